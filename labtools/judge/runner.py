"""The judge: every graded verdict, decided outside the student's process.

For a lab whose source notebook says `"labtools": {"judge": true}` in its metadata,
the grader never sends a test cell to the student's kernel. At each test cell it
runs that cell's code, taken from the lab's *source* notebook (hidden tests
included), here, in a namespace of its own: the setup cell and the read-only cells
tagged `judge` (test helpers), with `student` bound to a `labtools.judge.wire.Student`
whose calls travel to the kernel as data. The kernel only runs the student's
functions on the judge's inputs and sends back results as data; the judge computes
the references, compares, and writes the cell's outputs (what the test printed and,
if it failed, its message). nbgrader then scores those outputs as usual.

So nothing the student's process prints, replies or patches reaches a verdict
except the values its functions return, hidden tests never enter it, and a test
helper cannot be redefined by the submission. `GradingExecute` (execute.py) uses
`Judge` with a `KernelChannel`; the in-process harness (harness.py) with a
`LocalChannel` over a namespace, so fixtures exercise the same wire format.
"""

from __future__ import annotations

import ast
import contextlib
import io
import traceback
import types
from dataclasses import dataclass, field

from .. import nbcells
from . import copies, differences, raw_errors, reader, signatures, wire
from .embed import HANDLE_GRADE_ID
from .kernel_channel import JudgeTimeout

JUDGE_TAG = "judge"


def uses_judge(nb) -> bool:
    return bool((nb.metadata.get("labtools") or {}).get("judge"))


def judge_cells(nb) -> list:
    """Cells the judge runs before the tests: the setup cell and read-only cells tagged `judge`."""
    cells = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        meta = nbcells.nbgrader_meta(cell)
        if nbcells.grade_id(cell) == "setup" or (JUDGE_TAG in cell.metadata.get("tags", []) and meta.get("locked")
                                                  and not meta.get("grade") and not meta.get("solution")):
            cells.append(cell)
    return cells


@dataclass
class Verdict:
    """What the judge decided about one test cell."""

    grade_id: str
    passed: bool
    stdout: str = ""
    ename: str = ""
    evalue: str = ""
    details: list[str] = field(default_factory=list)
    incident: str = ""  # set by the judge alone (labtools/grade/incidents.py), never from what the student raised

    def outputs(self) -> list:
        import nbformat

        outs = []
        if self.stdout:
            outs.append(nbformat.v4.new_output("stream", name="stdout", text=self.stdout))
        if not self.passed:
            outs.append(nbformat.v4.new_output("error", ename=self.ename, evalue=self.evalue,
                                               traceback=[f"{self.ename}: {self.evalue}"]))
        return outs


NEEDS_REVIEW = "NeedsReview"


def _code_cells(cells) -> list:
    """Code cells as nbformat cells; a plain source string is a cell with no identity."""
    import nbformat

    return [nbformat.v4.new_code_cell(c) if isinstance(c, str) else c
            for c in cells if isinstance(c, str) or c.get("cell_type") == "code"]


def lab_cell_ids(source_nb) -> dict[str, str]:
    """grade_id -> source of the lab's own locked cells (as the source holds them, markers out)."""
    return {nbcells.grade_id(c): None if nbcells.is_autograded_test(c) else nbcells.strip_markers(c.source).strip()
            for c in source_nb.cells if c.cell_type == "code" and nbcells.grade_id(c)
            and (nbcells.nbgrader_meta(c).get("locked") or nbcells.is_autograded_test(c)) and not nbcells.is_solution(c)}


def is_lab_cell(cell, locked: dict[str, str]) -> bool:
    """A cell is the lab's own by its identity: a locked cell of the release (grade_id),
    restored byte for byte before grading. Its text alone never makes a cell the lab's."""
    gid = nbcells.grade_id(cell)
    # a test cell never runs in the kernel (the judge runs the source's), whatever text it holds
    return gid in locked and (locked[gid] is None or nbcells.strip_markers(cell.source).strip() == locked[gid])


