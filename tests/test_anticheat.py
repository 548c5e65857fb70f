"""Attack submissions (tests/fixtures/attacks/) graded by real nbgrader runs.

Each attack is graded with the course's configuration (lab01 is judged: its tests run
in the judge, outside the student's kernel) and with labtools switched off (no judge,
the lab's test cells run in the kernel, as plain nbgrader runs them). Its
honest twin, the same file without the `# cheat:begin/end` lines (and with the
`# honest:begin/end` lines, where an attack replaces code the twin writes openly), is
the measure: graded by the course, no attack may score more than its twin in any test
cell; an attack that reaches into the grader or the runtime is not run at all and is
reported for review; the others score exactly as their twin. Each fixture's claims
are checked both ways: whether it beats plain nbgrader (else it proves nothing), and
whether the judge flags it.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
import torch
from nbgrader.api import Gradebook

from labtools import judge, nbcells
from labtools.grade.steps.execute import kernel_env
from labtools.grade.run import grade
from labtools.labs import get_lab
from labtools.build.submissions import fill_release

from conftest import make_course, write_zip

LAB = get_lab("lab01_attention")
ATTACKS = Path(__file__).parent / "fixtures" / "attacks" / LAB.lab_id
CHEAT = re.compile(r"^[ \t]*# cheat:begin\n.*?^[ \t]*# cheat:end\n?", re.S | re.M)
HONEST = re.compile(r"^[ \t]*# honest:begin\n.*?^[ \t]*# honest:end\n?", re.S | re.M)
MARKERS = re.compile(r"^[ \t]*# (cheat|honest):(begin|end)\n", re.M)


def _attacks() -> list[str]:
    return sorted(p.stem for p in ATTACKS.glob("*.py"))


_BEATS_PLAIN = {name for name in _attacks()
                if re.search(r"Beats plain nbgrader: yes", (ATTACKS / f"{name}.py").read_text())}


def _cells(text: str) -> dict[str, str]:
    """grade_id -> cell source, from the `# %% <grade_id>` sections of a fixture."""
    parts = re.split(r"^# %% (\S+)\n", text, flags=re.M)
    return {gid: body for gid, body in zip(parts[1::2], parts[2::2])}


def _claim(text: str, what: str) -> bool:
    claim = re.search(rf"{what}: (yes|no)", text)
    assert claim, f"the fixture's docstring must say '{what}: yes' or 'no'"
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


def _grade_class(tmp: Path, files: dict[str, str], labtools_on: bool):
    course = make_course(tmp / "course", [LAB])
    if not labtools_on:
        with open(course / "nbgrader_config.py", "a") as config:
            config.write("\nc.GradingExecute.use_judge = False\n")
    archive = write_zip(tmp / "class.zip", {f"{s}/{LAB.notebook_name}": t for s, t in files.items()})
    report = grade(LAB.lab_id, archive, course_dir=course, hide_progress=True, workers=2, log=lambda *a: None)
    return course, {r.student: r for r in report.results}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """(judged scores, plain-nbgrader scores incl. honest twins, judged report, judged course, plain course)."""
    attacks, twins, twin_of, by_code = {}, {}, {}, {}
    for name in _attacks():
        text = (ATTACKS / f"{name}.py").read_text()
        attacks[name] = _submission({g: MARKERS.sub("", b) for g, b in _cells(HONEST.sub("", text)).items()})
        honest = {gid: MARKERS.sub("", body).strip() + "\n" for gid, body in _cells(CHEAT.sub("", text)).items()}
        # attacks on the same honest code share one twin
        twin_of[name] = by_code.setdefault(repr(sorted(honest.items())), f"honest-{name}")
        twins[twin_of[name]] = _submission(honest)
    reference = nbformat.writes(fill_release(nbcells.read(LAB.release_path()), nbcells.read(LAB.source_path())))
    judged_course, judged_report = _grade_class(tmp_path_factory.mktemp("judged"),
                                                {**attacks, "reference": reference}, labtools_on=True)
    # Plain nbgrader grades every honest twin (the measure), and of the attacks only those whose
    # claim needs it: the ones that say they beat it, and the leak (its printout is compared
    # below). An attack that does not claim to beat plain nbgrader is measured against the judge.
    plainly = {name: text for name, text in attacks.items() if name in _BEATS_PLAIN or name == "leak_hidden_tests"}
    plain_course, _ = _grade_class(tmp_path_factory.mktemp("plain"), {**plainly, **twins}, labtools_on=False)
    plain = _scores(plain_course)
    for name, twin in twin_of.items():
        plain[f"honest-{name}"] = plain[twin]
    return _scores(judged_course), plain, judged_report, judged_course, plain_course


def _autograded(course: Path, student: str):
    return nbformat.read(str(course / "autograded" / student / LAB.lab_id / LAB.notebook_name), as_version=4)


@pytest.mark.parametrize("attack", _attacks())
def test_attack_scores_no_more_than_its_honest_twin(graded, attack):
    judged, plain, report, course, _ = graded
    honest = plain[f"honest-{attack}"]
    assert set(judged[attack]) == set(honest)
    gained = {cell: (honest[cell], score) for cell, score in judged[attack].items() if score > honest[cell]}
    assert not gained, f"{attack} scored more than honestly earned (cell: (honest, got)): {gained}"
    assert report[attack].status.startswith("graded"), report[attack].status
    if _claim((ATTACKS / f"{attack}.py").read_text(), "Flagged for review"):
        assert all(score == 0 for score in judged[attack].values()), judged[attack]
        assert "review" in report[attack].status, report[attack].status
        tests = [c for c in _autograded(course, attack).cells if nbcells.is_autograded_test(c)]
        assert all(o.get("ename") == judge.NEEDS_REVIEW for c in tests for o in c.outputs
                   if o.output_type == "error") and all(c.outputs for c in tests)
    else:  # the judge did not need to step in: exactly the twin's marks, nothing reported
        assert judged[attack] == honest, f"{attack} lost honest marks: {judged[attack]} vs {honest}"
        assert "review" not in report[attack].status, report[attack].status


@pytest.mark.parametrize("attack", sorted(_BEATS_PLAIN))
def test_attack_beats_plain_nbgrader_as_it_claims(graded, attack):
    _, plain, _, _, _ = graded
    honest, cheated = sum(plain[f"honest-{attack}"].values()), sum(plain[attack].values())
    assert cheated > honest, f"{attack} is no attack: without labtools it gets {cheated}, honestly {honest}"


def test_every_attack_states_its_claims():
    for attack in _attacks():
        text = (ATTACKS / f"{attack}.py").read_text()
        _claim(text, "Beats plain nbgrader")
        _claim(text, "Flagged for review")


def test_reference_answers_get_full_marks_from_the_judge(graded):
    judged, _, report, course, _ = graded
    points = {nbcells.grade_id(c): float(nbcells.nbgrader_meta(c)["points"])
              for c in nbcells.read(LAB.source_path()).cells if nbcells.is_autograded_test(c)}
    assert judged["reference"] == points, judged["reference"]  # every test cell, full points
    assert report["reference"].status == "graded", report["reference"].status
    tests = [c for c in _autograded(course, "reference").cells if nbcells.is_autograded_test(c)]
    assert tests and not [o for c in tests for o in c.outputs if o.output_type == "error"]


def _hidden_test_lines() -> list[str]:
    """Distinctive lines of the lab's hidden tests (long enough not to occur by chance)."""
    lines = []
    for cell in nbcells.read(LAB.source_path()).cells:
        hidden = re.findall(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", cell.source, re.S)
        lines += [l.strip() for block in hidden for l in block.splitlines() if len(l.strip()) > 50]
    assert len(lines) > 10
    return lines


def test_hidden_tests_never_reach_the_students_kernel(graded):
    """The leak attack prints the kernel's history into its own notebook: graded plainly it
    holds the hidden tests (so the fixture works); judged, none of their lines."""
    _, _, _, judged_course, plain_course = graded
    hidden = _hidden_test_lines()

    def printed(course):
        nb = _autograded(course, "leak_hidden_tests")
        cell = next(c for c in nb.cells if nbcells.grade_id(c) == "create_causal_mask")
        return "".join(str(o.get("text", "")) for o in cell.outputs)

    assert sum(line in printed(plain_course) for line in hidden) > 5, "the fixture no longer leaks plainly"
    leaked = [line for line in hidden if line in printed(judged_course)]
    assert not leaked, leaked[:3]
    feedback = (judged_course / "feedback" / "leak_hidden_tests" / LAB.lab_id / f"{LAB.lab_id}.html")
    if feedback.exists():
        import html
        text = html.unescape(feedback.read_text())
        assert not [line for line in hidden if line in text]


# -- the pieces, on fresh inputs ---------------------------------------------------------

def test_kernel_env_hides_that_it_is_grading():
    env = kernel_env({"NBGRADER_EXECUTION": "autograde", "PATH": "/bin"})
    assert env == {"PATH": "/bin", "LABS_FAST": "1"}
    assert kernel_env({"PATH": "/bin"}) == {"PATH": "/bin"}
