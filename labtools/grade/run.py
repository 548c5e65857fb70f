"""`labtools grade`: from an LMS zip or a folder of notebooks to grades and feedback.

A `GradeRun` goes through explicit stages, each nbgrader's own step:
1. record the lab in the gradebook (`generate_assignment`);
2. collect the submissions (`zip_collect`; `labtools.collect` decides whose each file is);
3. autograde: each submission is a task on a Dask cluster (labtools/grade/task.py) that
   runs nbgrader's `autograde` and `generate_feedback` on a worker and returns data;
   this process alone writes the gradebook (nbgrader's `SaveAutoGrades` and
   `AssignLatePenalties` on the returned notebook) and the course folders, as each
   result arrives, so an interrupted run resumes where it stopped;
4. feedback: the HTML the workers made, one file per student;
5. export: the CSV export plugin, and a report that names every file it could not
   grade and why, without letting one bad file stop the class; the LMS id of each
   student (lms_ids.csv, for `labtools lms-export`) and the pairs of students whose own
   code is alike (similarity.csv, labtools/similarity.py); then the instructor's report of the
   lab (report.html, labtools/grade/report.py).
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import logging
import json
import shutil
import signal
import threading
import time
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path


from . import collect
from ..labs import REPO_ROOT, get_lab

# the configuration nbgrader runs with, and the scratch folders: in labtools/grade/config.py
from .config import (  # noqa: E402,F401
    RELEASE_DIR, SCRATCH, GradingError, UnsafeConfig, nbgrader_config, quiet_gradebook, with_busy_timeout,
)
GRADED_MARK = ".labtools-graded.json"  # in autograded/<student>/<lab>/: what was graded, for resuming


@dataclass
class StudentResult:
    student: str
    auto_score: float | None  # points from the autograded tests
    auto_max: float | None
    manual_max: float | None  # written answers, graded by hand in formgrader
    status: str  # "graded" or why not
    feedback: Path | None = None
    cell_scores: dict[str, tuple[float, float]] = field(default_factory=dict)  # grade_id -> (points, max)
    failures: dict[str, str] = field(default_factory=dict)  # grade_id -> a failed test's message
    incidents: list[str] = field(default_factory=list)  # what went wrong while the notebook ran, in words
    seconds: dict[str, float] = field(default_factory=dict)  # phase -> seconds; graded in this run only


@dataclass
class GradeReport:
    lab_id: str
    results: list[StudentResult] = field(default_factory=list)
    notes: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    cluster_failures: list[str] = field(default_factory=list)  # students whose task the cluster could not run
    csv_path: Path | None = None
    feedback_dir: Path | None = None
    # summed over this run's submissions: where the workers' time went (grade_task.SubmissionResult.seconds)
    seconds: dict[str, float] = field(default_factory=dict)
    lms_ids: dict[str, tuple[str, str]] = field(default_factory=dict)  # student -> (LMS, its id): collect.Decision
    similarity: object = None  # similarity.SimilarityReport, when copydetect is installed
    report_html: Path | None = None  # report.html (labtools/grade/report.py), once written

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


@dataclass
class GradeOptions:
    """The settings of one grade run (the grade command's options); nbgrader's and the
    sandbox's settings stay in the course's nbgrader_config.py."""

    db_url: str | None = None
    out_dir: Path | None = None
    student_pattern: str | None = None
    hide_progress: bool = False
    hide_hidden_tests: bool = True
    workers: int = 0  # local worker processes; 0: one per core
    scheduler: str | None = None  # a Dask scheduler's address; None: nbgrader_config.py, else a local cluster
    regrade: bool = False  # grade again submissions already graded from the same file
    roster: Path | None = None  # the LMS's gradebook export: its students without a submission go in the report

    def __post_init__(self):
        self.out_dir = Path(self.out_dir) if self.out_dir else None
        self.roster = Path(self.roster) if self.roster else None


class GradeRun:
    """One `labtools grade`: its stages in order, each small enough to read and test alone."""

    def __init__(self, lab_id: str, submissions: Path, course_dir: Path = REPO_ROOT,
                 options: GradeOptions | None = None, log=print):
        from nbgrader.apps.api import NbGraderAPI
        from nbgrader.coursedir import CourseDirectory

        from .cluster import GradeCluster

        # nbgrader's own INFO/WARNING chatter would bury the report; errors still show.
        logging.getLogger("traitlets").setLevel(logging.ERROR)
        quiet_gradebook()
        self.lab = get_lab(lab_id)
        self.course = Path(course_dir).resolve()
        self.submissions = Path(submissions)
        self.options = options or GradeOptions()
        self.log = log
        if not self.lab.source_path(self.course).exists():
            raise GradingError(f"{self.lab.source_path(self.course)} does not exist: is {self.course} the course directory?")
        if not self.submissions.exists():
            raise GradingError(f"{self.submissions}: no such file or folder of submissions")
        self.out = Path(self.options.out_dir) if self.options.out_dir else self.course / "grades" / lab_id
        self.config = nbgrader_config(self.course, self.options.db_url, self.options.hide_hidden_tests)
        self.cluster = GradeCluster(config=self.config)
        if self.options.scheduler is not None:
            self.cluster.scheduler = self.options.scheduler
        if self.options.workers:
            self.cluster.workers = self.options.workers
        self.coursedir = CourseDirectory(config=self.config)
        self.api = NbGraderAPI(coursedir=self.coursedir, config=self.config)
        self.report = GradeReport(lab_id)
        self.students: list[str] = []
        self.results: dict = {}  # student -> grade_task.SubmissionResult (this run's)
        self.failed: dict[str, str] = {}

    @property
    def lab_id(self) -> str:
        return self.lab.lab_id

    @property
    def nb_id(self) -> str:
        """nbgrader's name of the lab's notebook (the file name without .ipynb)."""
        return Path(self.lab.notebook_name).stem

    # -- checks made before anything is staged ------------------------------------------
    def check_roster(self) -> None:
        """A roster the report could not read is refused before anything is graded."""
        if self.options.roster is None:
            return
        from .lms import LmsError
        from .report import check_roster

        try:
            check_roster(self.options.roster, self.lab_id)
        except LmsError as exc:
            raise GradingError(f"--roster {self.options.roster}: {exc}") from None

    def check_sandbox(self) -> None:
        """Decide about the kernels' sandbox here, once: a refusal must come before any grading."""
        from ..sandbox import bwrap as sandbox
        from ..sandbox import cgroups

        try:
            sandbox.resolve_sandbox(str(self.config.LimitedKernelManager.get("sandbox", "auto")))
            cgroups.resolve(str(self.config.LimitedKernelManager.get("cgroup", "auto")))
        except (sandbox.SandboxUnavailable, cgroups.GroupUnavailable, ValueError) as exc:
            raise GradingError(str(exc)) from exc

    # -- 1. the lab in the gradebook --------------------------------------------------
    def record_assignment(self) -> None:
        from sqlalchemy.engine import make_url

        shown = make_url(str(self.config.CourseDirectory.db_url)).render_as_string(hide_password=True)
        self.log(f"[1/5] {self.lab_id}: recording the assignment in the gradebook ({shown})")
        for attempt in range(4):
            result = self.api.generate_assignment(self.lab_id, force=True, create=True)
            text = f"{result.get('log', '')}{result.get('error', '')}"
            if result["success"] or not any(w in text for w in ("IntegrityError", "UniqueViolation", "duplicate key")):
                break
            # Another grade command is creating the same gradebook tables or lab in a
            # shared database right now: its insert won, and the next try finds what it made.
            time.sleep(1 + 2 * attempt)
        if not result["success"]:
            raise GradingError(f"nbgrader generate_assignment failed:\n{text}")

    # -- 2. collect ---------------------------------------------------------------------
    def collect(self) -> list[str]:
        from nbgrader.apps import ZipCollectApp
        from nbgrader.utils import temp_attrs

        self.log(f"[2/5] collecting submissions from {self.submissions}")
        downloaded = self.course / "downloaded" / self.lab_id
        wrappers = _stage_input(self.submissions, downloaded / "archive")
        with temp_attrs(self.coursedir, assignment_id=self.lab_id):
            app = ZipCollectApp(coursedir=self.coursedir, parent=self.api, config=self.config)
            app.log.setLevel(logging.ERROR)
            app.collector_plugin = collect.LabCollector
            app.force = True  # replace a student's earlier collected file by the new one
            app.strict = False
            app.init_plugins()
            app.extract_archive_files()
            collect.restore_hand_in_times(downloaded / "archive", downloaded / "extracted")
            decision = collect.scan(downloaded / "extracted", self.lab_id, wrappers, self.options.student_pattern)
            app.collector_plugin_inst.decision = decision
            app.collector_plugin_inst.lab_id = self.lab_id
            app.process_extracted_files()
        self.report.notes, self.report.skipped = decision.notes, decision.skipped
        self.report.lms_ids = decision.lms_ids
        (downloaded / "collect_report.json").write_text(decision.to_json())
        self.students = sorted(set(decision.collect.values()))
        for rel, why in self.report.skipped:
            self.log(f"  skipped {rel}: {why}")
        for rel, what in self.report.notes:
            self.log(f"  note {rel}: {what}")
        if not self.students:
            self.log("  no notebook could be collected; nothing to grade")
        return self.students

    # -- 3. autograde on the cluster ----------------------------------------------------
    def _submitted(self, student: str) -> Path:
        return self.course / "submitted" / student / self.lab_id

    def _autograded(self, student: str) -> Path:
        return self.course / "autograded" / student / self.lab_id

    def job(self, student: str):
        from .task import SubmissionJob, lab_hash

        folder = self._submitted(student)
        stamp = folder / "timestamp.txt"
        return SubmissionJob(
            lab_id=self.lab_id, notebook_name=self.nb_id,
            source_hash=lab_hash(self.lab.source_path(self.course)), student=student,
            notebook=(folder / self.lab.notebook_name).read_bytes(),
            timestamp=stamp.read_text().strip() if stamp.exists() else None,
            course_hint=str(self.course), hide_hidden_tests=self.options.hide_hidden_tests)

    def already_graded(self, job) -> bool:
        """Graded before from the same file against the same lab (an interrupted run, resumed)."""
        mark = self._autograded(job.student) / GRADED_MARK
        try:
            done = json.loads(mark.read_text())
        except (OSError, ValueError):
            return False
        return done == _mark(job)

    def autograde(self, client) -> None:
        from distributed import as_completed
        from tqdm.auto import tqdm

        from .task import grade_submission

        jobs = [self.job(s) for s in self.students]
        todo = [j for j in jobs if self.options.regrade or not self.already_graded(j)]
        skipped = len(jobs) - len(todo)
        self.log(f"[3/5] autograding {len(todo)} submission(s)"
                 + (f" ({skipped} graded before from the same file: kept; --regrade grades them again)" if skipped else ""))
        bar = tqdm(total=len(todo), desc=f"autograde {self.lab_id}", unit="student", disable=self.options.hide_progress)
        # pure=False: a resubmission with the same bytes is still a task of its own
        futures = {client.submit(grade_submission, job, pure=False, key=f"grade-{self.lab_id}-{job.student}-{i}"): job
                   for i, job in enumerate(todo)}
        with _ctrl_c_noted() as interrupted:
            try:
                for future in as_completed(futures):
                    job = futures[future]
                    try:
                        result = future.result()
                    except Exception as exc:  # noqa: BLE001 - a failed task is this student's problem, not the run's
                        from .task import LabMismatch

                        if isinstance(exc, LabMismatch):
                            raise GradingError(str(exc)) from None
                        self.failed[job.student] = f"grading failed on the cluster: {type(exc).__name__}: {str(exc)[:200]}"
                        self.report.cluster_failures.append(job.student)
                    else:
                        self.store(job, result)
                    bar.update()
                    if interrupted:  # a Ctrl-C that library code swallowed still stops the run here
                        raise KeyboardInterrupt
            finally:
                for future in futures:
                    future.cancel()
                bar.close()

    def store(self, job, result) -> None:
        """Write one result: the gradebook first, then the files, then the mark that says
        it is done (a run stopped in between grades this student again, never twice)."""
        self.results[job.student] = result
        for phase, spent in result.seconds.items():
            self.report.seconds[phase] = self.report.seconds.get(phase, 0.0) + spent
        if not result.ok:
            self.failed[job.student] = result.failure
            return
        import nbformat
        from nbgrader.api import Gradebook
        from nbgrader.preprocessors import AssignLatePenalties, SaveAutoGrades

        nb = nbformat.reads(result.autograded.decode("utf-8"), as_version=4)
        db_url = str(self.config.CourseDirectory.db_url)
        with Gradebook(db_url, self.coursedir.course_id) as gb:
            gb.update_or_create_student(job.student)
            stamp = {"timestamp": job.timestamp} if job.timestamp else {}
            gb.update_or_create_submission(self.lab_id, job.student, **stamp)
        resources = {"nbgrader": {"notebook": self.nb_id, "assignment": self.lab_id,
                                  "student": job.student, "db_url": db_url}}
        for step in (SaveAutoGrades, AssignLatePenalties):
            nb, resources = step(config=self.config).preprocess(nb, resources)
        folder = self._autograded(job.student)
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        (folder / self.lab.notebook_name).write_bytes(result.autograded)
        if job.timestamp:
            (folder / "timestamp.txt").write_text(job.timestamp)
        if result.feedback_html:
            html = self.course / "feedback" / job.student / self.lab_id / f"{self.nb_id}.html"
            html.parent.mkdir(parents=True, exist_ok=True)
            html.write_bytes(result.feedback_html)
        (folder / GRADED_MARK).write_text(json.dumps(_mark(job)))

    # -- 4. feedback ------------------------------------------------------------------
    def feedback(self) -> Path:
        self.log("[4/5] writing feedback")
        feedback_out = self.out / "feedback"
        feedback_out.mkdir(parents=True, exist_ok=True)
        for student in self.students:
            html = self.course / "feedback" / student / self.lab_id / f"{self.nb_id}.html"
            if student not in self.failed and html.exists():
                shutil.copy(html, feedback_out / f"{student}.html")
        self.report.feedback_dir = feedback_out
        return feedback_out

    # -- 5. export ----------------------------------------------------------------------
    def export(self) -> GradeReport:
        from nbgrader.plugins.export import CsvExportPlugin

        self.log("[5/5] exporting grades")
        feedback_out = self.out / "feedback"
        with self.api.gradebook as gb:
            for student in self.students:
                copied = feedback_out / f"{student}.html"
                result = _result(gb, self.lab_id, student, self.failed.get(student), copied if copied.exists() else None)
                autograded = self._autograded(student) / self.lab.notebook_name
                result.incidents = _incidents(autograded)
                if result.incidents and result.status == "graded":
                    result.status = "graded; " + ", ".join(result.incidents)
                done = self.results.get(student)
                if done is not None:  # graded in this run: what its task returned
                    result.seconds = dict(done.seconds)
                    result.failures = {c.grade_id: c.message for c in done.cells if c.message}
                elif autograded.exists():  # kept from an earlier run: the same messages, from its notebook
                    from .task import failure_messages

                    result.failures = failure_messages(autograded)
                self.report.results.append(result)
            csv_path = self.out / "grades.csv"
            CsvExportPlugin(to=str(csv_path), assignment=[self.lab_id], parent=self.api).export(gb)
        self.report.csv_path = csv_path
        _write_problems(self.out / "problems.csv", self.report)
        if self.report.lms_ids:  # what `labtools lms-export` matches the LMS's gradebook with
            from .lms import LMS_IDS, save_lms_ids

            save_lms_ids(self.out / LMS_IDS, self.report.lms_ids)
        self.report.similarity = self.similar()
        self.report.report_html = self.write_report()
        return self.report

    def write_report(self) -> Path | None:
        """report.html (labtools/grade/report.py); a failure is logged, never hides the grades."""
        from . import report
        from .lms import LMS_IDS, LmsError, load_lms_ids

        try:
            with self.api.gradebook as gb:
                record = report.read_gradebook(gb, self.lab_id)
            missing, notes = [], []
            if self.options.roster is not None:
                ids = self.out / LMS_IDS
                try:
                    missing = report.roster_missing(self.options.roster, self.lab_id,
                                                    load_lms_ids(ids) if ids.exists() else self.report.lms_ids)
                except LmsError as exc:
                    notes.append(f"The roster {self.options.roster} was not used: {exc}")
            path = report.write(report.summarize(self.report, record, missing, notes), self.out / report.REPORT)
        except Exception as exc:  # noqa: BLE001 - the grades are written already
            self.log(f"  report not written: {type(exc).__name__}: {exc}")
            return None
        self.log(f"  report: {path}")
        return path

    def similar(self):
        """Pairs of students whose own code is alike (labtools/similarity.py): similarity.csv."""
        try:
            import copydetect  # noqa: F401
        except ImportError:
            self.log("  similar submissions not looked for: copydetect is not installed (pip install copydetect)")
            return None
        from . import similarity

        release = self.course / RELEASE_DIR / self.lab_id / self.lab.notebook_name
        try:
            report = similarity.similar_submissions(self.course, self.lab_id, release=release)
        except Exception as exc:  # noqa: BLE001 - the grades are written already; a failed comparison must not hide them
            self.log(f"  similar submissions not looked for: {type(exc).__name__}: {exc}")
            return None
        path = similarity.write_csv(report, self.out / "similarity.csv")
        self.log(f"  {len(report.pairs)} pair(s) of similar submissions among {len(report.compared)}: {path}")
        return report


def _mark(job) -> dict:
    return {"submission_sha256": hashlib.sha256(job.notebook).hexdigest(), "source_hash": job.source_hash,
            "timestamp": job.timestamp}


def grade(lab_id: str, submissions: Path, course_dir: Path = REPO_ROOT, options: GradeOptions | None = None,
          log=print, **settings) -> GradeReport:
    """Grade a class: collect, autograde on a Dask cluster, feedback, export.

    The run's settings are GradeOptions' fields, given as `options` or by name
    (`grade("lab01_attention", zip, workers=2)`): one list of them, in GradeOptions."""
    from dataclasses import fields, replace

    from .cluster import ClusterUnavailable, dask_client

    unknown = sorted(set(settings) - {f.name for f in fields(GradeOptions)})
    if unknown:
        raise TypeError(f"grade() has no setting {', '.join(unknown)}: see GradeOptions for the settings")
    options = replace(options or GradeOptions(), **settings)
    run = GradeRun(lab_id, submissions, course_dir, options, log=log)
    run.check_sandbox()
    run.check_roster()
    try:
        with dask_client(run.cluster, log=log) as client:  # before anything is staged
            run.record_assignment()
            if run.collect():
                run.autograde(client)
    except ClusterUnavailable as exc:
        raise GradingError(str(exc)) from None
    run.feedback()
    return run.export()


@contextlib.contextmanager
def _ctrl_c_noted():
    """Ctrl-C raises KeyboardInterrupt as usual and is also noted in the yielded list, so that
    the run stops at the next submission even if a library caught the exception (seen under load)."""
    noted: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield noted
        return

    def on_ctrl_c(signum, frame):
        noted.append(signum)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_ctrl_c)
    try:
        yield noted
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.default_int_handler)


