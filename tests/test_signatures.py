"""What an answer changed in its exercise's signature (defaults, order): read from the text, said in its failed tests."""

import nbformat

from labtools.judge import signatures

REFERENCE = '''
class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.1, activation="relu", *, eps=1e-5, norm=make_norm()):
        super().__init__()

    def forward(self, x, mask=None):
        return x
'''


def test_a_changed_default_is_named_with_both_values():
    answer = REFERENCE.replace('activation="relu"', "activation='gelu'")
    assert signatures.changed_signature("FeedForward", REFERENCE, answer) == [
        "in your FeedForward.__init__, activation defaults to 'gelu'; the exercise's signature gives it 'relu'"]
    kw_only = REFERENCE.replace("eps=1e-5", "eps=1e-6").replace("mask=None", "mask=0")
    told = signatures.changed_signature("FeedForward", REFERENCE, kw_only)
    assert len(told) == 2 and "eps defaults to 1e-06" in told[0] and "FeedForward.forward, mask defaults to 0" in told[1]


def test_the_same_defaults_written_otherwise_are_not_changes():
    other_style = '''
class FeedForward(nn.Module):
    """Another student's layout: keyword-only eps, the same values spelled differently."""
    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.10, activation: str = 'relu', *, eps=0.00001,
                 norm=None):
        super().__init__()
        self.extra = 1

    def forward(self, x, mask=None, cache=None):
        return x
'''
    assert signatures.changed_signature("FeedForward", REFERENCE, other_style) == []
    # an expression default (norm=make_norm()) is never compared; a missing class or broken text says nothing
    assert signatures.changed_signature("FeedForward", REFERENCE, "def FeedForward(x=1): pass") == []
    assert signatures.changed_signature("FeedForward", REFERENCE, "class FeedForward(:\n") == []
    # True is not 1, though True == 1
    assert signatures.changed_signature("f", "def f(b=True): pass", "def f(b=1): pass") == [
        "in your f, b defaults to 1; the exercise's signature gives it True"]
    assert signatures.changed_signature("f", "def f(t=1.0): pass", "def f(t=1): pass") == []
    # an answer's default is data, quoted short: a page of text in a default does not become a page of message
    long = signatures.changed_signature("f", "def f(a='relu'): pass", "def f(a='" + "x" * 5000 + "'): pass")
    assert len(long) == 1 and len(long[0]) < 150 and long[0].endswith("gives it 'relu'")


def test_each_failed_test_of_the_exercise_gets_the_sentence():
    def cell(source, gid, **meta):
        return nbformat.v4.new_code_cell(source, metadata={"nbgrader": {"grade_id": gid, **meta}})

    source_nb = nbformat.v4.new_notebook(cells=[
        cell("def f(k=None):\n    ### BEGIN SOLUTION\n    return k\n    ### END SOLUTION", "f", solution=True),
        cell("assert f() is None", "test_f_default", grade=True, points=1),
        cell("def g(n=2):\n    return n", "g", solution=True),
        cell("assert g() == 2", "test_g", grade=True, points=1)])
    submitted = [cell("def f(k=0):\n    return k", "f", solution=True), cell("def g(n=2):\n    return 3", "g")]
    notes = signatures.changed_signature_by_test(source_nb, submitted)
    assert notes == {"test_f_default": "in your f, k defaults to 0; the exercise's signature gives it None"}


def test_parameters_in_another_order_are_named():
    reference = "class PE(nn.Module):\n    def __init__(self, d_model, max_len=5000, dropout=0.0):\n        pass\n"
    tutorial = "class PE(nn.Module):\n    def __init__(self, d_model, dropout=0.0, max_len=5000):\n        pass\n"
    assert signatures.changed_signature("PE", reference, tutorial) == [
        "your PE.__init__ takes (self, d_model, dropout, max_len) in that order, the exercise's (self, d_model, max_len, "
        "dropout): a call that passes them by position gives each the other's value"]
    # other names (q, k, v for Q, K, V) or an extra parameter are not an order
    assert signatures.changed_signature("f", "def f(Q, K, V): pass", "def f(q, k, v): pass") == []
    assert signatures.changed_signature("f", "def f(Q, K): pass", "def f(K, Q, extra=None): pass") == []
