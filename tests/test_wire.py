"""The wire between the judge and the student's kernel (labtools/judge/wire.py) is grader code:
what crosses must be data, decoding must never run the sender's code, and every reply
the student's side can forge must either decode to plain data or fail as a WireError."""

from __future__ import annotations

import json
import pickle
import struct

import numpy as np
import pytest
import torch

from labtools.judge import wire


def _student(namespace):
    return wire.Student(wire.LocalChannel(wire.Agent(namespace)))


def _identity_student():
    return _student({"echo": lambda *a, **k: (a, k) if k else (a[0] if len(a) == 1 else a)})


@pytest.mark.parametrize("value", [
    0, -7, 2 ** 62, 1.5, float("inf"), float("-inf"), True, None, "héllo", "",
    torch.float16, torch.device("cpu"), torch.Size([2, 3]), slice(1, None, 2), Ellipsis,
    (1, (2, [3, {"a": 4}])), [], {}, {1: "one", "two": 2.0},
])
def test_plain_values_round_trip(value):
    got = _identity_student().echo(value)
    assert got == value and type(got) is type(value)


def test_nan_round_trips_as_a_float():
    got = _identity_student().echo(float("nan"))
    assert isinstance(got, float) and got != got


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64,
                                   torch.int8, torch.uint8, torch.bool, torch.complex64])
def test_tensors_round_trip_with_dtype_shape_and_values(dtype):
    x = (torch.randn(3, 4, 5, generator=torch.Generator().manual_seed(0)) * 10).to(dtype)
    got = _identity_student().echo(x)
    assert got.dtype == dtype and got.shape == x.shape and torch.equal(got, x)
    assert got.data_ptr() != x.data_ptr(), "a reply must be a copy, never the sender's storage"


def test_non_contiguous_tensors_and_grad_flags_cross():
    x = torch.arange(24.0).view(2, 3, 4).transpose(0, 2)
    got = _identity_student().echo(x)
    assert torch.equal(got, x) and got.stride() == x.stride() and not got.is_contiguous()
    y = torch.arange(120.0).view(2, 3, 4, 5).permute(2, 0, 3, 1)
    assert _identity_student().echo(y).stride() == y.stride()
    sliced = torch.arange(24.0).view(4, 6)[:, ::2]  # not a permutation: crosses as a contiguous copy
    assert torch.equal(_identity_student().echo(sliced), sliced)
    p = torch.nn.Parameter(torch.ones(2))
    got = _identity_student().echo(p)
    assert isinstance(got, torch.nn.Parameter) and got.requires_grad


def test_numpy_arrays_and_scalars_cross_as_numpy():
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    got = _identity_student().echo(a)
    assert isinstance(got, np.ndarray) and got.dtype == np.int32 and (got == a).all()
    assert _identity_student().echo(np.float32(2.5)) == 2.5


def test_generator_state_crosses():
    gen = torch.Generator().manual_seed(3)
    copy = _identity_student().echo(gen)
    assert torch.equal(torch.rand(4, generator=copy), torch.rand(4, generator=gen))


def test_objects_that_are_not_data_stay_behind_refs():
    layer = torch.nn.Linear(3, 2)
    student = _student({"layer": layer})
    ref = student.layer
    assert isinstance(ref, wire.Ref) and ref.type_name == "Linear"
    assert wire.is_instance(ref, "torch.nn.Module") and wire.is_instance(ref, torch.nn.Linear)
    assert not wire.is_instance(ref, "torch.nn.Embedding")
    assert ref.in_features == 3
    x = torch.randn(5, 3)
    assert torch.allclose(ref(x), layer(x))
    assert torch.equal(ref.weight, layer.weight) and ref.weight.data_ptr() != layer.weight.data_ptr()
    with pytest.raises(AttributeError):
        ref.weight = torch.zeros(2, 3)  # writes go through set_tensor, by name


class _CountingChannel(wire.LocalChannel):
    def __init__(self, agent):
        super().__init__(agent)
        self.ops = []

    def request(self, op, *args):
        self.ops.append(op)
        return super().request(op, *args)


