"""The judge: every graded verdict, decided outside the student's process.

- runner.py: `Judge` runs a lab's test cells (from its source notebook) here, against one
  submission, and returns typed `Verdict`s; `needs_review` reads the submission first.
- reader.py: the one reader of student code (the allowlist, and forbidden calls).
- signatures.py: the defaults and the parameter order an answer changed in its exercise's
  signature (read as text, like reader.py; said first in that exercise's failed tests).
- wire.py: calls to the student's code as data (the kernel's `Agent`, `student`, `lab`).
- raw_errors.py: what a raw error from inside an answer shows of its cause (a clause added to it).
- differences.py: what a wrong tensor shows of how it differs from the expected one
  (`labwire.describe_difference`, for the tests' messages).
- kernel_channel.py: the wire's bytes through a real kernel's stdin.
- embed.py: what of the above travels into a kernel as text (the handle cell, the agent).
- harness.py: the same judge over an in-process namespace, for the grader fixtures.
"""

from .embed import HANDLE_GRADE_ID, RULES_SOURCE, WIRE_SOURCE, agent_bootstrap, handle_cell_source
from .kernel_channel import JudgeTimeout, KernelChannel
from .runner import (JUDGE_TAG, NEEDS_REVIEW, GraderSetupError, Judge, Verdict, is_lab_cell, judge_cells,
                     lab_cell_ids, library_has, needs_review, notebook_names_read, uses_judge)

__all__ = ["HANDLE_GRADE_ID", "JUDGE_TAG", "NEEDS_REVIEW", "RULES_SOURCE", "WIRE_SOURCE", "GraderSetupError", "Judge",
           "JudgeTimeout", "KernelChannel", "Verdict", "agent_bootstrap", "handle_cell_source", "is_lab_cell",
           "judge_cells", "lab_cell_ids", "library_has", "needs_review", "notebook_names_read",
           "uses_judge"]
