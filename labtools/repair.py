"""Put back what students break, before nbgrader sees the notebook.

nbgrader restores locked cells and, with OverwriteCells.add_missing_cells, re-adds a
deleted test cell, but it fails on a notebook that lost a solution cell next to a
test cell, an empty notebook, or two cells with the same grade_id (a duplicated
cell). `repair` fixes those cases the fair way: a duplicated cell keeps its
nbgrader identity on the last copy (the one the student most likely edited; both
copies still run, in order); a missing graded, solution or read-only cell comes back
as it was released (a missing answer is the release's stub, worth nothing). The
student's own file is never changed: this works on nbgrader's scratch copy.
"""

from __future__ import annotations

import copy

from . import nbcells


def repair(nb, release_nb) -> tuple[object, list[str]]:
    notes: list[str] = []
    nb = copy.deepcopy(nb)

    # 1. duplicated ids: the last copy keeps the id
    last = {}
    for index, cell in enumerate(nb.cells):
        gid = nbcells.grade_id(cell)
        if gid:
            last[gid] = index
    for index, cell in enumerate(nb.cells):
        gid = nbcells.grade_id(cell)
        if gid and last[gid] != index:
            cell.metadata.pop("nbgrader", None)
            notes.append(f"cell {gid!r} appeared twice; graded the last copy")

    # 2. cells of the release that are gone: put them back where they were
    present = {nbcells.grade_id(c) for c in nb.cells if nbcells.grade_id(c)}
    position = 0  # insert after the last release cell found so far
    for cell in release_nb.cells:
        gid = nbcells.grade_id(cell)
        if not gid:
            continue
        if gid in present:
            position = next(i for i, c in enumerate(nb.cells) if nbcells.grade_id(c) == gid) + 1
            continue
        nb.cells.insert(position, copy.deepcopy(cell))
        position += 1
        present.add(gid)
        kind = "answer" if nbcells.is_solution(cell) else "test" if nbcells.is_autograded_test(cell) else "given"
        notes.append(f"{kind} cell {gid!r} was missing; put back as released")
    if notes and len(notes) > 6:
        notes = notes[:5] + [f"... and {len(notes) - 5} more repairs"]
    return nb, notes
