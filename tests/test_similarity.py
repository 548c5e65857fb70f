"""Similar submissions: a copy with renamed variables and reordered lines is flagged, with the
code both wrote side by side; independent correct answers to lab01's short exercises, and
code the release hands out, are not."""

from __future__ import annotations

import copy
import csv

import nbformat
import pytest

from labtools import nbcells
from labtools.grade import similarity
from labtools.labs import get_lab
from labtools.build.submissions import fill_release

LAB = get_lab("lab01_attention")
SOURCE = nbcells.read(LAB.source_path())
RELEASE = nbcells.read(LAB.release_path())

# Ada's answers, written the way a student does: the docstring shortened, comments of her own.
ADA = {
    "softmax": '''def softmax(x, dim=-1):
    """Numerically stable softmax of `x` along `dim`."""
    # subtract the row maximum so that exp never overflows
    largest = x.max(dim=dim, keepdim=True).values
    exps = torch.exp(x - largest)
    total = exps.sum(dim=dim, keepdim=True)
    return exps / total
''',
    "scaled_dot_product_attention": '''import math


def scaled_dot_product_attention(Q, K, V, mask=None):
    d_k = Q.shape[-1]
    keys_t = K.transpose(-2, -1)
    scale = 1.0 / math.sqrt(d_k)
    scores = torch.matmul(Q, keys_t) * scale
    if mask is not None:
        blocked = ~mask.bool()
        scores = scores.masked_fill(blocked, float("-inf"))
    weights = softmax(scores, dim=-1)
    output = torch.matmul(weights, V)
    return output, weights
''',
}
# Ben's: Ada's, every variable renamed, independent lines swapped, comments dropped.
BEN = {
    "softmax": '''def softmax(x, dim=-1):
    peak = x.max(dim=dim, keepdim=True).values
    e = torch.exp(x - peak)
    s = e.sum(dim=dim, keepdim=True)
    return e / s
''',
    "scaled_dot_product_attention": '''import math


def scaled_dot_product_attention(Q, K, V, mask=None):
    kt = K.transpose(-2, -1)
    dim_k = Q.shape[-1]
    factor = 1.0 / math.sqrt(dim_k)
    logits = torch.matmul(Q, kt) * factor
    if mask is not None:
        hidden = ~mask.bool()
        logits = logits.masked_fill(hidden, float("-inf"))
    probs = softmax(logits, dim=-1)
    return torch.matmul(probs, V), probs
''',
}
# Three students who worked alone: correct, short, and written as most people would.
CLEO = {
    "softmax": '''def softmax(x, dim=-1):
    shifted = x - torch.amax(x, dim=dim, keepdim=True)
    numer = torch.exp(shifted)
    return numer / torch.sum(numer, dim=dim, keepdim=True)
''',
    "scaled_dot_product_attention": '''import math


def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(mask == 0, float("-inf"))
    weights = softmax(scores, dim=-1)
    return weights @ V, weights
''',
}
DEV = {
    "softmax": '''def softmax(x, dim=-1):
    m, _ = torch.max(x, dim=dim, keepdim=True)
    z = (x - m).exp()
    z = z / z.sum(dim, keepdim=True)
    return z
''',
    "scaled_dot_product_attention": '''def scaled_dot_product_attention(Q, K, V, mask=None):
    d = K.shape[-1]
    s = torch.einsum("...qd,...kd->...qk", Q, K) / d ** 0.5
    if mask is not None:
        s = torch.where(mask.bool(), s, torch.full_like(s, float("-inf")))
    p = softmax(s, dim=-1)
    out = torch.einsum("...qk,...kv->...qv", p, V)
    return out, p
''',
}
ELI = {
    "softmax": '''def softmax(x, dim=-1):
    x_max = x.amax(dim=dim, keepdim=True)
    e = torch.exp(x - x_max)
    return e / e.sum(dim=dim, keepdim=True)
''',
    "scaled_dot_product_attention": '''import math


def scaled_dot_product_attention(Q, K, V, mask=None):
    d_k = K.size(-1)
    scores = torch.matmul(Q, K.mT) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), -math.inf)
    weights = softmax(scores, dim=-1)
    return torch.matmul(weights, V), weights
''',
}
# Two fixes of the buggy port lab01 hands out: the same few bugs fixed, the port's own lines kept.
PORT_FIXED_BY_CLEO = '''import math


def ported_attention(Q, K, V, mask=None):
    d_k = Q.shape[-1]
    scores = torch.matmul(Q, K.transpose(-2, -1)) / math.sqrt(d_k)
    if mask is not None:
        scores = scores + (mask == 0) * -1e9            # push the masked positions far down
    # numerically stable softmax over the keys
    scores = scores - scores.amax(dim=-1, keepdim=True)
    weights = torch.exp(scores)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    return torch.matmul(weights, V), weights
'''
PORT_FIXED_BY_DEV = '''import math


def ported_attention(Q, K, V, mask=None):
    d_k = Q.shape[-1]
    scores = torch.matmul(Q, K.transpose(-1, -2)) / math.sqrt(d_k)
    if mask is not None:
        scores = scores + (mask == 0) * -1e9            # push the masked positions far down
    # numerically stable softmax over the keys
    scores = scores - scores.max(axis=-1, keepdims=True).values
    weights = torch.exp(scores)
    weights = weights / weights.sum(axis=-1, keepdims=True)
    return torch.matmul(weights, V), weights
'''


