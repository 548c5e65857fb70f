"""The instructor's report of a graded lab: grades/<lab>/report.html, one file that opens offline.

What the class got wrong and what is left to do, at a glance: the score distribution, each
test's pass rate (worst first) with the failure message most students got, the time each
submission took, every incident (files not graded, timeouts, dead kernels, notebooks to
review by hand, metadata put back), students on the roster who handed nothing in, written
answers still to grade, and the pairs of similar submissions with the code they share.

Typed data in, HTML out: `summarize` turns the grade run's `GradeReport` and what the
gradebook holds (`read_gradebook`) into a `ReportData`; `render` writes it as HTML. Figures
are matplotlib PNGs inlined as base64, the page has no script and no external resource, and
its Content Security Policy forbids both. Everything a student wrote (failure messages carry
their exceptions' text, ids come from file names, code from their cells) goes through
Jinja's autoescaping; a figure's labels are set as plain text, never as maths.
"""

from __future__ import annotations

import base64
import copy
import io
import statistics
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from ..labs import get_lab

PHASES = ("kernel start", "setup cell", "notebook cells", "test cells")  # within nbgrader's autograde
REPORT = "report.html"  # in grades/<lab>/


@dataclass(frozen=True)
class TestStats:
    """One autograded test across the class."""

    grade_id: str
    points: float
    passed: int
    failed: int
    message: str = ""  # the failure message most of the failing students got
    message_count: int = 0  # how many of them got exactly that message

    @property
    def total(self) -> int:
        return self.passed + self.failed

    @property
    def pass_rate(self) -> float:
        return self.passed / self.total if self.total else 0.0


@dataclass(frozen=True)
class Incident:
    who: str  # the student, or the file that could not be graded
    what: str


@dataclass(frozen=True)
class PendingAnswer:
    """A cell graded by hand (a written answer) with no score yet."""

    student: str
    grade_id: str
    points: float


@dataclass(frozen=True)
class MissingStudent:
    student: str  # the gradebook's id, or the LMS's
    name: str
    roster: str  # where the student is listed: "gradebook" or the LMS's file


@dataclass(frozen=True)
class GradebookRecord:
    """What the gradebook knows beyond this run: who is enrolled, who handed this lab in, and
    which answers still need a human."""

    students: dict[str, str]  # id -> name ("" when the gradebook has none)
    submitted: frozenset[str]
    pending: tuple[PendingAnswer, ...] = ()


@dataclass
class ReportData:
    lab_id: str
    title: str
    created: str
    scores: dict[str, float]  # student -> autograded points, students graded
    auto_max: float
    tests: list[TestStats]  # worst pass rate first
    seconds: dict[str, dict[str, float]]  # student -> phase -> seconds; submissions graded in this run
    kept: int  # submissions graded by an earlier run and kept (their time is not known here)
    incidents: list[Incident]
    missing: list[MissingStudent]
    pending: list[PendingAnswer]
    similarity: object = None  # similarity.SimilarityReport, or None when not compared
    notes: list[str] = field(default_factory=list)


# -- the summary ------------------------------------------------------------------------
def read_gradebook(gb, lab_id: str) -> GradebookRecord:
    """The roster and the answers waiting for a human, from an open nbgrader Gradebook (read only)."""
    from nbgrader.api import MissingEntry

    students = {s.id: " ".join(n for n in (s.first_name, s.last_name) if n) for s in gb.students}
    try:
        submissions = gb.find_assignment(lab_id).submissions
    except MissingEntry:
        submissions = []
    pending = [PendingAnswer(sub.student.id, g.name, float(g.max_score))
               for sub in submissions for nb in sub.notebooks for g in nb.grades if g.needs_manual_grade]
    return GradebookRecord(students, frozenset(sub.student.id for sub in submissions),
                           tuple(sorted(pending, key=lambda p: (p.student, p.grade_id))))


