"""Several workers autograde into one SQLite gradebook and leave it consistent."""

from __future__ import annotations

import nbformat
from nbgrader.api import Gradebook

from labtools import nbcells
from labtools.grading import grade
from labtools.labs import get_lab
from labtools.submissions import fill_release

from conftest import make_course, write_zip

LAB = get_lab("lab01_attention")


def test_two_workers_grade_a_class_consistently(tmp_path):
    course = make_course(tmp_path / "course", [LAB])
    source, release = nbcells.read(LAB.source_path()), nbcells.read(LAB.release_path())
    files = {f"s{i}/{LAB.notebook_name}": nbformat.writes(fill_release(release, source)) for i in range(3)}
    files[f"s3/{LAB.notebook_name}"] = nbformat.writes(release)  # untouched
    report = grade(LAB.lab_id, write_zip(tmp_path / "class.zip", files), course_dir=course,
                   hide_progress=True, workers=2, log=lambda *a: None)
    scores = {r.student: (r.auto_score, r.auto_max, r.status) for r in report.results}
    top = scores["s0"][1]
    assert top > 0
    assert scores == {"s0": (top, top, "graded"), "s1": (top, top, "graded"),
                      "s2": (top, top, "graded"), "s3": (0.0, top, "graded")}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        assert sorted(s.id for s in gb.students) == ["s0", "s1", "s2", "s3"]
        assert len(gb.find_assignment(LAB.lab_id).submissions) == 4
    assert len(report.csv_path.read_text().splitlines()) == 1 + 4
