"""Submissions whose own code is alike: pairs of students to look at, and the code they share.

What is compared is only what each student wrote: the answer cells (nbgrader's solution
cells) and any code cell the student added or changed. The lines the release gave them
are blanked (the signature, the docstring, `# YOUR CODE HERE`, and any line the release
has elsewhere) and every fingerprint of the release's code is left out as boilerplate, so
a lab that hands out code to fix (lab01's buggy port) does not make its class look alike.

The comparison is copydetect's (https://github.com/blingenf/copydetect, MIT): the
winnowing of MOSS over Pygments tokens. Identifiers become placeholders before
fingerprinting, so renamed variables do not hide a copy, and a fingerprint matches
wherever it stands, so reordered statements still match. It is a pure-Python package
from PyPI that runs offline, compares Python as tokens rather than text, and takes
boilerplate; Dolos (similar, and well kept) would need Node.js beside the course's Python.

A flagged pair is something to look at, not a verdict: short exercises have few ways to be
written, which is why the score is taken over a student's whole notebook and a pair must
also share a minimum amount of code.
"""

from __future__ import annotations

import csv
import difflib
import io
import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path

from .. import nbcells

NOISE = 25  # shortest stretch of tokenized code (identifiers as one letter) that counts as shared
THRESHOLD = 0.6  # a pair is flagged when this share of one student's own code is in the other's
MIN_SHARED = 80  # ... and the shared stretches add up to this many tokenized characters (3 or 4 lines)
SEPARATOR = "0x5E9A2A7E"  # put between cells: a number literal, which tokenizing keeps as it is


@dataclass(frozen=True)
class CodeCell:
    """One cell of a student's own code."""

    label: str  # the answer cell's grade_id, or "cell N" for a cell the student added or changed
    source: str  # the cell as submitted
    own: str  # the same, with the release's lines blanked (line numbers unchanged)


@dataclass(frozen=True)
class SharedCode:
    """One stretch of code two students share, as each of them wrote it."""

    cell_a: str
    lines_a: tuple[int, int]  # first and last line (from 1) in that cell
    code_a: str
    cell_b: str
    lines_b: tuple[int, int]
    code_b: str


@dataclass(frozen=True)
class SimilarPair:
    student_a: str
    student_b: str
    share_a: float  # the part of a's own code that b's also has (0..1)
    share_b: float
    shared: tuple[SharedCode, ...] = ()

    @property
    def similarity(self) -> float:
        return max(self.share_a, self.share_b)


@dataclass
class SimilarityReport:
    lab_id: str
    threshold: float
    compared: list[str] = field(default_factory=list)  # students whose code was compared
    without_code: list[str] = field(default_factory=list)  # nothing of their own (e.g. an untouched release)
    pairs: list[SimilarPair] = field(default_factory=list)  # flagged pairs, most similar first
    scores: list[float] = field(default_factory=list)  # the similarity of every pair compared (a histogram's data)


def own_code(submission, release) -> list[CodeCell]:
    """The code cells a student wrote, each with the release's lines blanked.

    Answer cells are matched to the release by grade_id; any other code cell that is not
    the release's own is compared with the release cell it is closest to (a cell the student
    changed) and keeps only the lines that differ. Test and read-only cells are skipped: the
    autograded notebook holds the lab's hidden tests there, not the student's code.
    """
    given = {nbcells.grade_id(c): c.source for c in release.cells if c.cell_type == "code" and nbcells.grade_id(c)}
    release_cells = [c.source for c in release.cells if c.cell_type == "code"]
    plain = {s.strip() for s in release_cells}
    # a line the release has anywhere (the buggy code a lab hands out to fix, a helper's call)
    release_lines = {line.strip() for s in release_cells for line in s.splitlines() if len(line.strip()) > 3}
    cells = []
    for number, cell in enumerate(submission.cells, start=1):
        if cell.cell_type != "code" or not cell.source.strip():
            continue
        gid = nbcells.grade_id(cell)
        if nbcells.is_solution(cell) and gid in given:
            cells.append(CodeCell(gid, cell.source, _blank_given(cell.source, given[gid], release_lines)))
        elif not gid and cell.source.strip() not in plain:
            closest = max(release_cells, key=lambda s: difflib.SequenceMatcher(None, s, cell.source).quick_ratio(),
                          default="")
            cells.append(CodeCell(f"cell {number}", cell.source, _blank_given(cell.source, closest, release_lines)))
    return [c for c in cells if c.own.strip()]


