"""One submission, graded on a worker: the task `labtools grade` sends to Dask.

A task gets everything it needs as data (a `SubmissionJob`: the notebook's bytes,
the lab's identity and the hash of its source) and returns everything it made as
data (a `SubmissionResult`: the autograded notebook, the scores, the feedback HTML,
what happened). It touches no shared file system and no gradebook of the course:
each worker process grades in a scratch course of its own (a private SQLite
gradebook, the lab's release generated once), so a worker can be any machine with
the course's Python environment and a checkout of the course.

A worker whose copy of the lab differs from the client's refuses (`LabMismatch`),
since grading against other tests would give other grades.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

# One grade at a time per worker process: nbgrader's apps share process-wide state
# (the environment, logging), so a worker started with several threads still runs
# its tasks one after another; start more worker processes for more at once.
_LOCK = threading.Lock()
_SCRATCH: dict[tuple[str, str], Path] = {}


class LabMismatch(RuntimeError):
    """The worker's checkout holds another version of the lab than the client's."""


def lab_hash(source_notebook: Path) -> str:
    """What identifies a lab's tests: the SHA-256 of its source notebook."""
    return hashlib.sha256(Path(source_notebook).read_bytes()).hexdigest()


@dataclass(frozen=True)
class SubmissionJob:
    lab_id: str
    notebook_name: str
    source_hash: str
    student: str
    notebook: bytes  # the submitted .ipynb, as collected
    timestamp: str | None = None  # nbgrader's timestamp.txt, when the submission has one
    course_hint: str | None = None  # the client's course folder; used when the worker can see it
    hide_hidden_tests: bool = True


@dataclass
class CellScore:
    grade_id: str
    points: float
    max_points: float
    kind: str  # "autograded", "written" (graded by hand) or "task"
    needs_manual_grade: bool = False
    message: str = ""  # a failed test's message, as its cell's error output says it (the report counts them)


@dataclass
class SubmissionResult:
    student: str
    ok: bool  # autograde ran to the end (a failing test still counts as ok)
    failure: str = ""  # why not, in one line, when not ok
    autograded: bytes = b""  # the autograded notebook
    feedback_html: bytes = b""
    cells: list[CellScore] = field(default_factory=list)
    worker: str = ""
    # "autograde" (all of nbgrader's autograde), within it "kernel start", "setup cell",
    # "notebook cells", "test cells" (the judge); then "feedback"
    seconds: dict[str, float] = field(default_factory=dict)


def find_course(job: SubmissionJob) -> Path:
    """The worker's checkout of the course: $LABTOOLS_COURSE, the client's folder when
    this machine sees it, the current directory, or the checkout labtools runs from."""
    from ..labs import REPO_ROOT

    candidates = [os.environ.get("LABTOOLS_COURSE"), job.course_hint, os.getcwd(), str(REPO_ROOT)]
    for candidate in filter(None, candidates):
        if (Path(candidate) / "source" / job.lab_id / f"{job.notebook_name}.ipynb").exists():
            return Path(candidate).resolve()
    raise LabMismatch(f"this worker has no source/{job.lab_id}: start `dask worker` in a checkout of the course "
                      "(or set LABTOOLS_COURSE to one)")


def _worker_directory() -> str | None:
    """The Dask worker's own local directory, which Dask removes when the worker closes
    and purges at the next start after a crash; None outside a worker (the system's temp)."""
    try:
        from distributed import get_worker

        return get_worker().local_directory
    except (ImportError, ValueError):
        return None


def _scratch_course(course: Path, job: SubmissionJob) -> Path:
    """A private course folder for this worker process and lab version, made once."""
    key = (str(course), job.source_hash)
    if key in _SCRATCH and _SCRATCH[key].exists():
        return _SCRATCH[key]
    from nbgrader.apps.api import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    from .config import nbgrader_config

    scratch = Path(tempfile.mkdtemp(prefix=f"labtools-worker-{job.lab_id}-", dir=_worker_directory()))
    atexit.register(shutil.rmtree, scratch, True)  # a worker closed normally; Dask purges a killed one's
    shutil.copytree(course / "source" / job.lab_id, scratch / "source" / job.lab_id)
    if (course / "nbgrader_config.py").exists():
        shutil.copy(course / "nbgrader_config.py", scratch / "nbgrader_config.py")
    config = nbgrader_config(scratch, f"sqlite:///{scratch / 'gradebook.db'}")
    api = NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)
    result = api.generate_assignment(job.lab_id, force=True, create=True)
    if not result["success"]:
        raise RuntimeError(f"nbgrader generate_assignment failed on the worker: {first_cause(result)}")
    _SCRATCH[key] = scratch
    return scratch


