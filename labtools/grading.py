"""`labtools grade`: from an LMS zip or a folder of notebooks to grades and feedback.

Every step is nbgrader's: `generate_assignment` (records the lab in the gradebook),
`zip_collect` (extracts and files the submissions; `labtools.collect` decides whose
each file is), `autograde`, `generate_feedback`, and the CSV `export` plugin. What
this module adds is the order, a progress bar, and a report that names every file
it could not grade and why, without letting one bad file stop the class.
"""

from __future__ import annotations

import csv
import logging
import re
import shutil
import socket
import time
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

from . import collect
from .labs import REPO_ROOT, get_lab

SCRATCH = ".grading"  # inside the course directory, ignored by git


def _machine() -> str:
    """This machine's name. Each machine stages its input and regenerates the release
    in folders of its own, so that graders on several machines can share one course
    directory (on a network file system) without clearing each other's files."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname()).strip("._") or "localhost"


def _release_dir() -> str:
    return f"{SCRATCH}/{_machine()}/release"


class GradingError(RuntimeError):
    """A problem with the command's input as a whole (not with one submission)."""


@dataclass
class StudentResult:
    student: str
    auto_score: float | None  # points from the autograded tests
    auto_max: float | None
    manual_max: float | None  # written answers, graded by hand in formgrader
    status: str  # "graded" or why not
    feedback: Path | None = None
    cell_scores: dict[str, tuple[float, float]] = field(default_factory=dict)  # grade_id -> (points, max)


@dataclass
class GradeReport:
    lab_id: str
    results: list[StudentResult] = field(default_factory=list)
    notes: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    csv_path: Path | None = None
    feedback_dir: Path | None = None

    def result(self, student: str) -> StudentResult:
        return next(r for r in self.results if r.student == student)

    def table(self) -> str:
        def num(x):
            return "" if x is None else f"{x:g}"

        rows = [("student", "autograded", "of", "written (by hand)", "status")]
        for r in sorted(self.results, key=lambda r: r.student):
            rows.append((r.student, num(r.auto_score), num(r.auto_max),
                         f"_/{num(r.manual_max)}" if r.manual_max else "", r.status))
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(lines)


def _nbgrader_config(course: Path, db_url: str | None, hide_hidden_tests: bool = True) -> Config:
    config = Config()
    if (course / "nbgrader_config.py").exists():
        config = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()
    config.CourseDirectory.root = str(course)
    # The build owns release/; grading regenerates the assignment into scratch space.
    config.CourseDirectory.release_directory = _release_dir()
    # Whatever the course's nbgrader_config.py says, student content is shown inert.
    from .sanitize import NeutralizeStudentContent, SafeFeedbackExporter

    config.GenerateFeedback.exporter_class = SafeFeedbackExporter
    config.HTMLExporter.sanitize_html = True
    config.HTMLExporter.filters = {"clean_html": "labtools.sanitize.clean_html"}
    from nbgrader.preprocessors import CheckCellMetadata, ClearOutput, DeduplicateIds, OverwriteCells, OverwriteKernelspec

    from .restore import RestoreFromRelease

    # tampered metadata is put back from the release before nbgrader reads it (labtools/restore.py)
    first = list(config.Autograde.get("sanitize_preprocessors") or
                 [ClearOutput, DeduplicateIds, OverwriteKernelspec, OverwriteCells, CheckCellMetadata])
    if RestoreFromRelease not in first:
        config.Autograde.sanitize_preprocessors = [RestoreFromRelease, *first]
    steps = list(config.Autograde.get("autograde_preprocessors") or [])
    if steps and NeutralizeStudentContent not in steps:
        saving = next((i for i, s in enumerate(steps) if getattr(s, "__name__", "") == "SaveAutoGrades"), len(steps))
        steps.insert(saving, NeutralizeStudentContent)
        config.Autograde.autograde_preprocessors = steps
    if hide_hidden_tests:
        from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
        from nbgrader.preprocessors import GetGrades

        from .feedback import HideHiddenTests

        config.GenerateFeedback.preprocessors = [GetGrades, HideHiddenTests, CSSHTMLHeaderPreprocessor]
    if db_url:
        config.CourseDirectory.db_url = db_url
    elif not str(config.CourseDirectory.get("db_url", "")):
        config.CourseDirectory.db_url = f"sqlite:///{course / 'gradebook.db'}"
    else:
        url = str(config.CourseDirectory.db_url)
        if url.startswith("sqlite:///") and not url.startswith("sqlite:////"):
            # a relative SQLite path means relative to the course directory
            config.CourseDirectory.db_url = f"sqlite:///{course / url[len('sqlite:///'):]}"
    return config


