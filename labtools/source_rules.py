# Rules on how an answer is written ("do not call torch's softmax"), checked on the
# notebook's source, not by patching torch while the answer runs: an alias saved
# earlier or a lower-level entry point cannot get round a reading of the code.
"""Checks of the student's source: which functions an answer calls.

`forbidden_calls(sources, entry, targets)` reads the code cells `sources`, finds the
last top-level definition of `entry` and everything it reaches by name (other
functions and classes of the notebook, module-level aliases), resolves imports and
aliases (`import torch.nn.functional as F`, `from torch import softmax as s`,
`sm = torch.softmax`), and reports every use of a target. A target is a dotted name
(`torch.softmax`) or `.name` for any attribute of that name (`x.softmax(...)`).
Dynamic tricks in the reached code (`getattr` with a computed or matching name,
`eval`, `exec`, `__import__`, `importlib`, `globals()`, `sys.modules`) are reported
too, as needing review: the test fails and says so.
Standalone (no labtools imports): lab notebooks hold a copy.
"""

import ast

_DYNAMIC_CALLS = {"eval", "exec", "compile", "__import__", "globals", "locals", "vars", "getattr", "attrgetter",
                  "methodcaller", "import_module"}
_DYNAMIC_METHODS = {"import_module", "attrgetter", "methodcaller", "__import__"}
_DYNAMIC_NAMES = {"importlib", "__dict__", "__getattribute__", "modules", "__builtins__", "builtins"}


def _dotted(node):
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _local_names(node):
    """Names a function or class binds itself (parameters, assignments, imports, inner defs):
    a use of one of them is not a use of the notebook's global of that name."""
    names = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.arg):
            names.add(sub.arg)
        elif isinstance(sub, ast.Name) and isinstance(sub.ctx, (ast.Store, ast.Del)):
            names.add(sub.id)
        elif isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and sub is not node:
            names.add(sub.name)
        elif isinstance(sub, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in sub.names)
    return names if not isinstance(node, ast.Assign) else set()


def _parse(source):
    lines = [l for l in source.splitlines() if not l.lstrip().startswith(("%", "!"))]  # IPython magics
    try:
        return ast.parse("\n".join(lines))
    except SyntaxError:
        return None


def forbidden_calls(sources, entry, targets):
    """Uses of `targets` (and dynamic tricks) in the code `entry` reaches; [] if none."""
    definitions, aliases = {}, {}
    for source in sources:
        tree = _parse(source)
        if tree is None:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom) and node.module:
                for a in node.names:
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                definitions[node.name] = node
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        dotted = _dotted(node.value)
                        if dotted:
                            aliases[target.id] = dotted
                        definitions.setdefault(f"={target.id}", node)
    if entry not in definitions:
        return []

    def resolve(dotted, depth=0):
        head, _, rest = dotted.partition(".")
        if head in aliases and depth < 20 and aliases[head] != dotted and aliases[head] != head:
            return resolve(aliases[head] + ("." + rest if rest else ""), depth + 1)
        return dotted

    full = [t for t in targets if not t.startswith(".")]
    leaves = {t[1:] for t in targets if t.startswith(".")} | {t.rsplit(".", 1)[-1] for t in full}
    found, seen, todo = [], set(), [entry]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        node = definitions.get(name) or definitions.get(f"={name}")
        if node is None:
            continue
        where = f"in {name}" if not isinstance(node, ast.Assign) else f"in the assignment to {name}"
        local = _local_names(node)
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and sub.id != name and sub.id not in local:
                if sub.id in definitions or f"={sub.id}" in definitions:
                    todo.append(sub.id)
                if sub.id in _DYNAMIC_NAMES or sub.id in ("eval", "exec", "__import__", "globals", "vars", "locals"):
                    found.append(f"{sub.id} {where} (a dynamic lookup: flagged for review)")
                resolved = resolve(sub.id)
                if resolved in full:
                    found.append(f"{resolved} {where}")
            elif isinstance(sub, ast.Attribute):
                dotted = _dotted(sub)
                resolved = resolve(dotted) if dotted else None
                if resolved in full:
                    found.append(f"{resolved} {where}")
                elif sub.attr in leaves:
                    found.append(f".{sub.attr} {where}")
                elif sub.attr in _DYNAMIC_NAMES:
                    found.append(f".{sub.attr} {where} (a dynamic lookup: flagged for review)")
            elif isinstance(sub, ast.Call):
                callee = sub.func.id if isinstance(sub.func, ast.Name) else getattr(sub.func, "attr", None)
                # a method of that name is not the built-in: re.compile(...) is not compile(...)
                if isinstance(sub.func, ast.Attribute) and callee not in _DYNAMIC_METHODS:
                    dotted = _dotted(sub.func)
                    if not (dotted and resolve(dotted).startswith(("builtins.", "__builtins__."))):
                        callee = None
                if callee in _DYNAMIC_CALLS:
                    literal = (len(sub.args) > 1 and isinstance(sub.args[1], ast.Constant)
                               and isinstance(sub.args[1].value, str) and sub.args[1].value not in leaves)
                    if not (callee == "getattr" and literal):
                        found.append(f"{callee}(...) {where} (a dynamic lookup: flagged for review)")
    return sorted(set(found))

