"""The course as a website, built with Jupyter Book 1 (Sphinx) and nothing from the internet.

    python -m labtools site [--no-solutions] [--out DIR]

builds `build/site/`: a landing page (what the course is, each lab's objectives and
run time, how to start on Colab, how to grade), one page per lab from the self-study
edition (`notebooks/`) and the worked solutions with their figures (`solutions/`,
left out by `solutions: false` in `site/course.yml` or `--no-solutions`).

The site's folders are the repository's (`notebooks/<lab>.html` is
`notebooks/<lab>.ipynb`), so Jupyter Book's Colab button opens the same notebook as
the README's badge. Notebooks are never executed: their stored outputs are shown.
MathJax 3 is installed from npm (`site/package-lock.json`) and served from the site's
own `mathjax/` folder, and the build fails if any page still loads a file from
another host.
"""

from __future__ import annotations

import base64
import filecmp
import itertools
import json
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from string import Template

import nbformat
import yaml

from ..labs import GITHUB_BRANCH, GITHUB_REPO, REPO_ROOT, Lab

SITE_DIR = REPO_ROOT / "site"
DEFAULT_OUT = REPO_ROOT / "build" / "site"
# npm's install of MathJax, kept between builds (build/ is git-ignored)
NPM_DIR = REPO_ROOT / "build" / "site-npm"
# files copied to the site's root as they are (Sphinx's html_extra_path), not into _static
EXTRA = "_site_files"
BADGE = "badges/open-in-colab.svg"
COLAB_BADGE_URL = "https://colab.research.google.com/assets/colab-badge.svg"
# Sphinx reads mathjax_path relative to _static/; MathJax lives beside it, in mathjax/
MATHJAX_PATH = "../mathjax/tex-mml-chtml.js"


class SiteError(RuntimeError):
    """The site cannot be built; the message says what to do."""


@dataclass(frozen=True)
class SiteSettings:
    """What `site/course.yml` holds."""

    solutions: bool
    run_seconds: dict[str, float]


@dataclass(frozen=True)
class LabSummary:
    """What the landing page says about one lab, read from its self-study notebook."""

    lab: Lab
    title: str
    objectives: tuple[str, ...]
    run_seconds: float | None


@dataclass(frozen=True)
class MathJax:
    """MathJax as npm installed it: the package's folder (es5/, LICENSE) and its version."""

    package: Path
    version: str


@dataclass(frozen=True)
class SiteBuild:
    out_dir: Path
    pages: tuple[str, ...]  # site paths without suffix: "index", "notebooks/lab01_attention", ...
    solutions: bool
    mathjax_version: str
    seconds: float


# ---------------------------------------------------------------- settings and summaries

def load_settings(path: Path = SITE_DIR / "course.yml") -> SiteSettings:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise SiteError(f"cannot read the site's settings {path}: {exc}") from None
    solutions = data.get("solutions", True)
    run_seconds = data.get("run_seconds") or {}
    if not isinstance(solutions, bool):
        raise SiteError(f"{path}: `solutions` must be true or false, not {solutions!r}")
    if not isinstance(run_seconds, dict) or not all(
            isinstance(v, (int, float)) and v > 0 for v in run_seconds.values()):
        raise SiteError(f"{path}: `run_seconds` must map lab ids to positive numbers of seconds")
    return SiteSettings(solutions=solutions, run_seconds={str(k): float(v) for k, v in run_seconds.items()})


def _objectives(markdown: str) -> list[str]:
    """The numbered items under a '### Learning objectives' heading, each joined into one line."""
    match = re.search(r"^#+\s*Learning objectives\s*$(.*?)(?=^#|\Z)", markdown, re.M | re.S)
    if not match:
        return []
    items: list[str] = []
    for line in match.group(1).splitlines():
        start = re.match(r"\s*\d+\.\s+(.*)", line)
        if start:
            items.append(start.group(1).strip())
        elif items and line.strip():
            items[-1] += " " + line.strip()
    return items