def _stage_input(submissions: Path, archive: Path) -> set[str]:
    """Copy the input into nbgrader's archive folder; return the wrapper folders
    that will hold many students' files after extraction."""
    if archive.exists():
        shutil.rmtree(archive)
    archive.mkdir(parents=True)
    if submissions.is_dir():
        shutil.copytree(submissions, archive, dirs_exist_ok=True)
        return {""}
    if submissions.suffix.lower() != ".zip":
        raise GradingError(f"{submissions}: give a folder of notebooks or a .zip downloaded from the LMS")
    try:
        with zipfile.ZipFile(submissions) as zf:
            bad = zf.testzip()
    except zipfile.BadZipFile:
        raise GradingError(f"{submissions}: not a valid zip file (damaged or incomplete download?)") from None
    if bad:
        raise GradingError(f"{submissions}: the zip is damaged at {bad}; download it again")
    shutil.copy(submissions, archive / submissions.name)
    return {"", submissions.stem}


def grade(lab_id: str, submissions: Path, course_dir: Path = REPO_ROOT, db_url: str | None = None,
          out_dir: Path | None = None, student_pattern: str | None = None,
          hide_progress: bool = False, hide_hidden_tests: bool = True, workers: int = 1,
          log=print) -> GradeReport:
    from nbgrader.apps import ZipCollectApp
    from nbgrader.apps.api import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.plugins.export import CsvExportPlugin
    from nbgrader.utils import capture_log, temp_attrs
    from tqdm.auto import tqdm

    # nbgrader's own INFO/WARNING chatter would bury the report; errors still show.
    logging.getLogger("traitlets").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message=".*not in session.*")

    lab = get_lab(lab_id)
    course = Path(course_dir).resolve()
    submissions = Path(submissions)
    if not lab.source_path(course).exists():
        raise GradingError(f"{lab.source_path(course)} does not exist: is {course} the course directory?")
    if not submissions.exists():
        raise GradingError(f"{submissions}: no such file or folder of submissions")
    out = Path(out_dir) if out_dir else course / "grades" / lab_id
    report = GradeReport(lab_id)

    config = _nbgrader_config(course, db_url, hide_hidden_tests)
    # Decide about the kernels' sandbox once, here: worker processes' output is not shown,
    # so a warning or a refusal must come from this process, before any grading.
    from . import sandbox

    from . import cgroups

    try:
        sandbox.resolve_sandbox(str(config.LimitedKernelManager.get("sandbox", "auto")))
        cgroups.resolve(str(config.LimitedKernelManager.get("cgroup", "auto")))
    except (sandbox.SandboxUnavailable, cgroups.GroupUnavailable, ValueError) as exc:
        raise GradingError(str(exc)) from exc
    coursedir = CourseDirectory(config=config)
    api = NbGraderAPI(coursedir=coursedir, config=config)

    from sqlalchemy.engine import make_url

    shown = make_url(str(config.CourseDirectory.db_url)).render_as_string(hide_password=True)
    log(f"[1/5] {lab_id}: recording the assignment in the gradebook ({shown})")
    for attempt in range(4):
        result = api.generate_assignment(lab_id, force=True, create=True)
        text = f"{result.get('log', '')}{result.get('error', '')}"
        if result["success"] or not any(w in text for w in ("IntegrityError", "UniqueViolation", "duplicate key")):
            break
        # Another machine is creating the same gradebook tables or lab in a shared
        # database right now: its insert won, and the next try finds what it made.
        time.sleep(1 + 2 * attempt)
    if not result["success"]:
        raise GradingError(f"nbgrader generate_assignment failed:\n{text}")

    log(f"[2/5] collecting submissions from {submissions}")
    downloaded = course / "downloaded" / lab_id / _machine()
    wrappers = _stage_input(submissions, downloaded / "archive")
    with temp_attrs(coursedir, assignment_id=lab_id):
        app = ZipCollectApp(coursedir=coursedir, parent=api, config=config)
        app.log.setLevel(logging.ERROR)
        app.archive_directory = f"{_machine()}/archive"  # i.e. downloaded / "archive"
        app.extracted_directory = f"{_machine()}/extracted"
        app.collector_plugin = collect.LabCollector
        app.force = True  # replace a student's earlier collected file by the new one
        app.strict = False
        app.init_plugins()
        app.extract_archive_files()
        extracted = downloaded / "extracted"
        decision = collect.scan(extracted, lab_id, wrappers, student_pattern)
        app.collector_plugin_inst.decision = decision
        app.collector_plugin_inst.lab_id = lab_id
        app.process_extracted_files()
    report.notes, report.skipped = decision.notes, decision.skipped
    (downloaded / "collect_report.json").write_text(decision.to_json())
    students = sorted(set(decision.collect.values()))
    for rel, why in report.skipped:
        log(f"  skipped {rel}: {why}")
    for rel, what in report.notes:
        log(f"  note {rel}: {what}")
    if not students:
        log("  no notebook could be collected; nothing to grade")

    log(f"[3/5] autograding {len(students)} submission(s)" + (f" with {workers} workers" if workers > 1 else ""))
    failed = {}
    bar = tqdm(total=len(students), desc=f"autograde {lab_id}", unit="student", disable=hide_progress)
    if workers <= 1:
        for student in students:
            result = api.autograde(lab_id, student, force=True, create=True)
            if not result["success"]:
                failed[student] = "autograde failed: " + _first_cause(result)
            bar.update()
    else:
        from concurrent.futures import ThreadPoolExecutor

        db = str(config.CourseDirectory.db_url)
        with ThreadPoolExecutor(workers) as pool:
            for student, result in pool.map(lambda s: (s, _autograde_process(course, lab_id, s, db)), students):
                if not result["success"]:
                    failed[student] = "autograde failed: " + _first_cause(result)
                bar.update()
    bar.close()

    log("[4/5] writing feedback")
    feedback_out = out / "feedback"
    feedback_out.mkdir(parents=True, exist_ok=True)
    for student in tqdm(students, desc="feedback", unit="student", disable=hide_progress):
        if student in failed:
            continue
        api.generate_feedback(lab_id, student, force=True)

    log("[5/5] exporting grades")
    with api.gradebook as gb:
        for student in students:
            html = course / "feedback" / student / lab_id / f"{lab_id}.html"
            copied = None
            if html.exists():
                copied = feedback_out / f"{student}.html"
                shutil.copy(html, copied)
            result = _result(gb, lab_id, student, failed.get(student), copied)
            incidents = _incidents(course / "autograded" / student / lab_id / lab.notebook_name)
            if incidents and result.status == "graded":
                result.status = "graded; " + incidents
            report.results.append(result)
        csv_path = out / "grades.csv"
        CsvExportPlugin(to=str(csv_path), assignment=[lab_id], parent=api).export(gb)
    report.csv_path, report.feedback_dir = csv_path, feedback_out
    _write_problems(out / "problems.csv", report)
    return report


