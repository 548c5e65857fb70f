"""Real nbgrader runs of each lab's demo class: the tests that matter most (an untouched
release scores 0 and runs to the end, the reference answers score full marks, mistakes
lose points, bad files are named).

The demo class (see labtools.demo) is graded once per lab by `graded_class`.
"""

from __future__ import annotations

import nbformat

from labtools import judge, nbcells
from labtools.demo import demo_answers


def test_untouched_release_scores_zero_and_runs_to_the_end(graded_class):
    lab, course, report = graded_class
    untouched = report.result("dijkstraedsger")
    assert untouched.status == "graded"
    assert untouched.cell_scores, "no autograded cell was recorded"
    assert all(points == 0 for points, _ in untouched.cell_scores.values()), untouched.cell_scores
    autograded = nbformat.read(course / "autograded" / "dijkstraedsger" / lab.lab_id / lab.notebook_name, 4)
    judged = judge.uses_judge(nbcells.read(lab.source_path()))
    # a judged lab's test cells never run in the kernel: the judge writes their verdict
    code = [c for c in autograded.cells if c.cell_type == "code" and not (judged and nbcells.is_autograded_test(c))]
    assert all(c.execution_count is not None for c in code), "nbgrader stopped before the end"
    if judged:
        tests = [c for c in autograded.cells if nbcells.is_autograded_test(c)]
        assert tests and all(any(o.output_type == "error" for o in c.outputs) for c in tests), \
            "every judged test cell of an untouched release must hold the judge's failure"


def test_reference_solutions_get_full_marks(graded_class):
    lab, _, report = graded_class
    ref = report.result("lovelaceada")
    source = nbcells.read(lab.source_path())
    expected = {nbcells.grade_id(c) for c in source.cells if nbcells.is_autograded_test(c)}
    assert set(ref.cell_scores) == expected
    lost = {gid: s for gid, s in ref.cell_scores.items() if s[0] != s[1]}
    assert not lost, f"reference solutions lost points in {lost}"
    assert ref.auto_score == ref.auto_max > 0


def test_other_correct_styles_get_full_marks_under_nbgrader(graded_class):
    """Agreement between the in-process harness and nbgrader on answers in other styles."""
    _, _, report = graded_class
    alt = report.result("liskovbarbara")  # other styles, in a renamed copy
    assert alt.auto_score == alt.auto_max, {g: s for g, s in alt.cell_scores.items() if s[0] != s[1]}


def test_mistakes_lose_points_under_nbgrader(graded_class):
    """turingalan answered every other exercise with a wrong fixture and the rest with the
    reference: exactly the exercises answered wrongly lose points, each of them some."""
    lab, _, report = graded_class
    mixed = report.result("turingalan")
    source = nbcells.read(lab.source_path())
    wrong = set(list(demo_answers(lab, "wrong"))[::2])
    for exercise in nbcells.exercises(source):
        tests = [nbcells.grade_id(c) for c in nbcells.tests_of(source, exercise)]
        earned = sum(mixed.cell_scores[t][0] for t in tests)
        possible = sum(mixed.cell_scores[t][1] for t in tests)
        if exercise in wrong:
            assert earned < possible, f"{exercise}: the wrong answer kept all {possible} points"
        else:
            assert earned == possible, f"{exercise}: the reference answer lost points ({earned}/{possible})"


def test_renamed_notebook_is_graded_with_a_note(graded_class):
    lab, _, report = graded_class
    renamed = report.result("liskovbarbara")
    assert renamed.auto_score == renamed.auto_max
    assert any("liskovbarbara" in what and "Copy_of" in what for _, what in report.notes)


def test_bad_files_are_reported_by_name_and_the_rest_graded(graded_class):
    lab, course, report = graded_class
    skipped = dict(report.skipped)
    broken = [f for f in skipped if "knuthdonald" in f]
    assert broken and "not valid JSON" in skipped[broken[0]]
    stray = [f for f in skipped if f.endswith("notes.txt")]
    assert stray and "not a Jupyter notebook" in skipped[stray[0]]
    assert {r.student for r in report.results} == {
        "lovelaceada", "turingalan", "dijkstraedsger", "liskovbarbara"}
    problems = (report.csv_path.parent / "problems.csv").read_text()
    assert "knuthdonald" in problems and "notes.txt" in problems


def test_grades_csv_and_feedback_are_written(graded_class):
    lab, _, report = graded_class
    rows = report.csv_path.read_text().splitlines()
    assert rows[0].startswith("assignment,")
    assert len(rows) == 1 + 4
    for r in report.results:
        assert r.feedback is not None and r.feedback.exists(), r.student
        assert "<html" in r.feedback.read_text()[:2000].lower()


def test_student_feedback_leaves_hidden_tests_out(graded_class):
    lab, course, report = graded_class
    source = nbcells.read(lab.source_path())
    hidden_lines = []
    for cell in source.cells:
        if nbcells.is_autograded_test(cell) and nbcells.BEGIN_HIDDEN in cell.source:
            region = cell.source.split(nbcells.BEGIN_HIDDEN, 1)[1].split(nbcells.END_HIDDEN)[0]
            hidden_lines += [line.strip() for line in region.splitlines() if len(line.strip()) > 30]
    released = "\n".join(c.source for c in nbcells.read(lab.release_path()).cells)
    hidden_lines = [line for line in hidden_lines if line not in released]  # not secret if shown elsewhere
    assert hidden_lines, "the lab has no hidden tests to hide"
    student = report.result("turingalan")  # has failing hidden tests, so tracebacks too
    import html as html_lib
    import re

    text = html_lib.unescape(re.sub(r"<[^>]+>", "", student.feedback.read_text()))
    visible = [line.strip() for c in source.cells if nbcells.is_autograded_test(c)
               for line in c.source.split(nbcells.BEGIN_HIDDEN)[0].splitlines() if len(line.strip()) > 30]
    assert any(line in text for line in visible), "cannot find the visible tests in the feedback text"
    leaked = [line for line in hidden_lines if line in text]
    assert not leaked, f"hidden test lines in the feedback: {leaked[:3]}"
    assert "hidden tests: not shown" in text
    # the instructor's view keeps them
    autograded = (course / "autograded" / "turingalan" / lab.lab_id / lab.notebook_name).read_text()
    assert nbcells.BEGIN_HIDDEN in autograded


def test_honest_submissions_record_no_incident(graded_class):
    """Honest notebooks, in every style of the demo class, are neither sent to review nor
    reported with an incident (a false alarm would tell an honest student they cheated)."""
    from labtools.grade import incidents

    lab, course, report = graded_class
    for student in ("lovelaceada", "turingalan", "dijkstraedsger", "liskovbarbara"):
        assert "review" not in report.result(student).status, (student, report.result(student).status)
        nb = nbformat.read(course / "autograded" / student / lab.lab_id / lab.notebook_name, 4)
        assert incidents.read(nb) == [], (student, incidents.read(nb))