def summarise(lab: Lab, settings: SiteSettings, root: Path = REPO_ROOT) -> LabSummary:
    path = lab.selfstudy_path(root)
    nb = nbformat.read(str(path), as_version=4)
    markdown = "\n\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    title = re.search(r"^#\s+(.+)$", markdown, re.M)
    objectives = _objectives(markdown)
    if title is None or not objectives:
        raise SiteError(f"{path} needs a '# Lab N · title' heading and a numbered list under "
                        "'### Learning objectives': the landing page shows both")
    return LabSummary(lab, title.group(1).strip(), tuple(objectives), settings.run_seconds.get(lab.lab_id))


def duration_text(seconds: float) -> str:
    return f"about {round(seconds)} s" if seconds < 90 else f"about {round(seconds / 60)} min"


# ---------------------------------------------------------------- the book's source

def _badge(url: str) -> str:
    return f'<a href="{url}" target="_parent"><img src="{BADGE}" alt="Open In Colab"/></a>'


def _lab_entry(summary: LabSummary, solutions: bool) -> str:
    lab = summary.lab
    links = [f"[Read the lab](notebooks/{lab.notebook_name})"]
    if solutions:
        links.append(f"[worked solutions](solutions/{lab.notebook_name})")
    links.append(_badge(lab.colab_url))
    lines = [f"### {summary.title}", "", " · ".join(links), ""]
    if summary.run_seconds is not None:
        lines += [f"Runs from top to bottom in {duration_text(summary.run_seconds)} on one CPU thread "
                  "(the worked solutions, in full).", ""]
    lines += ["By the end of this lab you will be able to", ""]
    lines += [f"{n}. {item}" for n, item in enumerate(summary.objectives, 1)]
    return "\n".join(lines)


def _readme_intro(readme: Path) -> str:
    """The README's opening paragraph: what the course is (kept in one place)."""
    text = readme.read_text(encoding="utf-8")
    match = re.search(r"^# .+?\n\n(.+?)\n\n", text, re.S)
    if not match:
        raise SiteError(f"{readme} must start with a '# title' line and a paragraph about the course")
    return match.group(1)


def landing_page(summaries: list[LabSummary], solutions: bool, title: str, root: Path = REPO_ROOT) -> str:
    repository = f"https://github.com/{GITHUB_REPO}"
    note = " The worked solutions, with their figures, follow the labs." if solutions else ""
    template = Template((SITE_DIR / "index.md").read_text(encoding="utf-8"))
    return template.substitute(
        title=title, intro=_readme_intro(root / "README.md"), solutions_note=note,
        labs="\n\n".join(_lab_entry(s, solutions) for s in summaries),
        repository_url=repository,
        instructor_guide_url=f"{repository}/blob/{GITHUB_BRANCH}/README.md#instructor-guide")


def _config(mathjax_version: str) -> dict:
    from jupyter_book.config import get_default_sphinx_config

    config = yaml.safe_load((SITE_DIR / "_config.yml").read_text(encoding="utf-8"))
    config["repository"] = {"url": f"https://github.com/{GITHUB_REPO}", "branch": GITHUB_BRANCH, "path_to_book": ""}
    sphinx = config.setdefault("sphinx", {}).setdefault("config", {})
    # Jupyter Book's extensions but sphinx_thebe: with live code off it would still write its
    # settings twice into every page (a script error) and name a CDN to load thebe from.
    sphinx["extensions"] = [e for e in get_default_sphinx_config()["extensions"] if e != "sphinx_thebe"]
    sphinx["html_extra_path"] = [EXTRA]
    sphinx["mathjax_path"] = MATHJAX_PATH
    config["html"]["extra_footer"] = f"Maths typeset by MathJax {mathjax_version}, served from this site."
    return config


def _toc(labs: list[Lab], solutions: bool) -> dict:
    parts = [{"caption": "Labs", "chapters": [{"file": f"notebooks/{lab.lab_id}"} for lab in labs]}]
    if solutions:
        parts.append({"caption": "Worked solutions",
                      "chapters": [{"file": f"solutions/{lab.lab_id}"} for lab in labs]})
    return {"format": "jb-book", "root": "index", "parts": parts}


