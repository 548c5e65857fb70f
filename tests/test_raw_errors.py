"""The sentences the judge adds to raw errors from inside an answer (labtools/judge/raw_errors.py).

The errors are real: raised by torch and Python inside code compiled as a notebook cell, sent over
the wire as a kernel's agent sends them, and described by the runner as a student reads them."""

from __future__ import annotations

import dataclasses
import linecache
import itertools

import pytest
import torch

from labtools.judge import raw_errors, runner, wire

_cells = itertools.count()


def _message(source: str, call: str, *args, wrap: str = "") -> str:
    """What the runner says when `call` (defined by `source`, compiled as a notebook cell) raises;
    `wrap`: the text of a test helper's AssertionError raised from it (else the error itself)."""
    filename = f"/tmp/ipykernel_4242/{next(_cells)}.py"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    namespace = {"torch": torch, "nn": torch.nn}
    exec(compile(source, filename, "exec"), namespace)
    student = wire.Student(wire.LocalChannel(wire.Agent(namespace)))
    with pytest.raises(wire.StudentRaised) as info:
        getattr(student, call)(*args)
    if not wrap:
        return runner._describe_failure(info.value)[1]
    try:
        raise AssertionError(wrap) from info.value
    except AssertionError as wrapped:
        return runner._describe_failure(wrapped)[1]


def test_an_answers_own_raise_on_an_allowed_call_is_named():
    source = ("def heads(d_model, n_heads):\n"
              "    if n_heads % d_model:\n"
              "        raise ValueError(f'{d_model} is not divisible by {n_heads}')\n"
              "    return d_model // n_heads\n")
    message = _message(source, "heads", 16, 4, wrap="heads(16, 4) raised ValueError")
    assert "`raise` of your own code" in message
    assert message.index("raised at the notebook line") < message.index("`raise` of your own code")
    # a test that expects an error of another type: the raise is wanted, only its type is not
    message = _message(source, "heads", 16, 4, wrap="heads(16, 4) must raise TypeError, got ValueError")
    assert "`raise` of your own code" not in message


def test_an_embedding_index_outside_the_table_is_named():
    source = ("table = nn.Embedding(4, 2)\n"
              "def lookup(ids):\n"
              "    return table(ids + 1)\n")
    message = _message(source, "lookup", torch.tensor([0, 3]))
    assert "index out of range in self" in message and "outside 0 .. num_embeddings - 1" in message


def test_a_float_size_is_named():
    source = ("def split(x, n):\n"
              "    return x.view(x.shape[0], n, x.shape[1] / n)\n")
    message = _message(source, "split", torch.zeros(2, 4), 2)
    assert "a size or an index is a float" in message


def test_a_matmul_of_the_wrong_width_and_mixed_dtypes_are_named():
    layer = "lin = nn.Linear(4, 3)\ndef f(x):\n    return lin(x)\n"
    assert "in_features" in _message(layer, "f", torch.zeros(2, 5))
    assert "two dtypes" in _message(layer, "f", torch.zeros(2, 4, dtype=torch.float64))


@pytest.mark.parametrize("source, args, name", [
    ("def f(x, generator=None):\n    return torch.randn(3, generator=generator, device=generator.device) + x\n",
     (torch.zeros(3),), "generator"),
    ("def f(w, tokens=None):\n    labels = range(len(tokens))\n    return w\n", (torch.zeros(3),), "tokens"),
    ("def f(x, mask=None):\n    return x.masked_fill(~mask[None], 0.0)\n", (torch.zeros(3),), "mask"),
    ("def helper(x):\n    x.add_(1)\n\ndef f(x):\n    y = helper(x)\n    return y.sum()\n", (torch.zeros(3),), None),
])
def test_a_none_that_an_answer_uses_is_named_when_the_line_shows_it(source, args, name):
    message = _message(source, "f", *args)
    if name is None:  # `y.sum()`: the line names y, the error names the attribute: y it is
        assert "`y` is None on that line" in message and "returns nothing" in message, message
    else:
        assert f"`{name}` is None on that line" in message and f"if {name} is not None" in message, message