def _submission(answers: dict[str, str], hidden_tests: bool = False, written: bool = False):
    """The release with these answer cells filled and the other exercises left as handed out;
    with `hidden_tests`, the test cells as autograding leaves them (the source's, hidden tests in);
    with `written`, the written answers too."""
    nb = fill_release(RELEASE, SOURCE, answers, written=written)
    for cell in nb.cells:
        gid = nbcells.grade_id(cell)
        if nbcells.is_solution(cell) and cell.cell_type == "code" and gid not in answers:
            cell.source = nbcells.find_cell(RELEASE, gid).source
        elif hidden_tests and nbcells.is_autograded_test(cell):
            cell.source = nbcells.find_cell(SOURCE, gid).source
    return nb


def _codes(**students):
    return {name: similarity.own_code(_submission(answers), RELEASE) for name, answers in students.items()}


def test_a_renamed_and_reordered_copy_is_flagged_and_independent_answers_are_not():
    pairs = similarity.find_similar(_codes(ada=ADA, ben=BEN, cleo=CLEO, dev=DEV, eli=ELI), RELEASE)
    assert [(p.student_a, p.student_b) for p in pairs] == [("ada", "ben")]
    pair = pairs[0]
    assert pair.similarity >= similarity.THRESHOLD and min(pair.share_a, pair.share_b) > 0.7
    # the shared code, as each of them wrote it, cell by cell
    by_cell = {region.cell_a: region for region in pair.shared}
    assert set(by_cell) == {"softmax", "scaled_dot_product_attention"}
    soft = by_cell["softmax"]
    assert soft.cell_b == "softmax" and soft.lines_a == (4, 7) and soft.lines_b == (2, 5)
    assert soft.code_a.splitlines()[0].strip() == "largest = x.max(dim=dim, keepdim=True).values"
    assert soft.code_b.splitlines()[-1].strip() == "return e / s"
    attention = by_cell["scaled_dot_product_attention"]
    assert "scores = torch.matmul(Q, keys_t) * scale" in attention.code_a
    assert "logits = torch.matmul(Q, kt) * factor" in attention.code_b


def test_copies_are_flagged_among_a_larger_class_most_similar_first():
    # Fay handed in Cleo's notebook as it was; Gus took Eli's attention and Dev's softmax (renamed)
    gus = {**ELI, "softmax": DEV["softmax"].replace("m, _", "top, _").replace("(x - m)", "(x - top)")}
    codes = _codes(cleo=CLEO, ben=BEN, dev=DEV, ada=ADA, eli=ELI, fay=CLEO, gus=gus)
    pairs = similarity.find_similar(codes, RELEASE)
    assert [(p.student_a, p.student_b) for p in pairs] == [("cleo", "fay"), ("ada", "ben")]
    assert pairs[0].similarity > 0.95
    # half a notebook from each of two others (a short one) stays below the defaults, not below lower ones
    lower = similarity.find_similar(codes, RELEASE, threshold=0.45, min_shared=0)
    assert {(p.student_a, p.student_b) for p in lower} == {("cleo", "fay"), ("ada", "ben"), ("eli", "gus"),
                                                           ("dev", "gus")}