# A line inside $$...$$ that starts like a Markdown block ("+ x", "- x", "> x", "1. x") ends
# the paragraph in MyST, which parses Markdown before maths; Jupyter and Colab take the maths
# out first. Joined to the line before it, the formula reads the same in TeX.
_DISPLAY_MATHS = re.compile(r"\$\$.+?\$\$", re.S)
_DATA_IMAGE = re.compile(r"\]\(data:image/(png|jpeg|gif|webp);base64,([A-Za-z0-9+/=]+)\)")


def _figure_file(page: Path, number: int, match) -> str:
    """Write a markdown image's data URI as a file beside the site's page; its name."""
    name = f"{page.stem}-figure-{number}.{match.group(1)}"
    (page.parent / name).write_bytes(base64.b64decode(match.group(2)))
    return name
_BLOCK_START = re.compile(r"\n[ \t]*(?=[-+*>]\s|\d+[.)]\s)")


def _keep_display_maths_whole(markdown: str) -> str:
    return _DISPLAY_MATHS.sub(lambda m: _BLOCK_START.sub(" ", m.group(0)), markdown)


def _stage_notebook(source: Path, dest: Path) -> None:
    """A notebook as the site shows it: display maths kept whole, the Colab badge's
    picture served by the site (its page is one folder down from the site's root), and
    code that Jupyter and Colab show folded (the long read-only cells) folded here too."""
    nb = nbformat.read(str(source), as_version=4)
    dest.parent.mkdir(parents=True, exist_ok=True)
    figures = itertools.count(1)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = _keep_display_maths_whole(cell.source.replace(COLAB_BADGE_URL, "../" + BADGE))
            # an image inside the markdown (the lab's schematic) becomes a file beside the page:
            # the page stays small and the browser caches the figure
            cell.source = _DATA_IMAGE.sub(lambda m: f"]({_figure_file(dest, next(figures), m)})", cell.source)
        elif cell.metadata.get("jupyter", {}).get("source_hidden"):
            cell.metadata.setdefault("tags", []).append("hide-input")
    nbformat.write(nb, str(dest))


def stage(labs: list[Lab], settings: SiteSettings, solutions: bool, source: Path, mathjax: MathJax,
          root: Path = REPO_ROOT) -> list[str]:
    """Write the book's source folder; returns the site's pages."""
    if source.exists():
        shutil.rmtree(source)
    source.mkdir(parents=True)
    summaries = [summarise(lab, settings, root) for lab in labs]
    config = _config(mathjax.version)
    (source / "_config.yml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    (source / "_toc.yml").write_text(yaml.safe_dump(_toc(labs, solutions), sort_keys=False), encoding="utf-8")
    (source / "index.md").write_text(landing_page(summaries, solutions, config["title"], root), encoding="utf-8")
    pages = ["index"]
    for lab in labs:
        _stage_notebook(lab.selfstudy_path(root), source / "notebooks" / lab.notebook_name)
        pages.append(f"notebooks/{lab.lab_id}")
    if solutions:
        for lab in labs:
            _stage_notebook(lab.solutions_path(root), source / "solutions" / lab.notebook_name)
            pages.append(f"solutions/{lab.lab_id}")
    extra = source / EXTRA
    shutil.copytree(mathjax.package / "es5", extra / "mathjax")
    shutil.copyfile(mathjax.package / "LICENSE", extra / "mathjax" / "LICENSE")
    shutil.copyfile(SITE_DIR / "favicon.svg", source / "favicon.svg")
    (extra / BADGE).parent.mkdir(parents=True)
    shutil.copyfile(SITE_DIR / "open-in-colab.svg", extra / BADGE)
    return pages


# ---------------------------------------------------------------- MathJax from npm

def install_mathjax(npm_dir: Path = NPM_DIR) -> MathJax:
    """MathJax as `site/package-lock.json` pins it, installed by npm once and then reused."""
    lock = SITE_DIR / "package-lock.json"
    package = npm_dir / "node_modules" / "mathjax"
    installed = npm_dir / "package-lock.json"
    if (package / "es5" / "tex-mml-chtml.js").exists() and installed.exists() and filecmp.cmp(lock, installed, False):
        return _installed(package)
    npm = shutil.which("npm")
    if npm is None:
        raise SiteError("the site serves MathJax installed from npm, and npm is not installed: install Node.js "
                        "with npm (Debian/Ubuntu: sudo apt-get install npm; otherwise https://nodejs.org), "
                        "then run the command again")
    npm_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(SITE_DIR / "package.json", npm_dir / "package.json")
    shutil.copyfile(lock, installed)
    result = subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=npm_dir,
                            capture_output=True, text=True)
    if result.returncode != 0 or not (package / "es5").is_dir():
        installed.unlink(missing_ok=True)
        raise SiteError(f"`npm ci` could not install MathJax into {npm_dir} (it needs the npm registry the "
                        f"first time):\n{(result.stderr or result.stdout).strip()[-2000:]}")
    return _installed(package)


