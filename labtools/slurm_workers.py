"""Moved to labtools/grade/slurm_workers.py. This name keeps working for one release (a course's
nbgrader_config.py, a script, a running worker may still import it); it is the same module
object, so a setting changed through either name is changed for both."""

import sys
import warnings

from .grade import slurm_workers as _moved

warnings.warn("labtools.slurm_workers is now labtools.grade.slurm_workers", DeprecationWarning, stacklevel=2)
if __name__ == "__main__":  # python -m labtools.slurm_workers
    sys.exit(_moved.main())
sys.modules[__name__] = _moved
