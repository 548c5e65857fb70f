"""Tampered nbgrader metadata (labtools/grade/steps/restore.py): put back from the release, reported
by cell with what changed, and the notebook graded as if it had not been touched.

The grading test tampers with copies of the reference answers of lab01 in every way
issue 12 lists (points, an extra graded cell, a renamed, a deleted and a duplicated
test, a test turned into markdown, cells moved, the grade flag, malformed metadata,
another kernel) and grades them with real nbgrader runs: each keeps exactly the
reference's marks, and the grade table names what was restored.
"""

from __future__ import annotations

import copy

import nbformat
import pytest

from labtools import nbcells
from labtools.grade.run import grade
from labtools.labs import get_lab
from labtools.grade.steps.restore import restore, restored
from labtools.build.submissions import fill_release

from conftest import make_course, write_zip

LAB = get_lab("lab01_attention")


def _reference():
    return fill_release(nbcells.read(LAB.release_path()), nbcells.read(LAB.source_path()))


def _index(nb, gid):
    return next(i for i, c in enumerate(nb.cells) if nbcells.grade_id(c) == gid)


def _tamper_extra(nb):
    nb.cells.append(nbformat.v4.new_code_cell("assert True", metadata={"nbgrader": {
        "grade": True, "grade_id": "bonus", "locked": True, "points": 50, "solution": False, "schema_version": 3}}))


def _tamper_rename(nb):
    nb.cells[_index(nb, "test_softmax_values")].metadata.nbgrader["grade_id"] = "test_softmax_values_v2"


def _tamper_delete(nb):
    del nb.cells[_index(nb, "test_create_causal_mask_basic")]


def _tamper_markdown(nb):
    i = _index(nb, "test_softmax_stability")
    old = nb.cells[i]
    nb.cells[i] = nbformat.v4.new_markdown_cell(old.source, metadata=old.metadata)


def _tamper_duplicate(nb):
    nb.cells.insert(3, copy.deepcopy(nb.cells[_index(nb, "test_softmax_basic")]))
    nb.cells[3]["id"] = "dup-cell"


def _tamper_move(nb):
    helpers = nb.cells.pop(_index(nb, "given_test_helpers"))
    nb.cells.append(helpers)  # the tests' helpers after the tests that use them


def _tamper_grade_flag(nb):
    nb.cells[_index(nb, "test_dot_product_variance_basic")].metadata.nbgrader["grade"] = False


def _tamper_malformed(nb):
    nb.cells[_index(nb, "test_create_causal_mask_values")].metadata.nbgrader["points"] = "lots"


def _tamper_kernel(nb):
    nb.metadata["kernelspec"] = {"name": "evil", "display_name": "Evil", "language": "python"}


TAMPERINGS = {  # name: (tamper, cell the report must name)
    "points": (lambda nb: nb.cells[_index(nb, "test_softmax_basic")].metadata.nbgrader.update(points=100),
               "test_softmax_basic"),
    "extra": (_tamper_extra, "bonus"),
    "rename": (_tamper_rename, "test_softmax_values"),
    "delete": (_tamper_delete, "test_create_causal_mask_basic"),
    "markdown": (_tamper_markdown, "test_softmax_stability"),
    "duplicate": (_tamper_duplicate, "test_softmax_basic"),
    "move": (_tamper_move, "given_test_helpers"),
    "grade_flag": (_tamper_grade_flag, "test_dot_product_variance_basic"),
    "malformed": (_tamper_malformed, "test_create_causal_mask_values"),
    "kernel": (_tamper_kernel, "evil"),
}


# Tamperings of different cells share a submission (a grading costs seconds); each is still
# named in that submission's report, and the marks must stay the untouched notebook's.
GROUPS = [("points", "rename", "malformed"), ("extra", "markdown", "grade_flag"),
          ("delete", "duplicate", "kernel"), ("move",)]


def test_every_tampering_is_graded():
    assert sorted(name for group in GROUPS for name in group) == sorted(TAMPERINGS)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("metadata")
    course = make_course(tmp / "course", [LAB])
    files = {"honest": nbformat.writes(_reference())}
    for index, group in enumerate(GROUPS):
        nb = _reference()
        for name in group:
            TAMPERINGS[name][0](nb)
        files[f"tampered{index}"] = nbformat.writes(nb)
    archive = write_zip(tmp / "class.zip", {f"{s}/{LAB.notebook_name}": t for s, t in files.items()})
    report = grade(LAB.lab_id, archive, course_dir=course, hide_progress=True, workers=2, log=lambda *a: None)
    results = {r.student: r for r in report.results}
    return {"honest": results["honest"],
            **{name: results[f"tampered{index}"] for index, group in enumerate(GROUPS) for name in group}}


