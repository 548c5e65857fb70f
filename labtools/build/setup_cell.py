"""The setup cell every lab starts with, written once here.

`labtools build` copies it into each source notebook (the code cell whose nbgrader
grade_id is "setup"), and `labtools check` fails when a source has drifted from it.
"""

from __future__ import annotations

from ..labs import Lab

SETUP_GRADE_ID = "setup"

_TEMPLATE = '''\
# Lab setup: run this cell first. It is the same in every lab of the course.
import importlib.util, os, random, subprocess, sys

IN_COLAB = "google.colab" in sys.modules
# What this lab needs beyond torch, numpy, matplotlib, seaborn and transformers.
EXTRA_PACKAGES = {extra_packages!r}
_missing = [pip for module, pip in EXTRA_PACKAGES.items() if importlib.util.find_spec(module) is None]
if _missing and IN_COLAB:
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", *_missing], check=True)
elif _missing:
    raise ImportError("This lab needs: pip install " + " ".join(_missing))

import numpy as np
import torch
import matplotlib
import matplotlib.pyplot as plt

# Fast mode shrinks training so a whole lab runs in seconds (CI and autograding).
FAST = os.environ.get("LABS_FAST", "0") not in ("", "0") or "NBGRADER_EXECUTION" in os.environ


def pick_device() -> torch.device:
    """CUDA if there is a GPU, else Apple's MPS, else the CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def seed_everything(seed: int = 0) -> None:
    """Same seed for Python, NumPy and torch, so every run gives the same numbers."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


DEVICE = pick_device()
# The labs' models are small: on the CPU, one thread avoids the overhead (and, on a machine running
# several notebooks, the contention) of many. On a GPU the models and batches go to DEVICE.
torch.set_num_threads(int(os.environ.get("LABS_THREADS", "1")))
seed_everything(0)
print(f"{lab_id}: running on {{'Colab' if IN_COLAB else 'a local machine'}}, "
      f"device = {{DEVICE.type}}, fast mode = {{FAST}}")
'''


def setup_source(lab: Lab) -> str:
    return _TEMPLATE.format(extra_packages=dict(lab.extra_packages), lab_id=lab.lab_id)