def test_is_instance_of_a_plain_class_needs_no_round_trip_and_an_abc_asks_the_student():
    import collections.abc

    class Shape(torch.nn.Module):  # the student's own class
        pass

    class Table:  # a mapping only by registration, as ABCs allow
        pass

    collections.abc.Mapping.register(Table)

    channel = _CountingChannel(wire.Agent({"layer": torch.nn.Linear(3, 2), "shape": Shape(),
                                           "state": Table(), "Shape": Shape}))
    student = wire.Student(channel)
    layer, shape, state = student.layer, student.shape, student.state
    channel.ops.clear()
    assert wire.is_instance(layer, "torch.nn.Linear") and wire.is_instance(layer, torch.nn.Module)
    assert not wire.is_instance(layer, "torch.nn.Embedding")
    assert wire.is_instance(shape, "torch.nn.Module")
    assert channel.ops == [], channel.ops
    assert wire.is_instance(shape, student.Shape) and not wire.is_instance(layer, student.Shape)
    assert wire.is_instance(state, "collections.abc.Mapping")  # an ABC: registered classes count
    assert "isinstance" in channel.ops


def test_set_tensor_writes_into_the_student_module_and_checks_the_shape():
    layer = torch.nn.Linear(3, 2)
    ref = _student({"layer": layer}).layer
    wire.set_tensor(ref, "weight", torch.full((2, 3), 0.5))
    assert torch.equal(layer.weight.detach(), torch.full((2, 3), 0.5)) and layer.weight.requires_grad
    with pytest.raises(ValueError, match="shape"):
        wire.set_tensor(ref, "bias", torch.zeros(3))


def test_student_errors_come_back_typed_with_their_message():
    def broken(x):
        raise ValueError("bad size")

    class Custom(KeyError):
        pass

    def custom():
        raise Custom("mine")

    student = _student({"broken": broken, "custom": custom, "todo": lambda: (_ for _ in ()).throw(NotImplementedError())})
    with pytest.raises(ValueError, match="bad size") as info:
        student.broken(1)
    assert isinstance(info.value, wire.StudentRaised) and info.value.student_type == "ValueError"
    with pytest.raises(KeyError) as info:
        student.custom()
    assert info.value.student_type == "Custom"
    with pytest.raises(NotImplementedError):
        student.todo()
    with pytest.raises(NameError, match="run the cell"):
        student.missing


def test_an_input_changed_in_place_is_reported():
    student = _student({"scale": lambda x: x.mul_(2), "fine": lambda x: x * 2})
    x = torch.ones(3)
    assert torch.equal(student.fine(x), torch.full((3,), 2.0))
    with pytest.raises(wire.InputMutated, match=r"argument 1 \(x\)"):
        student.scale(x)
    assert torch.equal(x, torch.ones(3)), "the caller's tensor is never the one the student changed"


class _Silent(wire.Agent):
    """An agent that says nothing about the arguments after a call, as one a submission had
    tampered with might."""

    def handle(self, message):
        tree, tensors = wire.unpack(wire.Agent.handle(self, message))
        tree.pop("after", None)
        return wire.pack(tree, tensors)


def test_the_caller_decides_whether_an_input_changed_and_a_silent_reply_fails_closed():
    scale = lambda x: x.mul_(2)  # noqa: E731
    many = wire.Student(wire.LocalChannel(wire.Agent({"scale": scale, "keep": lambda x: x + 1})))
    calls = [((torch.ones(2),), {}), ((torch.zeros(2),), {}), ((torch.ones(3),), {})]
    assert [t.tolist() for t in wire.call_many(many.keep, calls)] == [[2.0, 2.0], [1.0, 1.0], [2.0, 2.0, 2.0]]
    # only the call that changed a non-zero tensor changed it: the first one is reported
    with pytest.raises(wire.InputMutated, match=r"changed its argument 1 \(x\)"):
        wire.call_many(many.scale, [((torch.zeros(2),), {}), ((torch.ones(2),), {})])
    # an OrderedDict arrives as a dict: the same data, not a change
    from collections import OrderedDict
    batch = OrderedDict(a=torch.ones(1))
    assert _student({"read": lambda b: float(b["a"].sum())}).read(batch) == 1.0
    silent = wire.Student(wire.LocalChannel(_Silent({"keep": lambda x: x + 1})))
    with pytest.raises(wire.WireError, match="after the call"):
        silent.keep(torch.ones(2))


