"""Moved to labtools/grade/similarity.py. This name keeps working for one release (a course's
nbgrader_config.py, a script, a running worker may still import it); it is the same module
object, so a setting changed through either name is changed for both."""

import sys
import warnings

from .grade import similarity as _moved

warnings.warn("labtools.similarity is now labtools.grade.similarity", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
