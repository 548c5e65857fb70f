"""Answers pasted from a library's source go to review (labtools/judge/copies.py); answers
written from the lab's text, in any style, do not."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from labtools.judge import copies

FIXTURES = Path(__file__).parent / "fixtures"
T5_BUCKET = "transformers.models.t5.modeling_t5.T5Attention._relative_position_bucket"


def _cheat(path: Path) -> str:
    """An attack fixture's submission, the cheat kept and the honest lines dropped."""
    text = path.read_text().split("# %% ", 1)[1].split("\n", 1)[1]
    return re.sub(r"\s*# honest:begin.*?# honest:end", "", text, flags=re.S)


def test_a_pasted_library_function_is_found_under_any_name():
    pasted = _cheat(FIXTURES / "attacks" / "lab03_positional" / "bucket_pasted_from_t5.py")
    assert "relative_position_if_large" in pasted
    found = copies.pasted([("code cell 9", pasted)], [T5_BUCKET])
    assert len(found) == 1 and found[0].startswith(f"relative_position_bucket is {T5_BUCKET} pasted")
    assert found[0].endswith("(code cell 9, line 1)")
    renamed = pasted.replace("def relative_position_bucket(", "def _buckets(")
    assert copies.pasted([("code cell 9", renamed)], [T5_BUCKET]), "the function's own name does not matter"


@pytest.mark.parametrize("answer", sorted((FIXTURES / "lab03_positional" / "relative_position_bucket").glob("*.py")),
                         ids=lambda p: p.stem)
def test_answers_written_from_the_lab_are_not_copies(answer):
    """Correct answers in other styles, and realistic mistakes, of the same algorithm."""
    assert copies.pasted([("code cell 9", answer.read_text())], [T5_BUCKET]) == []


def test_a_library_function_that_is_not_here_compares_nothing():
    pasted = _cheat(FIXTURES / "attacks" / "lab03_positional" / "bucket_pasted_from_t5.py")
    assert copies.pasted([("code cell 9", pasted)], ["transformers.no_such_module.f", "numpy.no_such_function"]) == []
