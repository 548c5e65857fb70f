"""Submissions as they really arrive, graded by real nbgrader runs: saved by Colab or
VS Code, cells deleted, duplicated or retyped, tests edited, empty notebooks, and
code that loops, kills its kernel, floods its output or eats all memory. Each is
graded as fairly as it can be, the report says what happened, and no submission
affects another."""

from __future__ import annotations

import copy
import json
import shutil

import nbformat
import pytest

from labtools import nbcells
from labtools.grade.run import grade
from labtools.labs import REPO_ROOT, get_lab
from labtools.build.submissions import fill_release

from conftest import make_course, write_zip

LAB = get_lab("lab01_attention")
WRONG_SOFTMAX = REPO_ROOT / "tests/fixtures/lab01_attention/softmax/wrong_global_max.py"


def _index(nb, gid):
    return next(i for i, c in enumerate(nb.cells) if nbcells.grade_id(c) == gid)


def _variants() -> dict[str, str]:
    source, release = nbcells.read(LAB.source_path()), nbcells.read(LAB.release_path())
    good = fill_release(release, source)
    out = {}

    nb = copy.deepcopy(good)  # Colab: nbformat 4.0, ids in cell metadata, outputs kept
    nb.nbformat_minor = 0
    nb.metadata = {"colab": {"provenance": [], "name": LAB.notebook_name}, "accelerator": "GPU",
                   "kernelspec": {"name": "python3", "display_name": "Python 3"}, "language_info": {"name": "python"}}
    for i, cell in enumerate(nb.cells):
        cell.pop("id", None)
        cell.metadata["id"] = f"c0ffee{i:04d}"
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [nbformat.v4.new_output("stream", name="stdout", text="old\n")], 7
    out["colab"] = json.dumps(nb)

    nb = copy.deepcopy(good)  # VS Code
    nb.metadata["vscode"] = {"interpreter": {"hash": "0123abcd"}}
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": ".venv (Python 3.11.7)", "language": "python"}
    out["vscode"] = nbformat.writes(nb)

    nb = copy.deepcopy(good)  # scratch cells added, a markdown cell moved
    nb.cells.insert(5, nbformat.v4.new_code_cell("print('trying things')"))
    nb.cells.insert(3, nb.cells.pop(0))
    out["added"] = nbformat.writes(nb)

    nb = copy.deepcopy(good)
    del nb.cells[_index(nb, "test_softmax_basic")]
    out["deleted_test"] = nbformat.writes(nb)

    nb = copy.deepcopy(good)
    del nb.cells[_index(nb, "softmax")]
    out["deleted_answer"] = nbformat.writes(nb)

    nb = copy.deepcopy(good)
    i = _index(nb, "softmax")
    nb.cells.insert(i + 1, copy.deepcopy(nb.cells[i]))
    out["duplicated"] = nbformat.writes(nb)

    nb = copy.deepcopy(good)
    i = _index(nb, "test_softmax_basic")
    nb.cells[i] = nbformat.v4.new_markdown_cell(nb.cells[i].source, metadata=nb.cells[i].metadata)
    out["retyped"] = nbformat.writes(nb)

    wrong = fill_release(release, source, {"softmax": WRONG_SOFTMAX.read_text()})
    out["wrong"] = nbformat.writes(wrong)
    nb = copy.deepcopy(wrong)  # same mistake, visible tests edited to `pass`
    for gid in ("test_softmax_basic", "test_softmax_stability"):
        nb.cells[_index(nb, gid)].source = "pass"
    out["edited_tests"] = nbformat.writes(nb)

    out["empty"] = nbformat.writes(nbformat.v4.new_notebook(metadata=good.metadata))

    def broken(code):
        nb = copy.deepcopy(good)
        nb.cells[_index(nb, "create_causal_mask")].source += "\n" + code
        return nbformat.writes(nb)

    out["loops"] = broken("while True:\n    pass")
    out["exits"] = broken("import os\nos._exit(1)")
    out["floods"] = broken("for i in range(1_000_000):\n    print(i)")
    out["hogs"] = broken("hog = []\nwhile True:\n    hog.append(bytearray(2**28))")
    # A device-side CUDA assert leaves the kernel's GPU unusable (every later use fails). Played
    # on the CPU: the cell that breaks sets GPU_BROKEN, which only a fresh kernel clears (the
    # replay skips the failed cell), and the later exercises fail while it is set.
    nb = copy.deepcopy(good)
    nb.cells[_index(nb, "softmax")].source += "\nGPU_BROKEN = False"
    nb.cells[_index(nb, "create_causal_mask")].source += (
        "\nGPU_BROKEN = True\nraise RuntimeError('CUDA error: device-side assert triggered')")
    for gid in ("plot_attention", "ported_attention"):
        nb.cells[_index(nb, gid)].source += (
            f"\n_{gid} = {gid}\n\n\ndef {gid}(*args, **kwargs):\n    if GPU_BROKEN:\n"
            f"        raise RuntimeError('CUDA error: device-side assert triggered')\n    return _{gid}(*args, **kwargs)")
    out["gpu_assert"] = nbformat.writes(nb)
    return {f"{student}/{LAB.notebook_name}": text for student, text in out.items()}


