"""What went wrong while a submission was graded, recorded as data where it happens.

A grading step that meets an incident (the kernel died or ran out of memory, a cell timed
out, the GPU broke, the judge sent the notebook to review or its own setup failed) appends a record {"cell", "kind", "detail"} to the autograded
notebook's metadata (`labtools_grader.incidents`), which the grader resets before every
run: a submission cannot bring its own. The report and problems.csv read these records,
never the text of a cell's outputs, so a student's exception named `NeedsReview` or
`KernelDied`, or a line printed to look like the grader's, is graded as what it is.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import nbcells

KEY = nbcells.GRADER_KEY

# kind -> how the report says it, for n cells
WORDS = {
    "timeout": "timed out",
    "kernel_died": "killed the kernel",
    "out_of_memory": "ran out of memory",
    "gpu_error": "broke the GPU (restarted)",
    "guard_unavailable": "not scored: the notebook broke the grader's test guard",  # notebooks graded before 2026-11-28
    "grader_setup": "not scored: the grader's own setup failed (tell the course's maintainers)",
}


@dataclass(frozen=True)
class Incident:
    cell: str
    kind: str
    detail: str = ""


def reset(nb) -> None:
    """Start a grading run with no incidents (whatever the submission's metadata says)."""
    nb.metadata.setdefault(KEY, {})["incidents"] = []


def record(nb, cell: str, kind: str, detail: str = "") -> None:
    nb.metadata.setdefault(KEY, {}).setdefault("incidents", []).append(
        {"cell": str(cell), "kind": str(kind), "detail": str(detail)[:500]})


def read(nb) -> list[Incident] | None:
    """The incidents recorded in an autograded notebook; None when it has no record (graded
    by a labtools from before these records)."""
    items = (nb.metadata.get(KEY) or {}).get("incidents")
    if not isinstance(items, list):
        return None
    return [Incident(str(i.get("cell", "")), str(i.get("kind", "")), str(i.get("detail", "")))
            for i in items if isinstance(i, dict)]


def describe(incidents: list[Incident]) -> list[str]:
    """The report's words for a list of incidents, one phrase per kind."""
    parts = []
    tampered = len({i.cell for i in incidents if i.kind == "tampered"})
    if tampered:
        parts.append(f"the test environment was tampered with before {tampered} test cell{'s' if tampered > 1 else ''} "
                     "(undone; see the notebook)")
    review = len({i.cell for i in incidents if i.kind == "needs_review"})
    if review:
        parts.append(f"needs review by hand: {review} test cell{'s' if review > 1 else ''} not run, because the "
                     "notebook reaches into the grader or the Python runtime (see the notebook)")
    for kind, words in WORDS.items():
        count = sum(i.kind == kind for i in incidents)
        if count:
            parts.append(f"{count} cell{'s' if count > 1 else ''} {words}")
    return parts
