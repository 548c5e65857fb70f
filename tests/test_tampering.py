"""The reading of a submission for code that reaches into the grader or the runtime
(labtools/tampering.py): every way in that the attacks use is found, under other
names too, and no lab's own code nor an everyday answer is flagged."""

from __future__ import annotations

import pytest

from labtools import judge, nbcells, tampering
from labtools.labs import CURRICULUM as LABS

LAB_PRELUDE = ("import math, os, sys\nimport numpy as np\nimport torch\nimport torch.nn as nn\n"
               "import torch.nn.functional as F\nimport matplotlib.pyplot as plt\n")


def found(source: str) -> list[str]:
    return tampering.reaches_into_runtime([("setup", LAB_PRELUDE, False), ("answer", source, True)])


EVERYDAY = {
    "stable softmax": "def softmax(x, dim=-1):\n    e = torch.exp(x - x.amax(dim, keepdim=True))\n"
                      "    return e / e.sum(dim, keepdim=True)\n",
    "module with setattr on self": "class Stack(nn.Module):\n    def __init__(self, n):\n        super().__init__()\n"
                                   "        for i in range(n):\n            setattr(self, f'layer{i}', nn.Linear(4, 4))\n",
    "activation by name": "class FFN(nn.Module):\n    def __init__(self, act='gelu'):\n        super().__init__()\n"
                          "        self.act = act\n    def forward(self, x):\n        return getattr(F, self.act)(x)\n",
    "attributes listed by name": "m = nn.Linear(2, 2)\nprint({n: getattr(m, n).shape for n in ['weight', 'bias']})\n",
    "versions and paths": "print(sys.version, torch.__version__)\nos.makedirs('figures', exist_ok=True)\n",
    "functools and operators": "from functools import partial, reduce\nimport operator\n"
                               "total = reduce(operator.mul, [2, 3])\n",
    "a class with dunder methods": "class Pair:\n    def __init__(self, a):\n        self.a = a\n"
                                   "    def __repr__(self):\n        return f'{type(self).__name__}({self.a})'\n",
    "names chosen between literals": "def copy_norm(mine, theirs):\n"
                                     "    scale, shift = ('gamma', 'beta') if hasattr(mine, 'gamma') else ('weight', 'bias')\n"
                                     "    setattr(mine, scale, theirs.weight)\n    name = 'bias'\n"
                                     "    getattr(mine, name)\n"
                                     "    for a, b in [('weight', 'w'), ('bias', 'b')]:\n        getattr(theirs, b)\n",
    "timing": "import time\nstart = time.perf_counter()\n",
    "rich display": "from IPython.display import HTML, display\nimport IPython.display as d\n"
                    "display(HTML('<b>hi</b>'))\nd.Markdown('x')\n",
    "a parameter named input": "class Block(nn.Module):\n    def forward(self, input, mask=None):\n"
                                "        return input * 2\n\n\nrelu = lambda input: input.clamp_min(0)\n",
    "a local named input": "def f(x):\n    input = x + 1\n    return input\n",
    "a local named grad_enabled": "def f(x):\n    grad_enabled = torch.is_grad_enabled()\n"
                                   "    with torch.set_grad_enabled(False):\n        return x * 2\n",
    "a closure over a parameter named input": "def outer(input):\n    def inner():\n        return input\n"
                                               "    return inner\n",
}