def needs_review(source_nb, submission_cells) -> list[str]:
    """What the submission's own code does outside the allowed Python (labtools/judge/reader.py).

    The lab's locked cells are known by identity and not read. Every other cell is read
    whole; a finding on a line that the lab itself writes in a cell a student may edit (a
    setting changed in lab 6's configuration cell, say) is the lab's, not the student's,
    unless it replaces or changes something (a line copied from the lab's cells does not
    make a redefinition of the lab's helper the lab's)."""
    locked = lab_cell_ids(source_nb)
    lab_lines = {line.strip() for c in source_nb.cells if c.cell_type == "code"
                 and not nbcells.nbgrader_meta(c).get("locked") and not nbcells.is_solution(c)
                 for line in nbcells.strip_markers(c.source).splitlines() if line.strip()}
    visible_tests = {_visible_test(c.source) for c in source_nb.cells
                     if c.cell_type == "code" and nbcells.is_autograded_test(c)} - {""}
    cells, texts, copied_tests = [], {}, set()
    for i, cell in enumerate(_code_cells(submission_cells)):
        where, source = f"code cell {i + 1}", nbcells.strip_markers(cell.source)
        if is_lab_cell(cell, locked) and locked[nbcells.grade_id(cell)] is None:
            continue  # a test cell never runs in the kernel: what it binds there is not the kernel's
        students = not is_lab_cell(cell, locked)
        cells.append((where, source, students))
        texts[where] = source.splitlines()
        if students and _visible_test(source) in visible_tests:
            copied_tests.add(where)  # a visible test copied whole, to try it: its own reads are the lab's
    found = []
    for finding in reader.reaches_into_runtime(cells, notebook_names_read(source_nb)):
        where, _, line = finding.rpartition("(")[2].rstrip(")").partition(", line ")
        lines = texts.get(where, [])
        text = lines[int(line) - 1].strip() if line.isdigit() and 0 < int(line) <= len(lines) else None
        if finding.startswith(("rebinds ", "changes ")) or (text not in lab_lines and where not in copied_tests):
            found.append(finding)
    library = list((source_nb.metadata.get("labtools") or {}).get("pasted_from") or [])
    if library:
        found += copies.pasted([(where, source) for where, source, students in cells if students], library)
    return found


def _visible_test(source: str) -> str:
    """A test cell's visible code, compared line by line: hidden tests, comments and blank lines out.
    A student's cell equal to one runs the lab's own lines, on names those lines bind (a name it reads
    first is a helper the lab defines, which a student cell may not rebind, or the student's answer)."""
    import re

    visible = nbcells.strip_markers(re.sub(r"### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS", "", source, flags=re.S))
    return "\n".join(line.strip() for line in visible.splitlines() if line.strip() and not line.strip().startswith("#"))


