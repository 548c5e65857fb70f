"""The graders are code: each exercise's tests must accept correct answers written
in different styles and reject realistic mistakes.

Fixtures live in tests/fixtures/<lab>/<exercise>/{correct,wrong}_*.py; each file is
the whole content of the exercise's solution cell, as a student would write it.

A wrong answer must also be told what its mistake is. Its fixture names the mistake in a
`# says: <regex>` line after its `# wrong:` line; the first message the student reads
(the first test that fails for what the answer computes) must match it. A message is built
from what the answer returned (compared with each likely mistake), so the regex is the name
of the mistake, not the wording of one fixture's message.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from labtools import nbcells
from labtools.judge.harness import run_exercise, score
from labtools.labs import built_labs

FIXTURES = Path(__file__).parent / "fixtures"


def _fixture_cases():
    for lab in built_labs():
        for path in sorted((FIXTURES / lab.lab_id).glob("*/*.py")):
            yield pytest.param(lab, path.parent.name, path, id=f"{lab.lab_id}/{path.parent.name}/{path.stem}")


def _describe(results) -> str:
    return "; ".join(f"{r.grade_id}: {'ok' if r.passed else r.error}" for r in results)


_BROKEN = re.compile(r"\b(SyntaxError|IndentationError|ImportError|ModuleNotFoundError)\b|name '(\w+)' is not defined")


_SAYS = re.compile(r"^#\s*says:\s*(.+?)\s*$", re.MULTILINE)


def says(fixture_text: str) -> re.Pattern | None:
    """The mistake a wrong fixture's first message must name, from its `# says:` line."""
    match = _SAYS.search(fixture_text)
    return re.compile(match.group(1), re.IGNORECASE) if match else None


def first_message(results, exercise: str) -> str:
    """What the student reads first: the first failure caused by what the answer computes."""
    return next((r.error for r in results if not r.passed and _caught(r.error, exercise)), "")


def _caught(error: str, exercise: str) -> bool:
    """A test failed because of what the answer computes, not because the fixture itself is
    broken (a typo, a missing import); a missing or renamed exercise is a real mistake."""
    match = _BROKEN.search(error)
    return match is None or match.group(2) == exercise


@pytest.mark.parametrize("lab, exercise, fixture", list(_fixture_cases()))
def test_fixture_scored_as_expected(lab, exercise, fixture):
    if fixture.stem.endswith("_on_cpu") and not torch.cuda.is_available():
        # a tensor made on the CPU is only a mistake where the lab's device is not the CPU
        pytest.skip("a device mistake: caught only on a GPU (run tests/benchmarks/fixtures_on_device.py there)")
    wrong = fixture.name.startswith("wrong_")
    # a wrong answer is done once one test fails for what it computes (the rest cannot undo that)
    stop_when = (lambda r: not r.passed and _caught(r.error, exercise)) if wrong else None
    results = run_exercise(lab.source_path(), exercise, fixture.read_text(), stop_when=stop_when)
    earned, possible = score(results)
    assert possible > 0, f"{exercise} has no points to earn"
    if fixture.name.startswith("correct_"):
        assert earned == possible, f"a correct answer lost points: {_describe(results)}"
    elif fixture.name.startswith("wrong_"):
        assert earned < possible, f"a wrong answer got full marks: {_describe(results)}"
        assert any(_caught(r.error, exercise) for r in results if not r.passed), \
            f"the wrong answer loses points only because it does not run (a broken fixture?): {_describe(results)}"
        mistake = says(fixture.read_text())
        if mistake is not None:
            message = first_message(results, exercise)
            assert mistake.search(message), f"the message does not name the mistake ({mistake.pattern!r}): {message}"
    else:
        pytest.fail(f"fixture names start with correct_ or wrong_: {fixture.name}")


