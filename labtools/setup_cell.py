"""Moved to labtools/build/setup_cell.py. This name keeps working for one release (a course's
nbgrader_config.py, a script, a running worker may still import it); it is the same module
object, so a setting changed through either name is changed for both."""

import sys
import warnings

from .build import setup_cell as _moved

warnings.warn("labtools.setup_cell is now labtools.build.setup_cell", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
