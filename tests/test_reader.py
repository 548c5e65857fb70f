"""The one reader of student code (labtools/judge/reader.py): every Python binding form is
resolved, by both questions asked of a notebook (forbidden calls in what an answer
reaches; the allowlist every student cell is read against), and honest code in other
styles is not flagged."""

import pytest

from labtools.judge.reader import forbidden_calls, reaches_into_runtime

PRELUDE = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"
SOFTMAX = ["torch.softmax", "torch.nn.functional.softmax", ".softmax"]
# The attack of the architecture review: a library module under another name, a function of
# its own put into it, called from the answer under a name that says nothing.
USE = "\ndef softmax(x, dim=-1):\n    return G.hush(x, dim)\n"

# Every binding form, each binding G to torch.nn.functional (or hush to torch.softmax)
BINDINGS = {
    "assignment": "G = torch.nn.functional\nG.hush = torch.softmax",
    "inside try": "try:\n    G = torch.nn.functional\n    G.hush = torch.softmax\nexcept Exception:\n    pass",
    "inside if": "if True:\n    G = F\n    G.hush = torch.softmax",
    "inside with": "with torch.no_grad():\n    G = F\n    G.hush = torch.softmax",
    "with ... as": "from contextlib import nullcontext\nwith nullcontext(F) as G:\n    G.hush = torch.softmax",
    "for over a list": "for G in [F]:\n    G.hush = torch.softmax",
    "annotated assignment": "G: object = torch.nn.functional\nG.hush = torch.softmax",
    "augmented assignment": "G = F\nG.hush = torch.softmax\nG.hush += 0 if False else 0",
    "walrus": "(G := F).hush = torch.softmax" if False else "if (G := F):\n    G.hush = torch.softmax",
    "walrus in a comprehension": "[G := m for m in [F]]\nG.hush = torch.softmax",
    "global in a helper": "def setup():\n    global G\n    G = F\n    G.hush = torch.softmax\nsetup()",
    "import in a helper": "def setup():\n    global G\n    import torch.nn.functional as G\n    G.hush = torch.softmax\nsetup()",
    "tuple unpacking": "G, _ = F, 1\nG.hush = torch.softmax",
    "conditional expression": "G = F if True else None\nG.hush = torch.softmax",
    "subscript of a literal": "G = [F][0]\nG.hush = torch.softmax",
    "decorator": "def install(f):\n    F.hush = torch.softmax\n    return f\n@install\ndef noop():\n    pass\nG = F",
    "class body": "class Holder:\n    G = F\nHolder.G.hush = torch.softmax\nG = Holder.G",
    "setattr": "G = F\nsetattr(G, 'hush', torch.softmax)",
}


@pytest.mark.parametrize("form", sorted(BINDINGS))
def test_every_binding_form_is_resolved_by_both_questions(form):
    cells = [PRELUDE, BINDINGS[form] + USE]
    calls = forbidden_calls(cells, "softmax", SOFTMAX)
    assert any("torch.softmax" in c or "dynamic" in c for c in calls), (form, calls)
    runtime = reaches_into_runtime([("lab", PRELUDE, False), ("answer", BINDINGS[form] + USE, True)])
    assert any("changes torch.nn.functional" in f for f in runtime), (form, runtime)


def test_a_patch_through_a_parameter_is_caught_by_what_the_library_lacks():
    # nothing names torch.nn.functional where the attribute is written; the use does
    cells = [PRELUDE, "def patch(m):\n    m.hush = lambda *a: torch.softmax(*a)\npatch(F)" + USE.replace("G.", "F.")]
    real = {"torch.nn.functional.hush": False}
    found = forbidden_calls(cells, "softmax", SOFTMAX, exists=lambda p: real.get(p, True))
    assert any("no such attribute" in f for f in found), found
    assert any("torch.softmax in what is assigned to .hush" in f for f in found), found


@pytest.mark.parametrize("name, source", [
    ("a local alias", "def softmax(x, dim=-1):\n    s = torch.softmax\n    return s(x, dim)"),
    ("a default argument", "def softmax(x, dim=-1, s=torch.softmax):\n    return s(x, dim)"),
    ("a decorator of the answer", "import functools\n@functools.wraps(torch.softmax)\ndef softmax(x, dim=-1):\n"
                                  "    return x"),
    ("a class the answer uses", "class H:\n    f = staticmethod(F.softmax)\ndef softmax(x, dim=-1):\n"
                                "    return H.f(x, dim)"),
    ("a dict filled later", "TABLE = {}\nTABLE['s'] = F.softmax\ndef softmax(x, dim=-1):\n    return TABLE['s'](x, dim)"),
    ("a list appended to", "FNS = []\nFNS.append(F.softmax)\ndef softmax(x, dim=-1):\n    return FNS[0](x, dim)"),
    ("an alias in a lambda", "pick = lambda: F.softmax\ndef softmax(x, dim=-1):\n    return pick()(x, dim)"),
    ("an alias of an alias", "A = F\nB = A\ndef softmax(x, dim=-1):\n    return B.softmax(x, dim)"),
    ("an import in the answer", "def softmax(x, dim=-1):\n    from torch.nn.functional import softmax as s\n"
                                "    return s(x, dim)"),
])
def test_forbidden_calls_are_found_wherever_they_are_bound(name, source):
    assert forbidden_calls([PRELUDE, source], "softmax", SOFTMAX), name


