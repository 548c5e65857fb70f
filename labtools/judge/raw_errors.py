"""What a raw error from inside an answer says about its cause, whatever the lab.

An error raised inside the student's code reaches them as the library's text plus the notebook
line that raised it (wire.py). A few errors mean more than their text says: each rule here adds
one sentence for one of them. A rule reads only facts of the error (its type, its text, the line)
and, to stay silent, the message so far (a test that expected an error, or already said the same
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
    return "; ".join(sentences)


def _applies(rule: Rule, error: RawError) -> bool:
    try:
        return bool(rule.applies(error))
    except Exception:  # noqa: BLE001 - a rule can only add a sentence, never fail a message
        return False
