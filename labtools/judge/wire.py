# Calls to the student's code, as data. (Written once in labtools/judge/wire.py; `labtools
# build` copies it into every lab.) Tests call your code through `student`:
# `student.softmax(x)` calls the `softmax` this notebook defines. Every argument and
# every result crosses as plain data (tensors as safetensors, the rest as JSON), the
# way the grader does it, so a test behaves here as it does when graded. `lab.X` is
# the lab's own helper X (a stand-in model, say): here this notebook's; when graded,
# built beside your code from the grader's copy of the read-only cells.
"""Calls to the student's code, as data.

Three places use this one file:
- every lab notebook holds it as a read-only cell: `student = Student(LocalChannel(
  Agent(globals())))`, so the visible tests call the notebook's own functions;
- the grader sends it into the student's kernel, where `Agent` answers requests;
- the judge (labtools/judge/runner.py) imports it to encode requests and decode replies.

A value crosses as data when it is a tensor, an array, a number, a string, None, a
dtype, a device, a shape, a generator's state, a matplotlib figure (what it shows),
or a tuple/list/dict of those; anything else stays where it is and crosses as a
`Ref`, a handle whose attributes, items and calls go back to the student's side.
Nothing is ever pickled: decoding data runs no code of the side that sent it.
It must not import labtools (the kernel may not have it).
"""

import inspect
import json
import re
import struct
import traceback

import numpy as np
import torch

MAX_REPLY_BYTES = 512 << 20
_DATA_DTYPES = {str(d).replace("torch.", ""): d for d in (
    torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
    torch.int8, torch.uint8, torch.bool, torch.complex64, torch.complex128)}
_SCALARS = (bool, int, float, str, type(None))
_NP_INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


class WireError(RuntimeError):
    """The other side sent something that is not valid data."""


class StudentRaised(Exception):
    """Base of the exceptions re-raised on the judge's side for an error in the student's code."""

    student_type = "Exception"
    notebook_line = ""  # the line of the notebook that raised, when a cell is on the traceback
    line_values = ()  # (name, kind, value) for the names on that line: shapes, numbers, lengths


_BUILTIN_ERRORS = {cls.__name__: cls for cls in (
    ValueError, TypeError, IndexError, KeyError, AttributeError, NameError, RuntimeError, ZeroDivisionError,
    NotImplementedError, AssertionError, ArithmeticError, LookupError, OverflowError, MemoryError,
    RecursionError, ImportError, ModuleNotFoundError, UnboundLocalError, StopIteration, TimeoutError)}
_RAISED_TYPES = {}


# The files a notebook's cells run from: ipykernel's (/tmp/ipykernel_<pid>/<hash>.py), IPython's
# older <ipython-input-...>, and the fixtures harness's <cell NAME>.
_CELL_FILE = re.compile(r"(ipykernel_\d+/\d+\.py|<ipython-input-[^>]*>|<cell [^>]*>)$")
MAX_LINE_CHARS = 200


def _notebook_line(exc):
    """The line of a notebook cell where `exc` was raised (the deepest frame of the traceback that
    is a cell's, library frames below it skipped), or "" when no cell is on the traceback."""
    try:
        for frame in reversed(traceback.extract_tb(exc.__traceback__)):
            if _CELL_FILE.search(frame.filename or "") and frame.line:
                return frame.line.strip()[:MAX_LINE_CHARS]
    except Exception:  # noqa: BLE001 - only a hint: a traceback that cannot be read gives none
        pass
    return ""


MAX_LINE_VALUES = 12
_LINE_KINDS = ("tensor", "number", "sequence")


def _cell_traceback(exc):
    """The deepest traceback entry of `exc` that runs in a notebook cell, or None."""
    found, tb = None, exc.__traceback__
    while tb is not None:
        if _CELL_FILE.search(tb.tb_frame.f_code.co_filename or ""):
            found = tb
        tb = tb.tb_next
    return found


def _names_on(line):
    """The names and attribute chains a line of code reads (`x`, `self.pe`), in order, once each;
    keywords, strings and comments skipped."""
    import io
    import keyword
    import tokenize

    chains, chain, after_dot, previous = [], [], False, ""
    try:
        for tok in tokenize.generate_tokens(io.StringIO(line).readline):
            name = tok.type == tokenize.NAME and not keyword.iskeyword(tok.string)
            if name and (after_dot or not chain) and (chain or previous != "."):
                chain.append(tok.string)
                after_dot = False
            elif tok.type == tokenize.OP and tok.string == "." and chain and not after_dot:
                after_dot = True
            else:
                if chain:
                    chains.append(".".join(chain))
                chain, after_dot = [], False
                if name and previous != ".":
                    chain = [tok.string]
            previous = tok.string
    except (tokenize.TokenError, SyntaxError, IndentationError):  # a line of a longer statement
        pass
    if chain:
        chains.append(".".join(chain))
    return list(dict.fromkeys(chains))


