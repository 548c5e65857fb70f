"""Moved to labtools/judge/wire.py. This name keeps working for one release (an instructor's
script or a running worker may still import it); it is the same module object, so a
setting changed through either name is changed for both."""

import sys
import warnings

from .judge import wire as _moved

warnings.warn("labtools.wire is now labtools.judge.wire", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