def _autograde_process(course: Path, lab_id: str, student: str, db_url: str) -> dict:
    """One `nbgrader autograde` in its own process, for parallel grading.

    Each process opens the gradebook for itself. SQLite serialises the writers (a
    generous busy timeout makes them wait rather than fail); a server database such as
    PostgreSQL takes concurrent writers as they come.
    """
    import subprocess
    import sys

    if db_url.startswith("sqlite:") and "timeout=" not in db_url:
        db_url += ("&" if "?" in db_url else "?") + "timeout=120"
    proc = subprocess.run(
        [sys.executable, "-m", "nbgrader", "autograde", lab_id, "--student", student, "--force",
         f"--CourseDirectory.db_url={db_url}", f"--CourseDirectory.release_directory={_release_dir()}",
         "--log-level=ERROR"],
        cwd=course, capture_output=True, text=True,
    )
    return {"success": proc.returncode == 0, "log": proc.stdout + proc.stderr}


def _incidents(autograded: Path) -> str:
    """What went wrong while the notebook ran, in words: tampering, timeouts, dead kernels."""
    import nbformat

    if not autograded.exists():
        return ""
    from .guard import NOTICE

    from .restore import restored

    nb = nbformat.read(str(autograded), as_version=4)
    cells = [c for c in nb.cells if c.cell_type == "code"]
    names = [o.get("ename") for c in cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    tampered = sum(any(o.get("output_type") == "stream" and str(o.get("text", "")).startswith(NOTICE)
                       for o in c.get("outputs", [])) for c in cells)
    parts = [f"the test environment was tampered with before {tampered} test cell{'s' if tampered > 1 else ''} "
             "(undone; see the notebook)"] if tampered else []
    changes = restored(nb)
    if changes:
        parts.append("metadata restored from the release: " + "; ".join(
            f"{c.get('cell')}: {c.get('change')}" for c in changes[:6]) + ("; ..." if len(changes) > 6 else ""))
    review = sum(any(o.get("ename") == "NeedsReview" for o in c.get("outputs", [])) for c in cells)
    if review:  # judge.NEEDS_REVIEW
        parts.append(f"needs review by hand: {review} test cell{'s' if review > 1 else ''} not run, because the "
                     "notebook reaches into the grader or the Python runtime (see the notebook)")
    for ename, words in (("CellTimeoutError", "timed out"), ("KernelDied", "killed the kernel"),
                         ("MemoryError", "ran out of memory"),
                         ("GuardUnavailable", "not scored: the notebook broke the grader's test guard")):
        count = names.count(ename)
        if count:
            parts.append(f"{count} cell{'s' if count > 1 else ''} {words}")
    return ", ".join(parts)


def _first_cause(result: dict) -> str:
    """The most telling line of a failed nbgrader run's log."""
    text = f"{result.get('log') or ''}\n{result.get('error') or ''}"
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    telling = [l for l in lines if ("Error" in l or "Exception" in l or "Timeout" in l)
               and "see the the above traceback" not in l and not l.startswith("File ")]
    return (telling or lines or ["unknown error"])[-1][:200]


def _result(gb, lab_id: str, student: str, failure: str | None, feedback: Path | None) -> StudentResult:
    from nbgrader.api import MissingEntry

    try:
        sub = gb.find_submission(lab_id, student)
    except MissingEntry:
        return StudentResult(student, None, None, None, failure or "not in the gradebook")
    grades = [g for nb in sub.notebooks for g in nb.grades]
    auto = [g for g in grades if g.cell.cell_type == "code"]
    manual = [g for g in grades if g.cell.cell_type != "code"]
    return StudentResult(
        student,
        auto_score=sum(g.auto_score or 0.0 for g in auto),
        auto_max=sum(g.max_score for g in auto),
        manual_max=sum(g.max_score for g in manual),
        status=failure or "graded",
        feedback=feedback,
        cell_scores={g.name: (g.auto_score or 0.0, g.max_score) for g in auto},
    )


def _write_problems(path: Path, report: GradeReport) -> None:
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["file", "kind", "message"])
        for rel, why in report.skipped:
            writer.writerow([rel, "not graded", why])
        for rel, what in report.notes:
            writer.writerow([rel, "note", what])
        for r in report.results:
            if r.status != "graded":
                writer.writerow([r.student, "autograde", r.status])
