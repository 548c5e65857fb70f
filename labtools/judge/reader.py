# The one reader of student code. Two questions are asked of a notebook's cells, and both
# need the same answer first: what can each name refer to?
#   forbidden_calls      does the code an answer reaches use a function the exercise forbids?
#   reaches_into_runtime does any cell the student wrote step outside the Python an answer needs?
# Standalone on purpose (no labtools imports, no __future__ import): the lab notebooks
# embed this text after labtools/judge/wire.py so that visible tests can ask the first question
# in the student's kernel; graded verdicts always ask it in the judge.
"""Reading student code: names resolved once, by every Python binding form.

`Names` reads cells in order and records what each name of each scope may refer to:
a dotted path into a library (`import torch.nn.functional as F`, `G = F`, `for G in [F]`,
`if ...: G = F`, `(G := F)`, `G: object = F`, `with nullcontext(F) as G`, an import or
`global G` inside a helper), a definition of the notebook (a function or class), or
something else (a value the code computes). A name bound several ways may refer to any
of them, and the readers below assume the worst of them.

`forbidden_calls(sources, entry, targets)` follows `entry` through everything it
reaches by name and lists each use of a target (`torch.softmax`, or `.softmax` for any
attribute so named); dynamic lookups in reached code are listed as needing review.

`reaches_into_runtime(cells)` is an allowlist: the student's cells may import only the
course's libraries, may not write attributes of objects they did not make (a library,
its classes, anything reached through them), may not touch dunder or private attributes
outside their own classes, and may not look names up dynamically. Everything else is
listed, with its line and the reason, and the judge sends the notebook to review.
"""

import ast
import functools
import inspect

# -- reading cells -----------------------------------------------------------------------

def parse(source):
    """The cell's syntax tree (IPython magics and shell lines dropped), or None."""
    lines = [l for l in source.splitlines() if not l.lstrip().startswith(("%", "!"))]
    try:
        return ast.parse("\n".join(lines))
    except SyntaxError:
        return None


