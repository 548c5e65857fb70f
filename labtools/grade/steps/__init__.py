"""The steps nbgrader runs for each notebook, named in the course's nbgrader_config.py and
installed by labtools/grade/config.py: restore (the lab's cells put back from the release),
execute (the notebook run in the sandbox, its tests decided by the judge), sanitize
(student content made inert before it is saved or shown) and feedback (hidden tests out)."""

from __future__ import annotations

from pathlib import Path


def course_notebook(config, resources, kind: str) -> Path | None:
    """The lab's "source" or "release" notebook in the course being graded, for the notebook
    nbgrader is working on (its `resources`); None when it has none."""
    from nbgrader.coursedir import CourseDirectory

    info = resources.get("nbgrader", {}) if resources else {}
    assignment, notebook = info.get("assignment"), info.get("notebook")
    if not (assignment and notebook):
        return None
    coursedir = CourseDirectory(config=config)
    folder = (Path(coursedir.root) / "source" / assignment if kind == "source" else
              Path(coursedir.format_path(coursedir.release_directory, ".", assignment)))
    path = folder / f"{notebook}.ipynb"
    return path if path.exists() else None
