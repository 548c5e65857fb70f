"""Moved to labtools/sandbox/cgroups.py. This name keeps working for one release; it is the
same module object, so a setting changed through either name is changed for both."""

import sys
import warnings

from .sandbox import cgroups as _moved

warnings.warn("labtools.cgroups is now labtools.sandbox.cgroups", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
