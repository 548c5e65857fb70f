"""Code that steps outside the Python an answer needs, found by reading it: now the
allowlist of the one reader of student code, labtools/judge/reader.py (kept for the modules
that import this name)."""

from .judge.reader import reaches_into_runtime  # noqa: F401