def dotted(node):
    """`a.b.c` for a chain of attributes on a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


# -- what names refer to -----------------------------------------------------------------

OTHER = ("other", None)  # a value the code computes: not a library object, not a definition


def _path(p):
    return ("path", p)


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef,
           ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_BUILTINS = {"eval", "exec", "compile", "__import__", "globals", "locals", "vars", "breakpoint", "getattr",
             "setattr", "delattr", "input", "open", "type", "object", "super", "print", "len", "range", "dir"}


_MUTATORS = {"append", "extend", "insert", "update", "setdefault", "add", "__setitem__"}


class Scope:
    def __init__(self, node, parent, cell=""):
        self.node, self.parent, self.cell = node, parent, cell
        self.values = {}        # name -> list of values it may hold
        self.declared = {}      # name -> "global" | "nonlocal"
        self.children = []
        if parent is not None:
            parent.children.append(self)

    @property
    def is_function(self):
        return isinstance(self.node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))

    def owner_of(self, name, walrus=False):
        """The scope a binding of `name` made here lands in (global/nonlocal; a walrus in a
        comprehension binds in the scope around it)."""
        scope = self
        while walrus and isinstance(scope.node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            scope = scope.parent
        kind = scope.declared.get(name)
        if kind == "global":
            while scope.parent is not None:
                scope = scope.parent
        elif kind == "nonlocal":
            scope = scope.parent
            while scope.parent is not None and not (scope.is_function and name in scope.values):
                scope = scope.parent
        return scope


class Names:
    """What every name of a notebook's cells may refer to, scope by scope."""

    def __init__(self):
        self.module = Scope(None, None)
        self.scope_of = {}      # id(scope node) -> Scope
        self.defs = []          # (name, node, cell, is_students) for every def/class, in order
        self.writes = []        # (base expr, attr, value expr, node, scope, cell, is_students): X.attr = value
        self.touches = {}       # global name -> statements that change what it holds (d[k] = v, d.add(v))
        self.touched_in = {}    # the same, with the cell and whether the student wrote it
        self.assigned = {}      # id(a Name target) -> the expression assigned to it, when plain
        self.bound_from = {}    # global name -> (expression it was bound from, scope it is read in)
        self.bound_exprs = {}   # (id(scope), name) -> (expression or None, iterated) for every binding
        self.module_bindings = {}  # global name -> (is_students, values, node, cell) for every binding
        self._cell, self._students = "", True

    # reading ---------------------------------------------------------------------------
    def add_cell(self, tree, cell="", is_students=True):
        self._cell, self._students = cell, is_students
        self._block(tree.body, self.module, top=True)

    def _block(self, statements, scope, top=False):
        for statement in statements:
            self._statement(statement, scope, top)

    def _statement(self, node, scope, top):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for outer in node.decorator_list + (node.bases + [k.value for k in node.keywords]
                                                if isinstance(node, ast.ClassDef) else
                                                node.args.defaults + [d for d in node.args.kw_defaults if d]):
                self._expression(outer, scope)
            self.defs.append((node.name, node, self._cell, self._students))
            self.bind(scope, node.name, [("def", node)], replace=top, node=node)
            inner = self._new_scope(node, scope)
            if not isinstance(node, ast.ClassDef):
                self._parameters(node.args, inner)
            self._declarations(node, inner)
            self._block(node.body, inner)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if isinstance(node, ast.Import):
                    name = alias.asname or alias.name.split(".")[0]
                    path = alias.name if alias.asname else alias.name.split(".")[0]
                else:
                    if alias.name == "*":
                        continue
                    name, path = alias.asname or alias.name, f"{node.module or ''}.{alias.name}"
                self.bind(scope, name, [_path(path)], replace=top, node=node)
            return
        if isinstance(node, ast.Assign):
            for target in node.targets:
                self._target(target, node.value, scope, top, node)
        elif isinstance(node, ast.AnnAssign):
            if node.value is not None:
                self._target(node.target, node.value, scope, top, node)
            self._expression(node.annotation, scope)
        elif isinstance(node, ast.AugAssign):
            self._target(node.target, None, scope, False, node)
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            self._target(node.target, node.iter, scope, False, node, iterated=True)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                if item.optional_vars is not None:
                    self._target(item.optional_vars, item.context_expr, scope, False, node, entered=True)
        elif isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
            for handler in node.handlers:
                if handler.name:
                    self.bind(scope, handler.name, [OTHER])
        elif isinstance(node, ast.Delete):
            for target in node.targets:
                self._target(target, None, scope, False, node)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            return
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            self._mutating_call(node.value, scope, node)
        for field, value in ast.iter_fields(node):
            if field in ("targets", "target") and not isinstance(node, (ast.For, ast.AsyncFor)):
                for target in (value if isinstance(value, list) else [value]):
                    self._expression(target, scope, store=True)
                continue
            items = value if isinstance(value, list) else [value]
            blocks = [v for v in items if isinstance(v, ast.stmt)]
            if blocks:
                self._block(blocks, scope)  # nested blocks bind in the same scope, conditionally
            for v in items:
                if isinstance(v, ast.excepthandler):
                    self._block(v.body, scope)
                    if v.type is not None:
                        self._expression(v.type, scope)
                elif isinstance(v, ast.withitem):
                    self._expression(v.context_expr, scope)
                elif isinstance(v, ast.expr):
                    self._expression(v, scope)
                elif isinstance(v, ast.AST) and not isinstance(v, ast.stmt):
                    for sub in ast.iter_child_nodes(v):  # match cases, keywords, ...
                        if isinstance(sub, ast.stmt):
                            self._block([sub], scope)
                        elif isinstance(sub, ast.expr):
                            self._expression(sub, scope)

    def _new_scope(self, node, parent):
        scope = Scope(node, parent, self._cell)
        self.scope_of[id(node)] = scope
        return scope

    def _parameters(self, args, scope):
        for a in args.posonlyargs + args.args + args.kwonlyargs + [x for x in (args.vararg, args.kwarg) if x]:
            self.bind(scope, a.arg, [OTHER])

    def _declarations(self, node, scope):
        """`global`/`nonlocal` statements of a function's own body (not of nested scopes)."""
        todo = list(node.body) if isinstance(node.body, list) else []
        while todo:
            sub = todo.pop()
            if isinstance(sub, ast.Global):
                scope.declared.update((n, "global") for n in sub.names)
            elif isinstance(sub, ast.Nonlocal):
                scope.declared.update((n, "nonlocal") for n in sub.names)
            if not isinstance(sub, _SCOPES):
                todo.extend(ast.iter_child_nodes(sub))

    def _expression(self, node, scope, store=False):
        """Scopes and walrus bindings inside an expression (lambdas, comprehensions)."""
        if isinstance(node, ast.Lambda):
            for d in node.args.defaults + [d for d in node.args.kw_defaults if d]:
                self._expression(d, scope)
            inner = self._new_scope(node, scope)
            self._parameters(node.args, inner)
            self._expression(node.body, inner)
            return
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            inner = self._new_scope(node, scope)
            for i, gen in enumerate(node.generators):
                self._expression(gen.iter, scope if i == 0 else inner)
                self._target(gen.target, gen.iter, inner, False, node, iterated=True)
                for cond in gen.ifs:
                    self._expression(cond, inner)
            for part in ([node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]):
                self._expression(part, inner)
            return
        if isinstance(node, ast.NamedExpr):
            self._target(node.target, node.value, scope, False, node, walrus=True)
        if isinstance(node, ast.Call):
            self._mutating_call(node, scope, node)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                self._expression(child, scope)
            elif isinstance(child, ast.keyword):
                self._expression(child.value, scope)

    def _target(self, target, value, scope, top, node, iterated=False, entered=False, walrus=False):
        if isinstance(target, ast.Name):
            if value is None:
                values = [OTHER]
            elif iterated:
                values = self.element_values(value, scope)
            elif entered:
                values = self.entered_values(value, scope)
            else:
                values = self.values(value, scope)
            self.bind(scope, target.id, values, replace=top, node=target, walrus=walrus)
            self.assigned[id(target)] = None if (iterated or entered) else value
            owner = scope.owner_of(target.id, walrus)
            self.bound_exprs.setdefault((id(owner), target.id), []).append((None if entered else value, iterated))
            if owner is self.module:
                self.bound_from.setdefault(target.id, []).append((value if value is not None else node, scope))
        elif isinstance(target, (ast.Tuple, ast.List)):
            paired = (not iterated and not entered and isinstance(value, (ast.Tuple, ast.List))
                      and len(value.elts) == len(target.elts))
            for i, element in enumerate(target.elts):
                if isinstance(element, ast.Starred):
                    element = element.value
                if paired:
                    self._target(element, value.elts[i], scope, top, node)
                elif isinstance(value, ast.IfExp) and all(
                        isinstance(b, (ast.Tuple, ast.List)) and len(b.elts) == len(target.elts)
                        for b in (value.body, value.orelse)):
                    # `a, b = ("x", "y") if c else ("u", "v")`: each name gets one of two items
                    self._target(element, ast.IfExp(test=value.test, body=value.body.elts[i],
                                                     orelse=value.orelse.elts[i]), scope, top, node)
                elif iterated and isinstance(value, (ast.Tuple, ast.List, ast.Set)):
                    # `for a, b in [(F, x)]`: each name may be any item of any element
                    self._target(element, ast.List(elts=[e for v in value.elts for e in
                                                         (v.elts if isinstance(v, (ast.Tuple, ast.List)) else [v])],
                                                   ctx=ast.Load()), scope, False, node, iterated=True)
                else:
                    self._target(element, None, scope, False, node)
        elif isinstance(target, ast.Starred):
            self._target(target.value, None, scope, False, node)
        elif isinstance(target, ast.Attribute):
            self.writes.append((target.value, target.attr, value, node, scope, self._cell, self._students))
            self._touch(target, node, scope)
        elif isinstance(target, ast.Subscript):
            self._touch(target, node, scope)

    def _touch(self, target, node, scope):
        root = target
        while isinstance(root, (ast.Attribute, ast.Subscript)):
            root = root.value
        if isinstance(root, ast.Name):
            self.touches.setdefault(root.id, []).append((node, scope))
            self.touched_in.setdefault(root.id, []).append((node, scope, self._cell, self._students))

    def _mutating_call(self, call, scope, node):
        """`d.append(v)`, `d.update(...)`: the statement changes what `d` holds."""
        if isinstance(call.func, ast.Attribute) and call.func.attr in _MUTATORS:
            self._touch(call.func, node, scope)
        if isinstance(call.func, ast.Name) and call.func.id in ("setattr", "delattr") and call.args:
            base = call.args[0]
            name = call.args[1].value if len(call.args) > 1 and isinstance(call.args[1], ast.Constant) else None
            value = call.args[2] if len(call.args) > 2 else None
            self.writes.append((base, name if isinstance(name, str) else None, value, node, scope,
                                self._cell, self._students))

    def bind(self, scope, name, values, replace=False, node=None, walrus=False):
        owner = scope.owner_of(name, walrus)
        if owner is self.module:  # who binds each name of the notebook, and to what
            self.module_bindings.setdefault(name, []).append((self._students, list(values), node, self._cell))
        held = owner.values.setdefault(name, [])
        if replace and owner is self.module and owner is scope:
            # an unconditional module-level binding replaces what the name held, except that a
            # library path it once held is kept: code that ran in between may have used it
            held[:] = [v for v in held if v[0] == "path"]
        for v in values:
            if v not in held:
                held.append(v)

    # resolving -------------------------------------------------------------------------
    def lookup(self, name, scope):
        """What `name`, read in `scope`, may refer to."""
        first = scope
        while scope is not None:
            if scope.declared.get(name) == "global":
                return list(self.module.values.get(name, [])) or [_path("builtins." + name)]
            if name in scope.values and (scope is first or not isinstance(scope.node, ast.ClassDef)):
                return list(scope.values[name])
            scope = scope.parent
        return [_path("builtins." + name)] if name in _BUILTINS else [OTHER]

    def values(self, node, scope):
        """What an expression may evaluate to, as far as reading can tell."""
        if isinstance(node, ast.Name):
            return self.lookup(node.id, scope)
        if isinstance(node, ast.Attribute):
            out = []
            for v in self.values(node.value, scope):
                if v[0] == "path":
                    out.append(_path(f"{v[1]}.{node.attr}"))
                elif v[0] == "def" and isinstance(v[1], ast.ClassDef) and id(v[1]) in self.scope_of:
                    out.extend(self.scope_of[id(v[1])].values.get(node.attr, [OTHER]))  # a class attribute
                else:
                    out.append(OTHER)
            return _unique(out)
        if isinstance(node, ast.IfExp):
            return _unique(self.values(node.body, scope) + self.values(node.orelse, scope))
        if isinstance(node, ast.BoolOp):
            return _unique([v for value in node.values for v in self.values(value, scope)])
        if isinstance(node, ast.NamedExpr):
            return self.values(node.value, scope)
        if isinstance(node, ast.Subscript) and isinstance(node.value, (ast.List, ast.Tuple, ast.Dict)):
            return self.element_values(node.value, scope)
        if isinstance(node, ast.Starred):
            return self.element_values(node.value, scope)
        return [OTHER]

    def element_values(self, node, scope):
        """What iterating over (or indexing) an expression may give."""
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            return _unique([v for e in node.elts for v in self.values(e, scope)]) or [OTHER]
        if isinstance(node, ast.Dict):
            return _unique([v for e in node.keys + node.values if e is not None for v in self.values(e, scope)]) \
                or [OTHER]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in (
                "enumerate", "zip", "reversed", "list", "tuple", "iter", "sorted", "set"):
            return _unique([v for a in node.args for v in self.element_values(a, scope)] + [OTHER])
        return [OTHER]

    def entered_values(self, node, scope):
        """What `with <node> as name` may bind: a nullcontext hands back its argument."""
        if isinstance(node, ast.Call) and node.args and any(
                v[0] == "path" and v[1].endswith("nullcontext") for v in self.values(node.func, scope)):
            return self.values(node.args[0], scope)
        return [OTHER]

    def paths(self, node, scope):
        return [v[1] for v in self.values(node, scope) if v[0] == "path"]

    def scope_for(self, node, default):
        return self.scope_of.get(id(node), default)