def _installed(package: Path) -> MathJax:
    return MathJax(package, json.loads((package / "package.json").read_text(encoding="utf-8"))["version"])


# ---------------------------------------------------------------- build and check

class _RemoteAssets(HTMLParser):
    """Tags that make a browser fetch something from another host as the page loads."""

    FETCHING = {"script": "src", "img": "src", "iframe": "src", "source": "src", "video": "src",
                "audio": "src", "embed": "src", "object": "data", "link": "href"}

    def __init__(self):
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag, attrs):
        attr = self.FETCHING.get(tag)
        values = dict(attrs)
        url = (values.get(attr) or "").strip()
        if tag == "link" and (values.get("rel") or "") in ("canonical", "alternate"):
            return  # names the page, fetches nothing
        if url.startswith(("http://", "https://", "//")):
            self.found.append(f"<{tag} {attr}={url}>")


def remote_assets(out_dir: Path) -> list[str]:
    """'page: <tag attr=url>' for every tag of the built site that loads from another host."""
    found = []
    for page in sorted(out_dir.rglob("*.html")):
        if "mathjax" in page.relative_to(out_dir).parts:
            continue
        parser = _RemoteAssets()
        parser.feed(page.read_text(encoding="utf-8", errors="replace"))
        found += [f"{page.relative_to(out_dir)}: {tag}" for tag in parser.found]
    return found


def _require_jupyter_book() -> None:
    try:
        import jupyter_book  # noqa: F401
    except ImportError:
        raise SiteError("the site is built with Jupyter Book 1: pip install 'jupyter-book<2' "
                        "(it is in requirements.txt)") from None


def _jupyter_book(source: Path, output: Path) -> None:
    command = [sys.executable, "-c", "from jupyter_book.cli.main import main; main()",
               "build", str(source), "--path-output", str(output), "--builder", "html", "--all",
               "--warningiserror", "--keep-going"]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        log = (result.stdout + result.stderr).strip().splitlines()
        raise SiteError("Jupyter Book could not build the site (warnings count as errors):\n"
                        + "\n".join(log[-40:]))


def build(labs: list[Lab], out_dir: Path = DEFAULT_OUT, solutions: bool | None = None,
          root: Path = REPO_ROOT, npm_dir: Path = NPM_DIR) -> SiteBuild:
    """Build the site into `out_dir` (replaced); `solutions=None` follows site/course.yml."""
    start = time.perf_counter()
    _require_jupyter_book()
    settings = load_settings()
    solutions = settings.solutions if solutions is None else solutions
    mathjax = install_mathjax(npm_dir)
    work = out_dir.parent / f"{out_dir.name}-work"
    pages = stage(labs, settings, solutions, work / "source", mathjax, root)
    _jupyter_book(work / "source", work / "output")
    html = work / "output" / "_build" / "html"
    remote = remote_assets(html)
    if remote:
        raise SiteError("pages of the site would load files from other hosts:\n  " + "\n  ".join(remote[:20]))
    (html / ".nojekyll").touch()  # GitHub Pages: serve _static/ and _images/ as they are
    if out_dir.exists():
        shutil.rmtree(out_dir)
    shutil.move(str(html), str(out_dir))
    shutil.rmtree(work)
    return SiteBuild(out_dir, tuple(pages), solutions, mathjax.version, time.perf_counter() - start)
