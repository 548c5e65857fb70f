"""A new gradebook gets nbgrader's schema version without the `alembic` subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbgrader.api
import pytest
from nbgrader.api import Gradebook
from nbgrader.dbutil import _temp_alembic_ini
from sqlalchemy import text

from labtools.grade.gradebook_schema import alembic_head, use_in_process_version


def test_the_version_is_what_the_alembic_command_prints():
    alembic = Path(sys.executable).with_name("alembic")
    with _temp_alembic_ini("sqlite:////tmp/unused.db") as ini:
        printed = subprocess.run([str(alembic), "-c", ini, "heads"], capture_output=True, text=True, check=True)
    assert printed.stdout.split()[0] == alembic_head()
    assert len(alembic_head()) == 12 and "(head)" in printed.stdout


def test_a_new_gradebook_is_stamped_without_a_subprocess(tmp_path, monkeypatch):
    monkeypatch.setattr(nbgrader.api, "get_alembic_version", nbgrader.api.get_alembic_version)
    use_in_process_version()

    def no_subprocess(*args, **kwargs):
        pytest.fail(f"a subprocess was started: {args}")

    monkeypatch.setattr(nbgrader.api.sp, "check_output", no_subprocess)
    with Gradebook(f"sqlite:///{tmp_path / 'gradebook.db'}") as gb:
        stamped = gb.db.execute(text("SELECT version_num FROM alembic_version")).scalar_one()
    assert stamped == alembic_head()
