"""After `labtools grade`: the LMS ids it keeps and the similar submissions it lists, then
`labtools lms-export` from the real gradebook into Canvas's own export."""

from __future__ import annotations

import csv
from pathlib import Path

import nbformat

from labtools import cli, nbcells
from labtools.grade.run import grade
from labtools.grade.lms import LMS_IDS, load_lms_ids

from conftest import make_course, write_zip
from test_similarity import ADA, BEN, LAB, SOURCE, _submission

CANVAS_EXPORT = Path(__file__).parent / "fixtures" / "lms" / "canvas_gradebook.csv"


def test_grade_keeps_lms_ids_flags_the_copy_and_lms_export_writes_the_totals(tmp_path, capsys):
    course = make_course(tmp_path / "course", [LAB])
    # Canvas's "Download submissions": Grace handed in Ada's answers, renamed and reordered (two
    # students keep the run short; tests/test_similarity.py has the independent answers)
    files = {f"lovelaceada_1001_5001_{LAB.notebook_name}": ADA, f"hoppergrace_1002_5002_{LAB.notebook_name}": BEN}
    archive = write_zip(tmp_path / "submissions.zip", {
        name: nbformat.writes(_submission(answers, written=True)) for name, answers in files.items()})
    report = grade(LAB.lab_id, archive, course_dir=course, hide_progress=True, workers=2, log=lambda *a: None)
    out = course / "grades" / LAB.lab_id

    assert load_lms_ids(out / LMS_IDS) == {"lovelaceada": ("canvas", "1001"), "hoppergrace": ("canvas", "1002")}
    assert [(p.student_a, p.student_b) for p in report.similarity.pairs] == [("hoppergrace", "lovelaceada")]
    with (out / "similarity.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert {(r["student_a"], r["student_b"]) for r in rows} == {("hoppergrace", "lovelaceada")}
    assert "softmax" in {r["cell_a"] for r in rows}

    imported = tmp_path / "canvas_import.csv"
    code = cli.main(["lms-export", LAB.lab_id, "--from", str(CANVAS_EXPORT), "--out", str(imported),
                     "--course-dir", str(course)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    with imported.open(newline="", encoding="utf-8-sig") as fh:
        rows = list(csv.reader(fh))
    column = rows[0].index("Lab 1: From RNN attention to scaled dot-product attention (40123)")
    written = {row[1]: row[column] for row in rows[3:] if row[column] and row[1] in {"1001", "1002"}}
    autograded = {r.student: r.auto_score for r in report.results}
    written_points = sum(nbcells.nbgrader_meta(c).get("points", 0) for c in SOURCE.cells
                         if c.cell_type == "markdown" and nbcells.nbgrader_meta(c).get("grade"))
    # the Canvas column is out of 47: a lab with another total is scaled to it, and the export says so
    lab_max, column_max = report.results[0].auto_max + written_points, float(rows[2][column])
    scaled = {s: points / lab_max * column_max for s, points in autograded.items()}
    assert written == {"1001": f"{scaled['lovelaceada']:.2f}".rstrip("0").rstrip("."),
                       "1002": f"{scaled['hoppergrace']:.2f}".rstrip("0").rstrip(".")}
    assert (lab_max == column_max) != (f"scaled from the lab's {lab_max:g} points to the LMS column's {column_max:g}" in printed)
    assert autograded["lovelaceada"] > 0
    # both wrote their written answers, which nobody has graded yet: pending, by their points
    assert f"hoppergrace ({written_points:g} points)" in printed and "2 student(s) have written answers" in printed