def _static_attribute(obj, name):
    """obj.name read from the object's own storage (a module's parameters, buffers and
    submodules, or its __dict__) without running a property or __getattr__; _MISSING if absent."""
    stored = getattr(obj, "__dict__", None)
    if type(stored) is not dict:
        return _MISSING
    if isinstance(obj, torch.nn.Module):
        for group in ("_parameters", "_buffers", "_modules"):
            table = stored.get(group)
            if type(table) is dict and name in table:
                return table[name]
    return stored.get(name, _MISSING)


_MISSING = object()


def _line_value(value):
    """(kind, value) of what a name held, as data a message may quote; None for anything else."""
    if isinstance(value, (torch.Tensor, np.ndarray)):
        return "tensor", [int(n) for n in value.shape][:8]
    if type(value) in (int, float) and value == value and abs(value) != float("inf"):
        return "number", value
    if type(value) in (list, tuple, torch.Size):
        return "sequence", len(value)
    return None


def _line_values(exc, line):
    """What the names on the line that raised held at that moment: shapes of tensors and arrays,
    numbers, lengths. Only a hint for the message: the judge reads it as data, never as a verdict."""
    out = []
    try:
        tb = _cell_traceback(exc)
        if tb is None or not line:
            return out
        frame = tb.tb_frame
        for chain in _names_on(line):
            parts = chain.split(".")
            value = frame.f_locals.get(parts[0], frame.f_globals.get(parts[0], _MISSING))
            for depth, part in enumerate(parts[1:], start=1):
                inner = _static_attribute(value, part)
                if inner is _MISSING:  # a method or a property: the chain up to it is what was read
                    parts = parts[:depth]
                    break
                value = inner
            described = None if value is _MISSING else _line_value(value)
            name = ".".join(parts)
            if described is not None and name != "_" and all(entry[0] != name for entry in out):
                out.append([name, *described])
            if len(out) >= MAX_LINE_VALUES:
                break
    except Exception:  # noqa: BLE001 - only a hint: whatever fails gives none
        return []
    return out


def _clean_values(value):
    """The names on the raising line as the other side sent them, kept only when they are the data
    `_line_values` makes: (name, "tensor", shape), (name, "number", value) or (name, "sequence", length)."""
    kept = []
    for entry in value[:MAX_LINE_VALUES] if isinstance(value, list) else []:
        if not (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], str)
                and re.fullmatch(r"[A-Za-z_]\w{0,40}(\.[A-Za-z_]\w{0,40}){0,3}", entry[0]) and entry[1] in _LINE_KINDS):
            continue
        name, kind, data = entry
        if kind == "tensor" and isinstance(data, list) and len(data) <= 8 and all(
                type(n) is int and 0 <= n < 1 << 48 for n in data):
            kept.append((name, kind, tuple(data)))
        elif kind == "number" and type(data) in (int, float) and data == data and abs(data) < 1e300:
            kept.append((name, kind, data))
        elif kind == "sequence" and type(data) is int and 0 <= data < 1 << 48:
            kept.append((name, kind, data))
    return tuple(kept)


def _clean_line(value):
    """A line as the other side sent it, made safe to put in a message: text only, one line, short."""
    if not isinstance(value, str):
        return ""
    return "".join(c if c.isprintable() else " " for c in value)[:MAX_LINE_CHARS].strip()


def _raised_type(name, bases):
    builtin = next((_BUILTIN_ERRORS[b] for b in bases if b in _BUILTIN_ERRORS), Exception)
    key = (str(name)[:80], builtin)
    if key not in _RAISED_TYPES:
        _RAISED_TYPES[key] = type(key[0], (StudentRaised, builtin), {"student_type": key[0]})
    return _RAISED_TYPES[key]


class Ref:
    """A handle on an object that lives with the student's code."""

    __slots__ = ("_channel", "_id", "_type", "_mro", "_name")

    def __init__(self, channel, ref_id, type_name, mro, name=None):
        object.__setattr__(self, "_channel", channel)
        object.__setattr__(self, "_id", ref_id)
        object.__setattr__(self, "_type", type_name)
        object.__setattr__(self, "_mro", tuple(mro))
        object.__setattr__(self, "_name", name)

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return self._channel.request("getattr", self, name)

    def __setattr__(self, name, value):
        raise AttributeError("set the student's attributes with set_tensor(obj, 'path', value)")

    def __call__(self, *args, **kwargs):
        return self._channel.request("call", self, list(args), kwargs)

    def __getitem__(self, key):
        return self._channel.request("getitem", self, key)

    def __len__(self):
        return self._channel.request("len", self)

    def __iter__(self):
        return iter([self[i] for i in range(len(self))])

    def __repr__(self):
        return f"<{self._type} from the student's notebook>"

    @property
    def type_name(self):
        """The class name of the object, e.g. 'Linear' (what `type(obj).__name__` gives)."""
        return self._type.rsplit(".", 1)[-1]


class Figure:
    """What a matplotlib figure shows, as data: one `Axes` per axes, in order."""

    def __init__(self, axes):
        self.axes = axes

    def __repr__(self):
        return f"Figure(axes={self.axes!r})"