def _unique(values):
    out = []
    for v in values:
        if v not in out:
            out.append(v)
    return out


def read_names(sources):
    """`Names` of cells given as (where, source, is_students), or as plain sources."""
    names = Names()
    for i, cell in enumerate(sources):
        where, source, students = cell if isinstance(cell, tuple) else (f"cell {i + 1}", cell, True)
        tree = parse(source)
        if tree is not None:
            names.add_cell(tree, where, students)
    return names


def _walk_scoped(node, scope, names):
    """(sub-node, the scope it is read in) for everything inside `node`."""
    todo = [(node, scope)]
    while todo:
        current, where = todo.pop()
        yield current, where
        inner = names.scope_of.get(id(current), where) if current is not node else where
        for child in ast.iter_child_nodes(current):
            # a function's decorators and defaults are read outside it; its body inside
            if isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)) \
                    and child in getattr(current, "decorator_list", []) + getattr(current, "bases", []):
                todo.append((child, where))
            elif isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) \
                    and child is current.args:
                todo.append((child, where))
            else:
                todo.append((child, inner if current is not node else names.scope_of.get(id(node), where)))


# -- rule 1: forbidden calls in the code an answer reaches --------------------------------

_DYNAMIC_CALLS = {"eval", "exec", "compile", "__import__", "globals", "locals", "vars", "getattr", "attrgetter",
                  "methodcaller", "import_module", "breakpoint"}