def test_code_the_release_hands_out_is_left_out():
    # both fixed the same handed-out port the same way; their other answers are their own
    codes = _codes(cleo={**CLEO, "ported_attention": PORT_FIXED_BY_CLEO},
                   dev={**DEV, "ported_attention": PORT_FIXED_BY_DEV})
    assert similarity.find_similar(codes, RELEASE) == []
    own = {cell.label: cell.own for cell in codes["cleo"]}
    assert "def softmax" not in own["softmax"] and "Numerically stable" not in own["softmax"]
    assert "weights = torch.exp(scores)" not in own["ported_attention"]  # a line of the given port
    assert "K.transpose(-2, -1)" in own["ported_attention"]  # the fix is hers


def test_only_what_the_student_wrote_is_read():
    nb = _submission(ADA, hidden_tests=True)
    assert similarity.own_code(_submission({}, hidden_tests=True), RELEASE) == []  # the release as handed out
    position = next(i for i, c in enumerate(nb.cells) if nbcells.grade_id(c) == "softmax") + 1
    nb.cells.insert(position, nbformat.v4.new_code_cell("print(softmax(torch.tensor([1000.0, 0.0])))"))
    demo = next(c for c in nb.cells if c.cell_type == "code" and c.source.startswith("names = ["))
    demo.source += "\nprint(keys.shape)"
    cells = {cell.label: cell for cell in similarity.own_code(nb, RELEASE)}
    assert set(cells) == {"softmax", "scaled_dot_product_attention", f"cell {position + 1}",
                          f"cell {nb.cells.index(demo) + 1}"}
    assert cells[f"cell {nb.cells.index(demo) + 1}"].own.strip() == "print(keys.shape)"
    assert not any("Hidden tests" in cell.source for cell in cells.values())


def test_shared_code_is_shown_at_the_lines_it_stands_on():
    # the same notebook twice (the reference answers): each answer cell is shared whole, from
    # its first line of code to its last, below the signature and docstring the release gave
    reference = similarity.own_code(fill_release(RELEASE, SOURCE, written=False), RELEASE)
    pair, = similarity.find_similar({"a": reference, "b": copy.deepcopy(reference)}, RELEASE)
    code_lines = {cell.label: [n for n, line in enumerate(cell.own.splitlines(), start=1)
                               if line.strip() and not line.strip().startswith("#")] for cell in reference}
    assert {r.cell_a: r.lines_a for r in pair.shared} == {c: (n[0], n[-1]) for c, n in code_lines.items()}
    assert all(r.lines_a == r.lines_b and r.code_a == r.code_b for r in pair.shared)


def _autograded(course, student, answers):
    path = course / "autograded" / student / LAB.lab_id / LAB.notebook_name
    path.parent.mkdir(parents=True)
    nbformat.write(_submission(answers, hidden_tests=True), str(path))


def test_the_graded_class_is_compared_and_the_pairs_written(tmp_path):
    for student, answers in {"ada": ADA, "ben": BEN, "cleo": CLEO, "dora": {}}.items():
        _autograded(tmp_path, student, answers)
    report = similarity.similar_submissions(tmp_path, LAB.lab_id)
    assert report.compared == ["ada", "ben", "cleo"] and report.without_code == ["dora"]
    assert len(report.scores) == 3 and sum(score >= similarity.THRESHOLD for score in report.scores) == 1
    assert [(p.student_a, p.student_b) for p in report.pairs] == [("ada", "ben")]
    with similarity.write_csv(report, tmp_path / "grades" / "similarity.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert {(r["student_a"], r["student_b"], r["cell_a"], r["lines_a"], r["lines_b"]) for r in rows} >= {
        ("ada", "ben", "softmax", "4-7", "2-5")}
    assert all(float(r["similarity"]) >= similarity.THRESHOLD for r in rows)


@pytest.mark.parametrize("threshold, flagged", [(0.95, 0), (0.5, 1)])
def test_the_threshold_decides(threshold, flagged):
    codes = _codes(ada=ADA, ben=BEN, cleo=CLEO)
    assert len(similarity.find_similar(copy.deepcopy(codes), RELEASE, threshold=threshold)) == flagged
