"""The instructor's report (labtools/grade/report.py): its summary from made-up grade runs (fast),
its page with student text in it (fast), and one real grade run's report.html opened in
headless Chromium (slow)."""

from __future__ import annotations

import base64
import csv
import re
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest

from labtools import nbcells
from labtools.grade import report
from labtools.grade.run import GradeReport, GradingError, StudentResult, grade
from labtools.labs import get_lab
from labtools.grade.lms import LmsError
from labtools.grade.similarity import SharedCode, SimilarityReport, SimilarPair
from labtools.build.submissions import fill_release

LAB = get_lab("lab01_attention")
CANVAS_EXPORT = Path(__file__).parent / "fixtures" / "lms" / "canvas_gradebook.csv"
# what a student can make a test say: their exception's text goes into the failure message
ATTACK = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'


def _student(name, scores, failures=None, status="graded", incidents=(), seconds=None):
    auto = sum(points for points, _ in scores.values())
    return StudentResult(name, auto, sum(top for _, top in scores.values()), 4.0, status, cell_scores=scores,
                         failures=dict(failures or {}), incidents=list(incidents), seconds=dict(seconds or {}))


def _class() -> GradeReport:
    """Four submissions of a lab with three tests: t_values fails for all, with one message most
    often; t_basic and t_shape once each; dora's task failed on the cluster."""
    timing = {"autograde": 6.0, "kernel start": 1.5, "setup cell": 0.5, "notebook cells": 1.0, "test cells": 2.0,
              "feedback": 1.0}
    results = [
        _student("ada", {"t_basic": (2, 2), "t_values": (0, 3), "t_shape": (1, 1)},
                 {"t_values": "rows must sum to 1"}, seconds=timing),
        _student("ben", {"t_basic": (0, 2), "t_values": (0, 3), "t_shape": (1, 1)},
                 {"t_basic": "expected a tensor", "t_values": "rows must sum to 1"}, seconds=timing,
                 status="graded; 1 cell timed out", incidents=["1 cell timed out"]),
        _student("cleo", {"t_basic": (2, 2), "t_values": (0, 3), "t_shape": (0, 1)},
                 {"t_values": "got NaN for large scores", "t_shape": "shape (2, 3) instead of (3, 2)"}),
        StudentResult("dora", None, None, None, "grading failed on the cluster: KilledWorker: ..."),
    ]
    return GradeReport(LAB.lab_id, results=results, skipped=[("notes.txt", "not a Jupyter notebook")],
                       notes=[("Copy_of_lab01.ipynb", "renamed by the student")])


GRADEBOOK = report.GradebookRecord(
    students={"ada": "Ada Lovelace", "ben": "", "cleo": "", "dora": "", "zed": "Zed Shaw"},
    submitted=frozenset({"ada", "ben", "cleo", "dora"}),
    pending=(report.PendingAnswer("ada", "written_scaling", 2.0),))


def test_pass_rates_worst_first_with_the_most_common_message():
    data = report.summarize(_class(), GRADEBOOK)
    assert [(t.grade_id, t.passed, t.failed) for t in data.tests] == [
        ("t_values", 0, 3), ("t_basic", 2, 1), ("t_shape", 2, 1)]
    worst = data.tests[0]
    assert (worst.message, worst.message_count, worst.points, worst.pass_rate) == ("rows must sum to 1", 2, 3, 0.0)
    assert (data.tests[1].message, data.tests[1].message_count) == ("expected a tensor", 1)
    assert data.tests[1].pass_rate == pytest.approx(2 / 3)
    assert data.scores == {"ada": 3, "ben": 1, "cleo": 2} and data.auto_max == 6


def test_missing_students_pending_answers_incidents_and_time():
    data = report.summarize(_class(), GRADEBOOK)
    assert data.missing == [report.MissingStudent("zed", "Zed Shaw", "gradebook")]
    assert data.pending == [report.PendingAnswer("ada", "written_scaling", 2.0)]
    assert [(i.who, i.what) for i in data.incidents] == [
        ("notes.txt", "not graded: not a Jupyter notebook"), ("Copy_of_lab01.ipynb", "note: renamed by the student"),
        ("ben", "1 cell timed out"), ("dora", "grading failed on the cluster: KilledWorker: ...")]
    assert set(data.seconds) == {"ada", "ben"} and data.kept == 1  # cleo: graded by an earlier run


def test_the_roster_from_an_lms_export_lists_who_handed_nothing_in():
    ids = {"ada": ("canvas", "1001"), "ben": ("canvas", "1003")}
    missing = report.roster_missing(CANVAS_EXPORT, LAB.lab_id, ids)
    assert [m.student for m in missing] == ["1002", "1004", "1005", "1006", "1007", "1008", "1009"]
    assert missing[0] == report.MissingStudent("1002", "Hopper, Grace", "Canvas")
    with pytest.raises(LmsError, match="no LMS ids"):
        report.roster_missing(CANVAS_EXPORT, LAB.lab_id, {})
    with pytest.raises(LmsError, match="downloaded from Moodle"):
        report.roster_missing(CANVAS_EXPORT, LAB.lab_id, {"ada": ("moodle", "12")})


