"""Grades back into the LMS: each LMS's own export, filled and read back the way the LMS
reads it, changes only this lab's cells of the students who handed in, matched by the id
the LMS put in the submission file names."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import pytest

from labtools import cli
from labtools.grade import collect
from labtools.grade import lms
from labtools.grade.lms import LabGrade, LmsError

LAB = "lab01_attention"
FIXTURES = Path(__file__).parent / "fixtures" / "lms"
NB = json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5})

# file names as each LMS's "download all submissions" writes them -> what the file holds
CANVAS_FILES = {
    f"lovelaceada_1001_5001_{LAB}.ipynb": NB,
    f"hoppergrace_1002_5002_{LAB}.ipynb": NB,
    f"turingalan_1003_5003_{LAB}.ipynb": NB,
    f"dijkstraedsgerw_LATE_1004_5004_{LAB}.ipynb": NB,
    f"liskovbarbara_1005_5005_Copy_of_{LAB}.ipynb": NB,
    f"knuthdonalddon_1006_5006_{LAB}.ipynb": NB[:-9],  # damaged: handed in, not graded
    "shannonclaude_1007_5007_notes.txt": "I could not finish.\n",  # no notebook at all
    f"okaforchidi_1009_5009_{LAB}.ipynb": NB,  # excused in Canvas
    f"ramanujansrinivasa_1042_5042_{LAB}.ipynb": NB,  # in another section's gradebook
}
MOODLE_FILES = {
    f"Ada Lovelace_2411201_assignsubmission_file_{LAB}.ipynb": NB,
    f"Grace Hopper_2411202_assignsubmission_file_/{LAB}.ipynb": NB,  # "download as folders"
    f"Alan Turing_2411203_assignsubmission_file_{LAB}.ipynb": NB,
    f"Edsger Dijkstra_2411204_assignsubmission_file_{LAB}.ipynb": NB,
    f"Barbara Liskov_2411205_assignsubmission_file_{LAB}.ipynb": NB,
    f"Donald Knuth_2411206_assignsubmission_file_{LAB}.ipynb": NB,
}
BLACKBOARD_FILES = {
    f"Lab 1 Attention_alovelace_attempt_2026-03-09-10-12-00_{LAB}.ipynb": NB,
    f"Lab 1 Attention_ghopper_attempt_2026-03-08-23-58-00_{LAB}.ipynb": NB,
    f"Lab 1 Attention_aturing_attempt_2026-03-09-09-01-00_{LAB}.ipynb": NB,
    f"Lab 1 Attention_bliskov_attempt_2026-03-06-16-44-00_{LAB}.ipynb": NB,
    f"Lab 1 Attention_jnunez_attempt_2026-03-01-12-00-00_{LAB}.ipynb": NB,
}


def _downloaded(tmp: Path, files: dict[str, str]) -> dict[str, tuple[str, str]]:
    """What the grade command records of an LMS download: each student's LMS id."""
    for name, text in files.items():
        (tmp / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp / name).write_text(text)
    return collect.scan(tmp, LAB, {""}).lms_ids


def _as_the_lms_reads(path: Path, encoding: str, delimiter: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(path.read_bytes().decode(encoding), newline=""), delimiter=delimiter))


def _changed(before: list[list[str]], after: list[list[str]]) -> dict[tuple[int, int], str]:
    """Every cell that differs, by (row, column); fails if a row or column came or went."""
    assert len(after) == len(before)
    changed = {}
    for r, (old, new) in enumerate(zip(before, after)):
        assert len(new) == len(old), f"row {r} has {len(new)} cells, not {len(old)}"
        changed.update({(r, c): b for c, (a, b) in enumerate(zip(old, new)) if a != b})
    return changed


def _fill(tmp_path, fixture: str, files: dict[str, str], grades: dict[str, LabGrade], lms_name=None, column=None):
    ids = _downloaded(tmp_path / "download", files)
    grade_file = lms.read_grade_file(FIXTURES / fixture)
    place = lms.layout(grade_file, lms_name or lms.detect(grade_file), LAB, column)
    result = lms.fill(grade_file, place, grades, ids, LAB)
    out = lms.write_grade_file(grade_file, tmp_path / f"import-{fixture}")
    return result, out


def _grade(student, score, pending=0.0, max_score=47.0):
    return LabGrade(student, score, max_score, pending)


