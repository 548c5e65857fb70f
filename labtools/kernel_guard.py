"""The half of the test guard that runs inside a grading kernel.

`labtools.guard` sends this file's source to every kernel it autogrades, before the
first cell of the notebook, and calls `Guard` around each test cell. It must not
import labtools (the kernel may run in a sandbox without it) and it must only use
what a lab kernel has anyway (the standard library, IPython, torch, NumPy).

What it does, so that tests score what the student's code honestly earns:
- At kernel start it keeps the original contents of the modules and classes that
  tests rely on (builtins, torch, torch.testing, NumPy, numpy.testing, math, ...)
  and of IPython's hooks (input transformers, custom exception handlers, event
  callbacks, sys.settrace, displayhook).
- Before each test cell it undoes whatever changed since: a patched
  `torch.allclose`, a `numpy.testing` function replaced by a no-op, an exception
  handler that hides failed asserts, an input transformer that blanks test cells,
  test helpers redefined in an answer cell.
- During a test cell, the student's functions and modules are checked on the way
  out: an object that fakes its class, a Tensor subclass with its own
  `__torch_function__`, or a student-made object whose `__eq__` (or `__bool__`,
  ...) answers what the test wants to hear, fails the test with a clear message.

It reports what it undid as one JSON line; the grader shows it to the instructor.
A determined student can still read this code and defeat it from inside the
kernel; that is what the sandbox and the instructor's review are for.
"""

import builtins
import functools
import importlib
import json
import os
import sys
import types

REPORT_PREFIX = "LABTOOLS-GUARD "

WATCHED_MODULES = (
    "builtins", "math", "operator", "functools", "contextlib", "random",
    "torch", "torch.nn", "torch.nn.functional", "torch.testing", "torch.special", "torch.linalg",
    "numpy", "numpy.testing", "numpy.linalg",
)
# (module, class): classes whose methods tests call on the student's results.
WATCHED_CLASSES = (
    ("torch", "Tensor"), ("torch.nn", "Module"), ("torch.nn", "Parameter"),
    ("numpy", "ndarray"),
)
# Names that IPython and ipykernel rebind on their own: the display history in the user
# namespace, and `input`, which the kernel swaps for each request.
IGNORED_NAMES = {"_", "__", "___", "_i", "_ii", "_iii", "_oh", "_ih", "_dh", "In", "Out", "input", "raw_input"}
# What an instructor's cell defines that is restored if an answer redefines it: the
# helpers and imports the tests use. Data (tensors, models) is left alone, since the
# notebook's own demonstration cells rebind such names all the time.
RESTORED_KINDS = (types.FunctionType, types.BuiltinFunctionType, types.ModuleType, type, functools.partial)
# Methods through which an object can tell a test what it wants to hear.
DECEPTIVE_METHODS = (
    "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__bool__", "__len__",
    "__float__", "__int__", "__index__", "__torch_function__", "__array__",
    "__array_function__", "__array_ufunc__", "__getattr__", "__getattribute__",
)
TRUSTED_TENSOR_TYPES_MODULE = "torch"
MAX_CHECKED_ITEMS = 100_000
_MISSING = object()


class GuardFailure(AssertionError):
    """A result that pretends to be something it is not (the test fails)."""


def _describe(obj):
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or type(obj).__name__
    return str(name)


def _student_made(cls):
    """A class defined in the notebook (the student's namespace), not by a library."""
    return getattr(cls, "__module__", None) == "__main__"


def dishonesty(value, _budget=None):
    """Why `value` may not be trusted by a test, or None if it is an honest value."""
    budget = _budget if _budget is not None else [MAX_CHECKED_ITEMS]
    budget[0] -= 1
    if budget[0] < 0:
        return None
    kind = type(value)
    try:
        claimed = value.__class__
    except Exception:  # noqa: BLE001 - any failure here is itself a sign of tampering
        return f"an object of type {kind.__name__} whose __class__ cannot be read"
    if claimed is not kind:
        return f"an object of type {kind.__name__} that claims to be a {_describe(claimed)}"
    torch = sys.modules.get("torch")
    if torch is not None and issubclass(kind, torch.Tensor):
        if kind is torch.Tensor or kind.__module__.split(".")[0] == TRUSTED_TENSOR_TYPES_MODULE:
            return None
        return (f"a {kind.__name__}, a Tensor subclass defined outside torch "
                "(return a plain torch.Tensor)")
    if torch is not None and issubclass(kind, torch.nn.Module):
        return None
    for cls in kind.__mro__:
        if _student_made(cls):
            for name in DECEPTIVE_METHODS:
                if name in vars(cls):
                    return (f"an object of the notebook's own class {kind.__name__}, which defines "
                            f"{name} (return plain tensors, numbers, strings, lists, tuples or dicts)")
    if isinstance(value, (tuple, list)):
        items = value
    elif isinstance(value, dict):
        items = list(value.keys()) + list(value.values())
    else:
        return None
    for item in items:
        problem = dishonesty(item, budget)
        if problem:
            return f"a {kind.__name__} holding {problem}"
        if budget[0] < 0:
            break
    return None


