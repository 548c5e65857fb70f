"""Rules on how an answer is written, read from its source (labtools/source_rules.py):
uses of a forbidden function are found under any alias and through the notebook's own
helpers; dynamic lookups are flagged; ordinary code is not."""

import pytest

from labtools.source_rules import forbidden_calls

SOFTMAX = ["torch.softmax", "torch.nn.functional.softmax", ".softmax"]


@pytest.mark.parametrize("cells", [
    ["import torch\ndef f(x):\n    return torch.softmax(x, -1)"],
    ["import torch.nn.functional as F\ndef f(x):\n    return F.softmax(x, -1)"],
    ["from torch.nn.functional import softmax as s\ndef f(x):\n    return s(x, -1)"],
    ["import torch\nsm = torch.softmax", "def f(x):\n    return sm(x, -1)"],
    ["def helper(x):\n    return x.softmax(-1)", "def f(x):\n    return helper(x) * 2"],
    ["import torch as T\nclass F:\n    def go(self, x):\n        return T.nn.functional.softmax(x, -1)\n"
     "def f(x):\n    return F().go(x)"],
])
def test_a_forbidden_call_is_found_under_any_name(cells):
    assert forbidden_calls(cells, "f", SOFTMAX)


@pytest.mark.parametrize("body, word", [
    ("return getattr(torch, 'soft' + 'max')(x, -1)", "getattr"),
    ("return eval('torch.softmax')(x, -1)", "eval"),
    ("return __import__('torch').softmax(x, -1)", "__import__"),
    ("import importlib\n    return importlib.import_module('torch').softmax(x, -1)", "import"),
    ("import builtins\n    return builtins.eval('x')", "eval"),
    ("return globals()['torch'].exp(x)", "globals"),
])
def test_dynamic_lookups_are_flagged_for_review(body, word):
    found = forbidden_calls([f"import torch\ndef f(x):\n    {body}"], "f", SOFTMAX)
    assert found and any(word in f for f in found), found


@pytest.mark.parametrize("cells", [
    ["import torch\ndef f(x):\n    e = torch.exp(x - x.amax(-1, keepdim=True))\n    return e / e.sum(-1, keepdim=True)"],
    ["import re\nWORD = re.compile(r'\\\\w+')\ndef f(text):\n    return WORD.findall(text.lower())"],
    ["import re\ndef f(text):\n    return re.compile('[a-z0-9]+').findall(text)"],
    ["def softmax_free(x):\n    return x\ndef f(x):\n    softmax = 3\n    return softmax_free(x) + softmax"],
    ["import torch\ndef f(x):\n    return getattr(x, 'shape')"],
    ["import torch\ndef g(x):\n    return torch.softmax(x, -1)\ndef f(x):\n    return x * 2"],  # g is never reached
])
def test_ordinary_code_is_not_flagged(cells):
    assert forbidden_calls(cells, "f", SOFTMAX) == []


def test_the_last_definition_is_the_one_read():
    cells = ["import torch\ndef f(x):\n    return torch.softmax(x, -1)", "def f(x):\n    return x"]
    assert forbidden_calls(cells, "f", SOFTMAX) == []
    assert forbidden_calls(list(reversed(cells)), "f", SOFTMAX)
