"""What a raw error from inside an answer says about its cause, whatever the lab.

An error raised inside the student's code reaches them as the library's text plus the notebook
line that raised it (wire.py). A few errors mean more than their text says: each rule here adds
one sentence for one of them. A rule reads only facts of the error (its type, its text, the line,
what the names on that line held: shapes, numbers, lengths) and, to stay silent, the message so far (a test that expected an error, or already said the same
thing); never the lab, so it can only say what the error itself shows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class RawError:
    kind: str  # the error's type name, e.g. "IndexError"
    text: str  # its message
    line: str  # the notebook line that raised it ("" if none)
    message: str  # what the student reads so far
    values: tuple = ()  # (name, kind, value) of the names on that line: "tensor" shape, "number", "sequence" length


@dataclass(frozen=True)
class Rule:
    applies: Callable[[RawError], bool]
    sentence: str
    said: str = r"(?!)"  # a pattern: when the message already matches it, the test said this in its own words


RULES = (
    # a test that expects an error says "must raise"; every other call is one the docstring allows
    Rule(lambda e: (e.line.startswith("raise ") or e.line == "raise") and "must raise" not in e.message,
         "that line is a `raise` of your own code, reached on a call the test expects to work: "
         "check the condition that leads to it", said=r"must not raise"),
    Rule(lambda e: "index out of range in self" in e.text,
         "an embedding lookup (nn.Embedding, or index_select) got an index outside 0 .. num_embeddings - 1: "
         "compare the indices you look up (token ids, positions, buckets) with the size of the table"),
    Rule(lambda e: e.kind == "TypeError" and bool(re.search(
            r"but got float|'float' object cannot be interpreted as an integer|must be int, not float", e.text)),
         "a size or an index is a float: `/` always gives a float (8 / 2 is 4.0); use `//` or int()", said=r"//"),
    Rule(lambda e: "shapes cannot be multiplied" in e.text,
         "a matrix product (a linear layer, or @) got a tensor whose last dimension is not the size the "
         "layer takes (its in_features): check which tensor reaches that line, and its shape"),
    Rule(lambda e: bool(re.search(r"same dtype|expected scalar type", e.text)),
         "tensors of two dtypes meet in one operation: make new tensors with the dtype of the inputs "
         "(torch.zeros(..., dtype=x.dtype), or x.new_zeros(...))"),
    Rule(lambda e: "Boolean value of Tensor with more than one value is ambiguous" in e.text,
         "a tensor of several values is used as a condition (`if mask:`, `while t:`, `and`, `or`): to ask "
         "whether an argument was given compare it with None (`if mask is not None:`); to ask about its values "
         "reduce them first (`.any()`, `.all()`)"),
    Rule(lambda e: bool(re.search(r"\"bitwise_(and|or|xor|not)_\w+\" not implemented for '(Float|Double|Half|BFloat16)'"
                                  r"|invert\) is only implemented on integer and Boolean", e.text)),
         "`&`, `|` and `~` work on bool (or integer) tensors, not on floats: make a mask bool before combining it "
         "(torch.ones(L, L, dtype=torch.bool).tril(), or a comparison such as mask != 0)"),
    Rule(lambda e: bool(re.search(r"cannot assign '[\w.]+' as parameter '\w+' \(torch.nn.Parameter or None expected\)",
                                  e.text)),
         "a module's parameter can only be replaced by an nn.Parameter: copy the values into the one it has "
         "(with torch.no_grad(): param.copy_(values)), or wrap them, nn.Parameter(values)"),
    Rule(lambda e: bool(re.search(r"Invalid shape \([\d, ]*\) for image data", e.text)),
         "imshow draws a matrix: give it a 2-D array (rows x columns), and check the shape of what reaches that "
         "line (an index too many leaves one row; a batch axis too many leaves 3 or 4 dimensions)"),
    Rule(lambda e: bool(re.search(r"The shape of the mask \[[\d, ]*\] at index \d+ does not match the shape of the indexed", e.text)),
         "indexing with a bool mask (x[mask] = value) needs a mask of exactly x's shape: it does not broadcast; "
         "x.masked_fill(mask, value) (or torch.where) does"),
    Rule(lambda e: bool(re.search(r"stack expects each tensor to be equal size, but got \[[\d, ]*\] at entry \d+ and "
                                  r"\[([\d, ]*, )?0(, [\d, ]*)?\] at entry \d+", e.text)),
         "one of the pieces is empty (a dimension of size 0): a slice that starts at or past the end of its dimension, "
         "as an index counted from 1 instead of 0 gives: check the slice bounds of each piece"),
    Rule(lambda e: "probability tensor contains either `inf`, `nan` or element < 0" in e.text,
         "a row of the probabilities holds NaN (or is all zero): when every logit of a row is -inf after filtering, "
         "softmax gives 0 / 0 = NaN; a filter must always keep at least one token per row (check which tensor each "
         "threshold is taken from and compared with)"),
    Rule(lambda e: "Expected all tensors to be on the same device" in e.text,
         "tensors on two devices meet in one operation: make new tensors on the inputs' device "
         "(device=x.device)"),
)


def _none_name(error: RawError) -> str:
    """The name that holds None on the line that raised, when the error and the line show it
    (`'NoneType' object has no attribute 'device'` on `... generator.device ...`)."""
    attribute = re.search(r"'NoneType' object has no attribute '(\w+)'", error.text)
    if attribute:
        found = re.findall(rf"([A-Za-z_][\w.]*)\.{attribute.group(1)}\b", error.line)
    elif "object of type 'NoneType' has no len()" in error.text:
        found = re.findall(r"\blen\(\s*([A-Za-z_][\w.]*)\s*\)", error.line)
    elif re.search(r"'NoneType' object is not (subscriptable|iterable)", error.text):
        found = re.findall(r"([A-Za-z_][\w.]*)\s*\[", error.line) if "subscriptable" in error.text \
            else re.findall(r"\bin\s+([A-Za-z_][\w.]*)\s*:", error.line)
    else:
        return ""
    names = set(found)
    return names.pop() if len(names) == 1 else ""


def _none_sentence(error: RawError) -> str:
    name = _none_name(error)
    return (f"`{name}` is None on that line: a parameter whose default is None (a mask, a generator, the "
            f"tokens) must be handled before it is used (`if {name} is not None:`), and a value assigned from "
            "a call that returns nothing (a missing `return`, an in-place method) is None too") if name else ""


def _shape(shape) -> str:
    return "(" + ", ".join(str(n) for n in shape) + ("," if len(shape) == 1 else "") + ")"


def _held(error: RawError) -> str:
    """What the names on the raising line held, as a clause ("x is (3, 10, 16), L = 10")."""
    parts = []
    for name, kind, value in error.values:
        if kind == "tensor":
            parts.append(f"{name} is {_shape(value)}")
        elif kind == "number":
            parts.append(f"{name} = {value:.4g}" if isinstance(value, float) else f"{name} = {value}")
        else:
            parts.append(f"len({name}) = {value}")
    return ", ".join(parts[:8])


_BROADCAST = re.compile(r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\) at non-singleton dimension")
_OUT_OF_BOUNDS = re.compile(r"index (-?\d+) is out of bounds for dimension (\d+) with size (\d+)")
_ABOUT_SIZES = re.compile(r"size|shape|dimension|out of bounds|out of range|must match|cannot be multiplied"
                          r"|values to unpack")
_UNPACK = re.compile(r"(too many|not enough) values to unpack \(expected (\d+)")


def _unpacked_shape(error: RawError) -> str:
    """`a, b = x.shape` for a tensor x of another number of dimensions."""
    found = _UNPACK.search(error.text)
    if not found:
        return ""
    for name, kind, value in error.values:
        if kind == "tensor" and re.search(rf"=\s*{re.escape(name)}\s*\.\s*(shape|size\(\))", error.line) \
                and len(value) != int(found.group(2)):
            return (f"{name} has {len(value)} dimensions, {_shape(value)}, and the line unpacks {found.group(2)}: "
                    f"check where {name} got {'its extra' if len(value) > int(found.group(2)) else 'too few'} "
                    "dimensions (an unsqueeze or a view too many, a mask of another layout)")
    return ""


def _misaligned(error: RawError) -> str:
    """A broadcast error where a tensor of the line matches a block of another's dimensions that
    is not at its end: broadcasting aligns shapes from the right, so it met the wrong axes."""
    sizes = _BROADCAST.search(error.text)
    if not sizes:
        return ""
    clash = {int(sizes.group(1)), int(sizes.group(2))}
    tensors = [(name, value) for name, kind, value in error.values if kind == "tensor"]
    for small, s in tensors:
        for big, b in tensors:
            if small == big or not 0 < len(s) < len(b) or b[len(b) - len(s):] == s or not clash & set(s):
                continue
            for start in range(len(b) - len(s) - 1, -1, -1):
                if b[start:start + len(s)] == s:
                    fixed = _shape(s + (1,) * (len(b) - start - len(s)))
                    what = "dimension" if len(s) == 1 else f"{len(s)} dimensions"
                    return (f"broadcasting lines shapes up from the right, so {small} {_shape(s)} meets the last "
                            f"{what} of {big} {_shape(b)}, not the {what} of the same size from its dimension "
                            f"{start}: to go along those, give {small} the shape {fixed} ({small}[..., None], "
                            ".unsqueeze(-1), or keepdim=True where it comes from a sum, a max or a mean)")
    return ""


def _subscripts(line: str):
    """(name, [index expressions]) of each `name[...]` on a line, the expressions split at top-level commas."""
    for found in re.finditer(r"([A-Za-z_][\w.]*)\[", line):
        depth, start, parts = 1, found.end(), []
        for i in range(found.end(), len(line)):
            c = line[i]
            if c in "([{":
                depth += 1
            elif c in ")]}":
                depth -= 1
                if depth == 0:
                    parts.append(line[start:i].strip())
                    yield found.group(1), parts
                    break
            elif c == "," and depth == 1:
                parts.append(line[start:i].strip())
                start = i + 1


def _index_past_end(error: RawError) -> str:
    """An IndexError whose index is a name on the line used at a dimension of another size."""
    found = _OUT_OF_BOUNDS.search(error.text)
    if not found:
        return ""
    index, dim, size = (int(g) for g in found.groups())
    held = {name: (kind, value) for name, kind, value in error.values}
    for tensor, parts in _subscripts(error.line):
        kind, shape = held.get(tensor, (None, None))
        if kind != "tensor" or dim >= len(parts) or dim >= len(shape) or shape[dim] != size:
            continue
        used = parts[dim]
        if held.get(used, (None, None)) == ("number", index):
            return (f"in `{tensor}[{', '.join(parts)}]`, {used} = {index} is the index of dimension {dim} of "
                    f"{tensor} {_shape(shape)}, whose size is {size}: check that each index runs over the "
                    "dimension it stands at (and the range of the loop that makes it)")
    return ""


def explain(error: RawError) -> str:
    """The sentences of the rules that apply to `error` and that its message does not say yet, as
    one clause to append to the message ("" if none)."""
    said = error.message if isinstance(error.message, str) else ""
    sentences = [rule.sentence for rule in RULES
                 if _applies(rule, error) and rule.sentence not in said and not re.search(rule.said, said)]
    try:
        named = _none_sentence(error)
    except Exception:  # noqa: BLE001 - it can only add a sentence
        named = ""
    if named and named not in said:
        sentences.append(named)
    sentences += _about_shapes(error, said)
    return "; ".join(sentences)


def _about_shapes(error: RawError, said: str) -> list[str]:
    """For an error about sizes or shapes: what the line's tensors were, and why they clash when
    the shapes show it."""
    try:
        if not error.values or error.kind == "TypeError" or not _ABOUT_SIZES.search(str(error.text)):
            return []
        held = _held(error)
        out = [f"on that line {held}"] if held and held not in said else []
        why = _misaligned(error) or _index_past_end(error) or _unpacked_shape(error)
        return out + ([why] if why and why not in said else [])
    except Exception:  # noqa: BLE001 - it can only add a sentence
        return []


def _applies(rule: Rule, error: RawError) -> bool:
    try:
        return bool(rule.applies(error))
    except Exception:  # noqa: BLE001 - a rule can only add a sentence, never fail a message
        return False