class Axes:
    """What one axes shows: its heatmaps' numbers, lines, labels and title."""

    def __init__(self, **fields):
        self.__dict__.update(fields)

    def __repr__(self):
        return f"Axes({', '.join(f'{k}={v!r}' for k, v in self.__dict__.items() if k in ('title', 'is_colorbar'))})"


def _describe_figure(fig):
    fig.canvas.draw()  # tick labels are final only after a draw
    axes = []
    for ax in fig.axes:
        images = [np.asarray(np.ma.getdata(im.get_array()), dtype=np.float64) for im in ax.images]
        images += [np.asarray(np.ma.getdata(c.get_array()), dtype=np.float64) for c in ax.collections
                   if c.get_array() is not None]
        axes.append({
            "label": ax.get_label(), "title": ax.get_title(), "xlabel": ax.get_xlabel(), "ylabel": ax.get_ylabel(),
            "is_colorbar": ax.get_label() == "<colorbar>" or getattr(ax, "_colorbar", None) is not None,
            "heatmaps": images,
            "heatmap_has_colorbar": [getattr(im, "colorbar", None) is not None
                                     for im in list(ax.images) + [c for c in ax.collections if c.get_array() is not None]],
            "xticks": [float(t) for t in ax.get_xticks()], "yticks": [float(t) for t in ax.get_yticks()],
            "xticklabels": [t.get_text() for t in ax.get_xticklabels()],
            "yticklabels": [t.get_text() for t in ax.get_yticklabels()],
            "xlim": [float(v) for v in ax.get_xlim()], "ylim": [float(v) for v in ax.get_ylim()],
            "lines": [np.asarray(line.get_xydata(), dtype=np.float64) for line in ax.get_lines()],
        })
    return {"axes": axes}


def _dense_order(t):
    """For a non-contiguous tensor that is a permutation of a contiguous one (transpose,
    permute), the order of dimensions that makes it contiguous; else None."""
    if t.is_contiguous() or t.dim() < 2 or not t.numel():
        return None
    order = sorted(range(t.dim()), key=lambda d: -t.stride(d))
    return order if t.permute(order).is_contiguous() else None


class _Encoder:
    """value -> (JSON tree, {key: tensor}); objects that are not data become refs."""

    def __init__(self, make_ref, max_items=100_000):
        self.tensors = {}
        self.make_ref = make_ref
        self.budget = max_items

    def _tensor(self, t, **extra):
        key = f"t{len(self.tensors)}"
        data = t.detach()
        if data.dtype not in _DATA_DTYPES.values():
            raise WireError(f"tensors of dtype {data.dtype} cannot be sent")
        order = _dense_order(data)
        if order is not None:  # a transposed or permuted view crosses as one: the layout is part of the input
            data = data.permute(order)
            extra["perm"] = order
        self.tensors[key] = data.to("cpu").contiguous().clone()
        return {"t": "tensor", "k": key, "dev": str(t.device), "rg": bool(t.requires_grad), **extra}

    def encode(self, value):
        self.budget -= 1
        if self.budget < 0:
            raise WireError("the value is too large to send (too many items)")
        if isinstance(value, bool) or value is None or isinstance(value, str):
            return value
        if type(value) in (int, float):
            if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
                return {"t": "float", "v": repr(value)}
            return value
        if isinstance(value, torch.Tensor):
            return self._tensor(value, param=isinstance(value, torch.nn.Parameter))
        if isinstance(value, np.ndarray) and value.dtype != object:
            return {"t": "ndarray", "k": self._tensor(torch.from_numpy(np.ascontiguousarray(value)))["k"]}
        if isinstance(value, np.bool_):  # not a Python bool: a test may need to tell them apart
            return {"t": "npbool", "v": bool(value)}
        if isinstance(value, np.integer) and value.dtype.name in _NP_INTS:
            # not a Python int either: "returns a Python int" must see what came back
            return {"t": "npint", "d": value.dtype.name, "v": int(value)}
        if isinstance(value, np.generic) and not isinstance(value, np.object_):
            return self.encode(value.item())
        if isinstance(value, torch.dtype):
            return {"t": "dtype", "v": str(value).replace("torch.", "")}
        if isinstance(value, torch.device):
            return {"t": "device", "v": str(value)}
        if isinstance(value, torch.Size):
            return {"t": "size", "v": [int(v) for v in value]}
        if isinstance(value, torch.Generator):
            return {"t": "generator", "k": self._tensor(value.get_state())["k"], "dev": str(value.device)}
        if isinstance(value, slice):
            return {"t": "slice", "v": [self.encode(value.start), self.encode(value.stop), self.encode(value.step)]}
        if value is Ellipsis:
            return {"t": "ellipsis"}
        if type(value) in (tuple, list):
            return {"t": type(value).__name__, "v": [self.encode(v) for v in value]}
        if type(value) is dict or type(value).__name__ == "OrderedDict" and type(value).__module__ == "collections":
            # a module's state_dict() is an OrderedDict: it crosses as a plain dict
            return {"t": "dict", "k": [self.encode(k) for k in value], "v": [self.encode(v) for v in value.values()]}
        if isinstance(value, Ref):
            return {"t": "ref", "id": value._id}
        if type(value).__name__ == "Figure" and type(value).__module__.startswith("matplotlib"):
            return {"t": "figure", "v": self.encode(_describe_figure(value))}
        if type(value).__name__ == "generator" or (hasattr(value, "__next__") and hasattr(value, "__iter__")):
            return {"t": "list", "v": [self.encode(v) for v in _bounded(value, self.budget)]}
        return self.make_ref(value)


