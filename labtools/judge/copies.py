"""Answers pasted from a library's source.

A rule on calls cannot see an answer that pastes the library function it replaces (T5's
bucketing out of transformers' modeling_t5.py): nothing is called, and the answer is right.
A lab lists, in its metadata (`labtools.pasted_from`: dotted paths of library functions), the
functions its exercises must not be copies of. A function of the submission whose tokens match
one of them almost all the way is sent to a person (review): it never loses points by itself.

Tokens are the code's own, comments and docstrings left out, names kept: a paste keeps the
library's names (`relative_position_if_large`), an answer written from the lab's text has its
own. Lab 3's fixtures: the pasted bucketing 0.97; fifteen honest and wrong answers 0.27 to 0.71.
"""

from __future__ import annotations

import ast
import difflib
import functools
import importlib
import inspect
import io
import textwrap
import tokenize

THRESHOLD = 0.9
_SKIP = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.ENCODING, tokenize.ENDMARKER}


def _tokens(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    body = list(function.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]  # the docstring
    code = "\n".join(ast.unparse(statement) for statement in body)
    try:
        return [t.string for t in tokenize.generate_tokens(io.StringIO(code).readline) if t.type not in _SKIP]
    except (tokenize.TokenError, SyntaxError):
        return []


@functools.lru_cache(maxsize=64)
def library_tokens(path: str) -> tuple[str, ...]:
    """The tokens of the library function at `path` (module.Class.function); () when it cannot be
    found here (another version of the library): nothing is compared then."""
    parts = path.split(".")
    for i in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
            break
        except ImportError:
            continue
    else:
        return ()
    try:
        for name in parts[i:]:
            obj = getattr(obj, name)
        tree = ast.parse(textwrap.dedent(inspect.getsource(inspect.unwrap(obj))))
    except (AttributeError, TypeError, OSError, SyntaxError):
        return ()
    function = next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    return tuple(_tokens(function)) if function is not None else ()


def pasted(cells: list[tuple[str, str]], library_paths: list[str]) -> list[str]:
    """Findings for the functions in `cells` ((where, source) of the student's cells) that are
    one of `library_paths` pasted: `name is path pasted (97% of its tokens) (where, line n)`."""
    libraries = [(path, library_tokens(path)) for path in library_paths]
    libraries = [(path, tokens) for path, tokens in libraries if len(tokens) >= 20]  # too short to tell
    found = []
    for where, source in cells:
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            mine = _tokens(node)
            for path, theirs in libraries:
                ratio = difflib.SequenceMatcher(None, mine, list(theirs), autojunk=False).ratio()
                if ratio >= THRESHOLD:
                    found.append(f"{node.name} is {path} pasted ({ratio:.0%} of its tokens): a copy is for a "
                                 f"person to judge ({where}, line {node.lineno})")
    return found
