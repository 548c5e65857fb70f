"""The configuration nbgrader grades with: the course's nbgrader_config.py, and the steps
labtools owns, whatever that file says.

Grading is safe only with labtools' steps in nbgrader's pipeline: RestoreFromRelease first
(the lab's structure put back), GradingExecute (the judge, outside the student's kernel,
and the sandboxed kernel), NeutralizeStudentContent before the grades are saved (nothing
a student wrote runs in a browser). nbgrader's defaults have none of them. So the steps
are written here once: a course file that names no steps gets these; one that names its
own must keep these (a subclass of each counts) and is refused otherwise, with what to
change, before anything is graded. Nothing is inserted behind the file's back.
"""

from __future__ import annotations

from pathlib import Path

from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

SCRATCH = ".grading"  # inside the course directory, ignored by git
RELEASE_DIR = f"{SCRATCH}/release"  # the build owns release/; grading regenerates into scratch space


class GradingError(RuntimeError):
    """A problem with the command's input as a whole (not with one submission)."""


class UnsafeConfig(GradingError):
    """The course's nbgrader configuration would grade without the judge, the sandbox or the sanitizing."""


def sanitize_steps() -> list:
    from nbgrader.preprocessors import CheckCellMetadata, ClearOutput, DeduplicateIds, OverwriteCells, OverwriteKernelspec

    from .steps.restore import RestoreFromRelease

    return [RestoreFromRelease, ClearOutput, DeduplicateIds, OverwriteKernelspec, OverwriteCells, CheckCellMetadata]


def autograde_steps() -> list:
    from nbconvert.preprocessors import ClearMetadataPreprocessor
    from nbgrader.preprocessors import AssignLatePenalties, CheckCellMetadata, IgnorePattern, LimitOutput, SaveAutoGrades

    from .steps.execute import GradingExecute
    from .steps.sanitize import NeutralizeStudentContent

    return [GradingExecute, IgnorePattern, ClearMetadataPreprocessor, LimitOutput, NeutralizeStudentContent,
            SaveAutoGrades, AssignLatePenalties, CheckCellMetadata]


def _name(step) -> str:
    return getattr(step, "__name__", None) or type(step).__name__


def _has(steps, required) -> int | None:
    """Where a step that is `required` (or a subclass of it) stands in `steps`."""
    for i, step in enumerate(steps):
        if isinstance(step, type) and issubclass(step, required) or isinstance(step, required):
            return i
    return None


def install_grading_steps(config: Config) -> None:
    """Give `config` labtools' steps where it names none; refuse it where it names others."""
    from nbgrader.preprocessors import Execute, SaveAutoGrades

    from .steps.execute import GradingExecute, LimitedKernelManager
    from .steps.restore import RestoreFromRelease
    from .steps.sanitize import NeutralizeStudentContent

    where = "nbgrader_config.py"
    fix = (" Remove the line to grade with labtools' own steps (labtools/grade/config.py), or list them as "
           "the course's nbgrader_config.py in the repository does.")
    sanitize = config.Autograde.get("sanitize_preprocessors")
    if sanitize is None:
        config.Autograde.sanitize_preprocessors = sanitize_steps()
    elif _has(sanitize, RestoreFromRelease) != 0:
        raise UnsafeConfig(f"{where}: c.Autograde.sanitize_preprocessors must start with "
                           f"labtools.grade.steps.restore.RestoreFromRelease (it lists {', '.join(map(_name, sanitize))})." + fix)
    steps = config.Autograde.get("autograde_preprocessors")
    if steps is None:
        config.Autograde.autograde_preprocessors = steps = autograde_steps()
    listed = ", ".join(map(_name, steps)) or "nothing"
    if _has(steps, GradingExecute) is None:
        raise UnsafeConfig(f"{where}: c.Autograde.autograde_preprocessors has no labtools.grade.steps.execute.GradingExecute "
                           f"(it lists {listed}): the notebooks would run with no judge and no sandbox." + fix)
    plain = [s for s in steps if _has([s], Execute) is not None and _has([s], GradingExecute) is None]
    if plain:
        raise UnsafeConfig(f"{where}: c.Autograde.autograde_preprocessors also runs {_name(plain[0])}, which "
                           "executes the notebook outside the judge and the sandbox." + fix)
    neutral, saving = _has(steps, NeutralizeStudentContent), _has(steps, SaveAutoGrades)
    if neutral is None or (saving is not None and neutral > saving):
        raise UnsafeConfig(f"{where}: c.Autograde.autograde_preprocessors must run "
                           "labtools.grade.steps.sanitize.NeutralizeStudentContent before SaveAutoGrades "
                           f"(it lists {listed}): student content would reach the gradebook live." + fix)
    for section in ("GradingExecute", "Execute", "ExecutePreprocessor", "NotebookClient"):
        manager = config[section].get("kernel_manager_class") if section in config else None
        if manager is not None and not (isinstance(manager, type) and issubclass(manager, LimitedKernelManager)):
            raise UnsafeConfig(f"{where}: c.{section}.kernel_manager_class = {_name(manager)} would start "
                               "kernels outside the sandbox and its limits; remove the line "
                               "(labtools.sandbox.manager.LimitedKernelManager is used).")