def _bounded(iterator, limit):
    out = []
    for item in iterator:
        out.append(item)
        if len(out) > limit:
            raise WireError("the iterator yields too many items to send")
    return out


def _decode(tree, tensors, resolve, depth=0):
    if depth > 64:
        raise WireError("data nested too deeply")
    if tree is None or isinstance(tree, (bool, int, float, str)):
        return tree
    if isinstance(tree, list):
        raise WireError("malformed data (a bare list)")
    if not isinstance(tree, dict):
        raise WireError(f"malformed data ({type(tree).__name__})")
    kind = tree.get("t")
    sub = lambda v: _decode(v, tensors, resolve, depth + 1)  # noqa: E731
    if kind == "tensor":
        t = tensors[tree["k"]].clone()
        if "perm" in tree:
            perm = tree["perm"]
            if not isinstance(perm, list) or sorted(perm) != list(range(t.dim())):
                raise WireError("malformed tensor layout")
            t = t.permute([perm.index(d) for d in range(t.dim())])
        device = str(tree.get("dev", "cpu"))
        if device != "cpu" and _device_available(device):
            t = t.to(device)
        if tree.get("param"):
            return torch.nn.Parameter(t, requires_grad=bool(tree.get("rg")))
        return t.requires_grad_(bool(tree.get("rg"))) if t.is_floating_point() or t.is_complex() else t
    if kind == "ndarray":
        t = tensors[tree["k"]]
        return t.float().numpy().astype(np.float32) if t.dtype == torch.bfloat16 else t.numpy().copy()
    if kind == "npbool":
        return np.bool_(tree["v"] is True)
    if kind == "npint":
        if tree.get("d") not in _NP_INTS or type(tree.get("v")) is not int:
            _fail("malformed NumPy integer")
        info = np.iinfo(tree["d"])
        return np.dtype(tree["d"]).type(tree["v"]) if info.min <= tree["v"] <= info.max else _fail("NumPy integer out of range")
    if kind == "float":
        return float(tree["v"]) if tree["v"] in ("nan", "inf", "-inf") else _fail("malformed float")
    if kind == "dtype":
        return _DATA_DTYPES.get(tree["v"]) or _fail(f"unknown dtype {tree['v']!r}")
    if kind == "device":
        return torch.device(str(tree["v"]))
    if kind == "size":
        return torch.Size([int(v) for v in tree["v"]])
    if kind == "generator":
        device = str(tree.get("dev", "cpu"))
        gen = torch.Generator(device=device if _device_available(device) else "cpu")
        gen.set_state(tensors[tree["k"]])
        return gen
    if kind == "slice":
        return slice(*[sub(v) for v in tree["v"]])
    if kind == "ellipsis":
        return Ellipsis
    if kind in ("tuple", "list"):
        items = [sub(v) for v in tree["v"]]
        return tuple(items) if kind == "tuple" else items
    if kind == "dict":
        return {sub(k): sub(v) for k, v in zip(tree["k"], tree["v"])}
    if kind == "figure":
        raw = sub(tree["v"])
        return Figure([Axes(**{str(k): v for k, v in ax.items()}) for ax in raw["axes"]])
    if kind == "ref":
        return resolve(tree)
    raise WireError(f"unknown kind of data {str(kind)[:40]!r}")


def _fail(message):
    raise WireError(message)


def _device_available(device):
    kind = device.split(":")[0]
    if kind == "cuda":
        return torch.cuda.is_available()
    if kind == "mps":
        return getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()
    return kind == "cpu"


def pack(tree, tensors):
    """One message: 8 bytes of JSON length, the JSON, then the tensors as safetensors."""
    from safetensors.torch import save

    head = json.dumps(tree, allow_nan=False).encode()
    return struct.pack("<Q", len(head)) + head + (save(tensors) if tensors else b"")


def unpack(message):
    from safetensors.torch import load

    if len(message) > MAX_REPLY_BYTES:
        raise WireError(f"message of {len(message)} bytes is larger than the limit")
    if len(message) < 8:
        raise WireError("message too short")
    (size,) = struct.unpack("<Q", message[:8])
    if size > len(message) - 8:
        raise WireError("malformed message length")
    try:
        tree = json.loads(message[8:8 + size])
        tensors = load(message[8 + size:]) if len(message) > 8 + size else {}
    except Exception as exc:  # noqa: BLE001 - any malformed input is a WireError
        raise WireError(f"malformed message: {type(exc).__name__}") from None
    return tree, tensors


