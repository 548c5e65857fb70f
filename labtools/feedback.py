"""Moved to labtools/grade/steps/feedback.py. This name keeps working for one release (a course's
nbgrader_config.py, a script, a running worker may still import it); it is the same module
object, so a setting changed through either name is changed for both."""

import sys
import warnings

from .grade.steps import feedback as _moved

warnings.warn("labtools.feedback is now labtools.grade.steps.feedback", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
