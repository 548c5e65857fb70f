"""Grades back into the LMS: this lab's column of the gradebook file the LMS exported, filled.

Each LMS imports a file of the shape it exports. So the instructor exports the LMS's
gradebook, and `export` fills in this lab's cells and writes the file back otherwise as it
was (same rows, columns, order, encoding, delimiter and quoting): what the LMS reads back is
its own file with one column filled. A student's row is found by the id the LMS itself put
in the submission's file name (kept by `labtools grade` in grades/<lab>/lms_ids.csv), never
by a name. Students on the roster who handed nothing in, and ids that match no row, are
listed, never guessed.

- Canvas: Grades > Export gives a CSV: a header (Student, ID, SIS User ID, SIS Login ID,
  Section, one column per assignment "Title (assignment id)", then read-only totals), a
  "Manual Posting" row when an assignment's grades are posted by hand, a
  "    Points Possible" row, and a row per student. "ID" is the Canvas user id that
  "Download submissions" puts in each file name (name_ID_attachment_file). Import it with
  Grades > Import.
- Moodle: the assignment's grading worksheet (Submissions > Download grading worksheet; the
  assignment needs the "Offline grading worksheet" feedback type). "Identifier" is
  "Participant N", N being the number in the downloaded file names
  (Full Name_N_assignsubmission_file_...); the grade goes into "Grade", out of "Maximum
  Grade". Upload it with Submissions > Upload grading worksheet.
- Blackboard: Grade Center > Work Offline > Download (tab-delimited .xls in UTF-16, or a
  comma-delimited .csv). Students are known by "Username", which the submissions' file names
  carry (assignment_username_attempt_...); columns read "Title [Total Pts: N Score] |id".
  Upload it with Work Offline > Upload.

The score written is the gradebook's total for the lab (autograded tests plus the written
answers graded so far in formgrader, less any late penalty), scaled to the LMS column's
points when they differ from the lab's. Students whose written answers are not all graded
yet are listed as pending: grade them, then export again.
"""

from __future__ import annotations

import codecs
import csv
import io
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..labs import REPO_ROOT, get_lab

FORMATS = ("canvas", "moodle", "blackboard")
LMS_IDS = "lms_ids.csv"  # in grades/<lab>/, written by `labtools grade`
NAMES = {"canvas": "Canvas", "moodle": "Moodle", "blackboard": "Blackboard"}


class LmsError(ValueError):
    """An input the export cannot use, with what to do about it."""


# -- what the grade run knows ----------------------------------------------------------
@dataclass(frozen=True)
class LabGrade:
    """One student's total for the lab, as the gradebook has it now."""

    student: str
    score: float  # autograded + written answers graded so far, less the late penalty
    max_score: float
    pending: float = 0.0  # points of written answers still to grade in formgrader


def save_lms_ids(path: Path, found: dict[str, tuple[str, str]]) -> Path:
    """Record which LMS id each student's submission carried; earlier runs' students are kept
    (a run that grades only late submissions must not forget the others)."""
    known = load_lms_ids(path) if path.exists() else {}
    known.update(found)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["student", "lms", "lms_id"])
        for student, (lms, lms_id) in sorted(known.items()):
            writer.writerow([student, lms, lms_id])
    return path


def load_lms_ids(path: Path) -> dict[str, tuple[str, str]]:
    with path.open(newline="", encoding="utf-8") as fh:
        return {row["student"]: (row["lms"], row["lms_id"]) for row in csv.DictReader(fh)}


def lab_grades(lab_id: str, course: Path = REPO_ROOT, db_url: str | None = None) -> dict[str, LabGrade]:
    """Every submission of the lab in the gradebook, read only."""
    from nbgrader.api import Gradebook, MissingEntry
    from nbgrader.coursedir import CourseDirectory

    from .config import nbgrader_config

    config = nbgrader_config(Path(course), db_url)
    url = str(config.CourseDirectory.db_url)
    if url.startswith("sqlite:///") and not Path(url[len("sqlite:///"):].split("?")[0]).exists():
        # opening a missing SQLite file would create an empty gradebook
        raise LmsError(f"no gradebook at {url.split('?')[0]}: grade the lab first (labtools grade {lab_id} ...), "
                       "or pass --db / --course-dir")
    grades = {}
    with Gradebook(url, CourseDirectory(config=config).course_id) as gb:
        try:
            assignment = gb.find_assignment(lab_id)
        except MissingEntry:
            raise LmsError(f"the gradebook ({url.split('?')[0]}) has no grades for {lab_id}: "
                           f"run labtools grade {lab_id} first") from None
        for submission in assignment.submissions:
            cells = [g for nb in submission.notebooks for g in nb.grades]
            grades[submission.student.id] = LabGrade(
                submission.student.id,
                score=max(0.0, float(submission.score) - float(submission.late_submission_penalty or 0.0)),
                max_score=float(submission.max_score),
                pending=float(sum(g.max_score for g in cells if g.needs_manual_grade)))
    return grades