def grade_submission(job: SubmissionJob) -> SubmissionResult:
    """Autograde one submission and write its feedback, in this worker's scratch course."""
    import socket

    course = find_course(job)
    found = lab_hash(course / "source" / job.lab_id / f"{job.notebook_name}.ipynb")
    if found != job.source_hash:
        raise LabMismatch(
            f"worker {socket.gethostname()} has another version of {job.lab_id} than the grade command "
            f"(source notebook {found[:12]} here, {job.source_hash[:12]} there): update its checkout of the course "
            "(git pull) and restart the worker")
    with _LOCK:
        from .config import quiet_gradebook

        logging.getLogger("traitlets").setLevel(logging.ERROR)
        quiet_gradebook()
        scratch = _scratch_course(course, job)
        result = _grade_in(scratch, job)
    result.worker = socket.gethostname()
    return result


def _grade_in(scratch: Path, job: SubmissionJob) -> SubmissionResult:
    from nbgrader.apps.api import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    from .config import nbgrader_config

    config = nbgrader_config(scratch, f"sqlite:///{scratch / 'gradebook.db'}", job.hide_hidden_tests)
    api = NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)
    folders = [scratch / kind / job.student for kind in ("submitted", "autograded", "feedback")]
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)
    submitted = scratch / "submitted" / job.student / job.lab_id
    submitted.mkdir(parents=True)
    (submitted / f"{job.notebook_name}.ipynb").write_bytes(job.notebook)
    if job.timestamp:
        (submitted / "timestamp.txt").write_text(job.timestamp)
    try:
        start = time.perf_counter()
        result = api.autograde(job.lab_id, job.student, force=True, create=True)
        seconds = {"autograde": time.perf_counter() - start}
        autograded = scratch / "autograded" / job.student / job.lab_id / f"{job.notebook_name}.ipynb"
        if not result["success"] or not autograded.exists():
            return SubmissionResult(job.student, False, "autograde failed: " + first_cause(result), seconds=seconds)
        start = time.perf_counter()
        api.generate_feedback(job.lab_id, job.student, force=True)
        seconds["feedback"] = time.perf_counter() - start
        seconds.update(_kernel_seconds(autograded))
        html = scratch / "feedback" / job.student / job.lab_id / f"{job.notebook_name}.html"
        return SubmissionResult(job.student, True, autograded=autograded.read_bytes(),
                                feedback_html=html.read_bytes() if html.exists() else b"",
                                cells=_cell_scores(api, job, failure_messages(autograded)), seconds=seconds)
    finally:
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)


def _kernel_seconds(autograded: Path) -> dict[str, float]:
    """Where the autograde's time went inside the notebook run (labtools/grade/steps/execute.py records it)."""
    import json

    try:
        meta = json.loads(autograded.read_text()).get("metadata", {})
        return {str(k): float(v) for k, v in meta.get("labtools_grader", {}).get("seconds", {}).items()}
    except (OSError, ValueError, AttributeError, TypeError):
        return {}


def _cell_scores(api, job: SubmissionJob, messages: dict[str, str]) -> list[CellScore]:
    with api.gradebook as gb:
        sub = gb.find_submission_notebook(job.notebook_name, job.lab_id, job.student)
        return [CellScore(g.name, float(g.auto_score or 0.0), float(g.max_score),
                          "autograded" if g.cell.cell_type == "code" else "written",
                          bool(g.needs_manual_grade), messages.get(g.name, "")) for g in sub.grades]


MAX_MESSAGE = 500  # characters of a failure message kept: a student's exception text can be any size


def failure_messages(autograded: Path) -> dict[str, str]:
    """grade_id -> the message of each graded code cell that ended in an error, read from the
    autograded notebook's error outputs (the judge's verdict, a timeout, a dead kernel)."""
    import nbformat

    try:
        nb = nbformat.read(str(autograded), as_version=4)
    except (OSError, ValueError):
        return {}
    messages = {}
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {}) or {}
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        if cell.cell_type == "code" and meta.get("grade") and meta.get("grade_id") and errors:
            ename, evalue = str(errors[-1].get("ename", "")), str(errors[-1].get("evalue", ""))
            # the judge's messages are sentences of their own; a plain kernel error needs its type
            text = evalue if evalue and (ename in evalue or ename == "AssertionError") else f"{ename}: {evalue}"
            messages[meta["grade_id"]] = text.strip(" :\n")[:MAX_MESSAGE]
    return messages


def first_cause(result: dict) -> str:
    """The most telling line of a failed nbgrader run's log."""
    text = f"{result.get('log') or ''}\n{result.get('error') or ''}"
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    telling = [l for l in lines if ("Error" in l or "Exception" in l or "Timeout" in l)
               and "see the the above traceback" not in l and not l.startswith("File ")]
    return (telling or lines or ["unknown error"])[-1][:200]