def test_a_roster_that_is_no_lms_export_is_refused(tmp_path):
    (tmp_path / "roster.csv").write_text("name,email\nAda,ada@example.edu\n")
    with pytest.raises(LmsError, match="--roster takes the gradebook exported"):
        report.check_roster(tmp_path / "roster.csv", LAB.lab_id)
    report.check_roster(CANVAS_EXPORT, LAB.lab_id)  # the same file lms-export reads is fine


def test_the_grade_command_refuses_a_bad_roster_before_anything_is_graded(tmp_path):
    from conftest import make_course

    course = make_course(tmp_path / "course", [LAB])
    (tmp_path / "submissions").mkdir()
    workbook = tmp_path / "gradebook.xlsx"
    workbook.write_bytes(b"PK\x03\x04 an Excel workbook")
    with pytest.raises(GradingError, match=r"--roster .*gradebook.xlsx is an Excel workbook"):
        grade(LAB.lab_id, tmp_path / "submissions", course_dir=course, roster=workbook, log=lambda *a: None)
    assert not (course / "gradebook.db").exists() and not (course / "downloaded").exists()


class _Page(HTMLParser):
    """What a browser would treat as active content, and the page's images and text."""

    def __init__(self):
        super().__init__()
        self.tags, self.handlers, self.images, self.csp, self.text = [], [], [], "", []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append(tag)
        self.handlers += [name for name in attrs if name.startswith("on")]
        if tag == "img":
            self.images.append(attrs.get("src", ""))
        if tag == "meta" and attrs.get("http-equiv") == "Content-Security-Policy":
            self.csp = attrs.get("content", "")

    def handle_data(self, data):
        self.text.append(data)


def test_the_page_escapes_student_text_and_inlines_every_figure():
    grade_report = _class()
    grade_report.results[0].failures["t_values"] = ATTACK  # ada's message is now the attack
    grade_report.results[1].failures["t_values"] = ATTACK
    grade_report.results[1].student = "b$e$n_$"  # a file name with dollars: no maths in a figure's labels
    grade_report.results[1].seconds["autograde"] = 9.0
    code = f"x = 1  # {ATTACK}</pre>"
    grade_report.similarity = SimilarityReport(LAB.lab_id, 0.6, compared=["ada", "ben"], scores=[0.9, 0.1, 0.2], pairs=[
        SimilarPair("ada", "ben", 0.9, 0.8, (SharedCode("softmax", (2, 3), code, "softmax", (1, 2), code),))])
    data = report.summarize(grade_report, GRADEBOOK)
    page = report.render(data)

    parsed = _Page()
    parsed.feed(page)
    assert "script" not in parsed.tags and not parsed.handlers, (parsed.handlers, "student text became HTML")
    assert {"default-src 'none'", "img-src data:", "style-src 'unsafe-inline'", "script-src 'none'"} <= {
        part.strip() for part in parsed.csp.split(";")}
    text = "".join(parsed.text)
    assert text.count(ATTACK) == 1 + 2, "the attack must be shown as text: in the tests table and both code columns"
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;&lt;img src=x onerror=" in page
    assert len(parsed.images) == 4  # scores, tests, time, similarity
    for src in parsed.images:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:|//)""", page), "nothing may load from elsewhere"


