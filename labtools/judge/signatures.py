"""What an answer changed in the signature its exercise gave it: defaults, and the order of the
parameters.

An exercise's signature is part of its contract: `FeedForward(d_model, d_ff, dropout=0.1,
activation="relu")` promises what a call without `activation` does, and `PositionalEncoding(d_model,
max_len=5000, dropout=0.0)` what `PositionalEncoding(16, 64, 0.1)` means. An answer that changes a
default (to "gelu", say) or the order (the PyTorch tutorial's (d_model, dropout, max_len)) fails the
tests that rely on it, and their messages can only describe what came out. This module reads both
signatures (the source notebook's solution cell and the submitted cell, as text: nothing of the
answer runs) and says what differs, so that a failed test of that exercise can name the change.

Only defaults written as literals on both sides are compared (numbers, strings, None, True,
tuples of those): `1e-5` and `0.00001` are the same default, and a default that is an
expression is never guessed at.
"""

from __future__ import annotations

import ast

from .. import nbcells

_MISSING = object()


def _literal(node):
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _MISSING


def _defaults(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, object]:
    """{parameter: its default as a literal} (parameters without one, or with an expression, left out)."""
    args = fn.args
    positional = args.posonlyargs + args.args
    pairs = list(zip(positional[len(positional) - len(args.defaults):], args.defaults))
    pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
    out = {}
    for arg, node in pairs:
        value = _literal(node)
        if value is not _MISSING:
            out[arg.arg] = value
    return out


def _positional(fn) -> tuple[str, ...]:
    return tuple(a.arg for a in fn.args.posonlyargs + fn.args.args)


def _signatures(source: str, name: str, read=_defaults) -> dict:
    """`read` (the defaults, or the positional parameters) of `name` (a function) or of its methods (a
    class), by "name" or "name.method"."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return {}
    found = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            found[name] = read(node)
        elif isinstance(node, ast.ClassDef) and node.name == name:
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    found[f"{name}.{item.name}"] = read(item)
    return found


def _shown(value, limit=40) -> str:
    """repr(value), cut short: an answer's default may be any length of text."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _same(a, b) -> bool:
    return type(a) is type(b) and a == b or (isinstance(a, (int, float)) and isinstance(b, (int, float))
                                             and not isinstance(a, bool) and not isinstance(b, bool) and a == b)


def changed_signature(exercise: str, reference: str, answer: str) -> list[str]:
    """Sentences for what `answer` changed in `exercise`'s signature: each default ("in your
    FeedForward.__init__, activation defaults to 'gelu'; the exercise's signature gives it 'relu'"),
    and the order of the same positional parameters."""
    mine = _signatures(answer, exercise)
    told = []
    theirs_order = _signatures(answer, exercise, _positional)
    for where, given in _signatures(reference, exercise, _positional).items():
        order = theirs_order.get(where)
        if order and order != given and sorted(order) == sorted(given):
            told.append(f"your {where} takes ({', '.join(order)}) in that order, the exercise's ({', '.join(given)}): a "
                        "call that passes them by position gives each the other's value")
    for where, given in _signatures(reference, exercise).items():
        for param, value in given.items():
            theirs = mine.get(where, {}).get(param, _MISSING)
            if theirs is not _MISSING and not _same(theirs, value):
                told.append(f"in your {where}, {param} defaults to {_shown(theirs)}; the exercise's signature gives "
                            f"it {_shown(value)}")
    return told


def changed_signature_by_test(source_nb, submission_cells) -> dict[str, str]:
    """{test grade_id: a sentence naming what its exercise's answer changed in its signature} for the
    tests of every exercise whose submitted cell changed a default or the parameters' order."""
    answers = {nbcells.grade_id(c): c.source for c in submission_cells if nbcells.grade_id(c)}
    names = nbcells.exercises(source_nb)
    notes = {}
    for exercise in names:
        if exercise not in answers:
            continue
        reference = nbcells.strip_markers(nbcells.find_cell(source_nb, exercise).source)
        told = changed_signature(exercise, reference, answers[exercise])
        if told:
            for cell in nbcells.tests_of(source_nb, exercise):
                notes[nbcells.grade_id(cell)] = "; ".join(told)
    return notes
