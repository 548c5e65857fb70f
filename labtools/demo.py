"""A small demo class: an LMS zip of realistic submissions, graded end to end.

The demo course lives in build/demo-course (ignored by git) with its own SQLite
gradebook, so it never touches the instructor's real one.
"""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import nbformat

from . import nbcells
from .grade.run import GradeReport, grade
from .labs import REPO_ROOT, Lab
from .build.submissions import fill_release

ANSWERS = Path(__file__).parent / "demo_answers"  # <lab>.json: {"correct": {...}, "wrong": {...}}


def demo_answers(lab: Lab, kind: str) -> dict[str, str]:
    """For each exercise, an answer of that kind ("correct": another style than the
    reference; "wrong": a common mistake), as the whole content of its solution cell.
    tests/test_graders.py grades each of them like a fixture."""
    path = ANSWERS / f"{lab.lab_id}.json"
    return dict(json.loads(path.read_text())[kind]) if path.exists() else {}


def demo_class(lab: Lab, root: Path = REPO_ROOT) -> dict[str, str]:
    """File name in the LMS zip (Canvas's pattern) -> content."""
    source = nbcells.read(lab.source_path(root))
    release = nbcells.read(lab.release_path(root))
    wrong = demo_answers(lab, "wrong")
    half_wrong = dict(list(wrong.items())[::2])
    files = {
        # reference solutions
        f"lovelaceada_1001_5001_{lab.notebook_name}": fill_release(release, source),
        # some common mistakes
        f"turingalan_1003_5003_{lab.notebook_name}": fill_release(release, source, half_wrong),
        # handed in untouched
        f"dijkstraedsger_LATE_1004_5004_{lab.notebook_name}": release,
        # correct answers written in other styles, in a copy the student renamed, written answers left out
        f"liskovbarbara_1005_5005_Copy_of_{lab.notebook_name}": fill_release(
            release, source, demo_answers(lab, "correct"), written=False),
    }
    out = {name: nbformat.writes(nb) for name, nb in files.items()}
    out[f"knuthdonald_1006_5006_{lab.notebook_name}"] = json.dumps({"cells": [{"cell_type": "code"}]})[:-7]
    out["shannonclaude_1007_5007_notes.txt"] = "I could not finish exercise 3.\n"
    return out


def run_demo(labs: list[Lab], log=print, course: Path | None = None) -> list[GradeReport]:
    course = (course or REPO_ROOT / "build" / "demo-course").resolve()
    if course.exists():
        shutil.rmtree(course)
    course.mkdir(parents=True)
    shutil.copy(REPO_ROOT / "nbgrader_config.py", course / "nbgrader_config.py")
    reports = []
    for lab in labs:
        shutil.copytree(lab.source_path().parent, course / "source" / lab.lab_id)
        archive = course / f"{lab.lab_id}_submissions.zip"
        with zipfile.ZipFile(archive, "w") as zf:
            for name, text in demo_class(lab).items():
                zf.writestr(name, text)
        log(f"\n=== demo class for {lab.lab_id}: {archive}")
        report = grade(lab.lab_id, archive, course_dir=course, log=log)
        log(f"\nGrades for {lab.lab_id} (gradebook {course / 'gradebook.db'}):\n{report.table()}")
        log(f"CSV: {report.csv_path}\nFeedback: {report.feedback_dir}")
        reports.append(report)
    return reports
