"""Attack fixtures of the labs other than lab 1 (tests/fixtures/attacks/<lab>/), graded by
the judge through the in-process harness (the same Judge, reader and wire as grading; lab 1's
attacks are graded by real nbgrader runs in tests/test_anticheat.py). Each attack is measured
against its honest twin (the file without the `# cheat:` lines, with the `# honest:` lines):
no test gives the attack more than the twin, an attack that says `Flagged for review: yes`
is sent to review with no test run, and one that says `no` is caught by the tests themselves (a
rule on the code, a check on data) and not sent to review."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from labtools.judge.harness import run_exercise
from labtools.labs import get_lab

ATTACKS = Path(__file__).parent / "fixtures" / "attacks"
CHEAT = re.compile(r"^[ \t]*# cheat:begin\n.*?^[ \t]*# cheat:end\n?", re.S | re.M)
HONEST = re.compile(r"^[ \t]*# honest:begin\n.*?^[ \t]*# honest:end\n?", re.S | re.M)
MARKERS = re.compile(r"^[ \t]*# (cheat|honest):(begin|end)\n", re.M)
CASES = sorted((p.parent.name, p.stem) for p in ATTACKS.glob("*/*.py") if p.parent.name != "lab01_attention")


def _section(text: str) -> tuple[str, str]:
    parts = re.split(r"^# %% (\S+)\n", text, flags=re.M)
    assert len(parts) == 3, "one `# %% <exercise>` section per attack fixture of these labs"
    return parts[1], parts[2]


def _scores(lab_id: str, exercise: str, answer: str) -> dict[str, tuple[float, bool, str]]:
    results = run_exercise(get_lab(lab_id).source_path(), exercise, answer)
    return {r.grade_id: (r.points if r.passed else 0.0, r.passed, r.error) for r in results}


@pytest.mark.parametrize("lab_id, name", CASES, ids=[f"{a}/{b}" for a, b in CASES])
def test_attack_scores_no_more_than_its_honest_twin(lab_id, name):
    text = (ATTACKS / lab_id / f"{name}.py").read_text()
    exercise, _ = _section(text)
    attack = MARKERS.sub("", _section(HONEST.sub("", text))[1])
    twin = MARKERS.sub("", _section(CHEAT.sub("", text))[1])
    flagged = re.search(r"Flagged for review: (yes|no)", text)
    assert flagged, "the fixture's docstring must say 'Flagged for review: yes' or 'no'"
    cheated, honest = _scores(lab_id, exercise, attack), _scores(lab_id, exercise, twin)
    assert set(cheated) == set(honest)
    gained = {g: (honest[g][0], s[0]) for g, s in cheated.items() if s[0] > honest[g][0]}
    assert not gained, f"{name} scored more than honestly earned (test: (honest, got)): {gained}"
    if flagged.group(1) == "yes":
        assert all(not passed and error.startswith("NeedsReview") for _, passed, error in cheated.values()), cheated
    else:  # caught by the tests themselves (a rule, a check on data): never sent to review
        assert not any(error.startswith("NeedsReview") for _, _, error in cheated.values()), cheated
