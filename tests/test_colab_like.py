"""The self-study notebook runs in an environment holding only what Colab
preinstalls (torch, numpy, matplotlib, seaborn, transformers) and nothing of the
project: no nbgrader, no nbval, no labtools."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from unittest import mock

import pytest

from labtools import nbcells
from labtools.build.editions import execute
from labtools.labs import REPO_ROOT, built_labs

from conftest import course_module

COLAB_PACKAGES = ["numpy", "matplotlib", "seaborn", "transformers", "ipykernel"]
VENV = REPO_ROOT / ".venv-colab"



@pytest.fixture(scope="session")
def colab_kernel(tmp_path_factory):
    """A kernelspec for a clean venv with Colab's preinstalled packages only."""
    python = VENV / "bin" / "python"
    stamp = VENV / ".colab-like"
    # what the labs install on Colab, where these are missing (setup cell, or the part that needs it)
    extras = sorted({pip for lab in built_labs()
                     for pip in [*lab.extra_packages.values(), *lab.optional_packages.values()]})
    wanted = " ".join(COLAB_PACKAGES + extras)
    if not stamp.exists() or stamp.read_text() != wanted:
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
        course = course_module()
        # no bytecode compiled at install (tens of seconds for torch and transformers): the
        # notebook compiles what it imports, as a fresh Colab runtime does. (pip's --compile
        # off; PIP_NO_COMPILE would read inverted.)
        with mock.patch.dict(os.environ, {"PIP_COMPILE": "0"}):
            course.install_torch(python)
            course.pip("install", "--quiet", *COLAB_PACKAGES, *extras, python=python)
        stamp.write_text(wanted)
    probe = subprocess.run(
        [str(python), "-c", "import importlib.util as u; "
         "print([m for m in ('nbgrader', 'nbval', 'labtools', 'nbclient') if u.find_spec(m)])"],
        capture_output=True, text=True, check=True, cwd="/",
    )
    assert probe.stdout.strip() == "[]", f"the Colab-like venv holds project tools: {probe.stdout}"
    kernels = tmp_path_factory.mktemp("jupyter") / "kernels" / "colab-like"
    kernels.mkdir(parents=True)
    (kernels / "kernel.json").write_text(json.dumps({
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Colab-like", "language": "python",
    }))
    return str(kernels.parent.parent)


def _filled(lab):
    """The self-study notebook with each stub replaced by the reference solution."""
    source = nbcells.read(lab.source_path())
    nb = copy.deepcopy(nbcells.read(lab.selfstudy_path()))
    code = [c for c in nb.cells if c.cell_type == "code"]  # the same code cells, in the same order
    source_code = [c for c in source.cells if c.cell_type == "code"]
    assert len(code) == len(source_code)
    for cell, target in zip(source_code, code):
        if nbcells.is_solution(cell):
            assert "NotImplementedError" in target.source
            target.source = nbcells.strip_markers(cell.source)
    return nb


def _errors(nb):
    return [(c.source[:60], o.ename, o.evalue) for c in nb.cells if c.cell_type == "code"
            for o in c.outputs if o.output_type == "error"]


@pytest.mark.parametrize("lab", built_labs(), ids=lambda lab: lab.lab_id)
def test_selfstudy_runs_top_to_bottom_in_a_colab_like_env(lab, colab_kernel, monkeypatch):
    # Fast mode: this test is about the environment; full runs are nbval's job.
    env = {"JUPYTER_PATH": colab_kernel, "HF_HUB_OFFLINE": "1", "LABS_FAST": "1"}
    done = execute(_filled(lab), kernel_name="colab-like", env_overrides=env)
    assert _errors(done) == []
    # as handed out: the only errors are the stubs asking for the student's code
    untouched = nbcells.read(lab.selfstudy_path())
    ran = execute(untouched, kernel_name="colab-like", env_overrides=env, allow_errors=True)
    assert {name for _, name, _ in _errors(ran)} <= {"NotImplementedError", "NameError"}