@pytest.mark.parametrize("lab", built_labs(), ids=lambda lab: lab.lab_id)
def test_every_exercise_has_enough_fixtures(lab):
    nb = nbcells.read(lab.source_path())
    for exercise in nbcells.exercises(nb):
        folder = FIXTURES / lab.lab_id / exercise
        correct = list(folder.glob("correct_*.py"))
        wrong = list(folder.glob("wrong_*.py"))
        assert len(correct) >= 3, f"{lab.lab_id}/{exercise}: {len(correct)} correct fixtures, need 3"
        assert len(wrong) >= 5, f"{lab.lab_id}/{exercise}: {len(wrong)} wrong fixtures, need 5"


# Issue 30: at least 90 % of the messages a wrong answer gets must name its mistake.
NAMED_SHARE = 0.9


@pytest.mark.parametrize("lab", built_labs(), ids=lambda lab: lab.lab_id)
def test_most_wrong_fixtures_name_their_mistake(lab):
    """Most wrong fixtures say which mistake their first message must name (each such line is
    checked in test_fixture_scored_as_expected), and no says line is a pattern that anything
    matches. `*_on_cpu` fixtures fail only on a GPU, so they are not counted here."""
    wrong = [p for p in (FIXTURES / lab.lab_id).glob("*/wrong_*.py") if not p.stem.endswith("_on_cpu")]
    patterns = {p.relative_to(FIXTURES).as_posix(): says(p.read_text()) for p in wrong}
    named = [name for name, pattern in patterns.items() if pattern is not None]
    for name in named:
        pattern = patterns[name]
        assert not pattern.search("") and len(re.sub(r"[^\w]", "", pattern.pattern)) >= 4, \
            f"{name}: '# says: {pattern.pattern}' names no mistake"
    assert len(named) >= NAMED_SHARE * len(wrong), \
        f"{lab.lab_id}: {len(named)} of {len(wrong)} wrong fixtures name their mistake, need {NAMED_SHARE:.0%}"


@pytest.mark.parametrize("lab", built_labs(), ids=lambda lab: lab.lab_id)
def test_reference_solutions_pass_every_test(lab):
    nb = nbcells.read(lab.source_path())
    for exercise in nbcells.exercises(nb):
        results = run_exercise(lab.source_path(), exercise)
        earned, possible = score(results)
        assert earned == possible > 0, f"{exercise}: {_describe(results)}"


@pytest.mark.parametrize("lab", built_labs(), ids=lambda lab: lab.lab_id)
def test_a_stub_answer_scores_zero(lab):
    """The release stub must lose every point of its exercise: no test passes vacuously."""
    nb = nbcells.read(lab.source_path())
    for exercise in nbcells.exercises(nb):
        cell = nbcells.find_cell(nb, exercise)
        stub = nbcells.stub_solution(cell.source)
        earned, _ = score(run_exercise(lab.source_path(), exercise, stub))
        assert earned == 0, f"{exercise}: a stub earned {earned} points"


def _demo_cases():
    from labtools.demo import demo_answers

    for lab in built_labs():
        for kind in ("correct", "wrong"):
            for exercise, answer in demo_answers(lab, kind).items():
                yield pytest.param(lab, exercise, kind, answer, id=f"{lab.lab_id}/{exercise}/demo-{kind}")


@pytest.mark.parametrize("lab, exercise, kind, answer", list(_demo_cases()))
def test_demo_answers_are_scored_as_their_kind(lab, exercise, kind, answer):
    """The demo class (labtools/demo_answers) holds answers of its own: they must be what they say."""
    earned, possible = score(run_exercise(lab.source_path(), exercise, answer))
    assert (earned == possible) if kind == "correct" else (earned < possible), f"{earned}/{possible}"


@pytest.mark.parametrize("lab", built_labs(), ids=lambda lab: lab.lab_id)
def test_the_demo_class_answers_every_exercise(lab):
    from labtools.demo import demo_answers

    exercises = set(nbcells.exercises(nbcells.read(lab.source_path())))
    assert set(demo_answers(lab, "correct")) == exercises == set(demo_answers(lab, "wrong"))