def _checked(function):
    @functools.wraps(function)
    def checked(*args, **kwargs):
        result = function(*args, **kwargs)
        problem = dishonesty(result)
        if problem:
            raise GuardFailure(f"{_describe(function)} returned {problem}")
        return result

    checked.__labtools_guarded__ = function
    return checked


def _module_output_hook(module, args, output):
    problem = dishonesty(output)
    if problem:
        raise GuardFailure(f"{type(module).__name__}.forward returned {problem}")


class Guard:
    """Keeps the originals at kernel start; restores them before every test cell."""

    def __init__(self, shell):
        self.shell = shell
        self.modules = {}
        for name in WATCHED_MODULES:
            try:
                module = importlib.import_module(name)
            except Exception:  # noqa: BLE001 - a lab without NumPy still gets the rest
                continue
            self.modules[name] = (module, dict(vars(module)))
        self.classes = {}
        for module_name, class_name in WATCHED_CLASSES:
            module = self.modules.get(module_name, (None,))[0]
            cls = getattr(module, class_name, None)
            if isinstance(cls, type):
                self.classes[f"{module_name}.{class_name}"] = (cls, dict(vars(cls)))
        self.shell_classes = [(cls, dict(vars(cls))) for cls in type(shell).__mro__
                              if cls is not object and not cls.__module__.startswith("traitlets")]
        self.shell_attrs = set(vars(shell))
        self.hook_lists = {name: list(getattr(shell, name)) for name in
                           ("input_transformers_cleanup", "input_transformers_post", "ast_transformers")
                           if isinstance(getattr(shell, name, None), list)}
        self.custom_exc = (shell.custom_exceptions, shell.CustomTB)
        self.events = {event: list(callbacks) for event, callbacks in shell.events.callbacks.items()}
        self.sys_hooks = {"displayhook": sys.displayhook, "breakpointhook": sys.breakpointhook,
                          "stdout": sys.stdout, "stderr": sys.stderr,
                          "trace": sys.gettrace(), "profile": sys.getprofile()}
        self.user_builtins = shell.user_ns.get("__builtins__")
        self.system_names = set(shell.user_ns)
        self.given = {}          # names the instructor's cells bound, with their values
        self.wrapped = {}        # student functions replaced by checked ones during a test
        self.shadows = {}        # the notebook's own names that hid a built-in, put back after
        self.forward_hook = None

    # -- what instructors' cells define ------------------------------------------------
    def record(self, names):
        for name in names:
            value = self.shell.user_ns.get(name, _MISSING)
            if isinstance(value, RESTORED_KINDS):
                self.given[name] = value
            else:
                self.given.pop(name, None)

    # -- around a test cell --------------------------------------------------------------
    def before_test(self, student_names=()):
        undone = []
        undone += self._restore_sys_hooks()
        undone += self._restore_shell()
        for name, (module, original) in self.modules.items():
            undone += self._restore_dict(module, original, name, delete_new=False)
            if sys.modules.get(name) is not module:
                sys.modules[name] = module
                undone.append(f"sys.modules[{name!r}] was replaced")
        for name, (cls, original) in self.classes.items():
            undone += self._restore_dict(cls, original, name, delete_new=True)
        undone += self._restore_user_ns()
        self._wrap_student_functions(student_names)
        torch = self.modules.get("torch", (None,))[0]
        if torch is not None:
            self.forward_hook = torch.nn.modules.module.register_module_forward_hook(_module_output_hook)
        return undone

    def after_test(self):
        if self.forward_hook is not None:
            self.forward_hook.remove()
            self.forward_hook = None
        user_ns = self.shell.user_ns
        for name, function in self.wrapped.items():
            current = user_ns.get(name)
            if getattr(current, "__labtools_guarded__", None) is function:
                user_ns[name] = function
        self.wrapped = {}
        for name, value in self.shadows.items():
            user_ns.setdefault(name, value)
        self.shadows = {}
        return []

    # -- the pieces ----------------------------------------------------------------------
    def _restore_dict(self, owner, original, label, delete_new):
        undone = []
        current = vars(owner)
        for key, value in list(original.items()):
            new = current.get(key, _MISSING)
            if new is value or key in IGNORED_NAMES:
                continue
            if _library_wrapper_of(new, value):
                original[key] = new  # e.g. torch._dynamo wraps torch.manual_seed on import
                continue
            try:
                setattr(owner, key, value)
            except (TypeError, AttributeError):
                continue  # immutable (a C type): nothing could have changed it either
            undone.append(f"{label}.{key} was replaced")
        if delete_new:
            for key in [k for k in current if k not in original]:
                if _library_made(current[key]) and not _shadows_inherited(owner, key):
                    original[key] = current[key]  # e.g. transformers adds nn.Module.smart_apply
                    continue
                try:
                    delattr(owner, key)
                except (TypeError, AttributeError):
                    continue
                undone.append(f"{label}.{key} was added")
        return undone

    def _restore_sys_hooks(self):
        undone = []
        for name in ("displayhook", "breakpointhook", "stdout", "stderr"):
            if getattr(sys, name) is not self.sys_hooks[name]:
                setattr(sys, name, self.sys_hooks[name])
                undone.append(f"sys.{name} was replaced")
        if sys.gettrace() is not self.sys_hooks["trace"]:
            sys.settrace(self.sys_hooks["trace"])
            undone.append("a trace function was set (sys.settrace)")
        if sys.getprofile() is not self.sys_hooks["profile"]:
            sys.setprofile(self.sys_hooks["profile"])
            undone.append("a profile function was set (sys.setprofile)")
        return undone

    def _restore_shell(self):
        shell, undone = self.shell, []
        for cls, original in self.shell_classes:
            undone += self._restore_dict(cls, original, f"IPython {cls.__name__}", delete_new=True)
        for name in [n for n in vars(shell) if n not in self.shell_attrs]:
            if any(name in vars(cls) and callable(vars(cls)[name]) for cls, _ in self.shell_classes):
                delattr(shell, name)
                undone.append(f"the IPython shell's {name} method was replaced")
        for name, original in self.hook_lists.items():
            if getattr(shell, name) != original:
                getattr(shell, name)[:] = original
                undone.append(f"IPython's {name} were changed")
        if (shell.custom_exceptions, shell.CustomTB) != self.custom_exc:
            shell.custom_exceptions, shell.CustomTB = self.custom_exc
            undone.append("a custom exception handler was set (set_custom_exc)")
        for event, callbacks in shell.events.callbacks.items():
            original = self.events.get(event, [])
            # Libraries may add their own callbacks later (matplotlib's inline backend does).
            foreign = [cb for cb in callbacks if cb not in original and not _library_callback(cb)]
            for callback in foreign:
                callbacks.remove(callback)
                undone.append(f"an IPython {event!r} callback was registered ({_describe(callback)})")
        return undone

    def _restore_user_ns(self):
        user_ns, undone = self.shell.user_ns, []
        if user_ns.get("__builtins__") is not self.user_builtins:
            user_ns["__builtins__"] = self.user_builtins
            undone.append("__builtins__ was replaced")
        for name, value in self.given.items():
            if user_ns.get(name, _MISSING) is not value:
                user_ns[name] = value
                undone.append(f"{name} (given by the notebook) was redefined")
        originals = self.modules["builtins"][1]
        for name in [n for n in user_ns if n in originals and n not in self.system_names
                     and n not in self.given and n not in IGNORED_NAMES]:
            if user_ns[name] is not originals[name] and callable(originals[name]):
                self.shadows[name] = user_ns.pop(name)
                undone.append(f"the built-in {name} was shadowed")
        return undone

    def _wrap_student_functions(self, names):
        user_ns = self.shell.user_ns
        for name in names:
            function = user_ns.get(name)
            if isinstance(function, types.FunctionType) and name not in self.given:
                self.wrapped[name] = function  # the original, put back by after_test
                user_ns[name] = _checked(function)