# -- the LMS's file, read and written back as it was -------------------------------------
@dataclass
class GradeFile:
    rows: list[list[str]]
    encoding: str  # what it was read with: "utf-16" and "utf-8-sig" write their BOM back
    delimiter: str
    newline: str
    quote_all: bool  # every field in quotes (Blackboard's comma files)


def read_grade_file(path: Path) -> GradeFile:
    path = Path(path)
    if not path.is_file():
        raise LmsError(f"{path}: no such file (the gradebook exported from the LMS)")
    data = path.read_bytes()
    if data[:4] in (b"PK\x03\x04", b"\xd0\xcf\x11\xe0"):
        raise LmsError(f"{path} is an Excel workbook, not the text file the LMS exports: download it "
                       "again as CSV (or tab-delimited), or save it from Excel as CSV UTF-8")
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        encoding = "utf-16"
    else:
        encoding = "utf-8-sig" if data.startswith(codecs.BOM_UTF8) else "utf-8"
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError:
        encoding, text = "cp1252", data.decode("cp1252", errors="replace")  # what Excel on Windows saves
    if "\x00" in text or not text.strip():
        raise LmsError(f"{path} is {'empty' if not text.strip() else 'not a text file'}: "
                       "give the gradebook file exported from the LMS")
    header = text.lstrip("\ufeff").splitlines()[0]
    delimiter = max(("\t", ",", ";"), key=header.count)
    if not header.count(delimiter):
        raise LmsError(f"{path}: its first line has no columns, so it is not a gradebook export")
    try:
        rows = list(csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=True))
    except csv.Error as exc:
        raise LmsError(f"{path}: not a well-formed CSV file ({exc}); export it from the LMS again") from None
    return GradeFile(rows, encoding, delimiter, "\r\n" if "\r\n" in text else "\n",
                     quote_all=header.startswith('"'))


