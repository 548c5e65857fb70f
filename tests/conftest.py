"""Shared fixtures: a scratch nbgrader course and a graded demo class per lab."""

from __future__ import annotations

import importlib.util
import shutil
import zipfile
from pathlib import Path

import pytest

from labtools.demo import demo_class
from labtools.grading import grade
from labtools.labs import REPO_ROOT, built_labs


# Modules whose tests need no kernel, no nbgrader run and no cluster: together they run in
# well under a minute (`python3 course.py test -m "not slow"`). Every other test is marked slow.
FAST_MODULES = {"test_wire", "test_nbcells", "test_collect", "test_sanitize", "test_tampering", "test_source_rules",
                "test_cluster", "test_gradebook_schema", "test_lms", "test_similarity", "test_report", "test_pretrained"}  # test_report marks its own slow tests


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.module.__name__.rpartition(".")[2] not in FAST_MODULES:
            item.add_marker(pytest.mark.slow)


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