@pytest.mark.parametrize("name", sorted(TAMPERINGS))
def test_tampered_metadata_is_restored_reported_and_graded(graded, name):
    honest, result = graded["honest"], graded[name]
    assert honest.status == "graded" and honest.auto_score == honest.auto_max > 0, honest
    assert result.status.startswith("graded; "), result.status
    assert "metadata restored from the release" in result.status, result.status
    assert TAMPERINGS[name][1] in result.status, result.status
    assert (result.auto_score, result.auto_max) == (honest.auto_score, honest.auto_max), \
        f"{name}: {result.auto_score}/{result.auto_max}, untouched {honest.auto_score}/{honest.auto_max}"


# -- restore() on its own, on fresh notebooks -------------------------------------------

def _marked(gid, source="x = 1", **meta):
    return nbformat.v4.new_code_cell(source, metadata={"nbgrader": {
        "grade_id": gid, "grade": False, "locked": True, "solution": False, "schema_version": 3, **meta}})


def _release():
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                           "language": "python"}})
    nb.cells = [nbformat.v4.new_markdown_cell("intro"), _marked("helpers", "def h(): pass"),
                _marked("answer", "raise NotImplementedError()", solution=True, locked=False),
                _marked("test_a", "assert h() is None", grade=True, points=2),
                _marked("test_b", "assert True", grade=True, points=1)]
    return nb


def test_an_untouched_notebook_with_student_cells_is_left_alone():
    nb = _release()
    nb.cells.insert(3, nbformat.v4.new_code_cell("scratch = 2"))
    before = nbformat.writes(nb)
    assert restore(nb, _release()) == []
    assert nbformat.writes(nb) == before


def test_moved_cells_go_back_in_order_with_the_student_cells_that_follow_them():
    nb = _release()
    mine = nbformat.v4.new_code_cell("mine = 1")
    nb.cells = [nb.cells[0], nb.cells[3], nb.cells[2], mine, nb.cells[1], nb.cells[4]]
    changes = restore(nb, _release())
    assert [nbcells.grade_id(c) or c.source for c in nb.cells] == ["intro", "helpers", "answer", "mine = 1",
                                                                   "test_a", "test_b"]
    assert any("order" in c["change"] for c in changes), changes


def test_every_change_is_recorded_by_cell():
    nb = _release()
    nb.cells[3].metadata.nbgrader["points"] = 99
    nb.cells[4].metadata.nbgrader["grade_id"] = "test_b_renamed"
    nb.metadata["kernelspec"] = {"name": "other"}
    changes = {c["cell"]: c["change"] for c in restore(nb, _release())}
    assert "points: 99 -> 2" in changes["test_a"]
    assert "renamed" in changes["test_b"]
    assert "kernel" in changes["(notebook)"]
    assert nb.cells[3].metadata.nbgrader["points"] == 2 and nbcells.grade_id(nb.cells[4]) == "test_b"
    assert nb.metadata.kernelspec["name"] == "python3"


def test_a_deleted_answer_comes_back_as_the_stub_and_the_students_copy_stays_ordinary():
    nb = _release()
    nb.cells[2].source = "def answer(): return 1"
    nb.cells[2].metadata = {"nbgrader": "garbage"}
    changes = restore(nb, _release())
    assert [c.source for c in nb.cells if nbcells.grade_id(c) == "answer"] == ["raise NotImplementedError()"]
    assert any(c.source == "def answer(): return 1" and "nbgrader" not in c.metadata for c in nb.cells)
    assert any(c["cell"] == "answer" and "missing" in c["change"] for c in changes), changes


def test_the_report_cannot_be_brought_by_the_submission(tmp_path):
    """The grader's step always writes its own record, even when it changed nothing."""
    from traitlets.config import Config

    from labtools.grade.steps.restore import RestoreFromRelease

    (tmp_path / "release" / "lab").mkdir(parents=True)
    nbformat.write(_release(), str(tmp_path / "release" / "lab" / "nb.ipynb"))
    config = Config()
    config.CourseDirectory.root = str(tmp_path)
    config.CourseDirectory.release_directory = "release"
    nb = _release()
    nb.metadata["labtools_grader"] = {"restored": [{"cell": "test_a", "change": "forged by the student"}]}
    nb, _ = RestoreFromRelease(config=config).preprocess(nb, {"nbgrader": {"assignment": "lab", "notebook": "nb"}})
    assert restored(nb) == []
