"""Run a lab's tests against one answer, in-process, the way nbgrader scores them.

nbgrader executes every cell, lets errors happen, and gives an autograded test cell
its points when it runs without an exception. This module does the same in the
current Python process (much faster than a kernel per answer), with the reference
solutions in place for every exercise except the one under test. The grader tests
use it to check that each exercise's tests accept correct answers written in other
styles and reject realistic mistakes; a few real nbgrader runs confirm it agrees.
"""

from __future__ import annotations

import contextlib
import io
import linecache
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import nbformat

from .. import nbcells
from . import runner as judge
from . import wire


@dataclass
class TestResult:
    grade_id: str
    points: float
    passed: bool
    error: str = ""


def _run_cell(source: str, namespace: dict, name: str) -> str:
    """Execute one cell; return '' on success, else the error in one line."""
    filename = f"<cell {name}>"
    # as ipykernel does for its cells: a traceback can then show the line that raised
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            exec(compile(source, filename, "exec"), namespace)
    except Exception as exc:  # noqa: BLE001 - a student's answer may raise anything
        return f"{type(exc).__name__}: {exc}"
    return ""


def _rng_state():
    import random

    import numpy as np
    import torch

    return random.getstate(), np.random.get_state(), torch.get_rng_state()


def _set_rng_state(state) -> None:
    import random

    import numpy as np
    import torch

    random.setstate(state[0])
    np.random.set_state(state[1])
    torch.set_rng_state(state[2])


# (notebook path, its mtime, exercise) -> (namespace, its contents, RNG state) after
# the cells that come before the exercise's solution cell. Those cells do not depend
# on the answer, so they run once per exercise instead of once per fixture. The same
# dict object is reused (cleared and refilled), because functions defined in those
# cells look names up in it: a helper that calls the student's function by name must
# see the answer under test, as it would in a kernel.
_PREFIX_CACHE: dict = {}


def _prefix(notebook: Path, nb, exercise: str, start: int) -> dict:
    key = (str(notebook), notebook.stat().st_mtime_ns, exercise)
    if key not in _PREFIX_CACHE:
        namespace: dict = {"__name__": "__main__", "display": print}
        judged = judge.uses_judge(nb)
        for index, cell in enumerate(nb.cells[:start]):
            if cell.cell_type == "code" and not (judged and nbcells.is_autograded_test(cell)):
                _run_cell(cell.source, namespace, nbcells.grade_id(cell) or f"#{index}")
        _PREFIX_CACHE[key] = (namespace, dict(namespace), _rng_state())
    namespace, contents, state = _PREFIX_CACHE[key]
    namespace.clear()
    namespace.update(contents)
    _set_rng_state(state)
    return namespace


def _judged(judged, grade_id: str) -> str:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        verdict = judged.run(grade_id)
    return "" if verdict.passed else f"{verdict.ename}: {verdict.evalue}"


def run_exercise(notebook: Path, exercise: str, answer: str | None = None,
                 stop_when: Callable[[TestResult], bool] | None = None) -> list[TestResult]:
    """Score the tests of `exercise` with `answer` as the content of its solution cell.

    `answer=None` keeps the reference solution. Cells after the exercise's last test
    are not run, nor, when `stop_when` is given, those after the first test result it
    accepts (a wrong answer needs one failure that names its mistake, not every one).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    notebook = Path(notebook)
    nb = nbcells.read(notebook)
    tests = nbcells.tests_of(nb, exercise)
    if not tests:
        raise ValueError(f"{notebook.name} has no test cells for exercise {exercise!r}")
    last_test = nbcells.grade_id(tests[-1])
    own = {nbcells.grade_id(c) for c in tests}
    start = next(i for i, c in enumerate(nb.cells) if nbcells.grade_id(c) == exercise)
    os.environ.setdefault("LABS_FAST", "1")
    namespace = _prefix(notebook, nb, exercise, start)
    # A judged lab's tests run in a namespace of their own and reach the answer only as
    # data, through the same wire format as grading (labtools/judge/runner.py).
    judged = None
    if judge.uses_judge(nb):
        # the submission as grading sees it: the lab's cells keep their identity (grade_id)
        cells = [nbformat.v4.new_code_cell(
                     answer if (nbcells.grade_id(c) == exercise and answer is not None) else nbcells.strip_markers(c.source),
                     metadata=c.metadata) for c in nb.cells if c.cell_type == "code"]
        judged = judge.Judge(nb, wire.LocalChannel(wire.Agent(namespace)), cells)
    results = []
    for index, cell in enumerate(nb.cells[start:], start):
        if cell.cell_type != "code":
            continue
        gid = nbcells.grade_id(cell) or f"#{index}"
        source = cell.source
        if gid == exercise and answer is not None:
            source = answer
        is_test = nbcells.is_autograded_test(cell)
        if judged is not None and is_test:
            error = "" if gid not in own else _judged(judged, gid)
        else:
            error = _run_cell(source, namespace, gid)
        if is_test and gid in own:
            points = float(nbcells.nbgrader_meta(cell).get("points", 0))
            results.append(TestResult(gid, points, not error, error))
            if stop_when is not None and stop_when(results[-1]):
                break
        if gid == last_test:
            break
    plt.close("all")
    return results


def score(results: list[TestResult]) -> tuple[float, float]:
    """(points earned, points possible)."""
    return sum(r.points for r in results if r.passed), sum(r.points for r in results)
