"""The course website (`python -m labtools site`), built once and read in headless Chromium.

The site is served by a local HTTP server, as GitHub Pages would serve it, and every
page is opened once: its requests, console messages, typeset maths, images and Colab
links are recorded, and each test checks one of them.
"""

from __future__ import annotations

import functools
import http.server
import re
import threading
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

from labtools.build import site
from labtools.cli import main
from labtools.labs import REPO_ROOT, built_labs, get_lab

from test_browser_safety import CHROMIUM, browser  # noqa: F401 (the fixture that starts Debian's chromium)

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (apt-get install chromium)")
LABS = built_labs()

# The text a page shows outside its code: raw TeX delimiters there mean maths left untypeset.
PROSE_TEXT = """() => {
  const main = document.querySelector('main') || document.body;
  const copy = main.cloneNode(true);
  copy.querySelectorAll('pre, code, .cell_output, .highlight, mjx-container, script').forEach(e => e.remove());
  return copy.innerText;
}"""


def readme_colab_links() -> dict[str, str]:
    """lab id -> the URL of its Open-in-Colab badge in README.md's table of labs."""
    links = {}
    for line in (REPO_ROOT / "README.md").read_text(encoding="utf-8").splitlines():
        row = re.match(r"\|\s*\d+\s*\|\s*`(\w+)`.*\]\((https://colab\.research\.google\.com/github/[^)]+)\)", line)
        if row:
            links[row.group(1)] = row.group(2)
    return links


@dataclass
class Visit:
    """What one page did in the browser."""

    page: str
    requests: list[str]
    problems: list[str]  # console errors, uncaught exceptions, failed or refused requests
    typeset: int  # MathJax output elements
    maths_errors: int  # MathJax's own error boxes (bad TeX)
    maths_fonts: bool  # MathJax's TeX fonts loaded (from the site)
    prose: str
    images: list[tuple[str, int]]  # (src, naturalWidth)
    output_images: int  # images inside cell outputs: the notebook's figures
    colab_links: set[str]