CANVAS_GRADES = {
    "lovelaceada": _grade("lovelaceada", 47),
    "hoppergrace": _grade("hoppergrace", 39.5, pending=6),  # written answers not graded yet
    "turingalan": _grade("turingalan", 30.25),
    "dijkstraedsgerw": _grade("dijkstraedsgerw", 0),
    "liskovbarbara": _grade("liskovbarbara", 45),
    "okaforchidi": _grade("okaforchidi", 41),
    "ramanujansrinivasa": _grade("ramanujansrinivasa", 44),
}


def test_canvas_round_trip_fills_only_the_labs_cells(tmp_path):
    result, out = _fill(tmp_path, "canvas_gradebook.csv", CANVAS_FILES, CANVAS_GRADES)
    before = _as_the_lms_reads(FIXTURES / "canvas_gradebook.csv", "utf-8-sig", ",")
    after = _as_the_lms_reads(out, "utf-8-sig", ",")
    column = before[0].index("Lab 1: From RNN attention to scaled dot-product attention (40123)")
    row_of = {row[1]: r for r, row in enumerate(before) if r > 0 and row[1]}
    assert _changed(before, after) == {(row_of["1001"], column): "47", (row_of["1002"], column): "39.5",
                                       (row_of["1003"], column): "30.25", (row_of["1004"], column): "0",
                                       (row_of["1005"], column): "45"}
    assert out.read_bytes().startswith(b"\xef\xbb\xbf") and b"\r\n" not in out.read_bytes()  # as Canvas wrote it
    assert result.column == before[0][column] and result.lms_max == 47
    assert {m.lms_id: m.points for m in result.matched} == {"1001": 47, "1002": 39.5, "1003": 30.25, "1004": 0, "1005": 45}
    assert [m.student for m in result.pending] == ["hoppergrace"]
    # Shannon handed in no notebook, Núñez nothing: listed, cells left alone; the test student is not a student
    assert sorted(m.lms_id for m in result.missing) == ["1007", "1008"]
    assert {u.student: u.lms_id for u in result.unmatched} == {"knuthdonalddon": "1006", "ramanujansrinivasa": "1042"}
    assert any("okaforchidi" in n and "EX" in n for n in result.notes)
    summary = result.summary()
    assert "hoppergrace (6 points)" in summary and "Núñez, José (1008)" in summary and "ramanujansrinivasa" in summary


def test_moodle_worksheet_round_trip_scales_to_its_maximum_grade(tmp_path):
    grades = {"Ada_Lovelace": _grade("Ada_Lovelace", 47), "Grace_Hopper": _grade("Grace_Hopper", 41, pending=2),
              "Alan_Turing": _grade("Alan_Turing", 30.5), "Edsger_Dijkstra": _grade("Edsger_Dijkstra", 12),
              "Barbara_Liskov": _grade("Barbara_Liskov", 45)}
    result, out = _fill(tmp_path, "moodle_grading_worksheet.csv", MOODLE_FILES, grades)
    before = _as_the_lms_reads(FIXTURES / "moodle_grading_worksheet.csv", "utf-8", ",")
    after = _as_the_lms_reads(out, "utf-8", ",")
    grade = before[0].index("Grade")
    by_participant = {after[r][0]: after[r][grade] for r in range(1, len(after))}
    # the lab is out of 47, the Moodle assignment out of 100
    assert by_participant == {"Participant 2411201": "100", "Participant 2411202": "87.23",
                              "Participant 2411203": "64.89", "Participant 2411204": "25.53",
                              "Participant 2411205": "95.74", "Participant 2411206": "",
                              "Participant 2411207": "", "Participant 2411208": "", "Participant 2411209": "0.00"}
    assert set(_changed(before, after)) == {(r, grade) for r in range(1, 6)}
    assert [u.student for u in result.unmatched] == ["Donald_Knuth"]  # handed in, no grade in the gradebook
    assert sorted(m.lms_id for m in result.missing) == ["Participant 2411207", "Participant 2411208",
                                                        "Participant 2411209"]
    assert "scaled from the lab's 47 points to the LMS column's 100" in result.summary()