# -- one real grade run, opened in Chromium ----------------------------------------------------
@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Three lab01 submissions from Canvas: Ada's reference answers, Grace's common mistakes (no
    written answers), Don's reference answers but a softmax whose error carries a script; and
    Noam, enrolled in the gradebook, who handed nothing in."""
    from conftest import make_course, write_zip
    from labtools.demo import demo_answers
    from nbgrader.api import Gradebook

    tmp = tmp_path_factory.mktemp("report")
    course = make_course(tmp / "course", [LAB])
    # enrolled in the course of nbgrader_config.py, with no submission
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", "transformers-by-building") as gb:
        gb.add_student("chomskynoam", first_name="Noam", last_name="Chomsky")
    source, release = nbcells.read(LAB.source_path()), nbcells.read(LAB.release_path())
    raising = f"def softmax(x, dim=-1):\n    raise ValueError({ATTACK!r})\n"
    files = {
        f"lovelaceada_1001_5001_{LAB.notebook_name}": fill_release(release, source),
        f"hoppergrace_1002_5002_{LAB.notebook_name}": fill_release(release, source, demo_answers(LAB, "wrong"),
                                                                  written=False),
        f"knuthdonald_1006_5006_{LAB.notebook_name}": fill_release(release, source, {"softmax": raising}),
    }
    archive = write_zip(tmp / "submissions.zip", {name: nbformat.writes(nb) for name, nb in files.items()})
    messages = []
    result = grade(LAB.lab_id, archive, course_dir=course, hide_progress=True, workers=2, roster=CANVAS_EXPORT,
                   log=messages.append)
    return course, result, messages


def _expected_rates(result) -> dict[str, tuple[int, int]]:
    rates: dict[str, list[int]] = {}
    for r in result.results:
        for gid, (points, top) in r.cell_scores.items():
            rates.setdefault(gid, [0, 0])[points >= top] += 1
    return {gid: (passed, failed) for gid, (failed, passed) in rates.items()}


@pytest.mark.slow
def test_the_grade_command_writes_the_report(graded):
    course, result, messages = graded
    page = course / "grades" / LAB.lab_id / report.REPORT
    assert result.report_html == page and page.exists(), messages
    failure = result.result("knuthdonald").failures["test_softmax_basic"]
    # the message, then the notebook line that raised it: both hold the attack, as text
    assert f" raised ValueError: {ATTACK} (raised at the notebook line `raise ValueError(" in failure, failure
    assert result.result("lovelaceada").failures == {}
    with (course / "grades" / LAB.lab_id / "grades.csv").open(newline="") as fh:
        # nbgrader exports every student of the gradebook: Noam with no submission too
        assert {row["student_id"] for row in csv.DictReader(fh)} == {"lovelaceada", "hoppergrace", "knuthdonald",
                                                                     "chomskynoam"}


@pytest.mark.slow
def test_the_report_opens_in_chromium(graded):
    from test_browser_safety import CHROMIUM

    if CHROMIUM is None:
        pytest.skip("needs Debian's chromium (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    course, result, _ = graded
    page_path = course / "grades" / LAB.lab_id / report.REPORT
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = chromium.new_page()
        console, requests = [], []
        page.on("console", lambda m: console.append(f"{m.type}: {m.text}") if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda e: console.append(f"page error: {e}"))
        page.on("request", lambda r: requests.append(r.url) if not r.url.startswith("data:") else None)
        page.goto(page_path.resolve().as_uri(), wait_until="load")
        page.wait_for_timeout(500)  # an onerror would fire after load
        images = page.eval_on_selector_all("img", "imgs => imgs.map(i => [i.alt, i.complete, i.naturalWidth])")
        state = page.evaluate("[window.__pwned, document.scripts.length]")
        rows = {table: page.eval_on_selector_all(f"#{table} tbody tr", "rows => rows.map(r => "
                                                 "Array.from(r.cells, c => c.innerText.replace(/\\s+/g, ' ').trim()))")
                for table in ("tests-table", "missing-table", "pending-table", "incidents-table")}
        glance = page.inner_text("#glance")
        text = page.inner_text("body")
        chromium.close()

    assert not console, console
    assert set(requests) <= {page_path.resolve().as_uri()}, f"the report loaded something else: {requests}"
    assert state == [None, 0], "a student's text ran as a script"
    assert len(images) == 4 and all(done and width > 0 for _, done, width in images), images
    # every test, worst first, with its counts; softmax's tests carry Don's message as text
    expected = _expected_rates(result)
    shown = [(row[0], int(row[3].split(" of ")[0]), int(row[3].split(" of ")[1])) for row in rows["tests-table"]]
    assert {gid: (total - failed, failed) for gid, failed, total in shown} == expected
    assert [failed for _, failed, _ in shown] == sorted((failed for _, failed, _ in shown), reverse=True)
    assert shown[0][1] == 2, "Grace's and Don's common failures come first"
    softmax = next(row for row in rows["tests-table"] if row[0] == "test_softmax_basic")
    assert softmax[2] == "67 %" and f" raised ValueError: {ATTACK}" in softmax[4]
    # who handed nothing in: Noam from the gradebook, the Canvas roster's other students
    assert [row[0] for row in rows["missing-table"]] == ["chomskynoam", "1003", "1004", "1005", "1007", "1008",
                                                          "1009"]
    # Ada's and Don's written answers wait for a human; Grace wrote none
    written = [c.metadata.nbgrader["grade_id"] for c in nbcells.read(LAB.source_path()).cells
               if c.cell_type == "markdown" and nbcells.nbgrader_meta(c).get("grade")]
    points = sum(nbcells.nbgrader_meta(nbcells.find_cell(nbcells.read(LAB.source_path()), gid))["points"]
                 for gid in written)
    assert rows["pending-table"] == [[s, ", ".join(sorted(written)), f"{points:g}"]
                                     for s in ("knuthdonald", "lovelaceada")]
    assert "3 submissions graded" in glance.replace("\n", " ")
    assert "lovelaceada and knuthdonald" in text or "knuthdonald and lovelaceada" in text, \
        "Ada's and Don's answers are the same outside softmax: a similar pair"