_DYNAMIC_NAMES = {"importlib", "__dict__", "__getattribute__", "modules", "__builtins__", "builtins"}


def forbidden_calls(sources, entry, targets, exists=None):
    """Uses of `targets` (and dynamic tricks) in the code `entry` reaches; [] if none.

    `exists(path)`, when given, says whether a library really has an attribute (None when
    it cannot tell): a reached use of one it lacks can only be a patch, and is listed."""
    names = read_names(sources)
    module = names.module
    if entry not in module.values:
        return []
    full = [t for t in targets if not t.startswith(".")]
    leaves = {t[1:] for t in targets if t.startswith(".")} | {t.rsplit(".", 1)[-1] for t in full}
    found = []
    seen_nodes, seen_names, seen_attrs = set(), set(), set()
    todo = []  # (node, scope it is read in, what it is)

    def reach_name(name):
        if name in seen_names:
            return
        seen_names.add(name)
        for v in module.values.get(name, []):
            if v[0] == "def":
                todo.append((v[1], module, f"in {name}"))
        for statement, at in names.bound_from.get(name, []) + names.touches.get(name, []):
            todo.append((statement, at, f"in the code that sets {name}"))

    def reach_attr(attr):
        if attr in seen_attrs:
            return
        seen_attrs.add(attr)
        for base, written, value, node, scope, _, _ in names.writes:
            if written == attr and value is not None:
                todo.append((value, scope, f"in what is assigned to .{attr}"))

    reach_name(entry)
    while todo:
        node, scope, where = todo.pop()
        if id(node) in seen_nodes:
            continue
        seen_nodes.add(id(node))
        for sub, at in _walk_scoped(node, scope, names):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load):
                held = names.lookup(sub.id, at)
                for v in held:
                    if v[0] == "def" and id(v[1]) not in seen_nodes:
                        todo.append((v[1], module, f"in {v[1].name}"))
                if _is_global(names, sub.id, at):
                    reach_name(sub.id)
                    if sub.id in full and sub.id != entry:  # a target naming a function of the notebook
                        found.append(f"{sub.id} {where}")
                for p in [v[1] for v in held if v[0] == "path"]:
                    if _matches(p, full):
                        found.append(f"{p} {where}")
                    elif p.rsplit(".", 1)[-1] in leaves and not p.startswith("builtins."):
                        found.append(f".{p.rsplit('.', 1)[-1]} {where}")
                    elif p.startswith("builtins.") and p[9:] in _DYNAMIC_CALLS | {"__builtins__"} \
                            and not (p[9:] == "getattr" and _called(sub, node)):  # getattr(x, "name"): below
                        called = "(...)" if _called(sub, node) else ""
                        found.append(f"{p[9:]}{called} {where} (a dynamic lookup: flagged for review)")
                if sub.id in _DYNAMIC_NAMES:
                    found.append(f"{sub.id} {where} (a dynamic lookup: flagged for review)")
            elif isinstance(sub, ast.Attribute):
                reach_attr(sub.attr)
                resolved = names.paths(sub, at)
                hit = [p for p in resolved if _matches(p, full)]
                if hit:
                    found.append(f"{hit[0]} {where}")
                elif sub.attr in leaves:
                    found.append(f".{sub.attr} {where}")
                elif sub.attr in _DYNAMIC_NAMES and not _called(sub, node):
                    found.append(f".{sub.attr} {where} (a dynamic lookup: flagged for review)")
                elif exists is not None and isinstance(sub.ctx, ast.Load):
                    for p in resolved:
                        if exists(p) is False:
                            found.append(f"{p} {where} (the library has no such attribute: a patch?)")
            if isinstance(sub, ast.Call):
                for keyword in sub.keywords:
                    if keyword.arg in leaves:
                        found.append(f"{keyword.arg}= {where}")
            if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute):
                if sub.func.attr in _DYNAMIC_CALLS and any(
                        p.startswith(("builtins.", "importlib.", "operator.")) for p in names.paths(sub.func, at)) \
                        or sub.func.attr in ("import_module", "attrgetter", "methodcaller", "__import__"):
                    found.append(f"{sub.func.attr}(...) {where} (a dynamic lookup: flagged for review)")
            if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id in ("getattr",) \
                    and any(v == _path("builtins.getattr") for v in names.lookup("getattr", at)):
                name = sub.args[1] if len(sub.args) > 1 else None
                if not (isinstance(name, ast.Constant) and isinstance(name.value, str) and name.value not in leaves):
                    found.append(f"getattr(...) {where} (a dynamic lookup: flagged for review)")
    return sorted(set(found))


def _matches(path, full):
    """A path is a target, or inside one (`transformers.generation.utils` is in `transformers.generation`),
    or another name of the same function or class (`torch.nn.modules.activation.MultiheadAttention` is
    `torch.nn.MultiheadAttention`)."""
    if any(path == t or path.startswith(t + ".") for t in full):
        return True
    named = _library_object(path)
    if named is None:
        return False
    home = getattr(named, "__name__", "") if inspect.ismodule(named) else getattr(named, "__module__", None) or ""
    for t in full:
        target = _library_object(t)
        if target is named:
            return True
        # a re-export of something a target module defines (`transformers.TextGenerationPipeline` is
        # defined in transformers.pipelines)
        if inspect.ismodule(target) and isinstance(home, str) and (home == target.__name__
                                                                  or home.startswith(target.__name__ + ".")):
            return True
    return False


@functools.lru_cache(maxsize=4096)
def _library_object(path):
    """The function, class or module a dotted path names in a library this process has already
    imported, or None. Nothing is imported by name here; a library's own lazy attribute (a module
    __getattr__, as transformers has) is asked only for names a module does not hold yet."""
    import sys

    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        obj = sys.modules.get(".".join(parts[:i]))
        if obj is not None:
            break
    else:
        return None
    for name in parts[i:]:
        try:
            obj = inspect.getattr_static(obj, name)
        except AttributeError:
            if not inspect.ismodule(obj) or name.startswith("_"):
                return None
            try:  # transformers' lazy module: the name is real, its module not yet imported
                obj = getattr(obj, name)
            except Exception:  # noqa: BLE001 - a library's lazy import can fail in any way
                return None
    obj = getattr(obj, "__func__", obj)  # a staticmethod or classmethod seen statically
    return obj if callable(obj) or inspect.ismodule(obj) else None


def _called(attribute, root):
    """Whether `x.modules` is called right away (nn.Module.modules()), not read (sys.modules)."""
    for sub in ast.walk(root):
        if isinstance(sub, ast.Call) and sub.func is attribute:
            return True
    return False


def _is_global(names, name, scope):
    while scope is not None and scope is not names.module:
        if scope.declared.get(name) == "global":
            return True
        if name in scope.values and not isinstance(scope.node, ast.ClassDef):
            return False
        scope = scope.parent
    return True


# -- rule 2: the allowlist every student cell is read against -----------------------------

# Libraries an answer of this course may import (a submodule of one is fine unless listed
# below as the runtime's machinery); anything else goes to review, with its name.
ALLOWED_MODULES = {
    "torch", "numpy", "math", "cmath", "random", "time", "datetime", "collections", "itertools", "functools",
    "operator", "dataclasses", "typing", "typing_extensions", "abc", "enum", "re", "string", "statistics", "copy",
    "json", "csv", "pathlib", "os", "warnings", "contextlib", "textwrap", "heapq", "bisect", "difflib", "hashlib",
    "zlib", "fractions", "decimal", "numbers", "pprint", "unicodedata", "tempfile", "matplotlib", "mpl_toolkits",
    "seaborn", "pandas", "scipy", "sklearn", "transformers", "datasets", "tokenizers", "huggingface_hub",
    "rouge_score", "evaluate", "tqdm", "einops", "IPython.display", "sentencepiece", "nltk",
    "PIL", "tabulate", "sys", "types", "torchvision", "accelerate", "timeit", "string", "struct", "array",
}
# allowed modules of which only these names may be used
MODULE_NAMES_OK = {"functools": {"partial", "reduce", "wraps", "lru_cache", "cache", "cached_property", "total_ordering"},
                   "operator": {"itemgetter", "add", "mul", "sub", "truediv", "neg", "matmul"},
                   "sys": {"version", "version_info", "platform", "maxsize", "float_info", "byteorder"},
                   "types": {"SimpleNamespace"}}
# (os._exit and os.abort only end the kernel, which the grader survives: not listed)
OS_FORBIDDEN = {"environ", "environb", "getenv", "putenv", "unsetenv", "system", "popen", "kill", "killpg", "fork",
                "forkpty", "dup", "dup2", "write", "execv", "execve", "execl", "execlp", "execvp", "spawnl", "spawnv",
                "posix_spawn", "setsid", "chdir", "chroot", "sys", "open", "fdopen", "pipe"}
TORCH_INTERNALS = ("torch.overrides", "torch.utils._python_dispatch", "torch._C", "torch._dynamo", "torch.library",
                   "torch._ops", "torch._refs", "torch._prims", "torch.ops", "torch.sys", "torch.os",
                   # hooks on every module or every graph of the process (the lab's stand-in models too)
                   "torch.nn.modules.module", "torch.autograd.graph", "torch.utils.hooks")
