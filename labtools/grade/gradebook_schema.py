"""The schema version nbgrader stamps on a new gradebook, read in this process.

nbgrader's `Gradebook` asks the `alembic` command for it each time it creates a
database: a Python subprocess that imports SQLAlchemy (1 to 3 s), found on the PATH
(a `dask worker` started outside the virtual environment may find none, or another
nbgrader's). A grade run creates one gradebook for its client and a scratch one on
every worker, so that was seconds per run and per worker. The version depends only
on the installed nbgrader: it is read once from nbgrader's own migration scripts,
which is what the command reads too.
"""

from __future__ import annotations

import functools


@functools.cache
def alembic_head() -> str:
    """The head revision of nbgrader's migrations (what `alembic heads` prints first)."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory
    from nbgrader.dbutil import ALEMBIC_DIR

    config = Config()
    config.set_main_option("script_location", ALEMBIC_DIR)
    return ScriptDirectory.from_config(config).get_current_head()


def use_in_process_version() -> None:
    """Make nbgrader's `Gradebook` take the version from `alembic_head`."""
    import nbgrader.api

    nbgrader.api.get_alembic_version = alembic_head
