"""The in-process harness must score like nbgrader: cells share one namespace."""

from __future__ import annotations

import nbformat
from nbformat.v4 import new_code_cell, new_notebook

from labtools.judge.harness import run_exercise, score


def _meta(gid, **kw):
    return {"nbgrader": {"grade_id": gid, "schema_version": 3, "locked": False,
                         "grade": kw.get("grade", False), "solution": kw.get("solution", False),
                         **({"points": kw["points"]} if "points" in kw else {})}}


def test_helpers_defined_before_an_exercise_see_the_answer_under_test(tmp_path):
    nb = new_notebook(cells=[
        new_code_cell("def check():\n    return double(3) == 6", metadata=_meta("helpers")),
        new_code_cell("def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION",
                      metadata=_meta("double", solution=True)),
        new_code_cell("assert check(), 'double(3) must be 6'", metadata=_meta("test_double", grade=True, points=1)),
    ])
    path = tmp_path / "lab.ipynb"
    nbformat.write(nb, path)
    assert score(run_exercise(path, "double")) == (1, 1)
    assert score(run_exercise(path, "double", "def double(x):\n    return x + 2")) == (0, 1)
    assert score(run_exercise(path, "double", "def double(x):\n    return x * 2.0")) == (1, 1)
    assert score(run_exercise(path, "double", "def double(x):\n    raise NotImplementedError()")) == (0, 1)


def test_stop_when_ends_the_run_at_the_first_result_it_accepts(tmp_path):
    tests = [new_code_cell(f"ran.append({i})\nassert {cond}, 'test {i}'",
                           metadata=_meta(f"test_double_{i}", grade=True, points=1))
             for i, cond in enumerate(["double(1) == 2", "double(2) == 4", "double(0) == 0"])]
    nb = new_notebook(cells=[
        new_code_cell("ran = []", metadata=_meta("helpers")),
        new_code_cell("def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION",
                      metadata=_meta("double", solution=True)),
        *tests,
        new_code_cell("ran.append('after')", metadata=_meta("after")),
    ])
    path = tmp_path / "lab.ipynb"
    nbformat.write(nb, path)
    wrong = "def double(x):\n    return x * x"  # right for 0, wrong for 1, right for 2
    results = run_exercise(path, "double", wrong, stop_when=lambda r: not r.passed)
    assert [(r.grade_id, r.passed) for r in results] == [("test_double_0", False)]
    results = run_exercise(path, "double", wrong, stop_when=lambda r: not r.passed and "test 9" in r.error)
    assert [(r.grade_id, r.passed) for r in results] == [("test_double_0", False), ("test_double_1", True),
                                                         ("test_double_2", True)]
    assert [r.passed for r in run_exercise(path, "double", stop_when=lambda r: not r.passed)] == [True] * 3