def summarize(report, gradebook: GradebookRecord, roster: list[MissingStudent] | None = None,
              notes: list[str] | None = None) -> ReportData:
    """The report's content from a grading.GradeReport and the gradebook's record; `roster`: the
    students of an LMS's roster without a submission (`roster_missing`)."""
    lab = get_lab(report.lab_id)
    graded = [r for r in report.results if r.auto_score is not None]
    tests: dict[str, list] = {}
    for r in graded:
        for gid, (points, top) in r.cell_scores.items():
            tests.setdefault(gid, []).append((points >= top - 1e-9, r.failures.get(gid, ""), top))
    stats = []
    for gid, outcomes in tests.items():
        failed = [message for ok, message, _ in outcomes if not ok]
        common = Counter(m for m in failed if m).most_common(1)
        stats.append(TestStats(gid, max(top for _, _, top in outcomes), len(outcomes) - len(failed), len(failed),
                               *(common[0] if common else ("", 0))))
    stats.sort(key=lambda t: (t.pass_rate, -t.failed, t.grade_id))
    missing = [MissingStudent(s, name, "gradebook") for s, name in sorted(gradebook.students.items())
               if s not in gradebook.submitted]
    return ReportData(
        lab_id=report.lab_id, title=lab.title, created=datetime.now().strftime("%Y-%m-%d %H:%M"),
        scores={r.student: float(r.auto_score) for r in graded},
        auto_max=max((float(r.auto_max or 0) for r in graded), default=0.0),
        tests=stats,
        seconds={r.student: dict(r.seconds) for r in report.results if r.seconds},
        kept=sum(1 for r in graded if not r.seconds),
        incidents=incidents(report),
        missing=missing + list(roster or []),
        pending=list(gradebook.pending),
        similarity=report.similarity,
        notes=list(notes or []))


def incidents(report) -> list[Incident]:
    """Files not graded, the collector's notes, and what went wrong in each student's run."""
    found = [Incident(rel, f"not graded: {why}") for rel, why in report.skipped]
    found += [Incident(rel, f"note: {what}") for rel, what in report.notes]
    for r in sorted(report.results, key=lambda r: r.student):
        found += [Incident(r.student, what) for what in r.incidents]
        if not r.incidents and r.status != "graded":
            found.append(Incident(r.student, r.status))
    return found


def _roster_file(path: Path, lab_id: str):
    """An LMS's gradebook export, read as `labtools lms-export` reads it (labtools/grade/lms.py), never
    written: (the file, the LMS, where its students and this lab's column are)."""
    from . import lms

    grade_file = lms.read_grade_file(Path(path))
    kind = lms.detect(grade_file)
    if kind is None:
        raise lms.LmsError(f"{path}: --roster takes the gradebook exported from Canvas, Moodle or Blackboard "
                           "(the file `labtools lms-export` reads)")
    return grade_file, kind, lms.layout(grade_file, kind, lab_id)


def roster_missing(path: Path, lab_id: str, lms_ids: dict[str, tuple[str, str]]) -> list[MissingStudent]:
    """Students on an LMS's gradebook export whose id no submission of the lab carried."""
    from . import lms

    grade_file, kind, place = _roster_file(path, lab_id)
    if not lms_ids:
        raise lms.LmsError("the submissions' file names carry no LMS ids to match the roster with "
                           "(grade the zip the LMS downloaded, with the names it gave the files)")
    filled = lms.fill(copy.deepcopy(grade_file), place, {}, lms_ids, lab_id, Path(path))
    return [MissingStudent(m.lms_id, m.name, lms.NAMES[kind]) for m in filled.missing]


def check_roster(path: Path, lab_id: str) -> None:
    """Refuse a roster the report could not use before anything is graded (raises lms.LmsError)."""
    _roster_file(path, lab_id)


# -- the figures ------------------------------------------------------------------------
def _plain(text: str) -> str:
    """A label matplotlib shows as it is: `$` would start maths (and a lone one, an error)."""
    return str(text).replace("$", r"\$")


def _png(fig) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _figure(width: float, height: float):
    from matplotlib.figure import Figure  # no pyplot: no global state, no GUI backend

    fig = Figure(figsize=(width, height))
    return fig, fig.subplots()


def score_figure(data: ReportData) -> str:
    fig, ax = _figure(7, 3)
    scores = list(data.scores.values())
    top = data.auto_max or max(scores, default=1.0) or 1.0
    if top <= 25 and all(float(s).is_integer() for s in scores):
        bins = [b - 0.5 for b in range(int(top) + 2)]  # one bar per whole point
    else:
        bins = [top * i / 20 for i in range(21)]
    ax.hist(scores, bins=bins, color="#4c72b0", edgecolor="white")
    ax.set_xlabel(f"autograded points (of {top:g})")
    ax.set_ylabel("students")
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_title(f"{len(scores)} submissions")
    return _png(fig)


