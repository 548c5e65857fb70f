"""What a wrong tensor shows about how it differs from the expected one (labtools/judge/differences.py).

Each case builds a wrong result from a fresh expected tensor by one mistake's effect and checks
the sentence measures it; right results computed another way, and unrelated numbers, get none."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from labtools.judge.differences import describe_difference as describe
from labtools.judge.runner import _LABWIRE

AXES = ("batch", "head", "query", "key")


def _weights(seed, shape=(2, 3, 5, 5)):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen).softmax(-1)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_one_relation_on_every_entry_is_measured(seed):
    want = _weights(seed)
    d_k, said = [(16, "0.25 (= 1/4 = 1/sqrt(16))"), (64, "0.125 (= 1/8 = 1/sqrt(64))"), (8, "0.3536 (= 1/sqrt(8))")][seed]
    assert describe(want / math.sqrt(d_k), want, AXES) == f"your result is the expected one times {said}"
    assert describe(want * 3.7, want).startswith("your result is the expected one times 3.7")
    assert describe(want + 0.25, want) == "your result is the expected one plus 0.25 (= 1/4 = 1/sqrt(16)) everywhere"
    assert describe(-want, want) == "your result is the expected one with the opposite sign"
    assert describe(want.log(), want).startswith("your numbers are the log of the expected ones")
    assert describe(want.exp(), want).startswith("your numbers are the exp of the expected ones")
    assert describe(2 * want - 1, want) == "your result is 2 times the expected one plus -1"


@pytest.mark.parametrize("seed", [3, 4])
def test_axes_in_another_order_or_regrouped_are_named(seed):
    want = _weights(seed, (2, 3, 4, 5))
    assert describe(want.transpose(1, 2), want, AXES) == (
        "your result holds the right numbers with its dimensions in another order: (batch, query, head, key) where "
        "the expected order is (batch, head, query, key); move them back with .permute or .transpose")
    assert "regrouped the way a reshape or a view regroups them" in describe(want.transpose(1, 2).reshape(want.shape), want)
    assert "regrouped the way a reshape" in describe(want.transpose(1, 2).reshape(2, 4, 15), want)
    assert describe(want[None], want).startswith("your result holds the right numbers with an extra dimension of size 1")
    square = _weights(seed, (2, 4, 4))
    assert describe(square.transpose(-1, -2), square, ("batch", "query", "key")) == \
        "your result is the expected one with its last two dimensions (query, key) swapped"


@pytest.mark.parametrize("seed", [5, 6])
def test_slices_that_hold_other_slices_are_named(seed):
    want = _weights(seed, (3, 2, 6, 4))
    shifted = torch.cat([want[:, :, :1], want[:, :, :-1]], dim=2)   # position i holds position i-1
    shifted[:, :, 0] = want[:, :, 0]
    assert describe(shifted, want, AXES).startswith(
        "your result is the expected one shifted by 1 along query: your query i holds the expected query i-1")
    assert describe(want[:1].expand_as(want), want, AXES) == "every batch of your result holds the expected batch 0"
    assert describe(want.flip(2), want, AXES) == "your result is the expected one reversed along query"


@pytest.mark.parametrize("seed", [7, 8])
def test_where_the_difference_lies_is_measured(seed):
    want = _weights(seed, (2, 3, 6, 6))
    rows = want.clone()
    rows[:, :, 2:] += 0.1                                    # queries 2.. wrong, 0-1 right
    assert describe(rows, want, AXES) == ("it differs at query 2-5 and is right at query 0-1: there your result is "
                                          "the expected one plus 0.1 (= 1/10 = 1/sqrt(100))")
    heads = want.clone()
    heads[:, 1] *= 2
    assert describe(heads, want, AXES) == \
        "it differs at head 1 and is right at head 0, 2: there your result is the expected one times 2"
    noise = want.clone()
    noise[:, 1] += 0.1 * torch.rand(6, 6, generator=torch.Generator().manual_seed(seed), dtype=want.dtype)
    assert describe(noise, want, AXES) == "it differs at head 1 and is right at head 0, 2"
    future = want + 0.05 * torch.ones(6, 6).triu(1)           # the future keys leak
    assert describe(future, want, AXES) == \
        "it differs only above the diagonal of the last two dimensions (query, key)"
    causal = want.masked_fill(~torch.ones(6, 6, dtype=torch.bool).tril(), 0.0)
    causal = causal / causal.sum(-1, keepdim=True)
    unmasked = causal.clone()
    unmasked[..., ~torch.ones(6, 6, dtype=torch.bool).tril()] = 0.01
    said = describe(unmasked, causal, AXES)
    assert said.startswith("it differs exactly where the expected value is 0"), said
    nan = want.clone()
    nan[0, 0, 0, 0] = float("nan")
    assert describe(nan, want, AXES) == f"1 of {want.numel()} entries are NaN"


@pytest.mark.parametrize("seed", [9, 10, 11])
def test_right_answers_and_unrelated_numbers_get_no_sentence(seed):
    gen = torch.Generator().manual_seed(seed)
    scores = torch.randn(2, 5, 7, generator=gen)
    want = torch.softmax(scores.double(), dim=-1)
    mine = torch.exp(scores - scores.amax(-1, keepdim=True))
    assert describe(mine / mine.sum(-1, keepdim=True), want) == ""            # right, another way, float32
    assert describe(torch.rand(2, 5, 7, generator=gen), want) == ""             # nothing simple holds
    assert describe(torch.randn(2, 5, 7, generator=gen), torch.randn(2, 5, 7, generator=gen)) == ""
    assert describe(np.asarray(want) * 2, want).endswith("times 2")             # arrays and lists too
    assert describe([[1.0, 2.0]], [[2.0, 4.0]]) == "your result is the expected one times 0.5 (= 1/2 = 1/sqrt(4))"


@pytest.mark.parametrize("odd", [None, "text", {"a": 1}, [1, "x"], torch.zeros(0), object(),
                                 torch.zeros(3, dtype=torch.complex64)])
def test_odd_values_never_raise(odd):
    assert describe(odd, torch.ones(3)) == "" and describe(torch.ones(3), odd) == ""


def test_the_judge_and_the_notebook_see_the_same_describer():
    """Tests call it as labwire.describe_difference: the judge's labwire has it, and the handle cell
    every lab holds defines it from the same source."""
    from labtools.judge import embed

    assert _LABWIRE.describe_difference is describe and _LABWIRE.Student is not None
    namespace = {}
    exec(embed.handle_cell_source(), namespace)
    want = _weights(12)
    assert namespace["labwire"].describe_difference(want * 2, want) == describe(want * 2, want)


def test_a_constant_and_integer_results_are_described_as_such():
    want = _weights(13, (2, 6))
    assert describe(torch.ones(2, 6), want) == "every entry of your result is 1"
    ids = torch.tensor([[0, 5, 7, 2, 0], [0, 3, 3, 9, 1]])
    later = ids.clone()
    later[:, 3:] = torch.tensor([[4, 4], [8, 8]])
    said = describe(later, ids, ("row", "position"))
    assert said == "it differs at position 3-4 and is right at position 0-2", said   # no "expected 0" story for ids
    assert describe(ids + 1, ids) == "your result is the expected one plus 1 everywhere"
    assert "times" not in describe(ids * 2, ids)                          # a factor means nothing for token ids


def test_a_message_splices_the_clause_in_only_when_there_is_one():
    want = _weights(14, (3, 5))
    clause = describe(want * 2, want)
    assert clause and describe(want * 2, want, before=": ", after="; ") == f": {clause}; "
    # nothing to say: no separator either, so a message never ends in a dangling ": "
    assert describe(want.clone(), want, before=": ", after="; ") == ""
    assert describe(torch.randn(3, 5, generator=torch.Generator().manual_seed(3)), want, before=": ") == ""
    # a clause the message already says is left out
    assert describe(want * 2, want, before=": ", skip=(clause[:12],)) == ""
    assert describe(want * 2, want, before=": ", skip=("it differs",)) == f": {clause}"


def test_a_factor_or_an_offset_of_each_row_is_measured():
    want = _weights(15, (2, 3, 5, 6))
    factors = torch.tensor([0.5, 0.7, 1.0, 0.9, 0.25], dtype=torch.float64)
    said = describe(want * factors[:, None], want, ("batch", "head", "query", "key"))
    assert said.startswith("each query of your result is the expected one times a number of its own")
    assert "[0.5, 0.7, 1, 0.9, 0.25]" in said
    # one number per (batch, head, query) row: no single axis holds it, the rows along the last do
    rows = torch.rand(2, 3, 5, 1, generator=torch.Generator().manual_seed(4), dtype=torch.float64) + 0.5
    said = describe(want * rows, want, ("batch", "head", "query", "key"))
    assert said.startswith("each vector along the last dimension (key)") and "times" in said
    # log-softmax where the softmax belongs is no per-row offset of the weights; logits minus a row's
    # logsumexp are one of the logits
    logits = torch.randn(4, 7, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    said = describe(logits - logits.logsumexp(-1, keepdim=True), logits, ("position", "vocab"))
    assert said.startswith("each position of your result is the expected one plus a number of its own")


def test_rows_of_unrelated_numbers_have_no_factor_of_their_own():
    want = _weights(16, (4, 6))
    other = _weights(17, (4, 6))
    assert "number of its own" not in describe(other, want, ("query", "key"))
    # one factor for all is said as one factor, not per row
    assert describe(want * 3, want).startswith("your result is the expected one times 3")
    ids = torch.tensor([[1, 2, 3], [4, 6, 8]])
    assert "number of its own" not in describe(ids * torch.tensor([[1], [2]]), ids)


def test_dimensions_merged_or_split_by_a_reshape_are_named():
    want = _weights(18, (2, 4, 3, 5))
    said = describe(want.reshape(8, 3, 5), want, AXES)
    assert said.startswith("your result holds the right numbers in the right order with (batch, head) merged into "
                           "one dimension of size 8 (shape (8, 3, 5), expected (2, 4, 3, 5))"), said
    assert "key split into 2 dimensions" not in said
    x = torch.randn(2, 3, 12, generator=torch.Generator().manual_seed(6))
    assert "feature split into 2 dimensions (3, 4)" in describe(x.reshape(2, 3, 3, 4), x, ("batch", "position", "feature"))
    # the same numbers regrouped across a permute are not a merge
    assert "merged" not in describe(want.transpose(1, 2).reshape(8, 3, 5), want, AXES)


def test_slices_written_to_the_wrong_place_are_told_which_holds_which():
    want = _weights(19, (6, 8))
    got = torch.zeros_like(want)
    got[:, 1:4] = want[:, [2, 4, 6]]            # a loop writing column i where 2i belongs
    got[:, 0] = want[:, 0]
    said = describe(got, want, ("position", "dimension"))
    assert said.startswith("some of your dimensions hold other dimensions of the expected result: your dimension "
                           "1 holds its dimension 2, 2 holds 4, 3 holds 6"), said
    assert said.endswith("your dimension 4-7 hold only 0 (never written)")
    one_moved = want.clone()
    one_moved[:, 5] = want[:, 6]
    assert "hold other dimensions" not in describe(one_moved, want, ("position", "dimension"))


def test_a_wrong_shape_alone_is_described():
    from labtools.judge.differences import describe_shape

    kv = ("batch", "kv head", "position", "d_k")
    assert describe_shape((2, 5, 3, 4), (2, 3, 5, 4), kv).startswith(
        "the sizes are right but in another order: yours are (batch, position, kv head, d_k)")
    assert describe_shape((2, 5, 2, 4), (2, 2, 5, 4), kv, before=": ") == \
        ": the sizes are right but two dimensions look swapped: (kv head, position): move them back with .transpose"
    assert describe_shape((4, 5, 7), (1, 4, 5, 7), ("batch", "head", "query", "key")).startswith(
        "a dimension of size 1 missing (batch; squeeze()")
    assert describe_shape((4, 3, 2), (2, 2, 3, 2), kv) == "it has (batch, kv head) merged into one dimension of size 4"
    # nothing that the shapes do not show; and the judge's labwire has it too
    assert describe_shape((2, 3), (4, 5)) == "" and describe_shape((2, 3), (2, 3)) == "" and describe_shape(None, (1,)) == ""
    assert describe_shape((3, 2, 3, 2), (2, 3, 2, 3)) == ""      # no single swap gives it, and the sizes repeat
    assert _LABWIRE.describe_shape is describe_shape


def test_pairs_taken_apart_before_a_reshape_are_named():
    even, odd = _weights(20, (6, 4)), _weights(21, (6, 4))
    want = torch.stack([even, odd], dim=-1).reshape(6, 8)            # sin, cos, sin, cos, ...
    said = describe(torch.stack([even, odd]).reshape(6, 8), want, ("position", "dimension"))
    assert said.startswith("your result holds the right numbers, but the pairs (2i, 2i+1) along dimension are taken "
                           "apart"), said
    assert "taken apart" not in describe(want.clone().flip(0), want, ("position", "dimension"))