@pytest.fixture(scope="module")
def wild(tmp_path_factory):
    course = make_course(tmp_path_factory.mktemp("wild"), [LAB])
    with (course / "nbgrader_config.py").open("a") as fh:
        fh.write("\nc.GradingExecute.timeout = 15\nc.LimitedKernelManager.memory_mb = 4096\n")
    archive = write_zip(course.parent / "wild.zip", _variants())
    report = grade(LAB.lab_id, archive, course_dir=course, hide_progress=True, log=lambda *a: None)
    return course, report, {r.student: r for r in report.results}


def test_every_submission_is_graded(wild):
    _, report, results = wild
    assert sorted(results) == sorted(s.split("/")[0] for s in _variants())
    assert all(r.status.startswith("graded") for r in results.values()), {s: r.status for s, r in results.items()}


@pytest.mark.parametrize("student", ["colab", "vscode", "added", "deleted_test", "duplicated", "retyped"])
def test_harmless_changes_keep_full_marks(wild, student):
    result = wild[2][student]
    assert result.auto_score == result.auto_max > 0, result.cell_scores


def test_editing_a_test_to_pass_earns_nothing(wild):
    results = wild[2]
    assert results["edited_tests"].auto_score == results["wrong"].auto_score < results["colab"].auto_score


def test_a_deleted_answer_loses_only_its_exercise(wild):
    scores = wild[2]["deleted_answer"].cell_scores
    lost = {gid for gid, (got, top) in scores.items() if got < top}
    exercises = nbcells.exercises(nbcells.read(LAB.source_path()))
    assert lost and all(nbcells.test_owner(gid, exercises) == "softmax" for gid in lost)


def test_an_empty_notebook_scores_zero_and_says_why(wild):
    _, report, results = wild
    assert results["empty"].auto_score == 0
    assert "missing: put back from the release" in results["empty"].status, results["empty"].status


@pytest.mark.parametrize("student, words", [("loops", "timed out"), ("exits", "killed the kernel"),
                                            ("hogs", "ran out of memory"), ("gpu_assert", "broke the GPU")])
def test_runaway_code_costs_only_its_own_exercise(wild, student, words):
    result = wild[2][student]
    assert words in result.status
    lost = {gid for gid, (got, top) in result.cell_scores.items() if got < top}
    assert all(gid.startswith("test_create_causal_mask") for gid in lost), lost
    assert result.auto_score >= result.auto_max - 4


def test_an_output_flood_is_cut_and_graded(wild):
    course, _, results = wild
    assert results["floods"].auto_score == results["floods"].auto_max
    autograded = course / "autograded" / "floods" / LAB.lab_id / LAB.notebook_name
    assert autograded.stat().st_size < 2_000_000