def _blank_given(source: str, given: str, release_lines: set[str]) -> str:
    """`source` with the lines it shares, in order, with `given`, and the lines it takes
    from anywhere in the release, made empty."""
    lines = source.splitlines()
    matcher = difflib.SequenceMatcher(None, lines, given.splitlines(), autojunk=False)
    for block in matcher.get_matching_blocks():
        for i in range(block.a, block.a + block.size):
            lines[i] = ""
    return "\n".join("" if line.strip() in release_lines else line for line in lines)


class _Document:
    """A student's own code as one text for copydetect, and the way back to cells and lines."""

    def __init__(self, cells: list[CodeCell], boilerplate, noise: int):
        from copydetect import CodeFingerprint
        from copydetect.utils import get_token_coverage

        self.cells = cells
        self.starts = []  # character offset of each cell in the text
        # Pygments drops leading newlines, which would shift every position copydetect maps
        # back: a comment first (tokenizing drops comments) keeps them
        self.text = "# the student's own code\n"
        for index, cell in enumerate(cells):
            self.text += f"\n{SEPARATOR}\n" if index else ""
            self.starts.append(len(self.text))
            self.text += cell.own
        # window 1: every k-gram is a fingerprint, so the result does not depend on the
        # (per-process random) string hashes that winnowing would choose among
        fp = CodeFingerprint("answer.py", noise, 1, boilerplate=boilerplate, fp=io.StringIO(self.text))
        # a k-gram reaching over the separator spans two cells: it is nobody's code
        cuts = [m.start() for m in re.finditer(SEPARATOR, fp.filtered_code)]
        fp.hash_idx = {h: kept for h, positions in fp.hash_idx.items()
                       if (kept := [i for i in positions if not any(c - noise < i < c + len(SEPARATOR) for c in cuts)])}
        fp.hashes = set(fp.hash_idx)
        fp.token_coverage = get_token_coverage(fp.hash_idx, noise, len(fp.filtered_code))
        self.fp = fp

    def raw(self, position: int) -> int:
        """Position in the text of a position in copydetect's tokenized text: its `offsets` say,
        at tokenized positions, how many characters were dropped before (the first row, [0, 0],
        is a placeholder that would put the first token at the very start of the text)."""
        import numpy as np

        offsets = self.fp.offsets[1:]
        if len(offsets) == 0:
            return position
        row = min(int(np.searchsorted(offsets[:, 0], position)), len(offsets) - 1)
        return position + int(offsets[row, 1])

    def where(self, start: int, end: int) -> tuple[CodeCell, tuple[int, int], str]:
        """The cell and lines that tokenized positions start..end (exclusive) come from."""
        first, last = self.raw(start), self.raw(max(start, end - 1))
        index = max(i for i, s in enumerate(self.starts) if s <= first)
        cell = self.cells[index]
        top = self.text.count("\n", self.starts[index], first) + 1
        bottom = min(self.text.count("\n", self.starts[index], last) + 1, len(cell.own.splitlines()))
        code = "\n".join(cell.source.splitlines()[top - 1:bottom])
        return cell, (top, bottom), code


def boilerplate_of(release, noise: int = NOISE):
    """Fingerprints of every code cell the release hands out."""
    import numpy as np
    from copydetect import CodeFingerprint

    text = "\n\n".join(c.source for c in release.cells if c.cell_type == "code")
    return np.array(sorted(CodeFingerprint("release.py", noise, 1, fp=io.StringIO(text)).hashes))