def test_a_tensor_used_as_a_condition_is_named():
    source = "def f(x, mask=None):\n    if mask:\n        x = x.masked_fill(~mask, 0.0)\n    return x\n"
    message = _message(source, "f", torch.zeros(2, 2), torch.ones(2, 2, dtype=torch.bool))
    assert "used as a condition" in message and "is not None" in message, message
    # a one-element mask is a fine condition: the error that follows is another one, and gets no such sentence
    one = "def f(x, mask=None):\n    if mask:\n        x = x + 1\n    return x.view(5)\n"
    assert "used as a condition" not in _message(one, "f", torch.zeros(2, 2), torch.ones(1, dtype=torch.bool))


@pytest.mark.parametrize("line", ["causal = torch.ones(3, 3).tril()\n    return causal & m",
                                  "return ~torch.ones(3, 3).tril() | m"])
def test_a_float_mask_combined_with_a_bitwise_operator_is_named(line):
    message = _message(f"def f(m):\n    {line}\n", "f", torch.ones(3, 3, dtype=torch.bool))
    assert "work on bool (or integer) tensors, not on floats" in message, message
    assert "not on floats" not in _message("def f(m):\n    return m & torch.ones(2)\n", "f", torch.ones(3, dtype=torch.bool))


def test_a_parameter_replaced_by_a_tensor_and_a_heatmap_of_the_wrong_rank_are_named():
    source = "lin = nn.Linear(2, 2)\ndef load(w):\n    lin.weight = w.clone()\n    return lin\n"
    message = _message(source, "load", torch.ones(2, 2))
    assert "only be replaced by an nn.Parameter" in message and "copy_" in message, message
    plot = ("import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
            "def draw(w):\n    fig, ax = plt.subplots()\n    ax.imshow(w[0].numpy())\n    return fig\n")
    assert "imshow draws a matrix" in _message(plot, "draw", torch.ones(3, 4))
    assert "imshow draws a matrix" not in _message(plot, "draw", ["ab"])  # no array at all: another error


@pytest.mark.parametrize("source, args", [
    ("def f(x):\n    return {'a': 1}[x]\n", ("b",)),                                          # KeyError
    ("def f(x):\n    return float(x)\n", ("nan-ish",)),                                       # ValueError
    ("def f(a, b=None):\n    return a.view(b)\n", (torch.zeros(2), None)),                     # None, no name shown
])
def test_other_errors_get_no_sentence(source, args):
    bare = _message(source, "f", *args)
    assert bare.endswith("`)"), bare          # ends with the notebook line: nothing appended


def test_a_rule_never_breaks_a_message_and_never_repeats_what_it_says():
    error = raw_errors.RawError("IndexError", "index out of range in self", "x = t(i)", "")
    sentence = raw_errors.explain(error)
    assert sentence and raw_errors.explain(raw_errors.RawError(
        "IndexError", "index out of range in self", "x = t(i)", f"already: {sentence}")) == ""
    assert raw_errors.explain(raw_errors.RawError(None, None, None, None)) == ""    # odd data: nothing
    # a test that already said it in its own words gets no second sentence
    float_size = raw_errors.RawError("TypeError", "type must be tuple of ints,but got float", "x.view(a / b)", "")
    assert raw_errors.explain(float_size)
    assert raw_errors.explain(dataclasses.replace(float_size, message="use d_model // n_heads")) == ""


def test_a_diagnostic_that_crashes_never_hides_the_failure():
    """A test helper whose diagnosis of a failure raises (a shape it did not expect) must leave the
    student the failure it was explaining, not its own traceback."""
    source = "def f(x):\n    return x.view(3, 3)\n"
    filename = f"/tmp/ipykernel_4242/{next(_cells)}.py"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    namespace = {"torch": torch}
    exec(compile(source, filename, "exec"), namespace)
    student = wire.Student(wire.LocalChannel(wire.Agent(namespace)))
    try:
        try:
            student.f(torch.zeros(4))
        except Exception:
            torch.zeros(4, 6).expand(6, 6)          # the diagnosis crashes
    except RuntimeError as crash:
        kind, message = runner._describe_failure(crash)
    assert kind == "RuntimeError" and message.startswith("your code raised RuntimeError: shape '[3, 3]'"), message
    assert "expand" not in message and "(raised at the notebook line `return x.view(3, 3)`): on that line x is (4,)" in message
    try:
        try:
            raise AssertionError("the weights differ")
        except AssertionError:
            {}["diagnosis"]
    except KeyError as crash:
        assert runner._describe_failure(crash) == ("AssertionError", "the weights differ")
    # a crash of a test's own code with no failure behind it is still reported as it is
    try:
        {}["x"]
    except KeyError as crash:
        assert runner._describe_failure(crash)[0] == "KeyError"


