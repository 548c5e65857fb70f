"""Put the lab's structure back before nbgrader reads a submission.

A student's notebook carries nbgrader's metadata, and a student can edit it: change a
test's points, add a graded cell of their own, rename or delete a test, turn a test
cell into markdown, move test cells above the helpers they use, or pick another
kernel. nbgrader repairs some of that and fails the whole notebook on the rest
("autograde failed", with no useful reason). `RestoreFromRelease` runs first and
makes the submission match the release the student was given:

- every cell the release marks (grade_id) gets the release's nbgrader metadata and
  cell type back; a cell with grade metadata the release does not have becomes an
  ordinary cell, and so do earlier copies of a duplicated cell (the last copy, the one
  most likely edited, is graded; every copy still runs);
- a renamed cell is recognised by its source and renamed back; a missing one is put
  back from the release at its place (a deleted answer comes back as the stub);
- the marked cells are put back in the release's order, each followed by the cells
  the student placed after it;
- the kernel and language are the release's.

Each change is recorded, by cell, as data in the notebook's metadata
(`labtools_grader.restored`: a list of {"cell", "change"}), which the grade command
reports; the notebook is then graded as usual.
"""

from __future__ import annotations

import copy

import nbformat
from nbgrader.preprocessors import NbGraderPreprocessor

from ... import nbcells
from . import course_notebook

REPORT_KEY = nbcells.GRADER_KEY
_CELL_KEYS = ("grade", "grade_id", "locked", "points", "solution", "task", "schema_version", "cell_type")


def _as_type(cell, cell_type: str):
    """The same cell as another type (nbgrader's update_cell_type, keeping id and metadata)."""
    if cell_type == "code":
        new = nbformat.v4.new_code_cell(cell.source, metadata=cell.metadata)
    elif cell_type == "markdown":
        new = nbformat.v4.new_markdown_cell(cell.source, metadata=cell.metadata)
    else:
        new = nbformat.v4.new_raw_cell(cell.source, metadata=cell.metadata)
    if "id" in cell:
        new["id"] = cell["id"]
    return new


def _fresh_copy(cell):
    new = copy.deepcopy(cell)
    new["id"] = nbformat.v4.new_markdown_cell("")["id"]
    if new.cell_type == "code":
        new.outputs, new.execution_count = [], None
    return new


