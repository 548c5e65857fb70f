"""Moved to labtools/judge/harness.py. This name keeps working for one release (an instructor's
script or a running worker may still import it); it is the same module object, so a
setting changed through either name is changed for both."""

import sys
import warnings

from .judge import harness as _moved

warnings.warn("labtools.harness is now labtools.judge.harness", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