def test_blackboard_download_round_trip_keeps_utf16_tabs_and_quotes(tmp_path):
    grades = {"alovelace": _grade("alovelace", 46), "ghopper": _grade("ghopper", 40.5), "aturing": _grade("aturing", 33),
              "bliskov": _grade("bliskov", 47), "jnunez": _grade("jnunez", 18.75)}
    result, out = _fill(tmp_path, "blackboard_gc_download.xls", BLACKBOARD_FILES, grades)
    raw = out.read_bytes()
    assert raw.startswith(b"\xff\xfe") and raw.decode("utf-16").startswith('"Last Name"\t"First Name"')
    before = _as_the_lms_reads(FIXTURES / "blackboard_gc_download.xls", "utf-16", "\t")
    after = _as_the_lms_reads(out, "utf-16", "\t")
    lab1 = before[0].index("Lab 1 Attention [Total Pts: 47 Score] |1734211")
    assert {after[r][2]: after[r][lab1] for r in range(1, len(after)) if after[r][lab1]} == {
        "alovelace": "46", "ghopper": "40.5", "aturing": "33", "bliskov": "47", "jnunez": "18.75"}
    assert set(_changed(before, after)) == {(r, lab1) for r in (1, 2, 3, 5, 8)}
    assert sorted(m.lms_id for m in result.missing) == ["cokafor", "cshannon", "dknuth", "edijkstra"]
    assert result.unmatched == [] and result.lms_max == 47


def test_the_column_is_chosen_by_name_and_otherwise_the_error_lists_them(tmp_path):
    grade_file = lms.read_grade_file(FIXTURES / "canvas_gradebook.csv")
    assert lms.layout(grade_file, "canvas", LAB, column="40123").column_title.endswith("(40123)")
    with pytest.raises(LmsError, match=r"no assignment column for lab03_positional .*'Reading quiz 1 \(40130\)'"):
        lms.layout(grade_file, "canvas", "lab03_positional")
    bb = lms.read_grade_file(FIXTURES / "blackboard_gc_download.xls")
    with pytest.raises(LmsError, match="no column 'Total'"):  # a calculated column is not uploadable
        lms.layout(bb, "blackboard", LAB, column="Total")


@pytest.mark.parametrize("fixture, wrong, right", [
    ("moodle_grading_worksheet.csv", "canvas", "moodle"),
    ("canvas_gradebook.csv", "blackboard", "canvas"),
    ("blackboard_gc_download.xls", "moodle", "blackboard"),
])
def test_a_file_of_another_lms_says_which_it_is(fixture, wrong, right):
    with pytest.raises(LmsError, match=f"--format {right}"):
        lms.layout(lms.read_grade_file(FIXTURES / fixture), wrong, LAB)


def test_another_courses_gradebook_is_refused(tmp_path):
    other = tmp_path / "other_course.csv"
    text = (FIXTURES / "canvas_gradebook.csv").read_text(encoding="utf-8-sig")
    other.write_text(text.replace(",100", ",700"), encoding="utf-8")  # every Canvas id differs
    grade_file = lms.read_grade_file(other)
    with pytest.raises(LmsError, match="another course or section"):
        lms.fill(grade_file, lms.layout(grade_file, "canvas", LAB), CANVAS_GRADES,
                 _downloaded(tmp_path / "download", CANVAS_FILES), LAB)


def test_submissions_from_another_lms_are_refused(tmp_path):
    grade_file = lms.read_grade_file(FIXTURES / "moodle_grading_worksheet.csv")
    with pytest.raises(LmsError, match="downloaded from Canvas, not Moodle"):
        lms.fill(grade_file, lms.layout(grade_file, "moodle", LAB), CANVAS_GRADES,
                 _downloaded(tmp_path / "download", CANVAS_FILES), LAB)


def test_a_roster_with_a_duplicate_id_is_refused(tmp_path):
    doubled = tmp_path / "doubled.csv"
    lines = (FIXTURES / "canvas_gradebook.csv").read_text(encoding="utf-8-sig").splitlines(keepends=True)
    doubled.write_text("".join(lines + [lines[3].replace("Lovelace, Ada", "Lovelace, A.")]), encoding="utf-8")
    grade_file = lms.read_grade_file(doubled)
    with pytest.raises(LmsError, match="lists id '1001' twice"):
        lms.fill(grade_file, lms.layout(grade_file, "canvas", LAB), CANVAS_GRADES, {}, LAB)


@pytest.mark.parametrize("content, words", [
    (b"PK\x03\x04 an xlsx workbook", "Excel workbook"),
    (b"", "empty"),
    (b"just one line of text\n", "no columns"),
    (b'Student,ID\n"Lovelace, Ada,1001\n', "not a well-formed CSV"),
])
def test_files_in_the_wrong_format_get_a_clear_error(tmp_path, content, words):
    path = tmp_path / "export.csv"
    path.write_bytes(content)
    with pytest.raises(LmsError, match=words):
        lms.read_grade_file(path)


def _gradebook(course: Path, scores: dict[str, tuple[float, float | None]]) -> None:
    """A gradebook as `labtools grade` leaves it: autograded tests (41 points) and one written
    answer (6 points), graded by hand for some students (None: not yet)."""
    from nbgrader.api import Gradebook
    from nbgrader.coursedir import CourseDirectory

    from labtools.grade.run import nbgrader_config

    config = nbgrader_config(course, None)
    with Gradebook(str(config.CourseDirectory.db_url), CourseDirectory(config=config).course_id) as gb:
        gb.add_assignment(LAB)
        gb.add_notebook(LAB, LAB)
        gb.add_grade_cell("tests", LAB, LAB, max_score=41, cell_type="code")
        gb.add_grade_cell("written", LAB, LAB, max_score=6, cell_type="markdown")
        for student, (auto, written) in scores.items():
            gb.add_student(student)
            gb.add_submission(LAB, student)
            tests = gb.find_grade("tests", LAB, LAB, student)
            tests.auto_score, tests.needs_manual_grade = auto, False
            answer = gb.find_grade("written", LAB, LAB, student)
            answer.manual_score, answer.needs_manual_grade = written, written is None
        gb.db.commit()


@pytest.mark.filterwarnings("ignore:.*not in session")
def test_lms_export_command_writes_the_gradebooks_totals(tmp_path, capsys):
    course = tmp_path / "course"
    course.mkdir()
    _gradebook(course, {"lovelaceada": (41, 6), "hoppergrace": (35, None), "turingalan": (27, 3.5)})
    ids = _downloaded(tmp_path / "download", {n: t for n, t in CANVAS_FILES.items() if n.split("_")[1] in "1001 1002 1003"})
    lms.save_lms_ids(course / "grades" / LAB / lms.LMS_IDS, ids)
    before = (course / "gradebook.db").read_bytes()
    out = tmp_path / "canvas_import.csv"
    code = cli.main(["lms-export", LAB, "--from", str(FIXTURES / "canvas_gradebook.csv"), "--out", str(out),
                     "--course-dir", str(course)])
    printed = capsys.readouterr().out
    assert code == 0
    after = _as_the_lms_reads(out, "utf-8-sig", ",")
    column = after[0].index("Lab 1: From RNN attention to scaled dot-product attention (40123)")
    assert {row[1]: row[column] for row in after[3:6]} == {"1001": "47", "1002": "35", "1003": "30.5"}
    assert "hoppergrace (6 points)" in printed and "formgrader" in printed
    assert (course / "gradebook.db").read_bytes() == before  # an export changes nothing in the gradebook


def test_lms_export_command_explains_what_is_missing(tmp_path, capsys):
    course = tmp_path / "course"
    course.mkdir()
    args = ["lms-export", LAB, "--from", str(FIXTURES / "canvas_gradebook.csv"), "--course-dir", str(course)]
    assert cli.main(args) == 2
    assert "grade the lab first" in capsys.readouterr().err
    export = course / "export.csv"
    shutil.copy(FIXTURES / "canvas_gradebook.csv", export)
    assert cli.main(["lms-export", LAB, "--from", str(export), "--out", str(export), "--course-dir", str(course)]) == 2
    assert "is the LMS's own export" in capsys.readouterr().err
    assert export.read_bytes() == (FIXTURES / "canvas_gradebook.csv").read_bytes()


def test_collect_keeps_each_students_lms_id_and_flags_two_accounts_as_one_student(tmp_path):
    ids = _downloaded(tmp_path / "one", CANVAS_FILES)
    assert ids["dijkstraedsgerw"] == ("canvas", "1004") and ids["knuthdonalddon"] == ("canvas", "1006")
    assert "shannonclaude" not in ids  # its only file is not a notebook
    same_name = {f"smithjohn_2001_7001_{LAB}.ipynb": NB, f"smithjohn_2002_7002_{LAB}.ipynb": NB}
    for name, text in same_name.items():
        (tmp_path / "two").mkdir(exist_ok=True)
        (tmp_path / "two" / name).write_text(text)
    decision = collect.scan(tmp_path / "two", LAB, {""})
    assert any("2 different LMS accounts (2001, 2002)" in what for _, what in decision.notes)
