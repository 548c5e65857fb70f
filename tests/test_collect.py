"""Which file of a student is graded: the latest hand-in, by the LMS's attempt stamp or the
time recorded in the zip, never by when the zip happened to be extracted."""

from __future__ import annotations

import os
import time
import zipfile
from pathlib import Path

from labtools.grade import collect

LAB = "lab01_attention"


def _zip(path: Path, entries: list[tuple[str, tuple, str]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as zf:
        for name, when, text in entries:
            zf.writestr(zipfile.ZipInfo(name, date_time=when), text)
    return path


def _extract(archive_zip: Path, extracted: Path) -> None:
    """As an extractor does: every file stamped with the time of extraction."""
    target = extracted / archive_zip.stem
    with zipfile.ZipFile(archive_zip) as zf:
        zf.extractall(target)
    now = time.time()
    for path in target.rglob("*"):
        os.utime(path, (now, now))


NB = '{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}'


def _chosen(tmp: Path, entries, pattern=None) -> str:
    archive = _zip(tmp / "archive" / "class.zip", entries)
    _extract(archive, tmp / "extracted")
    collect.restore_hand_in_times(tmp / "archive", tmp / "extracted")
    decision = collect.scan(tmp / "extracted", LAB, {"", "class"}, pattern)
    assert len(decision.collect) == 1, decision
    return Path(next(iter(decision.collect))).relative_to(tmp / "extracted" / "class").as_posix()


def test_a_canvas_resubmission_is_graded_not_the_first_attempt(tmp_path):
    # Canvas names a resubmitted file of the same name "<file>-1"; its zip entry is later
    chosen = _chosen(tmp_path, [
        (f"lovelace_1001_7002_{LAB}-1.ipynb", (2026, 3, 2, 9, 0, 0), NB),
        (f"lovelace_1001_7001_{LAB}.ipynb", (2026, 3, 1, 9, 0, 0), NB),
    ])
    assert chosen == f"lovelace_1001_7002_{LAB}-1.ipynb"


def test_the_latest_of_a_students_folder_wins_whatever_the_names(tmp_path):
    chosen = _chosen(tmp_path, [
        (f"hopper/{LAB}.ipynb", (2026, 3, 1, 9, 0, 0), NB),
        (f"hopper/{LAB} (final).ipynb", (2026, 3, 3, 9, 0, 0), NB),
        (f"hopper/old {LAB}.ipynb", (2026, 2, 1, 9, 0, 0), NB),
    ])
    assert chosen == f"hopper/{LAB} (final).ipynb"


def test_at_the_same_time_the_file_with_the_labs_name_wins(tmp_path):
    same = (2026, 3, 1, 9, 0, 0)
    chosen = _chosen(tmp_path, [(f"turing/{LAB}.ipynb", same, NB), (f"turing/Copy of {LAB}.ipynb", same, NB)])
    assert chosen == f"turing/{LAB}.ipynb"


def test_blackboard_attempt_stamps_order_the_attempts(tmp_path):
    # the attempt stamp decides even where the zip's entry times say otherwise
    chosen = _chosen(tmp_path, [
        (f"{LAB}_knuth_attempt_2026-03-02-10-00-00_{LAB}.ipynb", (2026, 1, 1, 0, 0, 0), NB),
        (f"{LAB}_knuth_attempt_2026-03-01-10-00-00_{LAB}.ipynb", (2026, 5, 1, 0, 0, 0), NB),
    ])
    assert chosen == f"{LAB}_knuth_attempt_2026-03-02-10-00-00_{LAB}.ipynb"


def test_a_folder_of_notebooks_keeps_the_files_times(tmp_path):
    archive = tmp_path / "archive"
    (archive / "liskov").mkdir(parents=True)
    (tmp_path / "extracted" / "liskov").mkdir(parents=True)
    for name, stamp in [(f"{LAB}.ipynb", 1_700_000_000), (f"{LAB} v2.ipynb", 1_700_100_000)]:
        (archive / "liskov" / name).write_text(NB)
        os.utime(archive / "liskov" / name, (stamp, stamp))
        (tmp_path / "extracted" / "liskov" / name).write_text(NB)  # copied now, as zip_collect does
    collect.restore_hand_in_times(archive, tmp_path / "extracted")
    decision = collect.scan(tmp_path / "extracted", LAB, {""})
    assert [Path(p).name for p in decision.collect] == [f"{LAB} v2.ipynb"]


def test_moodle_blind_marking_keeps_the_participants_apart(tmp_path):
    extracted = tmp_path / "extracted"
    for number in ("4101", "4102", "4103"):
        folder = extracted / f"Participant_{number}_assignsubmission_file_"
        folder.mkdir(parents=True)
        (folder / f"{LAB}.ipynb").write_text(NB)
    decision = collect.scan(extracted, LAB, {""})
    assert sorted(decision.collect.values()) == ["participant_4101", "participant_4102", "participant_4103"]
    assert decision.lms_ids["participant_4102"] == ("moodle", "4102")
