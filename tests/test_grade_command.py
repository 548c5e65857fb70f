"""Bad input to the grade command: a clear message naming the file, the other
submissions still graded, nothing overwritten."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from labtools import nbcells
from labtools.grade.collect import scan, student_of
from labtools.grade.run import GradingError, grade
from labtools.labs import REPO_ROOT, get_lab
from labtools.build.submissions import fill_release

from conftest import make_course, write_zip

LAB = get_lab("lab01_attention")


def cli(*args, cwd=REPO_ROOT):
    return subprocess.run([sys.executable, "-m", "labtools", *args], cwd=cwd, capture_output=True, text=True)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_unknown_lab_id_names_the_known_ones(tmp_path):
    proc = cli("grade", "lab99_nonsense", str(tmp_path))
    assert proc.returncode == 2
    assert "unknown lab id 'lab99_nonsense'" in proc.stderr and "lab01_attention" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_missing_submissions_and_wrong_course_dir_are_clear(tmp_path):
    proc = cli("grade", LAB.lab_id, str(tmp_path / "nowhere.zip"))
    assert proc.returncode == 2 and "nowhere.zip: no such file" in proc.stderr
    proc = cli("grade", LAB.lab_id, str(tmp_path), "--course-dir", str(tmp_path))
    assert proc.returncode == 2 and f"{tmp_path / 'source' / LAB.lab_id / LAB.notebook_name} does not exist: " \
        f"is {tmp_path} the course directory?" in proc.stderr, proc.stderr


def test_damaged_zip_is_refused_before_anything_changes(tmp_path):
    course = make_course(tmp_path / "course", [LAB])
    bad = tmp_path / "class.zip"
    bad.write_bytes(b"PK\x03\x04 this is not really a zip")
    with pytest.raises(GradingError, match="not a valid zip"):
        grade(LAB.lab_id, bad, course_dir=course, hide_progress=True, log=lambda *a: None)
    assert not (course / "submitted").exists()


def test_a_broken_resubmission_does_not_replace_a_good_one(tmp_path):
    """Regrading with a zip in which one student's file is damaged keeps that
    student's earlier submission and grade; the source is never touched."""
    course = make_course(tmp_path / "course", [LAB])
    source_hash = digest(course / "source" / LAB.lab_id / LAB.notebook_name)
    release = nbcells.read(LAB.release_path())
    good = nbformat.writes(fill_release(release, nbcells.read(LAB.source_path())))
    first = write_zip(tmp_path / "first.zip", {f"ada_1_1_{LAB.notebook_name}": good})
    report = grade(LAB.lab_id, first, course_dir=course, hide_progress=True, log=lambda *a: None)
    before = report.result("ada")
    assert before.status == "graded" and before.auto_score == before.auto_max > 0, before
    submitted = course / "submitted" / "ada" / LAB.lab_id / LAB.notebook_name
    kept = digest(submitted)

    second = write_zip(tmp_path / "second.zip", {
        f"ada_1_1_{LAB.notebook_name}": good[: len(good) // 2],  # truncated upload
        "readme.md": "hello",
    })
    messages = []
    report = grade(LAB.lab_id, second, course_dir=course, hide_progress=True, log=messages.append)
    assert digest(submitted) == kept
    assert any("ada" in m and "not valid JSON" in m for m in messages)
    assert any("readme.md" in m for m in messages)
    assert report.results == []
    assert digest(course / "source" / LAB.lab_id / LAB.notebook_name) == source_hash
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        assert gb.find_submission(LAB.lab_id, "ada").score == before.auto_score


@pytest.mark.parametrize("rel, expected", [
    ("alice/lab01_attention.ipynb", ("alice", "lab01_attention.ipynb")),
    ("alice/Copy of lab01_attention.ipynb", ("alice", "Copy of lab01_attention.ipynb")),
    ("bob_lab01_attention.ipynb", ("bob", "lab01_attention.ipynb")),
    ("smithj_12345_67890_lab01_attention.ipynb", ("smithj", "lab01_attention.ipynb")),
    ("smithj_LATE_12345_67890_lab01_attention-1.ipynb", ("smithj", "lab01_attention-1.ipynb")),
    ("Jane Doe_4321_assignsubmission_file_/lab01_attention.ipynb", ("Jane_Doe", "lab01_attention.ipynb")),
    ("Jane Doe_4321_assignsubmission_file_lab01_attention.ipynb", ("Jane_Doe", "lab01_attention.ipynb")),
    ("lab01_attention.ipynb", None),
])
def test_student_ids_from_lms_file_names(rel, expected):
    assert student_of(rel, LAB.lab_id, flat_dirs={""}) == expected


def test_scan_picks_one_notebook_per_student_and_explains(tmp_path):
    release = LAB.release_path().read_text()
    (tmp_path / "carol").mkdir()
    (tmp_path / "carol" / "scratch.ipynb").write_text(release)
    (tmp_path / "carol" / LAB.notebook_name).write_text(release)
    (tmp_path / "dave_lab01_attention.ipynb").write_text("")
    (tmp_path / "erin_lab01_attention.ipynb").write_text("[1, 2]")
    (tmp_path / "mystery.ipynb").write_text(release)
    decision = scan(tmp_path, LAB.lab_id, {""})
    assert list(decision.collect.values()) == ["carol"]
    assert decision.collect[str(tmp_path / "carol" / LAB.notebook_name)] == "carol"
    reasons = dict(decision.skipped)
    assert "another notebook" in reasons["carol/scratch.ipynb"]
    assert "empty" in reasons["dave_lab01_attention.ipynb"]
    assert "not a Jupyter notebook" in reasons["erin_lab01_attention.ipynb"]
    assert "cannot tell which student" in reasons["mystery.ipynb"]


def test_a_run_the_cluster_could_not_finish_exits_non_zero(monkeypatch, tmp_path, capsys):
    """Submissions that failed on the cluster (a worker lost every time, say) are the cluster's
    fault: the command says which and exits 1, so that a script or CI does not take it for done."""
    from labtools import cli
    from labtools.grade import run as grading

    def fake_grade(lab_id, submissions, cluster_failures=(), **kwargs):
        report = grading.GradeReport(lab_id, csv_path=tmp_path / "grades.csv", feedback_dir=tmp_path)
        report.cluster_failures = list(cluster_failures)
        return report

    monkeypatch.setattr(grading, "grade", lambda *a, **k: fake_grade(*a, cluster_failures=["ada", "bob"], **k))
    assert cli.main(["grade", LAB.lab_id, str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "2 submission(s) could not be graded on the cluster (ada, bob)" in out and "run the same command" in out
    monkeypatch.setattr(grading, "grade", fake_grade)
    assert cli.main(["grade", LAB.lab_id, str(tmp_path)]) == 0
