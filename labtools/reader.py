"""Moved to labtools/judge/reader.py. This name keeps working for one release (an instructor's
script or a running worker may still import it); it is the same module object, so a
setting changed through either name is changed for both."""

import sys
import warnings

from .judge import reader as _moved

warnings.warn("labtools.reader is now labtools.judge.reader", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
