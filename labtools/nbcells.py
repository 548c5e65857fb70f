"""Reading notebooks and finding nbgrader cells in them."""

from __future__ import annotations

from pathlib import Path

import nbformat

BEGIN_SOLUTION = "### BEGIN SOLUTION"
END_SOLUTION = "### END SOLUTION"
BEGIN_HIDDEN = "### BEGIN HIDDEN TESTS"
END_HIDDEN = "### END HIDDEN TESTS"
# the notebook metadata the grader owns: what restore changed, incidents, where the time went
GRADER_KEY = "labtools_grader"


def read(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(str(path), as_version=4)


def nbgrader_meta(cell) -> dict:
    meta = cell.get("metadata", {}).get("nbgrader")
    return meta if isinstance(meta, dict) else {}  # a submission's metadata can hold anything


def grade_id(cell) -> str | None:
    """The cell's nbgrader grade_id; None when it has none, or a submission's metadata holds
    something that is not a string there."""
    meta = cell.get("metadata", {}).get("nbgrader")
    gid = meta.get("grade_id") if isinstance(meta, dict) else None
    return gid if isinstance(gid, str) else None


def is_solution(cell) -> bool:
    return bool(nbgrader_meta(cell).get("solution"))


def role(cell) -> str:
    """'test', 'solution', 'given' (a read-only instructor cell) or 'other'."""
    if cell.cell_type != "code":
        return "other"
    meta = nbgrader_meta(cell)
    if meta.get("solution"):
        return "solution"
    if meta.get("grade"):
        return "test"
    if meta.get("locked"):
        return "given"
    return "other"


def is_autograded_test(cell) -> bool:
    meta = nbgrader_meta(cell)
    return cell.cell_type == "code" and bool(meta.get("grade")) and not meta.get("solution")


def find_cell(nb, gid: str):
    for cell in nb.cells:
        if grade_id(cell) == gid:
            return cell
    raise KeyError(f"no cell with nbgrader grade_id {gid!r}")


def exercises(nb) -> list[str]:
    """grade_ids of the code solution cells: one per autograded exercise."""
    return [grade_id(c) for c in nb.cells if c.cell_type == "code" and is_solution(c)]


def test_owner(test_id: str, names) -> str | None:
    """The exercise a test cell belongs to: `test_<exercise>` or `test_<exercise>_<what>`,
    the longest such name (test_TransformerEncoderBlock_x is TransformerEncoderBlock's,
    not TransformerEncoder's)."""
    owners = [n for n in names if test_id == f"test_{n}" or test_id.startswith(f"test_{n}_")]
    return max(owners, key=len) if owners else None


def tests_of(nb, exercise: str) -> list:
    names = exercises(nb)
    return [c for c in nb.cells if is_autograded_test(c) and test_owner(grade_id(c), names) == exercise]


def drop_hidden_tests(source: str, note: str | None = None) -> str:
    """The source without the region between the hidden-test markers; with `note`, the
    region is replaced by that line, indented as its first marker was (feedback says so)."""
    out, hidden = [], False
    for line in source.splitlines():
        stripped = line.strip()
        if stripped == BEGIN_HIDDEN:
            hidden = True
            if note is not None:
                out.append(line[: len(line) - len(line.lstrip())] + note)
        elif stripped == END_HIDDEN:
            hidden = False
        elif not hidden:
            out.append(line)
    return "\n".join(out) if note is not None else "\n".join(out).rstrip()


def strip_markers(source: str, markers=(BEGIN_SOLUTION, END_SOLUTION, BEGIN_HIDDEN, END_HIDDEN)) -> str:
    """The source with the nbgrader marker lines removed and their content kept."""
    return "\n".join(l for l in source.splitlines() if l.strip() not in markers).rstrip()


def stub_solution(source: str, stub: str = "raise NotImplementedError()") -> str:
    """What nbgrader's ClearSolutions leaves of a solution region: the stub, indented
    like the BEGIN marker (used to test that stubs score nothing)."""
    out, inside = [], False
    for line in source.splitlines():
        stripped = line.strip()
        if stripped == BEGIN_SOLUTION:
            inside = True
            out.append(line[: len(line) - len(line.lstrip())] + stub)
        elif stripped == END_SOLUTION:
            inside = False
        elif not inside:
            out.append(line)
    return "\n".join(out)