def notebook_names_read(source_nb) -> set[str]:
    """Names of the notebook, other than answers, that the tests read there as `student.X`
    (lab 4's pretrained `hf_model`, the given classes an answer must be built on). The
    lab's other helpers reach the kernel as `lab.X`, built from the judge's own text."""
    import re

    answers, read = set(), set()
    for cell in source_nb.cells:
        if cell.cell_type != "code":
            continue
        tree = reader.parse(nbcells.strip_markers(cell.source))
        if nbcells.is_solution(cell) and tree is not None:
            answers |= {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
            answers |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
        elif nbcells.is_autograded_test(cell) or JUDGE_TAG in cell.metadata.get("tags", []):
            read |= set(re.findall(r"\bstudent\.([A-Za-z_]\w*)", cell.source))
    return read - answers


def library_has(path: str) -> bool | None:
    """Whether a library the course allows really has the attribute `path` names (None: cannot
    tell). A use of one it lacks, in an answer, can only be a patch made in the kernel."""
    import importlib
    import types

    parts = path.split(".")
    if parts[0] not in reader.ALLOWED_MODULES or parts[0] in ("builtins", "sys", "os"):
        return None
    try:
        obj = importlib.import_module(parts[0])
    except Exception:  # noqa: BLE001 - not installed here: no answer either way
        return None
    for i, part in enumerate(parts[1:], 1):
        try:
            obj = getattr(obj, part)
            continue
        except Exception:  # noqa: BLE001
            pass
        if not isinstance(obj, types.ModuleType):
            return False
        try:
            obj = importlib.import_module(".".join(parts[: i + 1]))
        except ImportError:
            return False
        except Exception:  # noqa: BLE001
            return None
    return True


class GraderSetupError(RuntimeError):
    """A judge cell of the lab itself failed: the lab's bug, not the student's."""


# What a lab's judge cells compute for themselves (reference models they train, say), kept for
# the next submission this process grades: one dict per version of those cells. Only judge code
# writes to it; nothing of a student's reaches the judge's namespace except as data.
_CACHES: dict[str, dict] = {}


def _cache_for(cells) -> dict:
    import hashlib

    key = hashlib.sha256("\n\0".join(c.source for c in cells).encode()).hexdigest()
    return _CACHES.setdefault(key, {})


# `labwire` as the tests see it: the wire, and what the notebook's handle cell adds beside it
# (embed.py), so that a test says the same in the notebook and here.
_LABWIRE = types.ModuleType("labwire")
_LABWIRE.__dict__.update(vars(wire))
_LABWIRE.describe_difference = differences.describe_difference
_LABWIRE.describe_shape = differences.describe_shape


class Judge:
    """Runs the tests of one lab's source notebook against one submission."""

    def __init__(self, source_nb, channel: wire.Channel, submission_sources=()):
        self.source = source_nb
        self.channel = channel
        self._cells = judge_cells(source_nb)
        self._tests = {nbcells.grade_id(c): c for c in source_nb.cells if nbcells.is_autograded_test(c)}
        self._order = {id(c): i for i, c in enumerate(source_nb.cells)}
        self._ran = 0
        self._setup_error = ""
        # `lab.X`: the lab's helpers where the student's code runs, built there from this text
        lab_text = "\n\n".join(nbcells.strip_markers(c.source) for c in self._cells)
        self.namespace = {"__name__": "__judge__", "student": wire.Student(channel), "labwire": _LABWIRE,
                          "lab": wire.Lab(channel, lab_text), "JUDGE_CACHE": _cache_for(self._cells)}
        cells = _code_cells(submission_sources)
        locked = lab_cell_ids(source_nb)
        # the handle cell (known by identity) is the grader's own wire, not code an answer reaches
        sources = [nbcells.strip_markers(c.source) for c in cells
                   if not (nbcells.grade_id(c) == HANDLE_GRADE_ID and is_lab_cell(c, locked))]
        self.namespace["calls_in_answer"] = lambda entry, targets: reader.forbidden_calls(
            sources, entry, targets, exists=library_has)
        self.review = needs_review(source_nb, cells)
        # a default or the order changed in an exercise's signature: said first in each of its failed tests
        self._changed_signature = signatures.changed_signature_by_test(source_nb, cells)

    def _catch_up(self, position: int) -> None:
        """Run the judge cells that come before `position` in the source."""
        while self._ran < len(self._cells) and self._order[id(self._cells[self._ran])] < position:
            cell = self._cells[self._ran]
            self._ran += 1
            if self._setup_error:
                continue
            try:
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                    exec(compile(nbcells.strip_markers(cell.source), f"<judge {nbcells.grade_id(cell)}>", "exec"),
                         self.namespace)
            except Exception as exc:  # noqa: BLE001 - reported on every test, never scored
                self._setup_error = f"{nbcells.grade_id(cell)}: {type(exc).__name__}: {exc}"

    def has_test(self, grade_id: str) -> bool:
        return grade_id in self._tests

    def run(self, grade_id: str) -> Verdict:
        cell = self._tests.get(grade_id)
        if cell is None:
            return Verdict(grade_id, False, ename="UnknownTest",
                           evalue=f"{grade_id!r} is not a test of this lab: the cell was not run")
        if self.review:
            shown = "; ".join(self.review[:4]) + ("; ..." if len(self.review) > 4 else "")
            return Verdict(grade_id, False, ename=NEEDS_REVIEW, incident="needs_review", evalue=(
                "not run: your notebook reaches into the grader or the Python runtime, which no exercise "
                f"needs ({shown}). Your instructor will read it and grade it by hand."))
        self._catch_up(self._order[id(cell)])
        if self._setup_error:
            return Verdict(grade_id, False, ename="GraderSetupError", incident="grader_setup",
                           evalue=f"the grader's own setup failed ({self._setup_error}); tell your instructor")
        out = io.StringIO()
        source = nbcells.strip_markers(cell.source)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                exec(compile(source, f"<test {grade_id}>", "exec"), self.namespace)
        except Exception as exc:  # noqa: BLE001 - a failed test, whatever it raised
            if type(exc).__name__ == "DeadKernelError":
                raise  # the grader restarts the kernel and says so in this cell
            incident = ("timeout" if isinstance(exc, JudgeTimeout) else
                        "grader_setup" if isinstance(exc, wire.LabSetupError) else "")
            ename, evalue = _describe_failure(exc)
            if grade_id in self._changed_signature and not incident:
                evalue = f"your signature is not the exercise's: {self._changed_signature[grade_id]}. {evalue}"
            return Verdict(grade_id, False, out.getvalue(), ename, evalue, incident=incident)
        finally:
            self.channel.end_test()
        return Verdict(grade_id, True, out.getvalue())


def _raised_by_answer(exc: BaseException):
    """The error of the student's side behind `exc` (itself, or the error a test helper turned into
    an AssertionError with `raise ... from`), or None."""
    raised = exc if isinstance(exc, wire.StudentRaised) else exc.__cause__
    return raised if isinstance(raised, wire.StudentRaised) else None


def _where(exc: BaseException) -> str:
    """Where the student's side raised the error behind `exc`, as the end of a message."""
    line = getattr(_raised_by_answer(exc), "notebook_line", "")
    return f" (raised at the notebook line `{line}`)" if line else ""


def _explained(exc: BaseException, message: str) -> str:
    """`message`, then what the raw error behind it shows of its cause (raw_errors.py), if anything."""
    raised = _raised_by_answer(exc)
    if raised is None:
        return message
    extra = raw_errors.explain(raw_errors.RawError(raised.student_type, str(raised), raised.notebook_line, message,
                                                   raised.line_values))
    return f"{message}: {extra}" if extra else message


def _failure_behind(exc: BaseException) -> BaseException:
    """A test helper that crashed while it explained a failure (an error of the test's own code,
    raised while it handled the answer's error or a failed check) must not hide that failure:
    the student reads the failure it was handling."""
    if isinstance(exc, (AssertionError, wire.StudentRaised, wire.WireError, wire.LabSetupError, JudgeTimeout)):
        return exc
    handled = exc.__context__
    while handled is not None and not isinstance(handled, (AssertionError, wire.StudentRaised)):
        handled = handled.__context__
    return handled if handled is not None else exc


def _describe_failure(exc: BaseException) -> tuple[str, str]:
    exc = _failure_behind(exc)
    if isinstance(exc, wire.StudentRaised):
        return exc.student_type, _explained(exc, f"your code raised {exc.student_type}: {exc}{_where(exc)}")
    if isinstance(exc, AssertionError):
        return "AssertionError", _explained(exc, (str(exc) or "a check failed") + _where(exc))
    if isinstance(exc, wire.WireError):
        return "WireError", f"the grader could not read what your code returned: {exc}"
    if isinstance(exc, JudgeTimeout):
        return "Timeout", str(exc)
    if isinstance(exc, wire.LabSetupError):
        return "GraderSetupError", f"{exc}; tell your instructor"
    # an error of the test code itself on data it did not expect: show where, briefly
    last = traceback.extract_tb(exc.__traceback__)[-1:]
    where = f" (at {last[0].name}, line {last[0].lineno})" if last else ""
    return type(exc).__name__, f"{exc}{where}"