def test_a_shape_error_says_what_the_lines_names_held():
    """For an error about sizes, the message quotes the shapes and numbers of the names on the line
    (read as data from the answer's frame), and says why they clash when the shapes show it."""
    # a per-row scale that broadcasts along the columns: the vector meets the last axis
    source = "def q(w):\n    scale = w.abs().amax(dim=1) / 127\n    return (w / scale).round()\n"
    message = _message(source, "q", torch.randn(4, 6))
    assert "on that line w is (4, 6), scale is (4,)" in message, message
    assert "scale (4,) meets the last dimension of w (4, 6)" in message and "shape (4, 1)" in message, message
    # a module's buffer is read from the module's storage; the slice's shape is not computed
    module = ("class PE(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
              "        self.register_buffer('pe', torch.zeros(16, 50))\n"
              "    @property\n    def side(self):\n        raise RuntimeError('a property ran')\n"
              "    def forward(self, x):\n        L = x.shape[1]\n        return x + self.pe[:L] + self.side\n"
              "pe = PE()\ndef f(x):\n    return pe(x)\n")
    message = _message(module, "f", torch.zeros(3, 10, 16))
    assert "on that line x is (3, 10, 16), self.pe is (16, 50), L = 10" in message, message
    assert "a property ran" not in message and "broadcasting" not in message
    # loop indices in the wrong slots: the index that overran, where it stands, and the size there
    loops = ("def c(x):\n    B, H, L, d = x.shape\n    out = torch.zeros(B, L, H * d)\n    for b in range(B):\n"
             "        for h in range(H):\n            out[b, :, h * d:(h + 1) * d] = x[h, b]\n    return out\n")
    message = _message(loops, "c", torch.zeros(1, 2, 3, 2))
    assert "in `x[h, b]`, h = 1 is the index of dimension 0 of x (1, 2, 3, 2), whose size is 1" in message, message
    plain = _message("def f(x):\n    return x[5]\n", "f", torch.zeros(2))
    assert plain.endswith("on that line x is (2,)"), plain      # a literal index: the shape, no guess


def test_the_names_of_a_line_are_read_without_running_code():
    assert wire._names_on("out[b, :, h] = x.view(B, -1).sum(dim=1) if mask else 'a b'  # c d") == [
        "out", "b", "h", "x.view", "B", "dim", "mask"]
    assert wire._names_on("y = self.pe[:L] + (") == ["y", "self.pe", "L"]     # an unfinished line: the names so far


def test_a_bool_mask_index_and_a_shape_unpacked_into_the_wrong_count_are_named():
    fill = "def f(s, m):\n    s = s.clone()\n    s[m == 0] = -1e9\n    return s\n"
    message = _message(fill, "f", torch.zeros(3, 4, 6), torch.ones(4, 6))
    assert "does not broadcast; x.masked_fill(mask, value)" in message and "s is (3, 4, 6), m is (4, 6)" in message
    unpack = "def f(x):\n    h = x.unsqueeze(1).unsqueeze(2)\n    B, _, L, _ = h.shape\n    return L\n"
    message = _message(unpack, "f", torch.zeros(2, 1, 1, 7))
    assert "h has 6 dimensions, (2, 1, 1, 1, 1, 7), and the line unpacks 4" in message, message
    assert "unpacks" not in _message("def f(x):\n    a, b = 1, 2, 3\n    return a\n", "f", torch.zeros(2))


def test_an_empty_piece_in_a_stack_and_nan_probabilities_are_named():
    source = ("def split(x, n):\n    d = x.shape[-1] // n\n"
              "    pieces = [x[..., h * d:(h + 1) * d] for h in range(1, n + 1)]\n    return torch.stack(pieces, dim=1)\n")
    message = _message(source, "split", torch.zeros(2, 3, 4), 2)
    assert "one of the pieces is empty" in message, message
    ok = ("def split(x, n):\n    return torch.stack([x[..., :2], x[..., :3]], dim=1)\n")
    assert "one of the pieces is empty" not in _message(ok, "split", torch.zeros(2, 3, 4), 2)   # unequal, none empty
    draw = ("def draw(logits):\n    p = torch.softmax(logits.masked_fill(logits < 100, float('-inf')), -1)\n"
            "    return torch.multinomial(p, 1)\n")
    assert "every logit of a row is -inf after filtering" in _message(draw, "draw", torch.zeros(2, 5))