def nbgrader_config(course: Path, db_url: str | None, hide_hidden_tests: bool = True) -> Config:
    from .gradebook_schema import use_in_process_version

    use_in_process_version()  # no `alembic` subprocess per new gradebook (client and every worker)
    config = Config()
    if (course / "nbgrader_config.py").exists():
        config = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()
    config.CourseDirectory.root = str(course)
    # The build owns release/; grading regenerates the assignment into scratch space.
    config.CourseDirectory.release_directory = RELEASE_DIR
    # Whatever the course's nbgrader_config.py says, student content is shown inert.
    from .steps.sanitize import NeutralizeStudentContent, SafeFeedbackExporter

    config.GenerateFeedback.exporter_class = SafeFeedbackExporter
    config.HTMLExporter.sanitize_html = True
    config.HTMLExporter.filters = {"clean_html": "labtools.grade.steps.sanitize.clean_html"}
    install_grading_steps(config)
    from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
    from nbgrader.preprocessors import GetGrades

    from .steps.feedback import HideHiddenTests

    # set either way: the course's nbgrader_config.py hides them, which --show-hidden-tests must undo
    config.GenerateFeedback.preprocessors = [GetGrades, *([HideHiddenTests] if hide_hidden_tests else []),
                                             CSSHTMLHeaderPreprocessor]
    if db_url:
        config.CourseDirectory.db_url = db_url
    elif not str(config.CourseDirectory.get("db_url", "")):
        config.CourseDirectory.db_url = f"sqlite:///{course / 'gradebook.db'}"
    else:
        url = str(config.CourseDirectory.db_url)
        if url.startswith("sqlite:///") and not url.startswith("sqlite:////"):
            # a relative SQLite path means relative to the course directory
            config.CourseDirectory.db_url = f"sqlite:///{course / url[len('sqlite:///'):]}"
    config.CourseDirectory.db_url = with_busy_timeout(str(config.CourseDirectory.db_url))
    return config


def with_busy_timeout(db_url: str, seconds: int = 120) -> str:
    """A SQLite URL that waits for a lock (formgrader, another grade command) instead of failing."""
    if not db_url.startswith("sqlite:") or "timeout=" in db_url:
        return db_url
    return db_url + ("&" if "?" in db_url else "?") + f"timeout={seconds}"


def quiet_gradebook() -> None:
    """Hide SQLAlchemy's "object not in session" SAWarning, which nbgrader's gradebook raises
    on every submission it records (it adds the objects to the session right after: nothing is
    lost), in this process: the grade command's and every worker's (72 lines for one demo class)."""
    import warnings

    try:
        from sqlalchemy.exc import SAWarning
    except ImportError:  # pragma: no cover - nbgrader needs SQLAlchemy
        return
    warnings.filterwarnings("ignore", message=r".*not in session.*", category=SAWarning)