def tests_figure(data: ReportData) -> str:
    shown = data.tests[:40]  # the worst; the table lists them all
    fig, ax = _figure(7, 0.3 * len(shown) + 1)
    rows = range(len(shown))
    passed = [100 * t.pass_rate for t in shown]
    ax.barh(rows, passed, color="#55a868", label="passed")
    ax.barh(rows, [100 - p for p in passed], left=passed, color="#c44e52", label="failed")
    for row, t in zip(rows, shown):
        ax.text(1, row, f"{100 * t.pass_rate:.0f} %", va="center", fontsize="small", color="white")
    ax.set_yticks(list(rows), labels=[_plain(t.grade_id) for t in shown])
    ax.invert_yaxis()  # worst at the top
    ax.set_xlim(0, 100)
    ax.set_xlabel("students who passed (%)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")
    return _png(fig)


def phases(seconds: dict[str, float]) -> dict[str, float]:
    """A submission's seconds as parts that add up: the kernel's phases, the rest of nbgrader's
    autograde, and the feedback (grade_task.SubmissionResult.seconds nests the first in the second)."""
    inside = {p: seconds.get(p, 0.0) for p in PHASES}
    own = max(0.0, seconds.get("autograde", 0.0) - sum(inside.values()))
    return {**inside, "nbgrader's own steps": own, "feedback": seconds.get("feedback", 0.0)}


def time_figure(data: ReportData) -> str:
    """Each submission's time by phase, slowest first; a histogram of totals for a large class."""
    split = {s: phases(sec) for s, sec in data.seconds.items()}
    totals = {s: sum(p.values()) for s, p in split.items()}
    if len(split) > 60:
        fig, ax = _figure(7, 3)
        ax.hist(list(totals.values()), bins=30, color="#4c72b0", edgecolor="white")
        ax.set_xlabel("seconds per submission")
        ax.set_ylabel("submissions")
        return _png(fig)
    order = sorted(split, key=lambda s: -totals[s])
    fig, ax = _figure(7, 0.3 * len(order) + 1.2)
    left = [0.0] * len(order)
    for phase in next(iter(split.values())):
        widths = [split[s][phase] for s in order]
        ax.barh(range(len(order)), widths, left=left, label=phase)
        left = [a + b for a, b in zip(left, widths)]
    ax.set_yticks(range(len(order)), labels=[_plain(s) for s in order])
    ax.invert_yaxis()
    ax.set_xlabel("seconds (on its worker)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")
    return _png(fig)


def similarity_figure(data: ReportData) -> str:
    fig, ax = _figure(7, 2.5)
    ax.hist([100 * s for s in data.similarity.scores], bins=20, range=(0, 100), color="#8172b3", edgecolor="white")
    ax.axvline(100 * data.similarity.threshold, color="#c44e52", linestyle="--", label="flagged from here")
    ax.set_xlabel("share of one student's own code found in the other's (%)")
    ax.set_ylabel("pairs of students")
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.legend(loc="upper right", fontsize="small")
    return _png(fig)


# -- the page -----------------------------------------------------------------------------
def render(data: ReportData) -> str:
    """The report as one HTML page: no script, no external resource, student text escaped."""
    import jinja2

    from .steps.sanitize import CSP

    env = jinja2.Environment(loader=jinja2.PackageLoader("labtools", "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined)
    scores = list(data.scores.values())
    figures = {
        "scores": score_figure(data) if scores else "",
        "tests": tests_figure(data) if data.tests else "",
        "time": time_figure(data) if data.seconds else "",
        "similarity": similarity_figure(data) if data.similarity is not None and data.similarity.scores else "",
    }
    spent: Counter = Counter()
    for seconds in data.seconds.values():
        spent.update(phases(seconds))
    return env.get_template("report.html.j2").render(
        d=data, csp=CSP, figures=figures, phases=dict(spent), total=sum(spent.values()),
        mean=statistics.fmean(scores) if scores else None, median=statistics.median(scores) if scores else None,
        low=min(scores, default=None), high=max(scores, default=None))


def write(data: ReportData, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(data), encoding="utf-8")
    return path
