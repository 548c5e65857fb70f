"""Rules on how an answer is written ("do not call torch's softmax"), read from the notebook's
source: now asked of the one reader of student code, labtools/reader.py (kept for the
modules and notebooks that import this name)."""

from .reader import dotted as _dotted, forbidden_calls, parse as _parse  # noqa: F401
