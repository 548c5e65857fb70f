"""Attack submissions (tests/fixtures/attacks/) graded by real nbgrader runs.

Each attack is graded twice: with labtools' test guard (the course's configuration)
and with the guard off (what plain nbgrader gives). Its honest twin, the same file
without the `# cheat:begin/end` lines, is the measure: with the guard no attack may
score more than its twin in any test cell, and the attacks that say they beat
plain nbgrader must really do so without the guard (else the fixture proves nothing).
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
import torch
from nbgrader.api import Gradebook

from labtools import kernel_guard, nbcells
from labtools.grading import grade
from labtools.guard import NOTICE, bound_names, kernel_env
from labtools.labs import get_lab
from labtools.submissions import fill_release

from conftest import make_course, write_zip

LAB = get_lab("lab01_attention")
ATTACKS = Path(__file__).parent / "fixtures" / "attacks" / LAB.lab_id
CHEAT = re.compile(r"^[ \t]*# cheat:begin\n.*?^[ \t]*# cheat:end\n?", re.S | re.M)


def _attacks() -> list[str]:
    return sorted(p.stem for p in ATTACKS.glob("*.py"))


def _cells(text: str) -> dict[str, str]:
    """grade_id -> cell source, from the `# %% <grade_id>` sections of a fixture."""
    parts = re.split(r"^# %% (\S+)\n", text, flags=re.M)
    return {gid: body for gid, body in zip(parts[1::2], parts[2::2])}


def _beats_plain_nbgrader(text: str) -> bool:
    claim = re.search(r"Beats plain nbgrader: (yes|no)", text)
    assert claim, "the fixture's docstring must say 'Beats plain nbgrader: yes' or 'no'"
    return claim.group(1) == "yes"


def _submission(cells: dict[str, str]) -> str:
    source, release = nbcells.read(LAB.source_path()), nbcells.read(LAB.release_path())
    nb = fill_release(release, source, written=False)
    for cell in nb.cells:  # unanswered, as released, except the attacked cells
        gid = nbcells.grade_id(cell)
        if nbcells.is_solution(cell) and cell.cell_type == "code":
            cell.source = cells.get(gid, nbcells.find_cell(release, gid).source)
    return nbformat.writes(nb)


def _scores(course: Path) -> dict[str, dict[str, float]]:
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        return {sub.student.id: {g.name: g.auto_score for nb in sub.notebooks for g in nb.grades
                                 if g.cell.cell_type == "code"}
                for sub in gb.find_assignment(LAB.lab_id).submissions}


def _grade_class(tmp: Path, files: dict[str, str], guard: bool):
    course = make_course(tmp / "course", [LAB])
    if not guard:
        with open(course / "nbgrader_config.py", "a") as config:
            config.write("\nc.GradingExecute.guard = False\nc.GradingExecute.use_judge = False\n")
    archive = write_zip(tmp / "class.zip", {f"{s}/{LAB.notebook_name}": t for s, t in files.items()})
    report = grade(LAB.lab_id, archive, course_dir=course, hide_progress=True, workers=2, log=lambda *a: None)
    return course, {r.student: r for r in report.results}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """(guarded scores, plain-nbgrader scores, honest-twin scores, guarded report, course)."""
    attacks, twins, twin_of, by_code = {}, {}, {}, {}
    for name in _attacks():
        text = (ATTACKS / f"{name}.py").read_text()
        attacks[name] = _submission(_cells(text))
        honest = {gid: body.strip() + "\n" for gid, body in _cells(CHEAT.sub("", text)).items()}
        # attacks on the same honest code share one twin
        twin_of[name] = by_code.setdefault(repr(sorted(honest.items())), f"honest-{name}")
        twins[twin_of[name]] = _submission(honest)
    reference = nbformat.writes(fill_release(nbcells.read(LAB.release_path()), nbcells.read(LAB.source_path())))
    guarded_course, guarded_report = _grade_class(tmp_path_factory.mktemp("guarded"),
                                                  {**attacks, "reference": reference}, guard=True)
    plain_course, _ = _grade_class(tmp_path_factory.mktemp("plain"), {**attacks, **twins}, guard=False)
    plain = _scores(plain_course)
    for name, twin in twin_of.items():
        plain[f"honest-{name}"] = plain[twin]
    return _scores(guarded_course), plain, guarded_report, guarded_course


@pytest.mark.parametrize("attack", _attacks())
def test_attack_scores_no_more_than_its_honest_twin(graded, attack):
    guarded, plain, report, _ = graded
    honest = plain[f"honest-{attack}"]
    assert set(guarded[attack]) == set(honest)
    gained = {cell: (honest[cell], score) for cell, score in guarded[attack].items() if score > honest[cell]}
    assert not gained, f"{attack} scored more than honestly earned (cell: (honest, got)): {gained}"
    if attack != "break_the_guard":  # the only one that fails closed, at the cost of honest marks
        lost = {cell: (honest[cell], score) for cell, score in guarded[attack].items() if score < honest[cell]}
        assert not lost, f"the guard took honest marks from {attack} (cell: (honest, got)): {lost}"
    assert report[attack].status.startswith("graded"), report[attack].status


@pytest.mark.parametrize("attack", _attacks())
def test_attack_does_what_it_claims_against_plain_nbgrader(graded, attack):
    _, plain, _, _ = graded
    honest, cheated = sum(plain[f"honest-{attack}"].values()), sum(plain[attack].values())
    if _beats_plain_nbgrader((ATTACKS / f"{attack}.py").read_text()):
        assert cheated > honest, f"{attack} is no attack: without the guard it gets {cheated}, honestly {honest}"
    else:
        assert cheated == honest, f"{attack} beats plain nbgrader ({cheated} > {honest}): say so in its docstring"


def test_reference_answers_untouched_by_the_guard(graded):
    guarded, _, report, course = graded
    assert all(score > 0 for score in guarded["reference"].values()), guarded["reference"]
    assert report["reference"].status == "graded", report["reference"].status
    nb = nbformat.read(str(course / "autograded" / "reference" / LAB.lab_id / LAB.notebook_name), as_version=4)
    notices = [o for c in nb.cells for o in c.get("outputs", []) if NOTICE in str(o.get("text", ""))]
    assert not notices, notices


@pytest.mark.parametrize("attack", ["patch_torch_allclose", "patch_numpy_testing", "redefine_check_helper",
                                    "redefine_call_helper", "blank_test_cells", "swallow_errors"])
def test_tampering_is_reported(graded, attack):
    _, _, report, course = graded
    assert "tampered with" in report[attack].status, report[attack].status
    nb = nbformat.read(str(course / "autograded" / attack / LAB.lab_id / LAB.notebook_name), as_version=4)
    assert any(NOTICE in str(o.get("text", "")) for c in nb.cells for o in c.get("outputs", []))


# -- the pieces, on fresh inputs ---------------------------------------------------------

def test_honest_values_pass_the_output_check():
    from collections import namedtuple
    from dataclasses import dataclass

    Pair = namedtuple("Pair", "output weights")

    @dataclass(eq=False)
    class Plain:
        x: int

    honest = [torch.randn(3), torch.nn.Parameter(torch.ones(2)), torch.nn.Linear(2, 2), 3, 2.5, "text",
              None, [torch.ones(1), (1, 2)], {"a": torch.zeros(2)}, Pair(torch.ones(1), torch.ones(1)), Plain(1),
              torch.tensor(1.0).numpy()]
    for value in honest:
        assert kernel_guard.dishonesty(value) is None, value


def test_deceptive_values_fail_the_output_check():
    class Faker:
        __class__ = property(lambda self: torch.Tensor)

    Faker.__module__ = "__main__"

    class Yes(float):
        def __eq__(self, other):
            return True

    Yes.__module__ = "__main__"

    class Sub(torch.Tensor):
        pass

    Sub.__module__ = "__main__"
    for value in [Faker(), Yes(1.0), torch.ones(2).as_subclass(Sub), [1, Yes(2.0)], {"k": (Faker(),)}]:
        assert kernel_guard.dishonesty(value), value


def test_bound_names_reads_top_level_bindings():
    source = ("import torch.nn.functional as F\nimport math, os.path\nfrom x import y as z\n"
              "def f():\n    inner = 1\nclass C: pass\na, (b, c) = 1, (2, 3)\nd: int = 4\nfor i in []: pass\n")
    assert bound_names(source) == ["F", "math", "os", "z", "f", "C", "a", "b", "c", "d", "i"]
    assert bound_names(source, functions_only=True) == ["f"]
    assert bound_names("def broken(:") == []


def test_kernel_env_hides_that_it_is_grading():
    env = kernel_env({"NBGRADER_EXECUTION": "autograde", "PATH": "/bin"})
    assert env == {"PATH": "/bin", "LABS_FAST": "1"}
    assert kernel_env({"PATH": "/bin"}) == {"PATH": "/bin"}


def test_an_attack_on_a_partial_answer_keeps_exactly_its_honest_marks(graded):
    guarded, plain, _, _ = graded
    honest = sum(plain["honest-patch_on_partial_answer"].values())
    assert honest > 0, "the fixture's honest part must earn something"
    assert sum(guarded["patch_on_partial_answer"].values()) == honest < sum(plain["patch_on_partial_answer"].values())


def test_a_removed_guard_fails_closed(graded):
    """With its guard gone, no test cell of the notebook is scored, and the report says why."""
    guarded, _, report, _ = graded
    assert sum(guarded["break_the_guard"].values()) == 0
    assert "broke the grader's test guard" in report["break_the_guard"].status, report["break_the_guard"].status
