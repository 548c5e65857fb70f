"""Make submissions from a lab's release notebook: the way students fill it in.

Used by the demo class and by the tests (reference answers must get full marks,
an untouched release must get zero).
"""

from __future__ import annotations

import copy

from .. import nbcells


def fill_release(release_nb, source_nb, answers: dict[str, str] | None = None, written: bool = True):
    """A copy of the release notebook with each solution cell filled in.

    `answers` maps an exercise's grade_id to the whole content of its solution cell;
    exercises not in it get the reference solution from the source. With `written`,
    the written answers get the model answer too.
    """
    answers = answers or {}
    nb = copy.deepcopy(release_nb)
    for cell in nb.cells:
        if not nbcells.is_solution(cell):
            continue
        gid = nbcells.grade_id(cell)
        if cell.cell_type == "code":
            answer = answers.get(gid)
            if answer is None:
                answer = nbcells.strip_markers(nbcells.find_cell(source_nb, gid).source)
            cell.source = answer
        elif written:
            cell.source = nbcells.strip_markers(nbcells.find_cell(source_nb, gid).source)
    return nb
