"""Grading fails closed: labtools' steps (the judge, the sandbox, the sanitizing) are in
nbgrader's pipeline whatever the course's nbgrader_config.py says, or the grade command
refuses, before anything is graded, and says what to change."""

from __future__ import annotations

from pathlib import Path

import pytest

from labtools.grade.steps.execute import GradingExecute
from labtools.grade.config import autograde_steps, nbgrader_config, sanitize_steps
from labtools.grade.run import GradingError, grade
from labtools.labs import get_lab
from labtools.grade.steps.restore import RestoreFromRelease

from conftest import make_course, write_zip

HEAD = "c = get_config()\n"


def _config(tmp_path: Path, text: str | None):
    if text is not None:
        (tmp_path / "nbgrader_config.py").write_text(HEAD + text)
    return nbgrader_config(tmp_path, None)


@pytest.mark.parametrize("text", [None, "c.Execute.timeout = 30\n"], ids=["no file", "a file naming no steps"])
def test_a_config_that_names_no_steps_grades_with_labtools_steps(tmp_path, text):
    config = _config(tmp_path, text)
    assert config.Autograde.autograde_preprocessors == autograde_steps()
    assert config.Autograde.sanitize_preprocessors == sanitize_steps()
    assert config.Autograde.autograde_preprocessors[0] is GradingExecute
    assert config.Autograde.sanitize_preprocessors[0] is RestoreFromRelease


@pytest.mark.parametrize("text, named", [
    ("from nbgrader.preprocessors import Execute, SaveAutoGrades\n"
     "c.Autograde.autograde_preprocessors = [Execute, SaveAutoGrades]\n", "no labtools.grade.steps.execute.GradingExecute"),
    ("from nbgrader.preprocessors import Execute, SaveAutoGrades\nfrom labtools.grade.steps.execute import GradingExecute\n"
     "from labtools.grade.steps.sanitize import NeutralizeStudentContent\n"
     "c.Autograde.autograde_preprocessors = [GradingExecute, Execute, NeutralizeStudentContent, SaveAutoGrades]\n",
     "also runs Execute"),
    ("from nbgrader.preprocessors import SaveAutoGrades\nfrom labtools.grade.steps.execute import GradingExecute\n"
     "c.Autograde.autograde_preprocessors = [GradingExecute, SaveAutoGrades]\n", "NeutralizeStudentContent"),
    ("from nbgrader.preprocessors import ClearOutput\nc.Autograde.sanitize_preprocessors = [ClearOutput]\n",
     "must start with labtools.grade.steps.restore.RestoreFromRelease"),
    ("from jupyter_client.manager import KernelManager\nc.GradingExecute.kernel_manager_class = KernelManager\n",
     "outside the sandbox"),
])
def test_a_config_that_drops_a_safety_step_is_refused_with_what_to_change(tmp_path, text, named):
    with pytest.raises(GradingError) as refused:
        _config(tmp_path, text)
    assert named in str(refused.value)
    assert "nbgrader_config.py" in str(refused.value)


def test_a_subclass_of_a_step_counts_as_that_step(tmp_path):
    (tmp_path / "steps.py").write_text("from labtools.grade.steps.execute import GradingExecute\n"
                                       "class MyExecute(GradingExecute):\n    pass\n")
    text = ("import sys; sys.path.insert(0, %r)\nfrom steps import MyExecute\n"
            "from labtools.grade.config import autograde_steps\n"
            "c.Autograde.autograde_preprocessors = [MyExecute, *autograde_steps()[1:]]\n" % str(tmp_path))
    assert _config(tmp_path, text).Autograde.autograde_preprocessors[0].__name__ == "MyExecute"


def test_the_grade_command_refuses_before_grading_anything(tmp_path):
    lab = get_lab("lab01_attention")
    course = make_course(tmp_path / "course", [lab])
    with open(course / "nbgrader_config.py", "a") as config:
        config.write("\nfrom nbgrader.preprocessors import Execute, SaveAutoGrades\n"
                     "c.Autograde.autograde_preprocessors = [Execute, SaveAutoGrades]\n")
    archive = write_zip(tmp_path / "class.zip", {f"ada/{lab.notebook_name}": "{}"})
    with pytest.raises(GradingError, match="no labtools.grade.steps.execute.GradingExecute"):
        grade(lab.lab_id, archive, course_dir=course, hide_progress=True, log=lambda *a: None)
    assert not (course / "autograded").exists() and not (course / "gradebook.db").exists()