_OPAQUE = object()  # a value _data_copy does not copy (a module, the student's own object)
_CALLS = ("call", "call_many", "call_method")  # requests whose arguments must come back unchanged


def _data_copy(value, depth=0):
    """A copy of an argument that is data (a tensor, a number, a string, or lists, tuples and
    dicts of them), to see after a call whether the student changed it in place; _OPAQUE for
    anything else."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if value is None or isinstance(value, (str, bytes, int, float, bool)):
        return value
    if depth < 8 and isinstance(value, (list, tuple, dict)):
        items = value.items() if isinstance(value, dict) else enumerate(value)
        copied = {key: _data_copy(item, depth + 1) for key, item in items}
        return _OPAQUE if any(c is _OPAQUE for c in copied.values()) else _Copied(type(value), copied)
    return _OPAQUE


def _is_data(value, depth=0):
    """Whether _data_copy would copy `value` (data, not a module or the student's object)."""
    if isinstance(value, torch.Tensor) or value is None or isinstance(value, (str, bytes, int, float, bool)):
        return True
    if depth < 8 and isinstance(value, (list, tuple, dict)):
        return all(_is_data(v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))
    return False


def _parameter(fn, index):
    """' (name)' of fn's positional parameter at `index`, for messages; '' when unknown."""
    try:
        names = [p.name for p in inspect.signature(fn).parameters.values()
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        return f" ({names[index]})" if index < len(names) else ""
    except Exception:  # noqa: BLE001 - a student's object may make signature() raise anything
        return ""


class _Copied:
    def __init__(self, kind, items):
        self.kind, self.items = kind, items


def _unchanged(old, value):
    """Whether `value` still holds what its _data_copy `old` recorded. A dict may have gained
    keys (adding the encoding to a batch and returning it is a common style); a changed or
    removed entry, a list grown or shrunk, or a tensor written to, is a change."""
    if isinstance(old, torch.Tensor):
        if not isinstance(value, torch.Tensor) or value.shape != old.shape or value.dtype != old.dtype:
            return False
        value = value.detach()
        return torch.equal(value, old) or (value.is_floating_point() and bool(
            ((value == old) | (value.isnan() & old.isnan())).all()))  # NaN where NaN was is no change
    if isinstance(old, _Copied):
        if type(value) is not old.kind:
            return False
        if old.kind is dict:
            return all(key in value and _unchanged(item, value[key]) for key, item in old.items.items())
        return len(value) == len(old.items) and all(_unchanged(old.items[i], value[i]) for i in range(len(value)))
    return type(value) is type(old) and (value is old or value == old or value != value and old != old)


# -- the student's side --------------------------------------------------------------------
class LabSetupError(RuntimeError):
    """The lab's own helpers could not be built in the student's process: the grader's problem."""


class Agent:
    """Answers requests against a namespace (the notebook's globals): looks names up,
    calls, reads attributes and items, and keeps the objects it hands out as refs.

    `lab` holds the lab's own helpers (stand-in models, tokenizers, training loops) that the
    tests build where the student's code runs. In a notebook (lab=None) they are the
    notebook's own; the grader passes an empty dict and fills it with `define_lab`, from
    the judge's text of the lab's cells, so that no helper a test relies on is the copy a
    submission could have redefined."""

    def __init__(self, namespace, lab=None):
        self.namespace = namespace
        self.lab = lab
        self.objects = {}
        self._after = []

    def _ref(self, value):
        ref_id = len(self.objects) + 1
        self.objects[ref_id] = value
        cls = type(value)
        mro = [f"{c.__module__}.{c.__qualname__}" for c in cls.__mro__]
        name = getattr(value, "__name__", None) if isinstance(value, (type, type(_fail))) else None
        return {"t": "ref", "id": ref_id, "type": mro[0], "mro": mro, "name": name if isinstance(name, str) else None}

    def _resolve(self, tree):
        try:
            return self.objects[int(tree["id"])]
        except (KeyError, ValueError, TypeError):
            raise WireError("unknown reference") from None

    def handle(self, message):
        encoder = _Encoder(self._ref)
        self._after = []
        try:
            tree, tensors = unpack(message)
            op = tree["op"]
            args = [_decode(a, tensors, self._resolve) for a in tree.get("args", [])]
            result = {"value": encoder.encode(getattr(self, f"_op_{op}")(*args))}
            if op in _CALLS:
                # what the arguments hold after the call, as data: the caller compares them with
                # what it sent. Whether an input changed is decided there, never here.
                result["after"] = encoder.encode(self._after)
        except WireError as exc:
            result = {"wire_error": str(exc)}
        except BaseException as exc:  # noqa: BLE001 - the student's code may raise anything
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            encoder = _Encoder(self._ref)
            line = _notebook_line(exc)
            result = {"raised": {"type": type(exc).__name__, "message": str(exc)[:2000],
                                 "bases": [c.__name__ for c in type(exc).__mro__],
                                 "line": line, "values": _line_values(exc, line)}}
        self._after = []
        return pack(result, encoder.tensors)

    def _op_get(self, name):
        if name not in self.namespace:
            raise NameError(f"name '{name}' is not defined: run the cell that defines it")
        return self.namespace[name]

    def _op_lab_get(self, name):
        lab = self.namespace if self.lab is None else self.lab
        if not lab:
            raise WireError("the lab's helpers are not defined in this process")
        if name not in lab:
            raise NameError(f"the lab defines no helper '{name}'")
        return lab[name]

    def _op_define_lab(self, source):
        """Run the lab's helper cells (`source`, the judge's text) in a namespace of their own.
        The random generators are left as they were: defining helpers changes no answer."""
        import contextlib
        import io
        import random
        import types

        states = (random.getstate(), np.random.get_state(), torch.random.get_rng_state(),
                  torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None)
        wire = types.ModuleType("labwire")
        wire.__dict__.update(globals())
        lab = {"__name__": "__lab__", "labwire": wire, "student": Student(LocalChannel(Agent(self.namespace)))}
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                exec(compile(str(source), "<the lab's own helpers>", "exec"), lab)
        except Exception as exc:  # noqa: BLE001 - the grader's own cells: said as such, never the student's
            raise LabSetupError(f"{type(exc).__name__}: {exc}") from None
        finally:
            random.setstate(states[0])
            np.random.set_state(states[1])
            torch.random.set_rng_state(states[2])
            if states[3] is not None:
                torch.cuda.set_rng_state_all(states[3])
        self.lab = lab
        return None

    def _op_getattr(self, obj, name):
        return getattr(obj, name)

    def _op_getitem(self, obj, key):
        return obj[key]

    def _op_len(self, obj):
        return len(obj)

    def _op_call(self, fn, args, kwargs):
        values = list(args) + list(kwargs.values())
        result = fn(*args, **kwargs)
        names = [f"argument {i + 1}{_parameter(fn, i)}" for i in range(len(args))]
        names += [f"argument {k!r}" for k in kwargs]
        self._after.append([[i, names[i], v] for i, v in enumerate(values) if _is_data(v)])
        return result

    def _op_isinstance(self, obj, cls):
        if isinstance(cls, str):
            module, _, name = cls.rpartition(".")
            cls = getattr(__import__(module, fromlist=[name]), name)
        return isinstance(obj, cls)

    def _op_set_tensor(self, obj, path, value):
        *owners, last = path.split(".")
        for name in owners:
            obj = getattr(obj, name)
        target = getattr(obj, last)
        with torch.no_grad():
            if tuple(target.shape) != tuple(value.shape):
                raise ValueError(f"{path} has shape {tuple(target.shape)}, expected {tuple(value.shape)}")
            target.copy_(value)
        return None

    def _op_backward(self, fn, args, kwargs, grad_output, paths):
        """Call fn, backpropagate from its result (its sum when grad_output is None) and
        return (result, {path: gradient or None}) for the tensors of fn at `paths`."""
        tensors = {path: self._at(fn, path) for path in paths}
        for tensor in tensors.values():
            tensor.grad = None
        result = self._op_call(fn, args, kwargs)
        if not isinstance(result, torch.Tensor):
            raise TypeError(f"expected a tensor to backpropagate from, got {type(result).__name__}")
        if grad_output is None:
            result.sum().backward()
        else:
            result.backward(grad_output)
        return result, {path: (None if t.grad is None else t.grad.detach().clone()) for path, t in tensors.items()}

    def _op_manual_seed(self, seed):
        torch.manual_seed(int(seed))
        return None

    def _op_fill_results(self, fn, args, kwargs, value):
        """Call fn, then fill each tensor it returned (the result, or the items of a returned
        tuple or list) with `value`, one at a time, as a caller editing the results would; return
        (the result as it was returned, for each item the arguments and other results that changed
        with it, or None for an item that is not a tensor)."""
        result = self._op_call(fn, args, kwargs)
        items = list(result) if isinstance(result, (tuple, list)) else [result]
        returned = [t.detach().clone() if isinstance(t, torch.Tensor) else t for t in items]
        watched = [(f"argument {i + 1}", a) for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
        watched += [(f"argument {k!r}", a) for k, a in kwargs.items() if isinstance(a, torch.Tensor)]
        watched += [(f"result {i}", t) for i, t in enumerate(items) if isinstance(t, torch.Tensor)]
        changed = []
        for i, item in enumerate(items):
            if not isinstance(item, torch.Tensor):
                changed.append(None)
                continue
            before = [t.detach().clone() for _, t in watched]
            try:
                with torch.no_grad():
                    item.fill_(value)
            except RuntimeError as exc:
                changed.append([f"cannot be written in place ({str(exc)[:200]})"])
                continue
            changed.append([name for (name, t), old in zip(watched, before)
                            if name != f"result {i}" and (t.shape != old.shape or not torch.equal(t.detach(), old))])
        if isinstance(result, (tuple, list)):
            returned = tuple(returned) if isinstance(result, tuple) else returned
        else:
            returned = returned[0]
        return returned, changed

    def _op_call_many(self, fn, calls):
        """Call fn once per [args, kwargs] of `calls`, in order, in one request; the results."""
        return [self._op_call(fn, args, kwargs) for args, kwargs in calls]

    def _op_call_method(self, obj, name, args, kwargs):
        """obj.<name>(*args, **kwargs): the method looked up and called in one request."""
        return self._op_call(getattr(obj, name), args, kwargs)

    @staticmethod
    def _at(obj, path):
        for name in path.split("."):
            obj = getattr(obj, name)
        if not isinstance(obj, torch.Tensor):
            raise TypeError(f"{path} is a {type(obj).__name__}, not a tensor")
        return obj

    def serve(self, ask):
        """Kernel entry point for one test: each request arrives as the answer to an input
        request (base64) and its reply leaves as the prompt of the next one, until an empty
        request ends the loop. `ask` is the kernel's raw_input, taken before any student code
        ran. One stdin round trip per request costs a fraction of an execute_request."""
        import base64

        reply = ""
        while True:
            text = ask(REPLY_PREFIX + reply)
            if not text:
                return
            reply = base64.b64encode(self.handle(base64.b64decode(text))).decode()


REPLY_PREFIX = "LABTOOLS-REPLY "


# -- the side that calls -------------------------------------------------------------------
class InputMutated(AssertionError):
    """The student's function changed an argument it was given: a tensor, or an entry of a list
    or a dict (labtools' own copy: the caller's value never changes)."""


def _sent_values(op, args):
    """For each call a request makes, the values of its arguments, in the order the Agent
    reports them (positional, then keyword)."""
    if op == "call":
        return [list(args[1]) + list(args[2].values())]
    if op == "call_many":
        return [list(a) + list(k.values()) for a, k in args[1]]
    return [list(args[2]) + list(args[3].values())]  # call_method


def _changed_inputs(sent, after):
    """The names of the arguments of the first call whose value after the call (`after`, as the
    Agent sent it back) differs from what was sent; a reply that leaves one out is malformed."""
    if not isinstance(after, list) or len(after) != len(sent):
        raise WireError("malformed reply (the arguments after the call)")
    for values, reported in zip(sent, after):
        got = {}
        for entry in reported if isinstance(reported, list) else [None]:
            if not (isinstance(entry, list) and len(entry) == 3 and type(entry[0]) is int):
                raise WireError("malformed reply (the arguments after the call)")
            got[entry[0]] = entry[1:]
        changed = []
        for i, value in enumerate(values):
            old = _data_copy(value)
            if old is _OPAQUE:
                continue
            if i not in got:
                raise WireError("malformed reply (an argument is missing after the call)")
            name, now = got[i]
            if not _unchanged(old, now):
                changed.append(str(name)[:200])
        if changed:
            return changed
    return []


class Channel:
    """Sends requests to an Agent and decodes its replies; subclasses say how bytes travel."""

    lab_defined = False  # has the Agent at the other end been given the lab's helpers?

    def transfer(self, message):
        raise NotImplementedError

    def end_test(self):
        """Called when a test is over (a channel that holds the kernel for a test lets it go)."""

    def request(self, op, *args):
        encoder = _Encoder(lambda v: (_ for _ in ()).throw(WireError(f"cannot send a {type(v).__name__}")))
        tree = {"op": op, "args": [encoder.encode(a) for a in args]}
        # the arguments as the other side receives them (an OrderedDict arrives as a dict)
        sent = _sent_values(op, [_decode(a, encoder.tensors, self._make_ref) for a in tree["args"]]) \
            if op in _CALLS else None
        reply_tree, tensors = unpack(self.transfer(pack(tree, encoder.tensors)))
        if not isinstance(reply_tree, dict):
            raise WireError("malformed reply")
        if "wire_error" in reply_tree:
            raise WireError(str(reply_tree["wire_error"]))
        if "raised" in reply_tree:
            raised = reply_tree["raised"]
            error = _raised_type(raised.get("type", "Exception"), list(raised.get("bases", [])))(
                str(raised.get("message", "")))
            error.notebook_line = _clean_line(raised.get("line"))  # where it was raised: a hint, never a verdict
            error.line_values = _clean_values(raised.get("values"))  # what its names held: a hint too
            raise error
        value = self._decode_reply(reply_tree.get("value"), tensors)
        if sent is not None:
            after = self._decode_reply(reply_tree.get("after"), tensors)
            changed = _changed_inputs(sent, after)
            if changed:
                who = f"{name_of(args[0])}.{args[1]}" if op == "call_method" else name_of(args[0])
                raise InputMutated(f"{who} changed its {', '.join(changed)} in place: "
                                   "leave the inputs as they are (work on a copy, or use out-of-place operations)")
        return value

    def _decode_reply(self, tree, tensors):
        try:
            return _decode(tree, tensors, self._make_ref)
        except (KeyError, TypeError, ValueError, IndexError, RuntimeError) as exc:
            if isinstance(exc, WireError):
                raise
            raise WireError(f"malformed reply ({type(exc).__name__})") from None

    def _make_ref(self, tree):
        name = tree.get("name")
        return Ref(self, int(tree["id"]), str(tree.get("type", "object")), [str(m) for m in tree.get("mro", [])],
                   name[:80] if isinstance(name, str) else None)


def name_of(fn):
    """The name of a student's function or class (a Ref), or of a local function."""
    if isinstance(fn, Ref):
        return fn._name or fn.type_name
    name = getattr(fn, "__name__", None)
    return name if isinstance(name, str) else "your function"


class LocalChannel(Channel):
    """An Agent in this process: the notebook's own tests, and the in-process grader harness."""

    def __init__(self, agent):
        self.agent = agent

    def transfer(self, message):
        return self.agent.handle(message)


class Student:
    """`student.name` is the notebook's `name`, called through a channel."""

    def __init__(self, channel):
        object.__setattr__(self, "_channel", channel)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return self._channel.request("get", name)


class Lab:
    """`lab.name` is the lab's own helper `name` (ScriptedLM, make_test_tokenizer, torch, ...)
    where the student's code runs. Graded, it is built there from the judge's text of the
    lab's cells (`source`), once per kernel, never taken from the notebook's names."""

    def __init__(self, channel, source=None):
        object.__setattr__(self, "_channel", channel)
        object.__setattr__(self, "_source", source)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        channel = self._channel
        if self._source is not None and not channel.lab_defined:
            try:
                channel.request("define_lab", self._source)
            except StudentRaised as exc:
                raise LabSetupError(f"the lab's helpers could not be built where your code runs ({exc})") from None
            channel.lab_defined = True
        return channel.request("lab_get", name)


def _plain_class_name(cls):
    """The qualified name of `cls` (a class or its dotted path) when isinstance against it is a
    question of the class chain alone (its metaclass is `type`: no ABC registry, no
    __instancecheck__), else None."""
    if isinstance(cls, str):
        module, _, name = cls.rpartition(".")
        try:
            cls = getattr(__import__(module, fromlist=[name]), name)
        except (ImportError, AttributeError, ValueError):
            return None
    if type(cls) is not type:
        return None
    return f"{cls.__module__}.{cls.__qualname__}"


def is_instance(obj, cls):
    """isinstance for the student's objects: `cls` is a class (torch's, or the student's via
    `student.Name`) or its dotted path, e.g. "torch.nn.Linear"."""
    if not isinstance(obj, Ref):
        return isinstance(obj, cls) if isinstance(cls, type) else False
    plain = _plain_class_name(cls)
    if plain is not None and obj._mro:
        return plain in obj._mro  # the handle came with its class chain: no round trip
    if isinstance(cls, type):
        cls = f"{cls.__module__}.{cls.__qualname__}"
    return bool(obj._channel.request("isinstance", obj, cls))


def set_tensor(obj, path, value):
    """Copy `value` into the student's tensor at `path` (e.g. "W_q.weight"), without grad."""
    return obj._channel.request("set_tensor", obj, path, value)


def backward(fn, args=(), kwargs=None, grad_output=None, wrt=()):
    """Call the student's `fn(*args, **kwargs)` where it lives, backpropagate from the result
    (its sum, or `grad_output`) and return (result, {path: gradient}) for the tensors of `fn`
    named in `wrt` (e.g. "embedding.weight"); a gradient is None where none reached it."""
    return fn._channel.request("backward", fn, list(args), dict(kwargs or {}), grad_output, list(wrt))


def manual_seed(student, seed):
    """Seed torch's global generator in the student's process (torch.manual_seed there)."""
    return student._channel.request("manual_seed", int(seed))


def fill_results(fn, args=(), kwargs=None, value=-1):
    """Call the student's `fn(*args, **kwargs)` where it lives, then fill each tensor it returned
    with `value`, one at a time, as a caller editing the results would. Returns (the result as it
    was returned, [for each returned item, what else the fill changed: "argument 1", "result 0",
    ...]): a result that is a view of an argument, or shares memory with another result, shows there."""
    return fn._channel.request("fill_results", fn, list(args), dict(kwargs or {}), value)


def call_many(fn, calls):
    """Call the student's `fn` once per (args, kwargs) of `calls`, in order, in one request (many
    small calls cost one round trip); the list of results. Raises InputMutated as `fn(...)` would."""
    return fn._channel.request("call_many", fn, [[list(a), dict(k or {})] for a, k in calls])


def call_method(obj, name, *args, **kwargs):
    """`obj.name(*args, **kwargs)` for a student's object, in one round trip instead of two (the
    attribute, then the call): e.g. call_method(module, "load_state_dict", state, strict=False).
    Raises InputMutated as obj.name(...) would."""
    return obj._channel.request("call_method", obj, str(name), list(args), dict(kwargs))


def type_name(obj):
    """The class name of a student's object (a Ref) or of plain data."""
    return obj.type_name if isinstance(obj, Ref) else type(obj).__name__
