"""Moved to labtools/grade/gradebook_schema.py. This name keeps working for one release (a course's
nbgrader_config.py, a script, a running worker may still import it); it is the same module
object, so a setting changed through either name is changed for both."""

import sys
import warnings

from .grade import gradebook_schema as _moved

warnings.warn("labtools.gradebook_schema is now labtools.grade.gradebook_schema", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