def find_similar(codes: dict[str, list[CodeCell]], release, threshold: float = THRESHOLD,
                 noise: int = NOISE, min_shared: int = MIN_SHARED, scores: list | None = None) -> list[SimilarPair]:
    """Every pair of students whose own code is alike, most similar first. `scores`, a list,
    gets the similarity of every pair compared, flagged or not."""
    from copydetect import compare_files

    boilerplate = boilerplate_of(release, noise)
    docs = {s: _Document(cells, boilerplate, noise) for s, cells in sorted(codes.items()) if cells}
    pairs = []
    for a, b in itertools.combinations(docs, 2):
        overlap, (share_a, share_b), _ = compare_files(docs[a].fp, docs[b].fp)
        if scores is not None:
            scores.append(float(max(share_a, share_b)))
        if overlap >= min_shared and max(share_a, share_b) >= threshold:
            pairs.append(SimilarPair(a, b, float(share_a), float(share_b), _shared(docs[a], docs[b], noise)))
    return sorted(pairs, key=lambda p: (-p.similarity, p.student_a, p.student_b))


def _shared(a: _Document, b: _Document, k: int) -> tuple[SharedCode, ...]:
    """The stretches a and b share, each paired with where it stands in the other."""
    # positions of every shared k-gram in both; a stretch is a run of them on one diagonal
    hits = sorted((ia - ib, ia) for h in a.fp.hashes & b.fp.hashes
                  for ia in a.fp.hash_idx[h][:20] for ib in b.fp.hash_idx[h][:20])
    runs: list[list[int]] = []
    for diagonal, ia in hits:
        if runs and runs[-1][0] == diagonal and ia - runs[-1][2] < k:
            runs[-1][2] = ia
        else:
            runs.append([diagonal, ia, ia])
    # longest first; a stretch already shown (the same code matched at two places) is dropped
    kept: list[tuple[int, int, int, int]] = []
    for diagonal, start, end in sorted(runs, key=lambda r: r[1] - r[2]):
        span = (start, end + k, start - diagonal, end - diagonal + k)
        if not any(span[0] < o[1] and o[0] < span[1] or span[2] < o[3] and o[2] < span[3] for o in kept):
            kept.append(span)
    regions = []
    for a0, a1, b0, b1 in sorted(kept):
        cell_a, lines_a, code_a = a.where(a0, a1)
        cell_b, lines_b, code_b = b.where(b0, b1)
        regions.append(SharedCode(cell_a.label, lines_a, code_a, cell_b.label, lines_b, code_b))
    return tuple(regions)


def similar_submissions(course: Path, lab_id: str, students: list[str] | None = None,
                        threshold: float = THRESHOLD, release: Path | None = None) -> SimilarityReport:
    """Compare the graded class of a lab: the autograded notebooks (metadata restored from
    the release, so answer cells are where the release has them) in the course directory.
    `release`: the student edition they were handed (default: the course's release/)."""
    from ..labs import get_lab

    lab = get_lab(lab_id)
    course = Path(course)
    candidates = [release, lab.release_path(course), lab.release_path()]
    release = nbcells.read(next(p for p in candidates if p is not None and Path(p).exists()))
    folder = course / "autograded"
    if students is None:
        students = sorted(p.parent.parent.name for p in folder.glob(f"*/{lab_id}/{lab.notebook_name}"))
    report = SimilarityReport(lab_id, threshold)
    codes = {}
    for student in students:
        path = folder / student / lab_id / lab.notebook_name
        cells = own_code(nbcells.read(path), release) if path.exists() else []
        if cells:
            codes[student] = cells
            report.compared.append(student)
        else:
            report.without_code.append(student)
    report.pairs = find_similar(codes, release, threshold, scores=report.scores)
    return report


def write_csv(report: SimilarityReport, path: Path) -> Path:
    """One row per shared stretch of each flagged pair (a pair with none still gets a row)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["student_a", "student_b", "similarity", "share_a", "share_b",
                         "cell_a", "lines_a", "cell_b", "lines_b", "code_a", "code_b"])
        for pair in report.pairs:
            head = [pair.student_a, pair.student_b, f"{pair.similarity:.2f}", f"{pair.share_a:.2f}", f"{pair.share_b:.2f}"]
            for region in pair.shared or (None,):
                if region is None:
                    writer.writerow(head + [""] * 6)
                    continue
                writer.writerow(head + [region.cell_a, "%d-%d" % region.lines_a, region.cell_b,
                                        "%d-%d" % region.lines_b, region.code_a, region.code_b])
    return path