def _library_dirs():
    dirs = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    try:
        import site
        dirs.update(site.getsitepackages())
        dirs.add(site.getusersitepackages())
    except Exception:  # noqa: BLE001 - some embedded Pythons lack parts of site
        pass
    return tuple(os.path.join(d, "") for d in dirs if d)


LIBRARY_DIRS = _library_dirs()


def _library_made(value):
    """Code that comes from an installed library, not from a notebook cell."""
    func = value.func if isinstance(value, functools.partial) else value
    func = getattr(func, "__func__", func)
    code = getattr(func, "__code__", None)
    if code is None:  # a C function, a class, a module, data
        module = getattr(func, "__module__", None) or getattr(type(func), "__module__", "")
        return module != "__main__"
    return code.co_filename.startswith(LIBRARY_DIRS)


def _library_wrapper_of(new, original):
    """A library's wrapper around the original (functools.wraps sets __wrapped__)."""
    seen = 0
    wrapped = new
    while seen < 10 and wrapped is not None and _library_made(wrapped):
        wrapped = getattr(wrapped, "__wrapped__", None)
        if wrapped is original:
            return True
        seen += 1
    return False


def _shadows_inherited(cls, key):
    return any(key in vars(base) for base in cls.__mro__[1:])


def _library_callback(callback):
    module = getattr(callback, "__module__", None) or ""
    owner = getattr(callback, "__self__", None)
    if owner is not None:
        module = type(owner).__module__
    return module.split(".")[0] in ("matplotlib", "matplotlib_inline", "ipykernel", "ipywidgets")


def report(undone):
    """One line the grader reads back from the hidden cell's output."""
    print(REPORT_PREFIX + json.dumps(undone))