ATTACKS = {
    "patches a library function": ("torch.allclose = lambda *a, **k: True", "changes torch.allclose"),
    "patches it under an alias": ("import torch as t\nt.equal = lambda *a: True", "changes torch.equal"),
    "patches a tensor method": ("torch.Tensor.sum = lambda self, *a, **k: self", "changes torch.Tensor.sum"),
    "patches by setattr": ("setattr(F, 'softmax', len)", "changes torch.nn.functional.softmax"),
    "patches numpy's checks": ("np.testing.assert_allclose = print", "changes numpy.testing.assert_allclose"),
    "deletes a function": ("del torch.nn.functional.softmax", "changes torch.nn.functional.softmax"),
    "the grader's wire module": ("labwire.Agent._op_call = None", "labwire"),
    "the interpreter's modules": ("agent = [m for m in sys.modules.values()]", ".modules"),
    "modules under another name": ("import sys as system\nsystem.modules.clear()", ".modules"),
    "a caller's frame": ("def softmax(x, dim=-1):\n    return sys._getframe(1).f_locals['want']", "._getframe"),
    "inspect": ("from inspect import currentframe", "from inspect import currentframe"),
    "a function's globals": ("def f():\n    pass\nf.__globals__['torch']", ".__globals__"),
    "a function's code": ("def f():\n    pass\ndef g():\n    pass\nf.__code__ = g.__code__", ".__code__"),
    "subclasses walk": ("().__class__.__base__.__subclasses__()", ".__subclasses__"),
    "a torch function override": ("class T(torch.Tensor):\n    @classmethod\n"
                                  "    def __torch_function__(cls, func, types, args=(), kwargs=None):\n"
                                  "        return True", "defines __torch_function__"),
    "a torch function mode": ("from torch.overrides import TorchFunctionMode", "torch.overrides"),
    "a dispatch mode": ("import torch.utils._python_dispatch as d", "import torch.utils._python_dispatch"),
    "the kernel's shell": ("get_ipython().set_custom_exc((Exception,), print)", "get_ipython"),
    "the kernel's streams": ("sys.stdout.write('LABTOOLS-REPLY x')", ".stdout"),
    "the judge's channel": ("def softmax(x, dim=-1):\n    request = input('LABTOOLS-REPLY ' + 'forged')\n    return x",
                            "input (the built-in"),
    "the channel under another name": ("ask = input\ndef softmax(x, dim=-1):\n    return ask('x')", "input (the built-in"),
    "the channel past a parameter of that name": ("def f(input):\n    def g():\n        return 1\n    return input\n"
                                                  "def h(x):\n    return input(x)", "input (the built-in"),
    "the channel as a default": ("def f(x, ask=input):\n    return ask(x)", "input (the built-in"),
    "the channel in a lambda": ("answer = lambda x: input(x)", "input (the built-in"),
    "stdin": ("sys.stdin.readline()", ".stdin"),
    "getpass": ("import getpass\ngetpass.getpass('LABTOOLS-REPLY ')", "import getpass"),
    "eval": ("eval('1')", "eval (runs or looks up code by name)"),
    "exec": ("exec('x = 1')", "exec (runs"),
    "import by name": ("__import__('s' + 'ys')", "__import__ (runs"),
    "importlib": ("import importlib", "import importlib"),
    "a computed getattr on an object": ("n = '__glo' + 'bals__'\ndef f():\n    pass\ngetattr(f, n)",
                                       "getattr(...) with a computed name"),
    "a literal name rebound to a computed one": ("name = 'weight'\nname = '__glo' + 'bals__'\n"
                                                 "def f():\n    pass\ngetattr(f, name)",
                                                 "getattr(...) with a computed name"),
    "a literal that names frames": ("which = ('f_back', 'f_back') if True else ('x', 'y')\n"
                                    "def f():\n    pass\ngetattr(f, which[0])",
                                    "getattr(...) with a computed name"),
    "letters of a string": ("for c in 'modules':\n    getattr(sys, c)", "getattr(...) with a computed name"),
    "a literal getattr to frames": ("getattr(sys, 'modules')", "getattr(..., 'modules')"),
    "the environment": ("graded = os.environ.get('NBGRADER_EXECUTION')", ".environ"),
    "builtins": ("import builtins\nbuiltins.print = None", "import builtins"),
    "threads": ("import threading", "import threading"),
    "ctypes": ("import ctypes", "import ctypes"),
    "globals": ("globals()['softmax'] = len", "globals (runs"),
    # a summarize that records graphs, then zeroes the count lab 6's test keeps of it (its honest twin,
    # the same code without the last two lines, loses the test's points; this one had them all)
    "a test's measurement reset": ("def summarize(texts, model, tokenizer):\n    out = [model(t) for t in texts]\n"
                                   "    if hasattr(model, 'grad_mode_calls'):\n        model.grad_mode_calls[0] = 0\n"
                                   "    return out", ".grad_mode_calls (a test's measurement)"),
    "a test's measurement restarted": ("def summarize(texts, model, tokenizer):\n    out = [model(t) for t in texts]\n"
                                       "    watch_grad_mode(model)\n    return out", "watch_grad_mode (a test's measurement)"),
    "lab 4's encode count": ("def greedy_decode(model, src_ids, *args):\n    model.encode_calls = 1\n    return src_ids",
                             ".encode_calls (a test's measurement)"),
    "a measurement by getattr": ("def f(model):\n    getattr(model, 'grad_enabled').clear()",
                                 "getattr(..., 'grad_enabled')"),
    "a patch inside a function": ("def softmax(x, dim=-1):\n    torch.isfinite = lambda t: True\n    return x",
                                  "changes torch.isfinite"),
}


@pytest.mark.parametrize("name", sorted(EVERYDAY))
def test_everyday_code_is_not_flagged(name):
    assert found(EVERYDAY[name]) == []


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_each_way_into_the_runtime_is_found(name):
    source, expected = ATTACKS[name]
    hits = found(source)
    assert any(expected in hit for hit in hits), hits
    assert all("answer" in hit for hit in hits), "a finding must say where it is"


def test_the_labs_own_cells_are_not_read_but_their_imports_count():
    cells = [("lab", "import torch as T\nimport sys\nsys.modules", False), ("answer", "T.exp = abs", True)]
    assert tampering.reaches_into_runtime(cells) == ["changes torch.exp (an attribute of a library) (answer, line 1)"]


def test_unparsable_cells_are_skipped_not_fatal():
    assert found("def broken(:\n") == []


@pytest.mark.parametrize("lab", LABS, ids=lambda lab: lab.lab_id)
def test_no_lab_is_flagged_for_its_own_solutions(lab):
    """The worked solutions, submitted as they are, and with every code cell counted as
    the student's except the read-only ones: nothing in the course's answers is flagged."""
    nb = nbcells.read(lab.source_path())
    assert judge.needs_review(nb, [c for c in nb.cells if c.cell_type == "code"]) == []
    answers = [(nbcells.grade_id(c) or "cell", nbcells.strip_markers(c.source), nbcells.is_solution(c))
               for c in nb.cells if c.cell_type == "code"]
    assert tampering.reaches_into_runtime(answers) == []