def test_backward_runs_where_the_module_lives_and_returns_its_gradients():
    emb = torch.nn.Embedding(6, 2)

    class Pick(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.table = emb

        def forward(self, ids):
            return self.table(ids)

    module = Pick()
    ref = _student({"m": module}).m
    out, grads = wire.backward(ref, (torch.tensor([0, 2, 2]),), wrt=["table.weight"])
    assert out.shape == (3, 2)
    g = grads["table.weight"]
    assert torch.equal(g[:, 0], torch.tensor([1.0, 0, 2, 0, 0, 0]))
    _, again = wire.backward(ref, (torch.tensor([5]),), grad_output=torch.tensor([[3.0, 3.0]]), wrt=["table.weight"])
    assert torch.equal(again["table.weight"][:, 1], torch.tensor([0, 0, 0, 0, 0, 3.0])), \
        "gradients from an earlier call must not accumulate into the next"

    detached = _student({"m": lambda ids: emb(ids).detach().requires_grad_()}).m
    with pytest.raises(Exception):
        wire.backward(detached, (torch.tensor([1]),), wrt=["weight"])  # a lambda has no tensor "weight"


def test_manual_seed_seeds_the_student_side():
    student = _student({"draw": lambda: torch.rand(3)})
    wire.manual_seed(student, 11)
    first = student.draw()
    wire.manual_seed(student, 11)
    assert torch.equal(student.draw(), first)


def test_figures_cross_as_what_they_show():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def plot():
        fig, ax = plt.subplots()
        ax.imshow(np.eye(3))
        ax.set_title("weights")
        return fig

    got = _student({"plot": plot}).plot()
    assert isinstance(got, wire.Figure) and got.axes[0].title == "weights"
    assert (got.axes[0].heatmaps[0] == np.eye(3)).all()
    plt.close("all")


# -- what a forged reply can and cannot do ---------------------------------------------------
class _ForgedChannel(wire.Channel):
    def __init__(self, reply: bytes):
        self.reply = reply

    def transfer(self, message):
        return self.reply


def _forged(tree, tensors=None):
    return wire.pack(tree, tensors or {})


@pytest.mark.parametrize("reply", [
    b"", b"short", struct.pack("<Q", 10 ** 9) + b"{}",
    b"\x80\x04" + b"x" * 20,  # a pickle's opening bytes
    struct.pack("<Q", 2) + b"[]",
    _forged({"value": {"t": "pickle", "v": "gASV"}}),
    _forged({"value": {"t": "tensor", "k": "missing"}}),
    _forged({"value": {"t": "dtype", "v": "object"}}),
    _forged({"value": {"t": "float", "v": "1e308"}}),
    _forged({"value": [1, 2]}),
    _forged({"value": {"t": "ref"}}),
    _forged({"value": {"t": "tensor", "k": "a", "perm": [0, 0]}}, {"a": torch.zeros(2, 3)}),
    _forged({"value": {"t": "tensor", "k": "a", "perm": "10"}}, {"a": torch.zeros(2, 3)}),
])
def test_malformed_replies_are_wire_errors(reply):
    with pytest.raises(wire.WireError):
        wire.Student(_ForgedChannel(reply)).anything


def test_deeply_nested_replies_are_refused():
    tree = None
    for _ in range(200):
        tree = {"t": "list", "v": [tree]}
    with pytest.raises(wire.WireError, match="deeply"):
        wire.Student(_ForgedChannel(_forged({"value": tree}))).anything


def test_a_reply_cannot_smuggle_a_pickle_in_the_tensor_section():
    head = json.dumps({"value": {"t": "tensor", "k": "t0"}}).encode()
    payload = struct.pack("<Q", len(head)) + head + pickle.dumps(torch.ones(2))
    with pytest.raises(wire.WireError, match="malformed"):
        wire.Student(_ForgedChannel(payload)).anything


def test_oversized_replies_are_refused_before_decoding(monkeypatch):
    monkeypatch.setattr(wire, "MAX_REPLY_BYTES", 1000)
    with pytest.raises(wire.WireError, match="larger than the limit"):
        wire.unpack(b"\0" * 1001)


def test_the_judge_side_never_sends_its_own_objects():
    student = _identity_student()
    with pytest.raises(wire.WireError, match="cannot send"):
        student.echo(object())


def test_an_endless_generator_is_cut_off():
    def forever():
        while True:
            yield 1

    with pytest.raises(wire.WireError, match="too many"):
        _student({"stream": forever}).stream()


def test_a_state_dict_crosses_as_a_dict_and_loads_back():
    source, target = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    student = _student({"source": source, "target": target})
    saved = student.source.state_dict()          # an OrderedDict on the student's side
    assert type(saved) is dict and set(saved) == {"weight", "bias"}
    assert torch.equal(saved["weight"], source.weight.detach())
    student.target.load_state_dict(saved)
    assert torch.equal(target.weight.detach(), source.weight.detach())


def test_a_numpy_bool_stays_a_numpy_bool():
    got = _identity_student().echo(np.bool_(True))
    assert type(got) is np.bool_ and bool(got) is True, "a test of 'returns a Python bool' must see what came back"
    assert _identity_student().echo(True) is True


def test_call_method_is_one_round_trip_with_the_same_contract():
    class Doubler:
        def __init__(self):
            self.calls = 0

        def apply(self, x, *, times=2):
            self.calls += 1
            return x * times

        def scale_(self, x):
            return x.mul_(3)

    agent = wire.Agent({"d": Doubler()})
    channel = wire.LocalChannel(agent)
    requests = []
    original = channel.request
    channel.request = lambda *a: requests.append(a[0]) or original(*a)
    d = wire.Student(channel).d
    requests.clear()
    got = wire.call_method(d, "apply", torch.arange(3.0), times=5)
    assert torch.equal(got, torch.tensor([0.0, 5.0, 10.0])) and requests == ["call_method"]
    assert agent.namespace["d"].calls == 1
    x = torch.ones(2)
    with pytest.raises(wire.InputMutated, match="scale_ changed its argument 1"):
        wire.call_method(d, "scale_", x)
    assert torch.equal(x, torch.ones(2))
    with pytest.raises(AttributeError, match="nothing"):
        wire.call_method(d, "nothing")


def test_lists_and_dicts_changed_in_place_are_reported_and_added_keys_are_not():
    def prefix_in_place(batch):
        batch["text"] = ["note: " + t for t in batch["text"]]
        return len(batch["text"])

    def add_encoding(batch):  # a common Hugging Face style: the encoding added to the batch
        batch["lengths"] = [len(t) for t in batch["text"]]
        return batch

    student = _student({
        "prefix_in_place": prefix_in_place, "add_encoding": add_encoding,
        "append": lambda items: items.append(0) or len(items),
        "sort": lambda items: items.sort() or items[0],
        "pop_key": lambda batch: batch.pop("summary"),
        "nested": lambda rows: rows[1].mul_(0).sum(),
        "reads": lambda batch, rows: len(batch["text"]) + len(rows),
        "nan_tensor": lambda x: x.clone(),
        "model": lambda m: m.weight.data.zero_() is not None, "linear": torch.nn.Linear(2, 2),
    })
    batch = {"text": ["a cat", "a dog"], "summary": ["cat", "dog"]}
    for name, args in [("prefix_in_place", (batch,)), ("append", ([3, 1, 2],)), ("sort", ([3, 1, 2],)),
                       ("pop_key", (batch,)), ("nested", ([torch.ones(2), torch.ones(2)],))]:
        with pytest.raises(wire.InputMutated, match="argument 1"):
            getattr(student, name)(*args)
    assert batch == {"text": ["a cat", "a dog"], "summary": ["cat", "dog"]}, "the caller's batch is a copy"
    assert student.add_encoding(batch)["lengths"] == [5, 5]
    assert student.reads(batch, (1, [2.5, "x"], None)) == 5
    got = student.nan_tensor(torch.tensor([1.0, float("nan")]))
    assert torch.isnan(got[1])
    # a module is the student's own object, not data the call was given to read
    assert student.model(student.linear) is True


LAB_TEXT = ("import torch\n\n\nclass ScriptedLM(torch.nn.Module):\n    def forward(self, ids):\n"
            "        return torch.nn.functional.one_hot(ids % 5, 5).float()\n\n\n"
            "torch.manual_seed(0)  # the lab's cells seed; the student's random state must not move\n"
            "print('set up')\n")


def test_lab_helpers_are_built_from_the_judges_text_never_the_notebooks():
    class Rebound(torch.nn.Module):  # what a submission could have bound to the lab's name
        def forward(self, ids):
            return torch.zeros(ids.shape + (5,))

    notebook = {"ScriptedLM": Rebound, "generate": lambda model, ids: model(ids).argmax(-1)}
    agent = wire.Agent(notebook, lab={})  # as the grader installs it in a kernel
    channel = wire.LocalChannel(agent)
    student, lab = wire.Student(channel), wire.Lab(channel, LAB_TEXT)
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    model = lab.ScriptedLM()
    assert wire.type_name(model) == "ScriptedLM" and not wire.is_instance(model, student.ScriptedLM)
    assert torch.equal(student.generate(model, torch.tensor([[7, 3]])), torch.tensor([[2, 3]]))
    assert torch.equal(torch.rand(3), expected), "building the lab's helpers moved the random state"
    assert agent.lab["ScriptedLM"] is not Rebound and "Rebound" not in repr(agent.lab)


def test_a_grading_agent_without_the_labs_text_refuses_rather_than_read_the_notebook():
    channel = wire.LocalChannel(wire.Agent({"ScriptedLM": object}, lab={}))
    with pytest.raises(wire.WireError, match="not defined"):
        wire.Lab(channel).ScriptedLM
    with pytest.raises(NameError, match="no helper 'Missing'"):
        wire.Lab(channel, LAB_TEXT).Missing


def test_in_a_notebook_the_labs_helpers_are_the_notebooks_own():
    channel = wire.LocalChannel(wire.Agent({"ScriptedLM": dict}))
    assert wire.Lab(channel).ScriptedLM is not None and channel.request("lab_get", "ScriptedLM") is not None


def test_a_lab_text_that_fails_is_the_graders_error_and_is_tried_again():
    channel = wire.LocalChannel(wire.Agent({}, lab={}))
    with pytest.raises(wire.LabSetupError, match="ZeroDivisionError"):
        wire.Lab(channel, "x = 1 / 0").x
    assert not channel.lab_defined


def test_a_student_error_says_which_notebook_line_raised():
    """The agent sends the line of the deepest notebook cell on the traceback (library frames below
    it skipped); the judge keeps it as a hint, cleaned, and the runner ends the message with it."""
    import linecache

    from labtools.judge import runner

    filename = "/tmp/ipykernel_4242/123456.py"      # where ipykernel compiles a cell
    source = "def joined(a, b):\n    return torch.cat([a, b.unsqueeze(0)])\n"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    namespace = {"torch": torch}
    exec(compile(source, filename, "exec"), namespace)
    student = _student(namespace)
    with pytest.raises(RuntimeError) as info:
        student.joined(torch.zeros(2, 3), torch.zeros(2))
    assert info.value.notebook_line == "return torch.cat([a, b.unsqueeze(0)])"   # torch's own frames skipped
    _, message = runner._describe_failure(info.value)
    assert message.endswith("(raised at the notebook line `return torch.cat([a, b.unsqueeze(0)])`): "
                            "on that line a is (2, 3), b is (2,)"), message
    try:                                              # a test helper's AssertionError raised from it
        raise AssertionError("joined(...) raised RuntimeError") from info.value
    except AssertionError as wrapped:
        assert "`return torch.cat([a, b.unsqueeze(0)])`)" in runner._describe_failure(wrapped)[1]
    # code that is no notebook cell's (a library, the lab's helpers) gives no line
    with pytest.raises(ValueError) as info:
        _student({"f": lambda: int("x")}).f()
    assert info.value.notebook_line == "" and "notebook line" not in runner._describe_failure(info.value)[1]


@pytest.mark.parametrize("forged, kept", [
    ("x = 1\n<script>alert(1)</script>", "x = 1 <script>alert(1)</script>"),
    (["not", "text"], ""), (12, ""), ("y" * 5000, "y" * wire.MAX_LINE_CHARS),
])
def test_a_forged_line_is_only_short_text(forged, kept):
    """The line comes from the student's side: whatever it sends, the judge keeps one short line of
    printable text (the report escapes it like every message)."""
    assert wire._clean_line(forged) == kept


@pytest.mark.parametrize("forged, kept", [
    ([["x", "tensor", [2, 3]], ["L", "number", 10], ["xs", "sequence", 4]],
     (("x", "tensor", (2, 3)), ("L", "number", 10), ("xs", "sequence", 4))),
    ([["<b>x</b>", "tensor", [2]], ["x", "code", "print(1)"], ["x", "tensor", [-1]], ["x", "tensor", ["2"]],
      ["x", "number", float("nan")], ["x", "sequence", 2.5], "x", ["x", "tensor"]], ()),
    ("not a list", ()), ([["n", "number", 1]] * 50, (("n", "number", 1),) * wire.MAX_LINE_VALUES),
])
def test_forged_line_values_are_only_names_shapes_and_numbers(forged, kept):
    """What the names on a raising line held comes from the student's side: the judge keeps only
    entries that are a plain name (or attribute chain) with a shape, a finite number or a length."""
    assert wire._clean_values(forged) == kept


def test_a_numpy_integer_crosses_as_one():
    """np.prod and np.sum return NumPy integers: a test of "returns a Python int" must see that, and
    arithmetic on what came back works as on the student's side."""
    for value in (np.int64(1_050_624), np.int32(-7), np.uint8(255)):
        got = _identity_student().echo(value)
        assert type(got) is type(value) and got == value
    assert type(_identity_student().echo(7)) is int
    for forged in ({"t": "npint", "d": "object", "v": 1}, {"t": "npint", "d": "int8", "v": 300},
                   {"t": "npint", "d": "int64", "v": "1"}):
        with pytest.raises(wire.WireError):
            wire._decode(forged, {}, None)
