#!/usr/bin/env python3
"""The course's two commands, for a fresh clone with nothing but Python 3.10+.

    python3 course.py demo    build every lab's editions, execute the solutions,
                              autograde a small demo class, print its grades
    python3 course.py test    run the whole test suite (extra arguments go to pytest)

Both first make a virtual environment in .venv and install what the course needs.
PyTorch is installed before the rest so that pip never pulls a multi-GB CUDA build
by accident: a torch already in .venv is kept; a CPU wheel that pip is configured to
find locally is preferred; on Linux without an NVIDIA GPU the CPU wheel comes from
PyTorch's CPU index; elsewhere pip's default build is used. Set LABS_TORCH to a pip
requirement (e.g. "torch==2.5.1") to choose yourself.
"""

from __future__ import annotations

import glob
import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = Path(os.environ.get("LABS_VENV", ROOT / ".venv"))
STAMP = VENV / ".course-installed"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def venv_python() -> Path:
    return VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def run(*cmd, check=True, **kw) -> subprocess.CompletedProcess:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    return subprocess.run([str(c) for c in cmd], check=check, **kw)


def pip(*args, check=True, python=None):
    return run(python or venv_python(), "-m", "pip", "--disable-pip-version-check", *args, check=check)


def local_torch_wheel(python=None) -> str | None:
    """A torch==X requirement when pip's configured find-links hold a torch wheel."""
    proc = subprocess.run([str(python or venv_python()), "-m", "pip", "config", "list"],
                          capture_output=True, text=True)
    places = re.findall(r"find-links='([^']*)'", proc.stdout)
    places += os.environ.get("PIP_FIND_LINKS", "").split()
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    for place in places:
        for entry in place.split():
            for wheel in glob.glob(os.path.join(entry.removeprefix("file://"), f"torch-*-{tag}-*.whl")):
                version = os.path.basename(wheel).split("-")[1].split("+")[0]
                return f"torch=={version}"
    return None


def install_torch(python=None) -> None:
    """Install torch into the environment of `python` (default: .venv), CPU build
    where that is the sensible choice; keep a torch that is already there."""
    python = python or venv_python()
    probe = subprocess.run([str(python), "-c", "import torch"], capture_output=True)
    if probe.returncode == 0:
        return
    if os.environ.get("LABS_TORCH"):
        pip("install", os.environ["LABS_TORCH"], python=python)
        return
    local = local_torch_wheel(python)
    if local:
        pip("install", local, python=python)
        return
    if platform.system() == "Linux" and shutil.which("nvidia-smi") is None:
        if pip("install", "torch", "--index-url", CPU_INDEX, "--timeout", "30",
               check=False, python=python).returncode == 0:
            return
        print("PyTorch's CPU index is unreachable; installing pip's default torch build instead.")
    pip("install", "torch", python=python)


def ensure_environment() -> None:
    if sys.version_info < (3, 10):
        sys.exit(f"Python 3.10 or newer is needed (this is {platform.python_version()}).")
    wanted = hashlib.sha256(
        b"".join((ROOT / f).read_bytes() for f in ("requirements.txt", "pyproject.toml"))
    ).hexdigest()
    if STAMP.exists() and STAMP.read_text().strip() == wanted:
        return
    if not venv_python().exists():
        run(sys.executable, "-m", "venv", VENV)
    install_torch()
    pip("install", "-r", ROOT / "requirements.txt", "-e", ROOT)
    STAMP.write_text(wanted)


def main(argv: list[str]) -> int:
    commands = {"demo": ["-m", "labtools", "demo"], "test": ["-m", "pytest"]}
    if not argv or argv[0] not in commands:
        print(__doc__)
        return 2
    ensure_environment()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.call([str(venv_python()), *commands[argv[0]], *argv[1:]], cwd=ROOT, env=env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
