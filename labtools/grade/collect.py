"""Deciding whose notebook each submitted file is, before nbgrader collects it.

nbgrader's `zip_collect` extracts an LMS download and copies each file it is told
about into `submitted/<student>/<lab>/`. What it cannot do alone is cope with real
classes: files that are not notebooks, damaged JSON, notebooks renamed by the
student ("Copy of lab01_attention.ipynb"), several notebooks from one student, and
the file-name patterns of each LMS. `scan` decides all of that up front, and
`LabCollector` (nbgrader's collector plugin interface) hands the decisions to
`zip_collect`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbgrader.plugins.zipcollect import FileNameCollectorPlugin

# File-name patterns of the usual sources, tried in order on the path relative to
# the extracted folder. Each gives the student's id and the file the student named.
STUDENT_PATTERNS = {
    # Canvas "Download submissions": name_[LATE_]userid_submissionid_file.ipynb
    "canvas": r"(?:.*/)?(?P<student_id>[A-Za-z0-9.\-]+)_(?:LATE_|late_)?(?P<lms_id>\d+)_\d+_(?P<file>[^/]+)",
    # Moodle: "Full Name_123456_assignsubmission_file_" as a folder or a file prefix
    # (123456 is the participant id of the assignment's grading worksheet)
    "moodle": r"(?:.*/)?(?P<student_id>[^/]+?)_(?P<lms_id>\d+)_assignsubmission_file_/?(?P<file>[^/]*)",
    # Blackboard: assignment_username_attempt_2024-01-30-15-00-00_file.ipynb
    "blackboard": r"(?:.*/)?[^/]*?_(?P<student_id>(?P<lms_id>[^_/]+))_attempt_(?P<attempt>[0-9\-]+)_(?P<file>[^/]+)",
}
# `lms_id` is the id the LMS's own grade files know the student by (Canvas's user id,
# Moodle's participant id, Blackboard's username): labtools/grade/lms.py matches grades with it.
JUNK = re.compile(r"(^|/)(__MACOSX/|\.DS_Store$|\._|Thumbs\.db$|\.ipynb_checkpoints/)")


@dataclass
class Decision:
    """What the scan decided: notebooks to collect, and every file it set aside."""

    collect: dict[str, str] = field(default_factory=dict)  # extracted path -> student id
    notes: list[tuple[str, str]] = field(default_factory=list)  # (file, what happened)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (file, why)
    # student id -> (the LMS whose file names gave it, the LMS's id of the student)
    lms_ids: dict[str, tuple[str, str]] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps({"collect": self.collect, "notes": self.notes, "skipped": self.skipped,
                           "lms_ids": self.lms_ids}, indent=1)


def clean_student_id(raw: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.@\-]+", "_", raw.strip()).strip("_.") or "unknown"


def _flat_match(name: str, lab_id: str):
    """'alice_lab01_attention.ipynb' or 'bob-lab01_attention (1).ipynb': the student first."""
    return re.fullmatch(rf"(?P<student_id>.+?)[ _\-]+(?P<file>{re.escape(lab_id)}.*\.ipynb)", name)


def _flat_student(name: str, lab_id: str) -> str | None:
    match = _flat_match(name, lab_id)
    return clean_student_id(match.group("student_id")) if match else None


def _match(rel: str, custom: str | None = None):
    """(LMS, match) of the first file-name pattern (the course's own first) that names the
    student of the file at `rel`, or None."""
    for lms, pattern in ([("custom", custom)] if custom else []) + list(STUDENT_PATTERNS.items()):
        match = re.fullmatch(pattern, rel)
        if match and match.group("student_id"):
            return lms, match
    return None


def attempt_of(rel: str, custom: str | None = None) -> str:
    """The LMS's attempt stamp in a file's path ("" when it has none): later attempts sort later."""
    found = _match(rel, custom)
    return (found[1].groupdict().get("attempt") or "") if found else ""


def lms_id_of(rel: str, custom: str | None = None) -> tuple[str, str] | None:
    """(LMS, the LMS's id of the student) from a file's path, by the pattern that names the
    student (see `student_of`), or None when that pattern has no `lms_id` group."""
    found = _match(rel, custom)
    lms_id = found[1].groupdict().get("lms_id") if found else None
    return (found[0], lms_id) if lms_id else None


def restore_hand_in_times(archive: Path, extracted: Path) -> None:
    """Give each extracted file the time its zip entry records (when the student handed it
    in, for LMS downloads), or the time of the file it was copied from, since extraction
    stamps every file with the time of extraction."""
    import os
    import time
    import zipfile

    for path in archive.rglob("*"):
        copy = extracted / path.relative_to(archive)
        if path.is_file() and path.suffix.lower() != ".zip" and copy.is_file():
            os.utime(copy, (path.stat().st_atime, path.stat().st_mtime))
    for zpath in archive.rglob("*.zip"):
        target = extracted / zpath.relative_to(archive).parent / zpath.stem
        try:
            with zipfile.ZipFile(zpath) as zf:
                entries = [(i.filename, i.date_time) for i in zf.infolist() if not i.is_dir()]
        except (zipfile.BadZipFile, OSError):
            continue
        for name, when in entries:
            path = target / name
            if path.is_file() and ".." not in Path(name).parts:
                stamp = time.mktime(when + (0, 0, -1))
                os.utime(path, (stamp, stamp))


def _named(match) -> str:
    """The student id a file-name match gives. Moodle's blind marking names every file
    "Participant_<number>_...": the number is then what tells the students apart."""
    student = clean_student_id(match.group("student_id"))
    lms_id = match.groupdict().get("lms_id")
    if lms_id and student.lower() == "participant":
        return f"participant_{lms_id}"
    return student


def student_of(rel: str, lab_id: str, flat_dirs: set[str], custom: str | None = None):
    """(student id, the file name the student gave) of a submitted file, or None
    when it cannot be told whose it is.

    `flat_dirs` are the folders that hold many students' files side by side (the
    extraction root, a zip's own folder, a folder of '<student>_<lab>.ipynb' files);
    any other folder is taken to be one student's.
    """
    found = _match(rel, custom)
    if found:
        return _named(found[1]), found[1].groupdict().get("file") or rel.rsplit("/", 1)[-1]
    parent, _, name = rel.rpartition("/")
    if parent in flat_dirs:
        match = _flat_match(name, lab_id)
        return (clean_student_id(match.group("student_id")), match.group("file")) if match else None
    return clean_student_id(parent.rsplit("/", 1)[-1]), name


def _check_notebook(path: Path) -> str | None:
    """Why the file cannot be graded, or None when it is a readable notebook."""
    try:
        raw = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return "not a text file, so not a notebook; ask the student to download it again as .ipynb"
    if not raw.strip():
        return "the file is empty (0 bytes of notebook); ask the student to submit again"
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        return (f"not valid JSON (line {exc.lineno}, column {exc.colno}): the notebook is damaged; "
                "ask the student to download it again (File > Download .ipynb) and resubmit")
    if not isinstance(data, dict) or "cells" not in data:
        return "valid JSON but not a Jupyter notebook (no 'cells')"
    try:
        nbformat.reads(raw, as_version=4)
    except Exception as exc:  # noqa: BLE001 - nbformat raises several kinds
        return f"not a notebook nbformat can read: {exc}"
    return None


def _flat_dirs(rels: list[str], lab_id: str, wrapper_dirs: set[str]) -> set[str]:
    """Folders holding notebooks of two or more students named '<student>_<lab>'."""
    students: dict[str, set] = {}
    for rel in rels:
        parent, _, name = rel.rpartition("/")
        students.setdefault(parent, set()).add(_flat_student(name, lab_id))
    return set(wrapper_dirs) | {"" } | {d for d, s in students.items() if len(s - {None}) >= 2}


def scan(extracted: Path, lab_id: str, wrapper_dirs: set[str], custom_pattern: str | None = None) -> Decision:
    decision = Decision()
    candidates: dict[str, list[Path]] = {}
    lms_ids: dict[str, dict[Path, tuple[str, str]]] = {}
    given_names: dict[Path, str] = {}
    expected = f"{lab_id}.ipynb"
    files = [p for p in sorted(extracted.rglob("*")) if p.is_file()
             and not JUNK.search(p.relative_to(extracted).as_posix())]
    rels = [p.relative_to(extracted).as_posix() for p in files if p.suffix == ".ipynb"]
    flat_dirs = _flat_dirs(rels, lab_id, wrapper_dirs)
    for path in files:
        rel = path.relative_to(extracted).as_posix()
        if path.suffix != ".ipynb":
            decision.skipped.append((rel, f"not a Jupyter notebook ({path.suffix or 'no extension'}); not graded"))
            continue
        found = student_of(rel, lab_id, flat_dirs, custom_pattern)
        if found is None:
            decision.skipped.append((rel, "cannot tell which student submitted it: name files "
                                          f"'<student>_{expected}', put them in a folder per student, "
                                          "or pass --student-pattern"))
            continue
        student, given_names[path] = found
        known_as = lms_id_of(rel, custom_pattern)
        if known_as:
            lms_ids.setdefault(student, {})[path] = known_as
        problem = _check_notebook(path)
        if problem:
            decision.skipped.append((rel, f"{student}: {problem}"))
            continue
        candidates.setdefault(student, []).append(path)
    for student, paths in candidates.items():
        # the latest hand-in: the LMS's attempt stamp, then the time in the zip (see
        # restore_zip_times); at the same time, a file with the lab's own name wins
        chosen = max(paths, key=lambda p: (attempt_of(p.relative_to(extracted).as_posix(), custom_pattern),
                                          p.stat().st_mtime, given_names[p] == expected, str(p)))
        rel = chosen.relative_to(extracted).as_posix()
        decision.collect[str(chosen)] = student
        if given_names[chosen] != expected:
            decision.notes.append((rel, f"{student}: graded as {expected} (the student named it "
                                        f"{given_names[chosen]!r})"))
        for other in paths:
            if other != chosen:
                decision.skipped.append((other.relative_to(extracted).as_posix(),
                                         f"{student}: another notebook of this student, "
                                         f"{chosen.name}, was graded instead"))
    for student, found in lms_ids.items():
        chosen = next((p for p in found if str(p) in decision.collect), next(iter(found)))
        decision.lms_ids[student] = found[chosen]
        if len(set(found.values())) > 1:
            # two LMS accounts whose names clean to the same student id: never merge them silently
            decision.notes.append((chosen.relative_to(extracted).as_posix(), (
                f"{student}: files of {len(set(found.values()))} different LMS accounts "
                f"({', '.join(sorted(i for _, i in set(found.values())))}) were taken as one student; "
                "only one notebook was graded: pass --student-pattern to tell them apart")))
    return decision


class LabCollector(FileNameCollectorPlugin):
    """nbgrader collector plugin that follows a `Decision` made by `scan`."""

    decision: Decision | None = None
    lab_id: str = ""

    def collect(self, submitted_file: str):
        if self.decision is None:
            raise RuntimeError("LabCollector needs a decision from labtools.collect.scan")
        student = self.decision.collect.get(submitted_file)
        if student is None:
            return None
        return {"student_id": student, "file_id": f"{self.lab_id}.ipynb"}