PAGES = ["index"] + [f"{edition}/{lab.lab_id}" for edition in ("notebooks", "solutions") for lab in LABS]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """The whole site, built as the README says (`python -m labtools site`)."""
    out = tmp_path_factory.mktemp("site") / "site"
    assert main(["site", "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def server(built):
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(built)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def _visit(context, base: str, page_name: str) -> Visit:
    page = context.new_page()
    requests, problems = [], []
    page.on("request", lambda r: requests.append(r.url))
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(f"uncaught: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"failed: {r.url} {r.failure}"))
    page.on("response", lambda r: problems.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None)
    page.goto(f"{base}/{page_name}.html", wait_until="load")
    page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise", timeout=20_000)
    page.evaluate("() => MathJax.startup.promise")
    page.evaluate("() => document.fonts.ready.then(() => true)")  # the fonts MathJax asks for as it typesets
    visit = Visit(
        page=page_name, requests=requests, problems=problems,
        typeset=page.locator("mjx-container").count(),
        maths_errors=page.locator("mjx-merror").count(),
        maths_fonts=page.evaluate("() => [...document.fonts].some(f => f.family.startsWith('MJXTEX') && "
                                  "f.status === 'loaded')"),
        prose=page.evaluate(PROSE_TEXT),
        images=[tuple(i) for i in page.eval_on_selector_all("img", "els => els.map(e => [e.src, e.naturalWidth])")],
        output_images=page.locator(".cell_output img").count(),
        colab_links={a for a in page.eval_on_selector_all("a[href]", "els => els.map(e => e.href)")
                     if "colab.research.google.com" in a},
    )
    page.close()
    return visit


@pytest.fixture(scope="module")
def visits(server, browser):  # noqa: F811 (the imported fixture)
    context = browser.new_context()
    result = {name: _visit(context, server, name) for name in PAGES}
    context.close()
    return result


def lab_pages(visits, edition: str) -> list[tuple[str, Visit]]:
    return [(name.split("/")[1], v) for name, v in visits.items() if name.startswith(edition + "/")]


def test_the_site_has_a_landing_page_each_lab_and_its_solutions(built):
    for name in PAGES:
        assert (built / f"{name}.html").is_file(), f"{name}.html was not built"
    assert (built / "mathjax" / "tex-mml-chtml.js").is_file(), "MathJax must be served from the site"


def test_landing_page_shows_each_labs_objectives_and_run_time(visits):
    text = visits["index"].prose
    settings = site.load_settings()
    for lab in LABS:
        summary = site.summarise(lab, settings)
        assert summary.title in text, f"the landing page does not name {summary.title!r}"
        first = " ".join(re.sub(r"[`*]", "", summary.objectives[0].split("$")[0]).split())[:30]
        assert len(first) > 10 and first in " ".join(text.split()), \
            f"{lab.lab_id}'s first objective is missing from the landing page: {first!r}"
        if summary.run_seconds is not None:
            assert f"in {site.duration_text(summary.run_seconds)} on one CPU thread" in text, \
                f"the landing page does not give {lab.lab_id}'s run time"
    assert "Start on Colab" in text and "Grade with the course" in text


def test_maths_is_typeset_on_every_page(visits):
    for name, visit in visits.items():
        assert visit.typeset > 0, f"{name}: no MathJax output (mjx-container) on the page"
        assert visit.maths_errors == 0, f"{name}: MathJax could not typeset {visit.maths_errors} formula(s)"
        assert visit.maths_fonts, f"{name}: MathJax's TeX fonts did not load"
        for raw in ("$$", "\\(", "\\[", "\\frac", "\\sqrt"):
            assert raw not in visit.prose, f"{name}: raw TeX {raw!r} is shown as text"
        inline = re.search(r"\$[^$\n]*(\\[A-Za-z]+|\w_\w)[^$\n]*\$", visit.prose)  # "$d_k$", "$\\sqrt{d}$"
        assert inline is None, f"{name}: raw TeX {inline.group(0)!r} is shown as text"


def test_every_image_loads_and_the_solutions_show_their_figures(visits):
    for name, visit in visits.items():
        broken = [src for src, width in visit.images if width == 0]
        assert not broken, f"{name}: images that did not load: {broken}"
    for lab_id, visit in lab_pages(visits, "solutions"):
        nb = nbformat.read(str(get_lab(lab_id).solutions_path()), as_version=4)
        figures = sum("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))
        assert figures > 0 and visit.output_images == figures, \
            f"solutions/{lab_id}: {visit.output_images} of its {figures} figures are on the page"


def test_colab_links_open_the_notebooks_of_the_readme(visits):
    readme = readme_colab_links()
    assert set(readme) == {lab.lab_id for lab in LABS}, "README.md must have a Colab badge for every lab"
    for lab_id, visit in lab_pages(visits, "notebooks"):
        assert visit.colab_links == {readme[lab_id]}, \
            f"notebooks/{lab_id}: Colab links {visit.colab_links} are not the README's {readme[lab_id]}"
    assert visits["index"].colab_links == set(readme.values())
    for lab_id, visit in lab_pages(visits, "solutions"):
        # the solutions' own notebook, at the same place in the repository
        assert visit.colab_links == {readme[lab_id].replace("/notebooks/", "/solutions/")}, visit.colab_links


def test_no_page_requests_anything_from_another_host(visits, server):
    for name, visit in visits.items():
        elsewhere = [url for url in visit.requests if not url.startswith((server + "/", "data:", "blob:"))]
        assert not elsewhere, f"{name} requested files from other hosts: {elsewhere}"
        assert any(url.startswith(f"{server}/mathjax/") for url in visit.requests), \
            f"{name} did not load MathJax from the site's own mathjax/ folder"


def test_console_shows_no_errors(visits):
    for name, visit in visits.items():
        assert not visit.problems, f"{name}: {visit.problems}"


def test_no_solutions_switch_leaves_no_solution_page(tmp_path):
    package = tmp_path / "mathjax"  # a stand-in: the switch does not depend on MathJax
    (package / "es5").mkdir(parents=True)
    (package / "LICENSE").write_text("license")
    mathjax = site.MathJax(package, "3.0.0")
    source = tmp_path / "source"
    pages = site.stage(LABS, site.load_settings(), False, source, mathjax)
    assert pages == ["index"] + [f"notebooks/{lab.lab_id}" for lab in LABS]
    assert not (source / "solutions").exists()
    staged = [str(p.relative_to(source)) for p in source.rglob("*") if "solutions" in p.name]
    assert not staged, f"solutions staged for the site: {staged}"
    for name in ("_toc.yml", "index.md"):
        assert "solutions/" not in (source / name).read_text(), f"{name} still points at the solutions"
    with_solutions = site.stage(LABS, site.load_settings(), True, tmp_path / "full", mathjax)
    assert len(with_solutions) == 1 + 2 * len(LABS), "the switch must be what leaves them out"


def test_remote_assets_are_found_in_built_pages(tmp_path):
    (tmp_path / "page.html").write_text(
        '<link rel="canonical" href="https://example.org/page.html">'
        '<a href="https://colab.research.google.com/x">a link fetches nothing</a>'
        '<script defer src="https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-mml-chtml.js"></script>'
        '<link rel="stylesheet" href="//fonts.example.com/a.css"><img src="_images/local.png">')
    assert site.remote_assets(tmp_path) == [
        "page.html: <script src=https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-mml-chtml.js>",
        "page.html: <link href=//fonts.example.com/a.css>"]


def test_without_npm_the_build_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setattr(site.shutil, "which", lambda name: None)
    with pytest.raises(site.SiteError, match="apt-get install npm"):
        site.install_mathjax(tmp_path / "npm")


def test_bad_site_settings_are_named(tmp_path):
    bad = tmp_path / "course.yml"
    bad.write_text("solutions: maybe\n")
    with pytest.raises(site.SiteError, match="`solutions` must be true or false"):
        site.load_settings(bad)


def test_a_figure_inside_the_markdown_becomes_a_file_beside_the_page(tmp_path):
    """The notebooks carry their figures as data: URIs (Colab shows no attachment); the site
    serves each as a file, so that its pages stay small and the figure is cached."""
    import base64

    from labtools.build import schematics
    from labtools.build.site import _stage_notebook

    png = schematics.schematic_png(schematics.schematic_cell(nbformat.read(str(get_lab("lab01_attention").source_path()),
                                                                           as_version=4)))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(
        f"![the schematic](data:image/png;base64,{base64.b64encode(png).decode()})\n\n*the schematic*")])
    nbformat.write(nb, str(tmp_path / "lab.ipynb"))
    _stage_notebook(tmp_path / "lab.ipynb", tmp_path / "site" / "lab.ipynb")
    staged = nbformat.read(str(tmp_path / "site" / "lab.ipynb"), as_version=4).cells[0].source
    assert staged.startswith("![the schematic](lab-figure-1.png)") and "data:" not in staged
    assert (tmp_path / "site" / "lab-figure-1.png").read_bytes() == png