def restore(nb, release) -> list[dict]:
    """Make `nb` match `release` in structure (in place); the list of changes made."""
    changes: list[dict] = []

    def note(cell_name, change):
        changes.append({"cell": str(cell_name)[:80], "change": change})

    marked = [c for c in release.cells if nbcells.grade_id(c)]
    order = [nbcells.grade_id(c) for c in marked]
    by_id = {nbcells.grade_id(c): c for c in marked}

    # 1. which submission cell is which marked cell
    seen: dict[str, object] = {}
    strays = []  # (cell, claimed grade_id, its metadata): metadata the release does not have
    last = {nbcells.grade_id(c): i for i, c in enumerate(nb.cells) if "nbgrader" in c.get("metadata", {})}
    for index, cell in enumerate(nb.cells):
        if "nbgrader" not in cell.get("metadata", {}):
            continue
        gid = nbcells.grade_id(cell)
        if gid in by_id and last[gid] == index:  # a duplicated cell: the last copy, most likely the one edited
            seen[gid] = cell
            continue
        strays.append((cell, gid, cell.metadata.pop("nbgrader")))
    for gid in [g for g in order if g not in seen]:  # renamed: the same source under another name
        want = by_id[gid]
        match = next((s for s in strays if s[0].source.strip() == want.source.strip() and s[0].source.strip()), None)
        if match is not None:
            strays.remove(match)
            seen[gid] = match[0]
            if isinstance(match[2], dict):
                match[0].metadata["nbgrader"] = {**match[2], "grade_id": gid}
            note(gid, f"renamed to {match[1]!r}: name restored")
    for cell, gid, _ in strays:
        note(gid or "(no name)", "an earlier copy of a graded cell: made an ordinary cell (the last copy is graded)"
             if gid in seen else "grade metadata the release does not have: made an ordinary cell")

    # 2. metadata and cell type, as released
    for gid, cell in seen.items():
        want = by_id[gid]
        mine = cell.metadata.get("nbgrader", {})
        wanted = {k: v for k, v in want.metadata["nbgrader"].items() if k in _CELL_KEYS}
        differs = sorted(k for k in set(wanted) | {k for k in mine if k in _CELL_KEYS} if mine.get(k) != wanted.get(k))
        if differs:
            note(gid, "metadata changed (" + ", ".join(
                f"{k}: {str(mine.get(k))[:20]} -> {wanted.get(k)}" for k in differs) + "): restored")
        cell.metadata["nbgrader"] = {**{k: v for k, v in mine.items() if k not in _CELL_KEYS},
                                     **copy.deepcopy(wanted)}
        for key in ("deletable", "editable"):
            if key in want.metadata:
                cell.metadata[key] = want.metadata[key]
            else:
                cell.metadata.pop(key, None)
        if cell.cell_type != want.cell_type:
            note(gid, f"turned into a {cell.cell_type} cell: made a {want.cell_type} cell again")
            seen[gid] = _as_type(cell, want.cell_type)
            nb.cells[nb.cells.index(cell)] = seen[gid]

    # 3. the release's order, each marked cell followed by what the student put after it
    head, groups, current = [], {}, None
    for cell in nb.cells:
        gid = next((g for g, c in seen.items() if c is cell), None)
        if gid is not None:
            current = gid
            groups[gid] = [cell]
        elif current is None:
            head.append(cell)
        else:
            groups[current].append(cell)
    present = [g for g in [next((g for g, c in seen.items() if c is cell), None) for cell in nb.cells] if g]
    if present != [g for g in order if g in seen]:
        for gid in _out_of_place(present, order):
            note(gid, "moved: put back in the release's order")
    cells = list(head)
    for gid in order:
        if gid in groups:
            cells += groups[gid]
        else:
            note(gid, "missing: put back from the release")
            cells.append(_fresh_copy(by_id[gid]))
    nb.cells = cells

    # 4. the kernel the lab runs in
    for key in ("kernelspec", "language_info"):
        if key in release.metadata and nb.metadata.get(key) != release.metadata[key]:
            if key == "kernelspec" and (nb.metadata.get(key) or {}).get("name") != release.metadata[key].get("name"):
                note("(notebook)", f"kernel changed to {str((nb.metadata.get(key) or {}).get('name'))[:40]!r}: "
                                   f"restored to {release.metadata[key].get('name')!r}")
            nb.metadata[key] = copy.deepcopy(release.metadata[key])
    return _grouped(changes)


def _out_of_place(present: list[str], order: list[str]) -> list[str]:
    """The fewest cells whose moves explain `present`: those outside a longest run that is
    in the release's order (moving one cell to the end names that one cell)."""
    rank = [order.index(g) for g in present]
    best = [1] * len(rank)
    back = [-1] * len(rank)
    for i in range(len(rank)):
        for j in range(i):
            if rank[j] < rank[i] and best[j] + 1 > best[i]:
                best[i], back[i] = best[j] + 1, j
    keep, i = set(), max(range(len(rank)), key=best.__getitem__, default=-1)
    while i >= 0:
        keep.add(i)
        i = back[i]
    return [g for i, g in enumerate(present) if i not in keep]


def _grouped(changes: list[dict]) -> list[dict]:
    """One entry per kind of change, naming its cells (an emptied notebook is one line)."""
    merged: dict[str, list[str]] = {}
    for change in changes:
        merged.setdefault(change["change"], []).append(change["cell"])
    return [{"cell": ", ".join(cells[:6]) + (f" and {len(cells) - 6} more" if len(cells) > 6 else ""),
             "change": what} for what, cells in merged.items()]


class RestoreFromRelease(NbGraderPreprocessor):
    """First autograde step: the submission's structure as released (see module doc)."""

    def preprocess(self, nb, resources):
        path = course_notebook(self.config, resources, "release")
        if path is None:
            self.log.warning("no release notebook found: the submission's metadata was not checked")
            return nb, resources
        changes = restore(nb, nbcells.read(path))
        nb.metadata[REPORT_KEY] = {"restored": changes}  # always set: a submission cannot bring its own
        if changes:
            self.log.warning("restored from the release: %s", "; ".join(f"{c['cell']}: {c['change']}" for c in changes))
        return nb, resources


def restored(nb) -> list[dict]:
    """The changes RestoreFromRelease recorded in an autograded notebook."""
    report = nb.metadata.get(REPORT_KEY) or {}
    items = report.get("restored") if isinstance(report, dict) else None
    return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []
