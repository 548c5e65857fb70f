"""Code that reaches into the grader or the Python runtime, found by reading it.

The judge decides every verdict from the values the student's functions return, so
the only way left to raise a score is to make the kernel return values the student's
code did not compute: patch the agent that answers the judge, rewrite what the kernel
prints, swap a library function or a tensor's methods for one that calls a built-in
the exercise forbids, or read the interpreter's frames and modules. None of that is
needed to answer any exercise of this course, and all of it has to be written down
in the notebook, so `reaches_into_runtime` reads every code cell the student could
write or change and lists what it finds. The judge then runs no test and says why
(`needs review`): an instructor looks at the notebook and decides.

What is flagged, wherever it appears (module level or inside a function):
- calls that run or look up code by name: eval, exec, compile, __import__, globals,
  locals, vars, breakpoint, and getattr/setattr/delattr with a computed name;
- imports of the runtime's machinery (ctypes, gc, inspect, importlib, sys internals,
  IPython and the kernel, threads, signals, torch's dispatch overrides, ...);
- `sys.<anything>` but a few read-only facts, and `os` process and environment calls;
- dunder attributes other than the everyday ones (`__code__`, `__globals__`,
  `__subclasses__`, `__dict__`, ...);
- assigning to, or deleting, an attribute of an imported module or of its classes
  (`torch.allclose = ...`, `torch.Tensor.sum = ...`), and `setattr` on one;
- classes that define `__torch_function__` or `__torch_dispatch__`;
- the grader's own names (`labwire`, `get_ipython`), and the tests' instruments: what a test's
  stand-in model records about how the student's code called it (`grad_mode_calls`,
  `watch_grad_mode`, `.grad_enabled`, `.encode_calls`), which live in the kernel beside that code;
- the kernel's input channel, which carries the judge's requests and the answers to
  them: the built-in `input` (a name `input` that is not a parameter or a local
  variable of the function that uses it), `sys.stdin`, `getpass`.
"""

from __future__ import annotations

import ast

from .source_rules import _dotted, _parse  # the same reading of names and of cells with magics

_CALLS = {"eval", "exec", "compile", "__import__", "globals", "locals", "vars", "breakpoint", "get_ipython"}
_BY_NAME = {"getattr", "setattr", "delattr"}
# a computed name is fine on these (an activation chosen by name: getattr(F, "gelu"))
_BY_NAME_OK = {"self", "torch", "torch.nn", "torch.nn.functional"}
# attributes that lead to frames, modules or the kernel's streams, whatever object they are read from
_ATTRS = {"modules", "_getframe", "settrace", "setprofile", "f_back", "f_locals", "f_globals", "f_code",
          "gi_frame", "tb_frame", "stdin", "stdout", "stderr", "displayhook", "excepthook", "meta_path", "environ",
          "set_custom_exc", "input_transformers_post", "input_transformers_cleanup", "register_magic_function"}
_MODULES = {
    "ctypes", "gc", "inspect", "importlib", "builtins", "sys", "types", "dis", "code", "codeop", "marshal", "pickle",
    "IPython", "ipykernel", "jupyter_client", "zmq", "traitlets", "threading", "_thread", "multiprocessing",
    "concurrent", "asyncio", "signal", "atexit", "subprocess", "socket", "pty", "faulthandler", "tracemalloc",
    "labtools", "labwire", "nbformat", "nbgrader", "nbclient", "safetensors", "weakref", "operator", "functools",
    "getpass",
}
# `import functools` is everyday code; only its partial/reduce/wraps/lru_cache/cache are, see below
_MODULE_ATTRS_OK = {"functools": {"partial", "reduce", "wraps", "lru_cache", "cache", "cached_property"},
                    "operator": {"itemgetter", "add", "mul", "sub", "truediv", "neg"},
                    "sys": {"version", "version_info", "platform", "maxsize", "float_info", "byteorder"},
                    "types": {"SimpleNamespace"}}
_TORCH_INTERNALS = ("torch.overrides", "torch.utils._python_dispatch", "torch._C", "torch._dynamo",
                    "torch.library", "torch._ops", "torch._refs", "torch._prims", "torch.ops")
# (os._exit and os.abort only end the kernel, which the grader survives: not flagged)
_OS_FORBIDDEN = {"environ", "getenv", "putenv", "unsetenv", "system", "popen", "kill", "killpg", "fork",
                 "forkpty", "dup", "dup2", "write", "execv", "execve", "execl", "execlp",
                 "execvp", "spawnl", "spawnv", "posix_spawn", "setsid", "chdir", "chroot"}
_DUNDERS_OK = {"__init__", "__name__", "__qualname__", "__doc__", "__class__", "__len__", "__call__",
               "__getitem__", "__setitem__", "__iter__", "__next__", "__repr__", "__str__", "__version__",
               "__enter__", "__exit__", "__contains__", "__add__", "__mul__", "__matmul__", "__post_init__",
               "__annotations__", "__module__", "__file__"}
_TORCH_HOOKS = {"__torch_function__", "__torch_dispatch__"}
# Measurements the labs' tests take in the kernel (lab 4's stand-in model, lab 6's grad-mode watch): an
# answer that reads, resets or rewrites them could hide a graph it recorded or a second encoding.
_INSTRUMENT_NAMES = {"grad_mode_calls", "watch_grad_mode"}
_INSTRUMENT_ATTRS = _INSTRUMENT_NAMES | {"grad_enabled", "encode_calls"}


_MODULES_OK = ("IPython.display",)  # showing HTML, images, markdown: sanitized, not a way into the grader


def _module_flag(name: str) -> bool:
    if any(name == ok or name.startswith(ok + ".") for ok in _MODULES_OK):
        return False
    top = name.split(".")[0]
    return (top in _MODULES and top not in _MODULE_ATTRS_OK) or any(
        name == t or name.startswith(t + ".") for t in _TORCH_INTERNALS)


def _plain_names(target) -> list[ast.Name] | None:
    """The names a binding target binds, when it is a name or a (nested) tuple of names."""
    if isinstance(target, ast.Name):
        return [target]
    if isinstance(target, (ast.Tuple, ast.List)):
        names = []
        for element in target.elts:
            inner = _plain_names(element)
            if inner is None:
                return None
            names += inner
        return names
    return None


def _string_literals_only(value, iterated: bool = False) -> bool:
    """Whether every string this expression can give (or, iterated, give element by element) is
    an ordinary attribute name written in the cell: literals, tuples or lists of them, and
    conditional expressions choosing between such."""
    if isinstance(value, ast.IfExp):
        return _string_literals_only(value.body, iterated) and _string_literals_only(value.orelse, iterated)
    if isinstance(value, (ast.Tuple, ast.List)):
        return all(_string_literals_only(e) for e in value.elts)
    if iterated:
        return False  # iterating over one string gives its letters: not a name list
    return isinstance(value, ast.Constant) and isinstance(value.value, str) \
        and value.value not in _ATTRS and not value.value.startswith("__")


def _function_locals(node) -> set[str]:
    """Names a function (or lambda) binds itself: its parameters and what its own body
    assigns, imports or defines (not what nested functions bind)."""
    args = node.args
    names = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
    names |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
    todo = list(node.body) if isinstance(node.body, list) else [node.body]
    while todo:
        sub = todo.pop()
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, (ast.Store, ast.Del)):
            names.add(sub.id)
        elif isinstance(sub, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in sub.names)
        if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(sub.name)
            todo.extend(sub.decorator_list)
            continue  # a nested scope's own bindings are not this function's
        if isinstance(sub, ast.Lambda):
            continue
        todo.extend(ast.iter_child_nodes(sub))
    return names


class _Reader(ast.NodeVisitor):
    def __init__(self, where: str):
        self.where = where
        self.scopes: list[set[str]] = []  # the local names of the functions being read, innermost last
        self.modules: dict[str, str] = {}  # local name -> module path, from imports
        self.found: list[str] = []
        self.safe_loop_names: set[str] = set()  # `for name in ["weight", "bias"]`: ordinary names only

    def visit_Module(self, node):
        # A name is an ordinary attribute name when every binding of it gives it string literals:
        # `for name in ["weight", "bias"]`, `scale, shift = ("gamma", "beta") if ... else (...)`.
        bound: dict[str, bool] = {}
        literal_targets = set()
        for sub in ast.walk(node):
            if isinstance(sub, (ast.For, ast.comprehension)):
                pairs = [(sub.target, sub.iter)]
            elif isinstance(sub, ast.Assign):
                pairs = [(target, sub.value) for target in sub.targets]
            else:
                continue
            for target, value in pairs:
                names = _plain_names(target)
                if names is None:
                    continue
                safe = _string_literals_only(value, iterated=not isinstance(sub, ast.Assign))
                for name in names:
                    bound[name.id] = bound.get(name.id, True) and safe
                    literal_targets.add(id(name))
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store) and id(sub) not in literal_targets:
                bound[sub.id] = False  # bound some other way too: could be any string
            elif isinstance(sub, ast.arg):
                bound[sub.arg] = False
        self.safe_loop_names = {n for n, ok in bound.items() if ok}
        self.generic_visit(node)

    def flag(self, what: str, node) -> None:
        self.found.append(f"{what} ({self.where}, line {getattr(node, 'lineno', '?')})")

    def resolve(self, dotted: str | None) -> str | None:
        if not dotted:
            return None
        head, _, rest = dotted.partition(".")
        if head in self.modules:
            return self.modules[head] + ("." + rest if rest else "")
        return None

    def visit_Import(self, node):
        for a in node.names:
            self.modules[(a.asname or a.name).split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            if _module_flag(a.name):
                self.flag(f"import {a.name}", node)

    def visit_ImportFrom(self, node):
        module = node.module or ""
        for a in node.names:
            full = f"{module}.{a.name}"
            self.modules[a.asname or a.name] = full
            allowed = _MODULE_ATTRS_OK.get(module.split(".")[0])
            if _module_flag(full) or (allowed is not None and "." not in module and a.name not in allowed) \
                    or (module == "os" and a.name in _OS_FORBIDDEN):
                self.flag(f"from {module} import {a.name}", node)

    def visit_Name(self, node):
        if node.id in ("labwire", "__builtins__", "get_ipython"):
            self.flag(node.id, node)
        elif node.id in _INSTRUMENT_NAMES:
            self.flag(f"{node.id} (a test's measurement)", node)
        elif node.id == "input" and isinstance(node.ctx, ast.Load) and not any("input" in s for s in self.scopes):
            # a tensor parameter named `input` (torch's own style) is fine; the built-in is the
            # kernel's stdin, over which the judge sends its requests and reads the answers
            self.flag("input (the built-in: the kernel's input channel)", node)

    def visit_Attribute(self, node):
        if (node.attr.startswith("__") and node.attr.endswith("__") and node.attr not in _DUNDERS_OK) \
                or node.attr in _ATTRS:
            self.flag(f".{node.attr}", node)
            return self.generic_visit(node)
        if node.attr in _INSTRUMENT_ATTRS:
            self.flag(f".{node.attr} (a test's measurement)", node)
            return self.generic_visit(node)
        full = self.resolve(_dotted(node))
        if full:
            head, _, attr = full.partition(".")
            attr = attr.split(".")[0]
            allowed = _MODULE_ATTRS_OK.get(head)
            if (allowed is not None and attr and attr not in allowed) or (head == "os" and attr in _OS_FORBIDDEN) \
                    or any(full == t or full.startswith(t + ".") for t in _TORCH_INTERNALS):
                self.flag(full, node)
        self.generic_visit(node)

    def visit_Call(self, node):
        name = node.func.id if isinstance(node.func, ast.Name) else None
        if name in _CALLS:
            self.flag(f"{name}(...)", node)
        elif name in _BY_NAME:
            literal = len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
            base = _dotted(node.args[0]) if node.args else None
            if literal and node.args[1].value in _ATTRS | _TORCH_HOOKS | _INSTRUMENT_ATTRS:
                self.flag(f"{name}(..., {node.args[1].value!r})", node)
            elif not literal and not (base == "self" or self.resolve(base) in _BY_NAME_OK
                                      or (len(node.args) > 1 and isinstance(node.args[1], ast.Name)
                                          and node.args[1].id in self.safe_loop_names)):
                self.flag(f"{name}(...) with a computed name", node)
            elif name in ("setattr", "delattr") and self.resolve(_dotted(node.args[0])):
                self.flag(f"{name} on {self.resolve(_dotted(node.args[0]))}", node)
        self.generic_visit(node)

    def _targets(self, targets, node):
        for target in targets:
            for sub in ast.walk(target):
                if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, (ast.Store, ast.Del)):
                    full = self.resolve(_dotted(sub))
                    if full:
                        self.flag(f"changes {full}", node)

    def visit_Assign(self, node):
        self._targets(node.targets, node)
        self.generic_visit(node)

    def visit_AugAssign(self, node):
        self._targets([node.target], node)
        self.generic_visit(node)

    def visit_AnnAssign(self, node):
        self._targets([node.target], node)
        self.generic_visit(node)

    def visit_Delete(self, node):
        self._targets(node.targets, node)
        self.generic_visit(node)

    def visit_FunctionDef(self, node):
        if node.name in _TORCH_HOOKS:
            self.flag(f"defines {node.name}", node)
        for outer in node.decorator_list + node.args.defaults + [d for d in node.args.kw_defaults if d is not None]:
            self.visit(outer)  # read in the enclosing scope
        self.scopes.append(_function_locals(node))
        for statement in node.body:
            self.visit(statement)
        self.scopes.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node):
        for outer in node.args.defaults + [d for d in node.args.kw_defaults if d is not None]:
            self.visit(outer)
        self.scopes.append(_function_locals(node))
        self.visit(node.body)
        self.scopes.pop()


def reaches_into_runtime(cells: list[tuple[str, str, bool]]) -> list[str]:
    """What the student's cells reach into, as readable findings; [] for ordinary code.

    `cells` are (where, source, is_students) in notebook order: every cell's imports
    count (the lab's own cells import torch as `torch`, `F`, ...), only the student's
    cells are read for findings."""
    modules: dict[str, str] = {}
    found: list[str] = []
    for where, source, is_students in cells:
        tree = _parse(source)
        if tree is None:
            continue
        reader = _Reader(where)
        reader.modules = modules
        reader.visit(tree)
        if is_students:
            found += reader.found
    return list(dict.fromkeys(found))