# writable settings of a library (a seed, a precision or determinism switch): not a patch
SETTINGS_OK = ("torch.backends.", "pandas.options.", "matplotlib.rcParams", "numpy.random.seed")
# what a name of the kernel may be, but never in an answer
_DYNAMIC = {"eval", "exec", "compile", "__import__", "globals", "locals", "vars", "breakpoint", "get_ipython",
            "labwire", "__builtins__"}
_BY_NAME = {"getattr", "setattr", "delattr"}
_BY_NAME_OK = {"torch", "torch.nn", "torch.nn.functional"}  # getattr(F, "gelu"): an activation chosen by name
# attributes that lead to frames, modules, the kernel's streams or its process, on whatever object
RUNTIME_ATTRS = {"modules", "_getframe", "settrace", "setprofile", "f_back", "f_locals", "f_globals", "f_code",
                 "f_builtins", "gi_frame", "gi_code", "cr_frame", "ag_frame", "tb_frame", "tb_next", "stdin", "stdout",
                 "stderr", "displayhook", "excepthook", "meta_path", "path_hooks", "environ", "set_custom_exc",
                 "input_transformers_post", "input_transformers_cleanup", "register_magic_function",
                 # modules reached as attributes of other modules (os.sys, torch.sys)
                 "sys", "builtins", "gc", "inspect", "importlib", "ctypes", "subprocess", "threading", "_thread",
                 "marshal"}
DUNDERS_OK = {"__init__", "__name__", "__qualname__", "__doc__", "__class__", "__len__", "__call__", "__getitem__",
              "__setitem__", "__iter__", "__next__", "__repr__", "__str__", "__version__", "__enter__", "__exit__",
              "__contains__", "__add__", "__mul__", "__matmul__", "__post_init__", "__annotations__", "__module__",
              "__file__", "__eq__", "__hash__", "__lt__", "__bool__", "__array__"}
TORCH_HOOKS = {"__torch_function__", "__torch_dispatch__"}
# Measurements the labs' tests take in the kernel (lab 4's stand-in model, lab 6's grad-mode and tqdm watches)
INSTRUMENT_NAMES = {"grad_mode_calls", "watch_grad_mode", "progress_bars", "watch_progress_bars"}
INSTRUMENT_ATTRS = INSTRUMENT_NAMES | {"grad_enabled", "encode_calls", "seen_shapes", "seen_modes",
                                       # what lab 5's stand-in model would answer (the tests' expectation)
                                       "favourite",
                                       # torch's hooks on a module: the tests' watches live there
                                       "_forward_pre_hooks", "_forward_hooks", "_backward_hooks", "_backward_pre_hooks",
                                       "_forward_hooks_with_kwargs", "_forward_pre_hooks_with_kwargs",
                                       "_forward_hooks_always_called", "_global_forward_hooks"}


def _module_allowed(name):
    if any(name == t or name.startswith(t + ".") for t in TORCH_INTERNALS):
        return False
    parts = name.split(".")
    return any(".".join(parts[:i]) in ALLOWED_MODULES for i in range(1, len(parts) + 1))


def _name_allowed(path):
    """Whether a library path an answer uses is on the allowed side."""
    if any(path == t or path.startswith(t + ".") for t in TORCH_INTERNALS):
        return False
    head, _, rest = path.partition(".")
    first = rest.split(".")[0]
    if head in MODULE_NAMES_OK and first and first not in MODULE_NAMES_OK[head]:
        return False
    return not (head == "os" and first in OS_FORBIDDEN)


def _literal_names_only(value, iterated=False):
    """Whether every string `value` can give (element by element, when iterated) is an
    ordinary attribute name written in the cell."""
    if isinstance(value, ast.IfExp):
        return _literal_names_only(value.body, iterated) and _literal_names_only(value.orelse, iterated)
    if isinstance(value, (ast.Tuple, ast.List)):
        return all(_literal_names_only(e) for e in value.elts)
    if iterated:
        return False  # iterating over one string gives its letters
    return isinstance(value, ast.Constant) and isinstance(value.value, str) and _ordinary(value.value)


def _ordinary(attr):
    return not attr.startswith("_") and attr not in RUNTIME_ATTRS and attr not in INSTRUMENT_ATTRS


def _literal_name(names, name, scope):
    """Whether every binding of the variable `name` (as read in `scope`) gives ordinary
    attribute names written in the cell: `for n in ["weight", "bias"]`, `n = "gamma"`."""
    while scope is not None and name not in scope.values:
        scope = scope.parent
    if scope is None:
        return False
    bindings = names.bound_exprs.get((id(scope), name))
    return bool(bindings) and all(value is not None and _literal_names_only(value, iterated)
                                  for value, iterated in bindings)


def _own_attributes(names):
    """Attribute names the notebook gives its own objects (`self._cache = ...`, methods of its classes)."""
    own = {attr for _, attr, *_ in names.writes if attr}
    for _, node, _, _ in names.defs:
        if isinstance(node, ast.ClassDef):
            for sub in node.body:
                if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    own.add(sub.name)
                for target in getattr(sub, "targets", [getattr(sub, "target", None)]):
                    if isinstance(target, ast.Name):
                        own.add(target.id)
    return own


def _method_self(scope):
    """The first parameter's name of a method of a class (`self`, `cls`), else None."""
    while scope is not None:
        if isinstance(scope.node, (ast.FunctionDef, ast.AsyncFunctionDef)) and scope.parent is not None \
                and isinstance(scope.parent.node, ast.ClassDef):
            args = scope.node.args.posonlyargs + scope.node.args.args
            return args[0].arg if args else None
        scope = scope.parent
    return None


class _Finding:
    def __init__(self):
        self.found = []

    def add(self, what, where, node):
        self.found.append(f"{what} ({where}, line {getattr(node, 'lineno', '?')})")


def reaches_into_runtime(cells, read_by_tests=frozenset()):
    """What the student's cells do outside the allowed Python, as readable findings
    (`what (where, line n)`); [] for ordinary code.

    `cells` are (where, source, is_students) in notebook order: every cell binds names
    (the lab's cells import torch as `torch`, `F`, ...); only the student's are read.
    `read_by_tests` are names of the notebook (not answers) that the tests read there
    (lab 4's `hf_model`): a student cell may neither rebind nor change them."""
    names = Names()
    trees = []
    for where, source, students in cells:
        tree = parse(source)
        if tree is not None:
            names.add_cell(tree, where, students)
            trees.append((where, tree, students))
    own = _own_attributes(names)
    out = _Finding()
    for where, tree, students in trees:
        if students:
            for node, scope in _walk_scoped(tree, names.module, names):
                _read_node(node, scope, names, own, where, out, tree)
    lab_defs = {id(node) for _, node, _, students in names.defs if not students}
    lab_methods = {sub.name for _, node, _, students in names.defs if not students and isinstance(node, ast.ClassDef)
                   for sub in node.body if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef))
                   and not sub.name.startswith("__")}
    for base, attr, value, node, scope, where, students in names.writes:
        if students:
            _read_write(base, attr, node, scope, names, where, out, lab_defs, lab_methods)
    _read_rebindings(names, out)
    _read_test_objects(names, read_by_tests, out)
    return list(dict.fromkeys(out.found))


def _same_module_again(names, node, name):
    """`hf_model = hf_model.eval()`: a module's own methods that return the module itself."""
    value = names.assigned.get(id(node))
    return (isinstance(value, ast.Call)
            and isinstance(value.func, ast.Attribute) and isinstance(value.func.value, ast.Name)
            and value.func.value.id == name and value.func.attr in ("to", "eval", "cpu", "cuda", "float", "train"))


def _read_test_objects(names, read_by_tests, out):
    for name in read_by_tests:
        bindings = names.module_bindings.get(name, [])
        if not any(not students for students, *_ in bindings):
            continue  # the lab does not bind it here: nothing of the lab's to protect
        for students, _, node, where in bindings:
            if students and not _same_module_again(names, node, name):
                out.add(f"rebinds {name}, which the lab binds and its tests read", where, node)
        for node, scope, where, students in names.touched_in.get(name, []):
            while scope is not None and name not in scope.values:
                scope = scope.parent
            if students and scope in (None, names.module):
                out.add(f"changes {name} (the lab's, which its tests read)", where, node)


def _read_rebindings(names, out):
    """A student cell may not rebind, at the notebook's top level, a function, class or
    library name that the lab's own cells define: the tests use them (`student.ScriptedLM`,
    the kernel's `torch`). Importing the same library again under the same name is fine."""
    for name, bindings in names.module_bindings.items():
        lab = [v for students, values, _, _ in bindings if not students for v in values if v[0] in ("def", "path")]
        if not lab:
            continue
        lab_paths = {v[1] for v in lab if v[0] == "path"}
        for students, values, node, where in bindings:
            if students and not all(v[0] == "path" and v[1] in lab_paths for v in values):
                out.add(f"rebinds {name}, which the lab defines and its tests use", where, node)


def _lab_private(names, name, scope):
    """Whether `name`, read or bound in `scope`, is one the lab's cells bind at the top level
    with a leading underscore (lab 6's `_GRAD_MODE_CALLS`): the tests keep their counts there."""
    if not name.startswith("_") or name.startswith("__") or name == "_":
        return False
    while scope is not None and scope is not names.module and name not in scope.values:
        scope = scope.parent
    return scope is names.module and any(not students for students, *_ in names.module_bindings.get(name, []))


def _read_node(node, scope, names, own, where, out, tree):
    if isinstance(node, ast.Import):
        for a in node.names:
            if not _module_allowed(a.name):
                out.add(f"import {a.name} (not a library this course uses)", where, node)
    elif isinstance(node, ast.ImportFrom):
        module = node.module or ""
        for a in node.names:
            full = f"{module}.{a.name}"
            if node.level or not _module_allowed(module) or not _name_allowed(full) \
                    or (a.name == "*" and module.split(".")[0] in MODULE_NAMES_OK):
                out.add(f"from {'.' * node.level}{module} import {a.name} (not a library this course uses)",
                        where, node)
            elif a.name.startswith("_") and not a.name.startswith("__"):
                out.add(f"from {module} import {a.name} (a private name)", where, node)
    elif isinstance(node, ast.Name):
        held = [v[1][9:] for v in names.lookup(node.id, scope) if v[0] == "path" and v[1].startswith("builtins.")]
        if node.id in ("labwire", "get_ipython", "__builtins__"):  # the grader's and the kernel's own, bound or not
            out.add(f"{node.id} (the grader's or the kernel's own)", where, node)
        elif isinstance(node.ctx, ast.Load) and set(held) & _DYNAMIC:
            out.add(f"{node.id} (runs or looks up code by name)", where, node)
        elif isinstance(node.ctx, ast.Load) and "input" in held:
            # a tensor parameter named `input` is fine; the built-in is the kernel's stdin,
            # over which the judge sends its requests and reads the answers
            out.add("input (the built-in: the kernel's input channel)", where, node)
        elif isinstance(node.ctx, ast.Load) and set(held) & _BY_NAME and not _called(node, tree):
            out.add(f"{node.id} used as a value (a lookup by name that reading cannot follow)", where, node)
        elif node.id in INSTRUMENT_NAMES:
            out.add(f"{node.id} (a test's measurement)", where, node)
        elif _lab_private(names, node.id, scope):
            out.add(f"{node.id} (a private name of the lab's cells: the tests' own state)", where, node)
        elif node.id in TORCH_HOOKS and isinstance(node.ctx, ast.Store):
            out.add(f"defines {node.id}", where, node)
    elif isinstance(node, ast.Attribute):
        attr = node.attr
        dunder = attr.startswith("__") and attr.endswith("__")
        if dunder and (attr not in DUNDERS_OK or not isinstance(node.ctx, ast.Load)):
            out.add(f".{attr} (a dunder attribute: the interpreter's machinery)", where, node)
        elif attr in RUNTIME_ATTRS and not (attr == "modules" and _called(node, tree)):
            out.add(f".{attr} (the interpreter's or the kernel's internals)", where, node)
        elif attr in INSTRUMENT_ATTRS:
            out.add(f".{attr} (a test's measurement)", where, node)
        elif attr.startswith("_") and not dunder and (attr not in own or names.paths(node.value, scope)) \
                and not (isinstance(node.value, ast.Name) and node.value.id == _method_self(scope)) \
                and "os._exit" not in names.paths(node, scope):  # it only ends the kernel, which the grader survives
            out.add(f".{attr} (a private attribute of an object this notebook did not define)", where, node)
        else:
            for p in names.paths(node, scope):
                if not _name_allowed(p):
                    out.add(f"{p} (not a part of the library an answer may use)", where, node)
                    break
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in TORCH_HOOKS:
        out.add(f"defines {node.name}", where, node)
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _BY_NAME \
            and any(v == _path("builtins." + node.func.id) for v in names.lookup(node.func.id, scope)):
        name = node.func.id
        args = node.args
        literal = len(args) > 1 and isinstance(args[1], ast.Constant) and isinstance(args[1].value, str)
        base_paths = names.paths(args[0], scope) if args else []
        if literal and not _ordinary(args[1].value) and args[1].value not in own | DUNDERS_OK:
            out.add(f"{name}(..., {args[1].value!r})", where, node)
        elif not literal and not (
                (args and isinstance(args[0], ast.Name) and args[0].id == _method_self(scope) and name != "delattr")
                or (name == "getattr" and base_paths and all(p in _BY_NAME_OK for p in base_paths))
                or (len(args) > 1 and isinstance(args[1], ast.Name) and _literal_name(names, args[1].id, scope))):
            out.add(f"{name}(...) with a computed name", where, node)


_CALLED_BY_TESTS = {"forward", "generate", "__call__"}  # what tests and torch call on the objects they hand over


def _through_class(names, base, scope):
    """`model.__class__.forward = ...`, or `cls = model.__class__; cls.forward = ...`."""
    chain = base
    while isinstance(chain, (ast.Attribute, ast.Subscript)):
        if isinstance(chain, ast.Attribute) and chain.attr == "__class__":
            return True
        chain = chain.value
    if not isinstance(chain, ast.Name):
        return False
    while scope is not None and chain.id not in scope.values:
        scope = scope.parent
    bindings = names.bound_exprs.get((id(scope), chain.id), []) if scope is not None else []
    return any(value is not None and any(isinstance(n, ast.Attribute) and n.attr == "__class__"
                                         for n in ast.walk(value)) for value, _ in bindings)


def _read_write(base, attr, node, scope, names, where, out, lab_defs=frozenset(), lab_methods=frozenset()):
    """`X.attr = v`, `del X.attr`, `setattr(X, ...)`: only on objects the notebook made."""
    held = names.values(base, scope)
    lab = [v[1] for v in held if v[0] == "def" and id(v[1]) in lab_defs]
    if lab:
        out.add(f"changes {lab[0].name}.{attr or '...'} (the lab's own, which its tests use)", where, node)
        return
    paths = names.paths(base, scope)
    changed = [f"{p}.{attr}" if attr else p for p in paths]
    if changed and not all(c.startswith(SETTINGS_OK) for c in changed):
        out.add(f"changes {changed[0]} (an attribute of a library)", where, node)
        return
    if _through_class(names, base, scope):
        out.add(f"changes .{attr or '...'} of a class it reached through an object (`x.__class__`)", where, node)
        return
    if attr in lab_methods | _CALLED_BY_TESTS and not (isinstance(base, ast.Name) and base.id == _method_self(scope)):
        out.add(f"replaces .{attr} of an object (a method the lab's code calls)", where, node)
        return
    root = base
    while isinstance(root, (ast.Attribute, ast.Subscript)):
        root = root.value
    if isinstance(root, ast.Call) and not (isinstance(root.func, ast.Name) and root.func.id == "super"):
        if any(p in ("builtins.type", "builtins.getattr", "builtins.vars") for p in names.paths(root.func, scope)):
            out.add(f"changes .{attr} of a class or object it looked up", where, node)
