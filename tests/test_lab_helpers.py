"""What the tests reach in the student's process, by name (labtools/judge/wire.py, docs/authoring.md).

`student.X` is an exercise's answer; `lab.X` is a helper the grader builds in the kernel from
its own text of the lab's cells. The few notebook objects a test reads on purpose (the given
classes an answer must be built on, the pretrained model it copies from) are listed here with
why, and the reader refuses every rebinding of them."""

from __future__ import annotations

import ast
import re

import pytest

from labtools import judge, nbcells
from labtools.judge import reader

# name -> why a test reads the notebook's own object rather than the lab's copy
NOTEBOOK_OBJECTS = {
    "lab04_blocks": {
        "MultiHeadAttention": "the block must be built on the notebook's given class (isinstance)",
        "PositionalEncoding": "the encoder must be built on the notebook's given class (isinstance)",
        "hf_model": "the pretrained model the answer copies from: loaded once, in the notebook",
    },
    "lab05_variants": {"DecoderOnlyBlock": "TinyGPT must be built on the notebook's given block (isinstance)"},
}


def _lab_paths():
    from pathlib import Path

    return sorted(Path(__file__).resolve().parents[1].glob("source/lab*/lab*.ipynb"))


def _defined(cell) -> set[str]:
    tree = reader.parse(nbcells.strip_markers(cell.source))
    if tree is None:
        return set()
    names = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    return names | {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}


@pytest.mark.parametrize("path", _lab_paths(), ids=lambda p: p.stem)
def test_student_names_only_exercises_and_lab_names_only_the_judges_cells(path):
    nb = nbcells.read(path)
    assert judge.notebook_names_read(nb) == set(NOTEBOOK_OBJECTS.get(path.stem, {})), \
        "a test reads a helper of the notebook as student.X: use lab.X, or list it here with why"
    helpers = set().union(*(_defined(c) for c in judge.judge_cells(nb)))
    built = set()
    for cell in nb.cells:
        if cell.cell_type == "code" and (nbcells.is_autograded_test(cell) or cell in judge.judge_cells(nb)):
            built |= set(re.findall(r"\blab\.([A-Za-z_]\w*)", nbcells.strip_markers(cell.source)))
    imported = {"torch", "nn", "F", "np", "math"}
    assert built - helpers - imported == set(), f"lab.X the judge's cells do not define: {sorted(built - helpers)}"


@pytest.mark.parametrize("lab, name", [(lab, name) for lab, names in NOTEBOOK_OBJECTS.items() for name in names])
def test_the_notebook_objects_tests_read_cannot_be_rebound_or_changed(lab, name):
    path = next(p for p in _lab_paths() if p.stem == lab)
    nb = nbcells.read(path)
    cells = [(nbcells.grade_id(c), nbcells.strip_markers(c.source), False) for c in nb.cells
             if c.cell_type == "code" and not nbcells.is_solution(c) and not nbcells.is_autograded_test(c)]
    read = judge.notebook_names_read(nb)
    for attack in (f"{name} = None", f"class {name}:\n    pass", f"{name}.forward = print",
                   f"if True:\n    {name} = {name}.float().half()"):
        found = reader.reaches_into_runtime(cells + [("answer", attack, True)], read)
        assert any(name in f for f in found), (attack, found)
    for honest in ([f"{name} = {name}.eval()"] if name == "hf_model" else []) + [f"print({name})", f"def f({name}):\n    {name}.x = 1"]:
        assert reader.reaches_into_runtime(cells + [("answer", honest, True)], read) == [], honest


def _parses(text):
    import ast

    try:
        ast.parse(text)
    except SyntaxError:
        return False
    return True


@pytest.mark.parametrize("path", _lab_paths(), ids=lambda p: p.parent.name)
def test_a_visible_test_copied_into_a_students_cell_is_not_sent_to_review(path):
    """Students copy a visible test into a cell of their own to try it. Copied whole, it runs the
    lab's own lines (`labwire.manual_seed(student, 0)`, a helper it defines again), so nothing in it
    sends the submission to review; one line of it changed, or the same line in a cell of the
    student's own, is read as any student code is."""
    import copy

    import nbformat

    from labtools.judge import runner

    nb = nbcells.read(path)
    tests = [c for c in nb.cells if nbcells.is_autograded_test(c)]
    submission = copy.deepcopy(nb)
    for cell in tests:
        visible = re.sub(r"### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS", "", cell.source, flags=re.S)
        submission.cells.append(nbformat.v4.new_code_cell(visible))
    assert runner.needs_review(nb, submission.cells) == []
    reaching = [c for c in tests if any("labwire." in l and _parses(l.strip())
                                        for l in c.source.split("### BEGIN HIDDEN TESTS")[0].splitlines())]
    for cell in reaching[:2]:
        visible = re.sub(r"### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS", "", cell.source, flags=re.S)
        line = next(l for l in visible.splitlines() if "labwire." in l and _parses(l.strip()))
        for attack in ("labwire.Agent._op_call = print\n" + visible,
                       "print('trying the test')\n" + line.strip(),
                       visible + "\nlabwire.Agent.serve = print"):
            found = runner.needs_review(nb, copy.deepcopy(nb).cells + [nbformat.v4.new_code_cell(attack)])
            assert any(f.startswith("labwire") for f in found), (attack, found)