def write_grade_file(grade_file: GradeFile, path: Path) -> Path:
    buffer = io.StringIO()
    writer = csv.writer(buffer, delimiter=grade_file.delimiter, lineterminator=grade_file.newline,
                        quoting=csv.QUOTE_ALL if grade_file.quote_all else csv.QUOTE_MINIMAL)
    writer.writerows(grade_file.rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(buffer.getvalue().encode(grade_file.encoding))
    return path


# -- where each LMS keeps what ----------------------------------------------------------
@dataclass(frozen=True)
class Layout:
    lms: str
    id_column: int
    name_columns: tuple[int, ...]
    grade_column: int
    column_title: str
    student_rows: tuple[int, ...]
    lms_max: float | None  # the points the LMS column is out of, where the file says
    decimal_comma: bool  # the file writes 7,5 for 7.5


CANVAS_ASSIGNMENT = re.compile(r"(?P<title>.+) \((?P<id>\d+)\)")
BLACKBOARD_COLUMN = re.compile(r"(?P<title>.+?) \[Total Pts: (?P<upto>up to )?(?P<points>[\d.,]+)[^\]]*\] \|(?P<id>\d+)")


def detect(grade_file: GradeFile) -> str | None:
    header = [h.strip() for h in grade_file.rows[0]]
    if "ID" in header and ("Student" in header or "LastName" in header):
        return "canvas"
    if "Identifier" in header and "Grade" in header:
        return "moodle"
    if "Username" in header:
        return "blackboard"
    return None


def layout(grade_file: GradeFile, lms: str, lab_id: str, column: str | None = None) -> Layout:
    found = detect(grade_file)
    if found != lms:
        hint = f"; it looks like {NAMES[found]}'s: pass --format {found}" if found else ""
        raise LmsError(f"this is not {_what(lms)}{hint}")
    return {"canvas": _canvas, "moodle": _moodle, "blackboard": _blackboard}[lms](grade_file, lab_id, column)


def _what(lms: str) -> str:
    return {"canvas": "a Canvas gradebook export (its header has Student and ID)",
            "moodle": "a Moodle grading worksheet (its header has Identifier and Grade)",
            "blackboard": "a Blackboard Grade Center download (its header has Username)"}[lms]


def _canvas(grade_file: GradeFile, lab_id: str, column: str | None) -> Layout:
    header = [h.strip() for h in grade_file.rows[0]]
    id_column = header.index("ID")
    names = (header.index("Student"),) if "Student" in header else tuple(
        header.index(n) for n in ("LastName", "FirstName") if n in header)
    first_assignment = header.index("Section") + 1 if "Section" in header else id_column + 1
    candidates = [(i, m.group("title"), m.group("id")) for i, h in enumerate(header)
                  if i >= first_assignment and (m := CANVAS_ASSIGNMENT.fullmatch(h))]
    grade_column = _lab_column(candidates, header, lab_id, column)
    students, points = [], None
    for r, row in enumerate(grade_file.rows[1:], start=1):
        cells = row + [""] * (len(header) - len(row))
        if cells[0].strip() == "Points Possible":
            points = _number(cells[grade_column])
        elif cells[id_column].strip():  # the "Manual Posting" row has no id
            students.append(r)
    return Layout("canvas", id_column, names, grade_column, header[grade_column], tuple(students), points or None,
                  _decimal_comma(grade_file, grade_column, students))


def _moodle(grade_file: GradeFile, lab_id: str, column: str | None) -> Layout:
    header = [h.strip() for h in grade_file.rows[0]]
    if "Last modified (grade)" not in header:
        raise LmsError("this Moodle worksheet has no 'Last modified (grade)' column, which Moodle's upload needs: "
                       "download the grading worksheet again from the assignment")
    lower = [h.lower() for h in header]
    grade_column = header.index("Grade")
    students = [r for r, row in enumerate(grade_file.rows[1:], start=1) if any(c.strip() for c in row)]
    most = lower.index("maximum grade") if "maximum grade" in lower else None
    lms_max = _number(grade_file.rows[students[0]][most]) if most is not None and students else None
    names = (lower.index("full name"),) if "full name" in lower else ()
    return Layout("moodle", header.index("Identifier"), names, grade_column, "Grade", tuple(students), lms_max or None,
                  _decimal_comma(grade_file, most if most is not None else grade_column, students))


def _blackboard(grade_file: GradeFile, lab_id: str, column: str | None) -> Layout:
    header = [h.strip() for h in grade_file.rows[0]]
    matches = {i: m for i, h in enumerate(header) if (m := BLACKBOARD_COLUMN.fullmatch(h))}
    # "Total Pts: up to ..." marks a calculated column (Total, Weighted Total): not uploadable
    candidates = [(i, m.group("title"), m.group("id")) for i, m in matches.items() if not m.group("upto")]
    grade_column = _lab_column(candidates, header, lab_id, column)
    names = tuple(header.index(n) for n in ("Last Name", "First Name") if n in header)
    students = [r for r, row in enumerate(grade_file.rows[1:], start=1) if any(c.strip() for c in row)]
    points = _number(matches[grade_column].group("points")) if grade_column in matches else None
    # points 0: a text column, which has no points to scale to
    return Layout("blackboard", header.index("Username"), names, grade_column, header[grade_column],
                  tuple(students), points or None, _decimal_comma(grade_file, grade_column, students))


def _lab_column(candidates: list[tuple[int, str, str]], header: list[str], lab_id: str, column: str | None) -> int:
    """The column of this lab: the one --column names (its header, title or LMS id), else the
    one assignment whose title names the lab (its id, its title, or "Lab 1"/"Lab 01")."""
    if column:
        chosen = [i for i, title, lms_id in candidates if column.strip() in (header[i], title, lms_id)]
    else:
        lab = get_lab(lab_id)
        number = int(re.search(r"\d+", lab_id).group())
        chosen = [i for i, title, _ in candidates
                  if _plain(lab_id) in _plain(title) or _plain(lab.title) in _plain(title)
                  or re.search(rf"\blab\s*0*{number}\b", title, re.IGNORECASE)]
    if len(chosen) == 1:
        return chosen[0]
    listed = "; ".join(repr(header[i]) for i, _, _ in candidates) or "none"
    if not chosen:
        what = f"no column {column!r}" if column else f"no assignment column for {lab_id}"
        raise LmsError(f"{what} in this export (is it another course's?). Its assignment columns: {listed}. "
                       "Create the lab's assignment in the LMS and export again, or pass --column with one of them")
    raise LmsError(f"several columns could be {lab_id}'s: {'; '.join(repr(header[i]) for i in chosen)}; "
                   "pass --column with the right one")


def _plain(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "", text.lower())


def _number(text: str) -> float | None:
    text = text.strip()
    if re.fullmatch(r"-?\d+,\d+", text):
        text = text.replace(",", ".")
    try:
        return float(text)
    except ValueError:
        return None


def _decimal_comma(grade_file: GradeFile, column: int, rows) -> bool:
    cells = [grade_file.rows[r][column] for r in rows if column < len(grade_file.rows[r])]
    return any(re.fullmatch(r"-?\d+,\d+", c.strip()) for c in cells)


# -- the export -----------------------------------------------------------------------
@dataclass(frozen=True)
class Matched:
    lms_id: str
    name: str  # as the LMS file writes it
    student: str  # the student's id in the gradebook
    points: float  # what was written into the LMS column
    score: float  # the gradebook's total, in the lab's own points
    max_score: float
    pending: float  # written-answer points still to grade (0: all graded)
    previous: str  # what the LMS column held before


@dataclass(frozen=True)
class Missing:
    """On the LMS roster, and no submission of theirs was graded."""

    lms_id: str
    name: str


@dataclass(frozen=True)
class Unmatched:
    """Graded (or handed in), and not written into the LMS file."""

    student: str
    lms_id: str  # "" when the submission's file name carried no LMS id
    why: str


@dataclass
class LmsExport:
    lab_id: str
    lms: str
    column: str  # the LMS column that was filled
    source: Path
    out: Path | None = None
    lms_max: float | None = None  # the LMS column's points (None: the file does not say)
    lab_max: float | None = None  # the lab's points in the gradebook
    matched: list[Matched] = field(default_factory=list)
    missing: list[Missing] = field(default_factory=list)
    unmatched: list[Unmatched] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def pending(self) -> list[Matched]:
        return [m for m in self.matched if m.pending]

    def summary(self) -> str:
        lines = [f"{NAMES[self.lms]} column {self.column!r}: {len(self.matched)} grade(s) filled in; "
                 f"written to {self.out}"]
        if self.lms_max is not None and self.lab_max is not None and abs(self.lms_max - self.lab_max) > 1e-9:
            lines.append(f"scores scaled from the lab's {self.lab_max:g} points to the LMS column's {self.lms_max:g}")
        if self.pending:
            lines.append(f"{len(self.pending)} student(s) have written answers still to grade; their grade counts "
                         "only what is graded so far (grade them in formgrader, then export again): "
                         + ", ".join(f"{m.student} ({m.pending:g} points)" for m in self.pending))
        if self.missing:
            lines.append(f"{len(self.missing)} student(s) on the LMS roster handed nothing in (their cells are left "
                         "as they were): " + ", ".join(f"{m.name or '?'} ({m.lms_id})" for m in self.missing))
        for u in self.unmatched:
            lines.append(f"not written: {u.student}" + (f" (LMS id {u.lms_id})" if u.lms_id else "") + f": {u.why}")
        lines.extend(self.notes)
        return "\n".join(lines)


def fill(grade_file: GradeFile, place: Layout, grades: dict[str, LabGrade],
         lms_ids: dict[str, tuple[str, str]], lab_id: str, source: Path = Path("")) -> LmsExport:
    """Fill the lab's column of `grade_file` (in place) and say what was and was not matched."""
    result = LmsExport(lab_id, place.lms, place.column_title, Path(source), lms_max=place.lms_max)
    rows = grade_file.rows
    by_id: dict[str, int] = {}
    for r in place.student_rows:
        key = _lms_key(place.lms, _cell(rows[r], place.id_column))
        if key in by_id:
            raise LmsError(f"the LMS file lists id {_cell(rows[r], place.id_column)!r} twice (rows {by_id[key] + 1} "
                           f"and {r + 1}): export the gradebook again rather than editing it by hand")
        by_id[key] = r
    other = {lms for lms, _ in lms_ids.values()} - {place.lms, "custom"}
    if other and not any(lms == place.lms for lms, _ in lms_ids.values()):
        raise LmsError(f"the submissions of {lab_id} were downloaded from {NAMES.get(other.pop(), 'another LMS')}, "
                       f"not {NAMES[place.lms]}: give that LMS's gradebook (or --format)")
    written = set()
    for student in sorted(set(grades) | set(lms_ids)):
        lms, lms_id = lms_ids.get(student, ("", ""))
        grade = grades.get(student)
        row = by_id.get(_lms_key(place.lms, lms_id)) if lms_id else None
        if row is None:
            why = ("its submission's file name carried no LMS id (not downloaded from the LMS)" if not lms_id
                   else "this id is on no row of the LMS file (another course or section? dropped the course?)")
            result.unmatched.append(Unmatched(student, lms_id, why))
            continue
        if grade is None:
            result.unmatched.append(Unmatched(student, lms_id, "handed in, but no grade in the gradebook "
                                                             "(see problems.csv: a file that could not be graded?)"))
            written.add(row)
            continue
        previous = _cell(rows[row], place.grade_column)
        if place.lms == "canvas" and previous.strip() == "EX":
            result.notes.append(f"{student} is excused in Canvas (EX): left as it is")
            written.add(row)
            continue
        points = grade.score
        if place.lms_max is not None and grade.max_score and abs(place.lms_max - grade.max_score) > 1e-9:
            points = grade.score / grade.max_score * place.lms_max
        result.lab_max = grade.max_score
        _set(rows[row], place.grade_column, _format(points, place.decimal_comma))
        written.add(row)
        name = " ".join(_cell(rows[row], c) for c in place.name_columns).strip()
        result.matched.append(Matched(lms_id, name, student, round(points, 2), grade.score, grade.max_score,
                                      grade.pending, previous))
    if lms_ids and not result.matched and not written:
        sample = ", ".join(sorted(i for _, i in lms_ids.values())[:3])
        raise LmsError(f"none of the {len(lms_ids)} LMS ids in the submissions of {lab_id} (e.g. {sample}) is in "
                       "this file: is it the gradebook of another course or section?")
    for r in place.student_rows:
        if r not in written and not (place.lms == "canvas" and _cell(rows[r], 0).strip() == "Student, Test"):
            name = " ".join(_cell(rows[r], c) for c in place.name_columns).strip()
            result.missing.append(Missing(_cell(rows[r], place.id_column).strip(), name))
    return result


def _lms_key(lms: str, raw: str) -> str:
    """The part of an id cell that the file names carry: Moodle's 'Participant 123' is 123."""
    raw = raw.strip()
    if lms == "moodle":
        found = re.search(r"(\d+)$", raw)
        return found.group(1) if found else raw
    return raw.lower() if lms == "blackboard" else raw


def _cell(row: list[str], column: int) -> str:
    return row[column] if column < len(row) else ""


def _set(row: list[str], column: int, value: str) -> None:
    row.extend([""] * (column + 1 - len(row)))
    row[column] = value


def _format(points: float, decimal_comma: bool) -> str:
    text = f"{points:.2f}".rstrip("0").rstrip(".")
    return text.replace(".", ",") if decimal_comma else text


def export(lab_id: str, source: Path, out: Path | None = None, lms: str | None = None, column: str | None = None,
           course: Path = REPO_ROOT, db_url: str | None = None, grades_dir: Path | None = None) -> LmsExport:
    """Write the LMS's import file for `lab_id` from its gradebook export `source`."""
    get_lab(lab_id)
    course = Path(course)
    grades_dir = Path(grades_dir) if grades_dir else course / "grades" / lab_id
    grade_file = read_grade_file(Path(source))
    lms = lms or detect(grade_file)
    if lms not in FORMATS:
        raise LmsError(f"{source}: not a gradebook file of Canvas, Moodle or Blackboard that this knows "
                       "(pass --format canvas|moodle|blackboard if it is one)")
    out = Path(out) if out else grades_dir / f"{lms}_import{Path(source).suffix or '.csv'}"
    if out.resolve() == Path(source).resolve():
        raise LmsError(f"--out {out} is the LMS's own export: write the import file somewhere else")
    place = layout(grade_file, lms, lab_id, column)
    ids_file = grades_dir / LMS_IDS
    if not ids_file.exists():
        raise LmsError(f"{ids_file} does not exist: grade the lab first (labtools grade {lab_id} <the LMS's "
                       "download of the submissions>); the students' LMS ids come from the file names")
    lms_ids = load_lms_ids(ids_file)
    if not lms_ids:
        raise LmsError(f"no submission of {lab_id} had an LMS id in its file name: grade the zip the LMS "
                       "downloaded, with the file names it gave them")
    result = fill(grade_file, place, lab_grades(lab_id, course, db_url), lms_ids, lab_id, Path(source))
    result.out = write_grade_file(grade_file, out)
    return result