def test_another_name_of_the_same_library_function_is_the_same_target():
    """torch.nn.MultiheadAttention is defined in torch.nn.modules.activation: imported from there,
    it is the same class, and a rule that names one names the other. Names of other objects pass."""
    rule = ["torch.nn.MultiheadAttention", "torch.nn.functional.scaled_dot_product_attention"]
    other_path = ("from torch.nn.modules.activation import MultiheadAttention as M\n"
                  "def attend(q, k, v):\n    return M(4, 1)(q, k, v)[0]")
    assert forbidden_calls([PRELUDE, other_path], "attend", rule) == [
        "torch.nn.modules.activation.MultiheadAttention in attend"]
    honest = ("from torch.nn.modules.linear import Linear\n"
              "def attend(q, k, v):\n    w = (q @ k.mT).softmax(-1)\n    return Linear(4, 4)(w @ v)")
    assert forbidden_calls([PRELUDE, honest], "attend", rule) == []


@pytest.mark.parametrize("name, source", [
    ("a loop over model.modules()", "def count(model):\n    n = 0\n    for m in model.modules():\n"
                                    "        if isinstance(m, nn.Linear):\n            n += 1\n    return n"),
    ("model.named_modules()", "def names(model):\n    return [n for n, _ in model.named_modules()]"),
    ("a private attribute of its own class", "class Cache:\n    def __init__(self):\n        self._store = {}\n"
                                             "    def get(self, k):\n        return self._store.get(k)\n"
                                             "def peek(c):\n    return c._store"),
    ("a seed and a determinism switch", "torch.backends.cudnn.deterministic = True\ntorch.manual_seed(0)"),
    ("attributes of what it was given", "def load(block, layer):\n    block.norm.weight = layer.norm.weight\n"
                                        "    block.eps = 1e-6\n    return block"),
    ("a walrus and an annotated local", "def f(xs):\n    total: float = 0.0\n    if (n := len(xs)) > 0:\n"
                                        "        total = sum(xs) / n\n    return total"),
    ("names chosen from literals", "def copy(mine, theirs):\n    for name in ('weight', 'bias'):\n"
                                   "        setattr(mine, name, getattr(theirs, name))"),
    ("a function's name by getattr", "def label(fn):\n    return getattr(fn, '__name__', repr(fn))"),
    ("ending the kernel", "import os\nos._exit(1)"),
    ("a global counter", "CALLS = 0\ndef f(x):\n    global CALLS\n    CALLS += 1\n    return x"),
    ("plotting and progress bars", "import matplotlib.pyplot as plt\nfrom tqdm.auto import tqdm\n"
                                   "for i in tqdm(range(3)):\n    plt.plot([i])\nplt.rcParams['figure.dpi'] = 80"),
])
def test_honest_code_in_other_styles_is_not_flagged(name, source):
    assert reaches_into_runtime([("lab", PRELUDE, False), ("answer", source, True)]) == [], name


@pytest.mark.parametrize("source, expected", [
    ("import requests", "import requests (not a library"),
    ("from . import grader", "from . import grader"),
    ("x = torch.sys.modules", "sys"),
    ("import os\nm = os.sys", "sys"),
    ("t = torch.tensor([1.])\nt._version", "private attribute"),
    ("type(torch.tensor(1.)).__add__ = lambda a, b: a", "__add__"),
    ("e = eval", "eval"),
    ("g = getattr\ng(torch, 'soft' + 'max')", "getattr used as a value"),
    ("import functools\nf = functools.partial(getattr, torch)", "getattr used as a value"),
    ("m = __import__('sys').modules", "__import__"),
    ("getattr(torch, '__dict__')", "'__dict__'"),
    ("def f():\n    pass\ngetattr(f, '__globals__')", "'__globals__'"),
    ("import sys\nmods = sys.modules", ".modules"),
    # hooks on every module or graph of the process reach the lab's own stand-in models
    ("from torch.nn.modules.module import register_module_forward_hook", "torch.nn.modules.module"),
    ("from torch.nn.modules import module\nmodule.register_module_forward_hook(print)", "torch.nn.modules.module"),
    ("import torch.autograd.graph as g", "torch.autograd.graph"),
    ("from torch.utils.hooks import RemovableHandle", "torch.utils.hooks"),
])
def test_what_is_not_on_the_allowlist_goes_to_review(source, expected):
    found = reaches_into_runtime([("lab", PRELUDE, False), ("answer", source, True)])
    assert any(expected in f for f in found), found
    assert all("answer, line" in f for f in found), "a finding says where it is"


