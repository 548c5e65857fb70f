"""Tooling for the Transformers-by-building course: build, check and grade the labs."""

__version__ = "0.1.0"

import os as _os
import sys as _sys

# nbgrader runs `alembic` (and Jupyter finds kernels) through PATH; make the tools of
# this interpreter's environment reachable even when the venv is not activated.
_bin = _os.path.dirname(_sys.executable)
if _bin not in _os.environ.get("PATH", "").split(_os.pathsep):
    _os.environ["PATH"] = _bin + _os.pathsep + _os.environ.get("PATH", "")

# jsonschema imports the optional `rfc3987_syntax` (pulled in by jupyter-events) when it is
# installed, and that module compiles 38 grammars at import: ~2.5 s of CPU in every process
# that imports nbformat, nbclient or nbgrader (each grading worker, each CLI run). Nothing of
# nbformat's or nbgrader's validation checks IRI syntax, so the module is left out here.
if "rfc3987_syntax" not in _sys.modules:
    _sys.modules["rfc3987_syntax"] = None
