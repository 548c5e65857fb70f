"""Every lab's executed solutions under nbval (strict: outputs must match what is stored).

That every lab runs top to bottom and passes all its tests, hidden ones included, with the
reference answers in fast mode is checked by tests/test_colab_like.py, in the environment a
student has on Colab (the self-study edition shows every test); running the source under
`nbval --nbval-lax` as well ran the same cells a third time in CI."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from labtools.labs import REPO_ROOT, built_labs

LABS = built_labs()


def nbval(*args, fast: bool) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("LABS_FAST", "NBGRADER_EXECUTION")}
    if fast:
        env["LABS_FAST"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--nbval-cell-timeout=600", *args],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True,
    )


@pytest.mark.parametrize("lab", LABS, ids=lambda lab: lab.lab_id)
def test_solutions_reproduce_their_stored_outputs(lab):
    proc = nbval("--nbval", "--nbval-sanitize-with", "tests/nbval_sanitize.cfg",
                 str(lab.solutions_path().relative_to(REPO_ROOT)), fast=False)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