LAB_HELPERS = PRELUDE + ("class ScriptedLM(nn.Module):\n    def forward(self, ids):\n        return ids.float()\n\n\n"
                         "def make_test_tokenizer():\n    return None\n")


@pytest.mark.parametrize("source, expected", [
    ("def generate(model, ids, n):\n    model.__class__.forward = print\n    return ids", "reached through an object"),
    ("def generate(model, ids, n):\n    cls = model.__class__\n    cls.favourite = print\n    return ids",
     "reached through an object"),
    ("def generate(model, ids, n):\n    model.forward = print\n    return ids", "replaces .forward"),
    ("def generate(model, ids, n):\n    model.favourite = print\n    return ids", "replaces .favourite"),
    ("def generate(model, ids, n):\n    model.seen_modes.clear()\n    return ids", ".seen_modes"),
])
def test_what_the_tests_hand_over_keeps_its_methods_and_records(source, expected):
    helpers = LAB_HELPERS + "\n\nclass Scripted(nn.Module):\n    def favourite(self, ids):\n        return ids\n"
    found = reaches_into_runtime([("lab", helpers, False), ("answer", source, True)])
    assert any(expected in f for f in found), found


@pytest.mark.parametrize("source", [
    "class Mine(nn.Module):\n    def forward(self, x):\n        self.count = 1\n        return x",
    "def load(block, layer):\n    block.norm.weight = layer.weight\n    block.lin.bias.data = layer.b.clone()",
    "def generate(model, ids, n):\n    model.eval()\n    model.cache = {}\n    return ids",
    "print(torch.ones(2).__class__.__name__)",
])
def test_writing_what_an_answer_owns_or_builds_is_not_flagged(source):
    assert reaches_into_runtime([("lab", LAB_HELPERS, False), ("answer", source, True)]) == [], source


@pytest.mark.parametrize("source, expected", [
    ("class ScriptedLM(nn.Module):\n    def forward(self, ids):\n        return ids.float() * 0", "rebinds ScriptedLM"),
    ("def make_test_tokenizer():\n    return 'mine'", "rebinds make_test_tokenizer"),
    ("make_test_tokenizer = lambda: 'mine'", "rebinds make_test_tokenizer"),
    ("ScriptedLM.forward = lambda self, ids: ids", "changes ScriptedLM.forward"),
    ("setattr(ScriptedLM, 'forward', print)", "changes ScriptedLM.forward"),
    ("class Fake:\n    Linear = None\nnn = Fake()", "rebinds nn"),
    ("import numpy as torch", "rebinds torch"),
    ("if True:\n    F = None", "rebinds F"),
])
def test_the_labs_own_helpers_and_names_cannot_be_replaced(source, expected):
    found = reaches_into_runtime([("lab", LAB_HELPERS, False), ("answer", source, True)])
    assert any(expected in f for f in found), found


@pytest.mark.parametrize("source", [
    "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F",   # the same imports again
    "def f(ScriptedLM):\n    return ScriptedLM",                                # a parameter of that name
    "def g():\n    nn = 3\n    return nn",                                     # a local of that name
    "lm = ScriptedLM()\nlm.cache = {}",                                         # an object the answer made
    "from torch.nn.modules.normalization import LayerNorm",                     # a layer by its full path
])
def test_using_the_labs_names_is_not_replacing_them(source):
    assert reaches_into_runtime([("lab", LAB_HELPERS, False), ("answer", source, True)]) == []


# Lab 6 keeps its tests' counts in private names of its own cells (`_GRAD_MODE_CALLS`): a student
# cell may neither read nor change them, at any depth; its own private names are its own.
WATCH = "_COUNTS = {}\n\n\ndef counts():\n    return dict(_COUNTS)\n"


@pytest.mark.parametrize("source", [
    "_COUNTS['shown'] = 5",
    "_COUNTS.clear()",
    "def train(model):\n    _COUNTS.update(shown=1)\n    return model",
    "def train(model):\n    global _COUNTS\n    _COUNTS = {'shown': 1}\n    return model",
    "mine = _COUNTS\nmine['shown'] = 1",
    "class Trainer:\n    def fit(self):\n        return [_COUNTS for _ in range(1)]",
])
def test_the_labs_private_names_are_out_of_reach(source):
    found = reaches_into_runtime([("lab", PRELUDE + WATCH, False), ("answer", source, True)])
    assert any("_COUNTS (a private name of the lab's cells" in f for f in found), found


@pytest.mark.parametrize("source", [
    "_mine = {}\n_mine['a'] = 1",
    "def train(model, _COUNTS=None):\n    return _COUNTS",
    "def train(model):\n    _COUNTS = {}\n    _COUNTS['a'] = 1\n    return _COUNTS",
    "for _ in range(3):\n    _ = counts()",
])
def test_private_names_of_the_students_own_are_not_flagged(source):
    assert reaches_into_runtime([("lab", PRELUDE + WATCH, False), ("answer", source, True)]) == [], source