def _incidents(autograded: Path) -> list[str]:
    """What went wrong while the notebook ran, in words, from the typed records the grading
    steps left in its metadata (labtools/grade/incidents.py), never from what its cells show."""
    import nbformat

    from . import incidents
    from .steps.restore import restored

    if not autograded.exists():
        return []
    nb = nbformat.read(str(autograded), as_version=4)
    recorded = incidents.read(nb)
    if recorded is None:  # graded by a labtools from before the records (kept on resume): what it showed
        recorded = _incidents_from_outputs(nb)
    parts = incidents.describe([i for i in recorded if i.kind == "tampered"])
    changes = restored(nb)
    if changes:
        parts.append("metadata restored from the release: " + "; ".join(
            f"{c.get('cell')}: {c.get('change')}" for c in changes[:6]) + ("; ..." if len(changes) > 6 else ""))
    return parts + incidents.describe([i for i in recorded if i.kind != "tampered"])


def _incidents_from_outputs(nb) -> list:
    """Incidents of a notebook autograded before they were recorded as data (one release only)."""
    from .incidents import Incident

    kinds = {"NeedsReview": "needs_review", "CellTimeoutError": "timeout", "KernelDied": "kernel_died",
             "MemoryError": "out_of_memory", "GPUError": "gpu_error", "GuardUnavailable": "guard_unavailable"}
    return [Incident(str(i), kinds[o.get("ename")]) for i, c in enumerate(nb.cells) if c.cell_type == "code"
            for o in c.get("outputs", []) if o.get("output_type") == "error" and o.get("ename") in kinds]


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
