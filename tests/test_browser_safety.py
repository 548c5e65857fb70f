"""Nothing a student wrote runs in a browser: checked in real headless Chromium.

A lab01 submission carries scripts in every place a student controls: HTML,
JavaScript, SVG and markdown outputs, a markdown answer with `<script>`,
`<img onerror>` and a `javascript:` link, a raw HTML cell, and cell metadata aimed
at the HTML templates. It is graded by real nbgrader (`labtools grade`), then its
feedback file and formgrader's page for it (a real Jupyter server, as the
instructor sees it) are opened in Chromium. Every payload would set
`window.__pwned` or request a `/pwned` URL; neither may happen, and the attack
text must still be visible as text, so the instructor can see what was tried.

The same formgrader is then used as an instructor uses it: a written answer of this
submission gets points and a comment through the page, which nbgrader's export and
regenerated feedback must carry.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

from labtools import nbcells
from labtools.grade.run import grade
from labtools.labs import get_lab
from labtools.build.submissions import fill_release

from conftest import make_course, write_zip

LAB = get_lab("lab01_attention")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
PAYLOAD = "window.__pwned = (window.__pwned || []).concat('{0}'); fetch('/pwned-{0}')"

if CHROMIUM is None and os.environ.get("LABS_REQUIRE_BROWSER") == "1":
    raise RuntimeError("LABS_REQUIRE_BROWSER=1 but chromium is not installed (apt-get install chromium)")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (apt-get install chromium)")


def _script(tag: str) -> str:
    return PAYLOAD.format(tag)


def attack_notebook() -> str:
    source, release = nbcells.read(LAB.source_path()), nbcells.read(LAB.release_path())
    nb = fill_release(release, source)
    html = (f"<b>bold-html</b><script>{_script('html-script')}</script>"
            f'<img src=x onerror="{_script("html-img")}">')
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10" onload="{_script("svg")}">'
           '<rect width="5" height="5"/></svg>')
    iframe = {"text/html": f'<iframe srcdoc="<script>parent.{_script("iframe")}</script>"></iframe>'}
    outputs_code = (
        "\nfrom IPython.display import HTML, SVG, Javascript, Markdown, display\n"
        f"display(HTML({html!r}))\n"
        f"display(Javascript({_script('javascript')!r}))\n"
        f"display(SVG({svg!r}))\n"
        f"display(Markdown({'<img src=x onerror=' + repr(_script('markdown-output'))[1:-1] + '>'!r}))\n"
        f"display({iframe!r}, raw=True)\n"
    )
    written = (
        "My answer. <script>" + _script("md-script") + "</script>\n\n"
        '<img src="x" onerror="' + _script("md-img") + '">\n\n'
        "[click me](javascript:" + _script("md-link") + ")\n\n"
        '<a href="javascript:' + _script("md-anchor") + '">anchor</a> '
        '<details open ontoggle="' + _script("md-details") + '"><summary>s</summary>x</details>'
    )
    for cell in nb.cells:
        gid = nbcells.grade_id(cell)
        if gid == "softmax":
            cell.source += outputs_code
        elif gid == "written_port_bugs":
            cell.source = written
    raw = nbformat.v4.new_raw_cell(f"<script>{_script('raw-cell')}</script>")
    raw.metadata["format"] = "text/html"
    raw.metadata["raw_mimetype"] = "text/html"
    nb.cells.insert(3, raw)
    markdown = nbformat.v4.new_markdown_cell("student note ![pic](attachment:evil.svg)")
    markdown.attachments = {"evil.svg": {"image/svg+xml": f'<svg onload="{_script("attachment")}"/>'}}
    markdown.metadata["tags"] = [f'x"><img src=x onerror="{_script("tag")}">']
    nb.cells.insert(4, markdown)
    nb.metadata["title"] = f"</title><script>{_script('title')}</script>"
    return nbformat.writes(nb)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("browser")
    course = make_course(tmp / "course", [LAB])
    archive = write_zip(tmp / "class.zip", {f"mallory/{LAB.notebook_name}": attack_notebook()})
    report = grade(LAB.lab_id, archive, course_dir=course, hide_progress=True, log=lambda *a: None)
    return course, report


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--no-first-run", "--disable-sync"])
        yield chromium
        chromium.close()


def _visit(context, url: str) -> tuple[list, object, str]:
    """(what ran: pwned requests, dialogs, javascript: links; window.__pwned; page text) after loading `url`."""
    page = context.new_page()
    ran = []
    page.on("request", lambda r: ran.append(r.url) if "pwned" in r.url else None)
    page.on("dialog", lambda d: (ran.append(f"dialog {d.message}"), d.dismiss()))
    page.goto(url, wait_until="load")
    page.wait_for_timeout(1500)  # onerror, onload and fetch fire after load
    for link in page.query_selector_all("a"):  # a javascript: link must not survive to be clicked
        href = link.get_attribute("href") or ""
        if href.strip().lower().startswith("javascript:"):
            ran.append(f"link {href[:60]}")
    state = page.evaluate("window.__pwned")
    text = page.inner_text("body")
    page.close()
    return ran, state, text


def test_the_attack_submission_is_graded(graded):
    _, report = graded
    result = report.result("mallory")
    assert result.status.startswith("graded"), result.status
    assert result.auto_score == result.auto_max, "the reference answers under the attack must keep full marks"


def test_autograded_notebook_holds_only_inert_outputs(graded):
    course, _ = graded
    nb = nbformat.read(str(course / "autograded" / "mallory" / LAB.lab_id / LAB.notebook_name), as_version=4)
    for cell in nb.cells:
        assert cell.cell_type != "raw"
        for output in cell.get("outputs", []):
            assert set(output.get("data", {})) <= {"text/plain", "image/png", "image/jpeg"}, output
    text = json.dumps(nb)
    assert "bold-html" in text, "the HTML a student printed must stay readable as text"
    assert "<script>" not in "".join(c.source for c in nb.cells if c.cell_type == "markdown"), \
        "raw HTML in a student's markdown must be escaped"


def test_feedback_file_runs_nothing(graded, browser):
    _, report = graded
    feedback = report.feedback_dir / "mallory.html"
    html = feedback.read_text()
    assert 'http-equiv="Content-Security-Policy"' in html and "script-src 'none'" in html
    assert "<details>" in html and "<h2" in html, "the lab's own markdown (headings, <details> answers) must render"
    ran, state, text = _visit(browser.new_context(), feedback.resolve().as_uri())
    assert state is None and not ran, f"student script ran in the feedback page: {state} {ran}"
    assert "bold-html" in text and "My answer." in text, "the student's output and answer must still be shown"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def formgrader(graded, tmp_path_factory):
    """A real Jupyter server with nbgrader's formgrader, in the graded course directory."""
    course, _ = graded
    port, token = _free_port(), "browser-test-token"
    home = tmp_path_factory.mktemp("jupyter-home")
    env = dict(os.environ, HOME=str(home), JUPYTER_RUNTIME_DIR=str(home / "runtime"))
    log = home / "jupyter-server.log"  # a file, not a pipe: a pipe nobody reads would fill and stall the server
    with log.open("wb") as err:
        server = subprocess.Popen(
            [sys.executable, "-m", "jupyter", "server", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
             f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={course}", "--allow-root"],
            cwd=course, env=env, stdout=subprocess.DEVNULL, stderr=err)
    base = f"http://127.0.0.1:{port}"
    for _ in range(120):
        try:
            urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=1)
            break
        except OSError:
            if server.poll() is not None:
                pytest.fail(f"jupyter server did not start: {log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.5)
    yield base, token, course
    server.terminate()
    server.wait(timeout=30)


def test_formgrader_page_runs_nothing(formgrader, browser):
    from nbgrader.api import Gradebook

    base, token, course = formgrader
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        submission_id = gb.find_submission_notebook(LAB.lab_id, LAB.lab_id, "mallory").id
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{base}/?token={token}")  # log in as the instructor: a script would now act as them
    page.close()
    ran, state, text = _visit(context, f"{base}/formgrader/submissions/{submission_id}/?index=0")
    assert "mallory" in text or "Submission" in text, f"formgrader did not show the submission: {text[:300]}"
    assert state is None and not ran, f"student script ran in formgrader: {state} {ran}"
    assert "bold-html" in text and "My answer." in text, "the student's output and answer must still be shown"


# -- formgrader as an instructor uses it ------------------------------------------------------
WRITTEN = "written_scaling"  # one of mallory's written answers (the model answer), 2 points
COMMENT = "Right about the variance growing with d_k; say why that saturates the softmax."
# formgrader's page has fetched the cells' grades and comments and bound its inputs to them
LOADED = "window.formgrader && formgrader.grades && formgrader.grades.loaded && formgrader.comments.loaded"


def _nbgrader(course: Path, *args: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course, capture_output=True, text=True)
    assert proc.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"


def test_points_and_comment_given_in_formgrader_reach_the_export_and_the_feedback(formgrader, graded, browser):
    """The instructor opens Manual Grading, clicks the submission, types points and a comment for a
    written answer; `nbgrader export` and `nbgrader generate_feedback --force` (README, instructor
    guide step 3) must then carry both, and the feedback still runs nothing and hides the hidden tests."""
    import csv

    from nbgrader.api import Gradebook

    base, token, course = formgrader
    result = graded[1].result("mallory")
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        before = gb.find_submission(LAB.lab_id, "mallory").score
        assert gb.find_grade(WRITTEN, LAB.lab_id, LAB.lab_id, "mallory").needs_manual_grade

    context = browser.new_context()
    page = context.new_page()
    problems = []
    # formgrader loads MathJax from a CDN: offline (CI, here) only its own script misses it
    page.on("pageerror", lambda e: problems.append(f"page error: {e}") if "MathJax" not in str(e) else None)
    page.on("response", lambda r: problems.append(f"HTTP {r.status} {r.url}") if r.status >= 400 else None)
    page.goto(f"{base}/?token={token}")  # logs in: the server sets its cookie
    page.goto(f"{base}/formgrader/gradebook/{LAB.lab_id}/{LAB.lab_id}")  # Manual Grading > the lab > its notebook
    page.get_by_role("link", name="Submission #1").click()
    page.wait_for_function(LOADED)
    score = page.locator(f"input.score#{WRITTEN}")
    with page.expect_response(lambda r: "/formgrader/api/grade/" in r.url and r.request.method == "PUT") as saved:
        score.fill("1.5")
        score.press("Tab")
    assert saved.value.ok, saved.value.status
    comment = page.locator(f"textarea#{WRITTEN}-comment")
    with page.expect_response(lambda r: "/formgrader/api/comment/" in r.url and r.request.method == "PUT") as saved:
        comment.fill(COMMENT)
        comment.press("Tab")
    assert saved.value.ok, saved.value.status
    page.reload()  # what the next visit shows: both were kept
    page.wait_for_function(LOADED)
    shown = (page.input_value(f"input.score#{WRITTEN}"), page.input_value(f"textarea#{WRITTEN}-comment"))
    context.close()
    assert shown == ("1.5", COMMENT)
    assert not problems, problems

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        cell = gb.find_grade(WRITTEN, LAB.lab_id, LAB.lab_id, "mallory")
        assert (cell.manual_score, cell.needs_manual_grade) == (1.5, False)
    # the instructor's next steps, from the course directory
    _nbgrader(course, "export", "--to", "exported.csv")
    with (course / "exported.csv").open(newline="") as fh:
        row = next(r for r in csv.DictReader(fh) if r["student_id"] == "mallory")
    total = result.auto_max + result.manual_max
    assert (float(row["score"]), float(row["max_score"])) == (before + 1.5, total)
    _nbgrader(course, "generate_feedback", LAB.lab_id, "--force")
    feedback = course / "feedback" / "mallory" / LAB.lab_id / LAB.notebook_name.replace(".ipynb", ".html")
    ran, state, text = _visit(browser.new_context(), feedback.resolve().as_uri())
    assert state is None and not ran, f"student script ran in the regenerated feedback: {state} {ran}"
    words = " ".join(text.split())
    assert "Written response (Score: 1.5 / 2.0)" in words and COMMENT in words, words[:3000]
    assert f"(Score: {float(before + 1.5)} / {float(total)})" in words, "the notebook's total, as nbgrader writes it"
    assert "BEGIN HIDDEN TESTS" not in feedback.read_text(), "feedback regenerated by hand must hide the hidden tests"
