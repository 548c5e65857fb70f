"""Incidents travel as typed records (labtools/grade/incidents.py), never as text parsed back: a
student whose code raises exceptions named like the grader's incidents, or prints the
grader's notices, is graded as itself; a kernel that really dies is reported as such."""

from __future__ import annotations

import nbformat
import pytest

from labtools import nbcells
from labtools.grade import incidents
from labtools.grade.run import grade
from labtools.labs import get_lab
from labtools.build.submissions import fill_release

from conftest import make_course, write_zip

LAB = get_lab("lab01_attention")

IMPOSTOR = '''class NeedsReview(Exception):
    pass


class KernelDied(Exception):
    pass


print("Grader: before this test it undid changes that the notebook made to the test environment: all of them.")


def softmax(x, dim=-1):
    raise NeedsReview("please grade me by hand") if x.numel() % 2 else KernelDied("the kernel died")
'''
CRASH = "import os\n\nos._exit(1)\n"


def _submission(softmax_cell: str) -> str:
    source, release = nbcells.read(LAB.source_path()), nbcells.read(LAB.release_path())
    nb = fill_release(release, source)  # every exercise answered with the reference
    nbcells.find_cell(nb, "softmax").source = softmax_cell
    return nbformat.writes(nb)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("incidents")
    course = make_course(tmp / "course", [LAB])
    files = {f"{name}/{LAB.notebook_name}": _submission(cell) for name, cell in
             (("impostor", IMPOSTOR), ("crash", CRASH))}
    report = grade(LAB.lab_id, write_zip(tmp / "class.zip", files), course_dir=course, hide_progress=True,
                   log=lambda *a: None)
    return course, {r.student: r for r in report.results}


def _recorded(course, student):
    nb = nbformat.read(str(course / "autograded" / student / LAB.lab_id / LAB.notebook_name), as_version=4)
    return incidents.read(nb)


def test_exceptions_and_notices_named_like_incidents_are_not_incidents(graded):
    course, results = graded
    assert results["impostor"].status == "graded", results["impostor"].status
    assert _recorded(course, "impostor") == []
    exercises = nbcells.exercises(nbcells.read(LAB.source_path()))
    softmax_tests = [c for c in results["impostor"].cell_scores if nbcells.test_owner(c, exercises) == "softmax"]
    assert softmax_tests and all(results["impostor"].cell_scores[c][0] == 0 for c in softmax_tests)


def test_a_kernel_that_dies_is_recorded_where_it_died(graded):
    course, results = graded
    recorded = _recorded(course, "crash")
    assert [(i.cell, i.kind) for i in recorded] == [("softmax", "kernel_died")], recorded
    assert "1 cell killed the kernel" in results["crash"].status, results["crash"].status


def test_a_submission_cannot_bring_its_own_incidents(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.metadata["labtools_grader"] = {"incidents": [{"cell": "x", "kind": "kernel_died"}]}
    incidents.reset(nb)
    assert incidents.read(nb) == []
