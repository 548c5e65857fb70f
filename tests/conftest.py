"""Shared fixtures: a scratch nbgrader course and a graded demo class per lab."""

from __future__ import annotations

import importlib.util
import re
import shutil
import zipfile
from pathlib import Path

import pytest

from labtools.demo import demo_class
from labtools.grade.run import grade
from labtools.labs import REPO_ROOT, built_labs


# Modules whose tests need no kernel, no nbgrader run and no cluster: together they run in
# well under a minute (`python3 course.py test -m "not slow"`). Every other test is marked slow.
FAST_MODULES = {"test_wire", "test_nbcells", "test_collect", "test_sanitize", "test_tampering", "test_source_rules", "test_reader",
                "test_cluster", "test_gradebook_schema", "test_lms", "test_similarity", "test_report", "test_pretrained",
                "test_requirements"}  # test_report marks its own slow tests


# How the suite is spread over xdist workers (CI: `-n 2 --dist loadscope --no-loadscope-reorder`).
# A group runs on one worker, so a fixture a module shares (a graded class, a cluster, the
# Colab-like venv) is made once: every module is one group, except those whose parameters share
# nothing (one graded demo class, one nbval run per lab) and test_graders, grouped by exercise (the
# harness runs the cells before an exercise once per process). Groups go out heaviest first, so that the long ones do not start last: with
# loadscope's own order (most tests first), the six nbval runs (lab 6's alone 265 s) came last and
# one worker idled for minutes. Weights are seconds measured in CI (stop 24); only their order
# matters, and a module missing here weighs a second per test. (xdist's own `loadgroup` cannot be
# used: with this pytest its group marks do not reach the scheduler.)
SPLIT_BY_LAB = {"test_notebooks", "test_autograde"}
BY_EXERCISE = {"test_graders"}
WEIGHTS = {
    "test_anticheat": 330, "test_colab_like": 320, "test_dask_grading": 300, "test_notebooks[lab06_t5]": 265,
    "test_submissions_in_the_wild": 175, "test_autograde[lab06_t5]": 136, "test_postgres_gradebook": 115,
    "test_metadata": 105, "test_autograde[lab04_blocks]": 91, "test_slurm_grading": 75, "test_report": 70,
    "test_autograde[lab03_positional]": 68, "test_autograde[lab05_variants]": 64, "test_browser_safety": 62,
    "test_sandbox": 59, "test_autograde[lab02_multihead]": 57, "test_grade_command": 55,
    "test_process_tree_limits": 54, "test_autograde[lab01_attention]": 50, "test_after_grading": 42,
    "test_notebooks[lab05_variants]": 38, "test_notebooks[lab04_blocks]": 33,
}


def xdist_group(nodeid: str) -> str:
    """The group a test runs in: its module, or its module and lab, or its module and exercise."""
    module = Path(nodeid.split("::")[0]).stem
    exercise = re.search(r"\[(lab\d\d_[a-z0-9]+/[A-Za-z0-9_]+)", nodeid)
    if module in BY_EXERCISE and exercise:
        return f"{module}[{exercise.group(1)}]"
    lab = re.search(r"\[(lab\d\d_[a-z0-9]+)", nodeid)
    return f"{module}[{lab.group(1)}]" if module in SPLIT_BY_LAB and lab else module


_STARTED = __import__("time").time()


def pytest_terminal_summary(terminalreporter):
    """Each lab's wall time in the Colab replica (tests/test_colab_like.py), when it ran in this session."""
    folder = REPO_ROOT / ".venv-colab" / "wall-times"
    files = sorted(folder.glob("*.txt")) if folder.is_dir() else []
    fresh = [f for f in files if f.stat().st_mtime >= _STARTED]
    if any(f.stem.startswith("lab") for f in fresh):
        terminalreporter.section("labs in the Colab replica")
        for f in fresh:
            terminalreporter.write_line(f"{f.stem}: {f.read_text()}")


def pytest_collection_modifyitems(config, items):
    groups: dict[str, list] = {}
    for item in items:
        if item.module.__name__.rpartition(".")[2] not in FAST_MODULES:
            item.add_marker(pytest.mark.slow)
        groups.setdefault(xdist_group(item.nodeid), []).append(item)
    heaviest_first = sorted(groups, key=lambda g: -WEIGHTS.get(g, len(groups[g])))
    items[:] = [item for group in heaviest_first for item in groups[group]]


def pytest_xdist_make_scheduler(config, log):
    """loadscope, with `xdist_group` as the scope."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_group(nodeid)

    return ByGroup(config, log)


def course_module():
    """course.py (the stdlib-only bootstrap) imported as a module."""
    spec = importlib.util.spec_from_file_location("course_bootstrap", REPO_ROOT / "course.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_course(tmp: Path, labs) -> Path:
    """An nbgrader course directory with the repository's config and lab sources."""
    tmp.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO_ROOT / "nbgrader_config.py", tmp / "nbgrader_config.py")
    for lab in labs:
        shutil.copytree(lab.source_path().parent, tmp / "source" / lab.lab_id)
    return tmp


def write_zip(path: Path, files: dict[str, str]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    return path


@pytest.fixture(scope="session", params=built_labs(), ids=lambda lab: lab.lab_id)
def graded_class(request, tmp_path_factory):
    """The demo class of a lab (reference answers, other correct styles, mistakes,
    an untouched release, a renamed notebook, broken JSON, a stray file), collected
    from an LMS zip and autograded by real nbgrader runs into a SQLite gradebook."""
    lab = request.param
    course = make_course(tmp_path_factory.mktemp(f"course-{lab.lab_id}"), [lab])
    archive = write_zip(course.parent / f"{lab.lab_id}-lms.zip", demo_class(lab))
    report = grade(lab.lab_id, archive, course_dir=course, hide_progress=True, log=lambda *a: None)
    return lab, course, report
