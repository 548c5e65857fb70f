"""The grader's half of the test guard: tests score what the code honestly earns.

`TestGuard` is mixed into `GradingExecute` (labtools/execute.py). Around the cells of
every notebook that nbgrader autogrades it:

- starts the kernel without NBGRADER_EXECUTION (LABS_FAST=1 keeps the fast mode
  that variable used to switch on), so code cannot behave differently when graded;
- sends `labtools/kernel_guard.py` into the kernel before the first cell, then,
  before each test cell, has it undo what the notebook changed in the test
  environment (patched torch/NumPy checks, redefined helpers, IPython hooks) and
  check the student's results on their way out during the test;
- turns `execute_result` outputs of test cells into plain displays, so a value that
  student code puts out during a test is never read as nbgrader partial credit;
- writes what it undid at the top of the test cell (stdout), where the grade report
  (`grading._incidents`) and the student's feedback find it.

The kernel-side code runs in the same process as the student's, so this raises the
bar for the usual tricks; it is not a wall against someone who studies it.
"""

from __future__ import annotations

import ast
import json
import os
import secrets
from pathlib import Path

import nbformat
from nbclient.util import run_sync
from traitlets import Bool, Float, HasTraits

from . import kernel_guard, nbcells

KERNEL_SOURCE = Path(kernel_guard.__file__).read_text()
NOTICE = "Grader: before this test it undid changes that the notebook made to the test environment: "
GUARD_UNAVAILABLE = ("the grader could not check the test environment before this test (the notebook removed "
                     "or broke its guard), so the test is not scored")


def cell_role(cell) -> str:
    """'test', 'solution', 'given' (a read-only instructor cell) or 'other'."""
    if cell.cell_type != "code":
        return "other"
    meta = nbcells.nbgrader_meta(cell)
    if meta.get("solution"):
        return "solution"
    if meta.get("grade"):
        return "test"
    if meta.get("locked"):
        return "given"
    return "other"


def bound_names(source: str, functions_only: bool = False) -> list[str]:
    """Names a cell binds at its top level (defs, classes, imports, assignments)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.append(node.name)
        elif functions_only:
            continue
        elif isinstance(node, ast.ClassDef):
            names.append(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names += [(a.asname or a.name).split(".")[0] for a in node.names if a.name != "*"]
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.With)):
            targets = (node.targets if isinstance(node, ast.Assign)
                       else [node.target] if not isinstance(node, ast.With)
                       else [item.optional_vars for item in node.items if item.optional_vars])
            for target in targets:
                names += [n.id for n in ast.walk(target) if isinstance(n, ast.Name)]
    return names


def kernel_env(env: dict | None) -> dict:
    """The grading kernel's environment: no sign that it is being graded."""
    env = dict(os.environ if env is None else env)
    if env.pop("NBGRADER_EXECUTION", None) is not None:
        env["LABS_FAST"] = "1"
    return env


class TestGuard(HasTraits):
    """Mixin for nbclient-based preprocessors (needs `kc`, `nb`, `log`)."""

    guard = Bool(True, help="guard the tests (off: plain nbgrader behaviour, for comparison)").tag(config=True)
    partial_credit = Bool(False, help="let an execute_result of a test cell give nbgrader partial credit"
                          ).tag(config=True)
    guard_timeout = Float(60.0, help="seconds the guard may take around one cell").tag(config=True)

    def _guard_reset(self) -> None:
        self._guard_module = f"_labtools_guard_{secrets.token_hex(8)}"
        self._guard_given: list[str] = []
        self._guard_student: list[str] = []

    # -- kernel start ----------------------------------------------------------------------
    async def async_start_new_kernel(self, **kwargs):
        if self.guard:
            kwargs["env"] = kernel_env(kwargs.get("env"))
        self._guard_reset()  # a new notebook (a restart after a crash keeps what it knew)
        return await super().async_start_new_kernel(**kwargs)

    # nbclient binds its sync names to its own coroutines: rebind them to these.
    start_new_kernel = run_sync(async_start_new_kernel)

    async def async_start_new_kernel_client(self):
        kc = await super().async_start_new_kernel_client()
        if self.guard and getattr(self, "_judge", None) is None:  # a judged lab needs no guard
            if not hasattr(self, "_guard_module"):
                self._guard_reset()
            name = self._guard_module
            await self._guard_run(
                f"(lambda m: (__import__('sys').modules.__setitem__({name!r}, m), exec({KERNEL_SOURCE!r}, m.__dict__),"
                f" setattr(m, 'guard', m.Guard(get_ipython()))))(__import__('types').ModuleType({name!r}))")
            if self._guard_given:  # a restarted kernel: what the replayed cells defined
                await self._guard_call(f"record({self._guard_given!r})")
        return kc

    start_new_kernel_client = run_sync(async_start_new_kernel_client)

    # -- around each cell ------------------------------------------------------------------
    def guard_before(self, cell, role: str) -> list[str] | None:
        """What the guard undid before a test cell; None if it could not run (fail closed)."""
        if not self.guard or role != "test":
            return []
        return run_sync(self._guard_call)(f"before_test({self._guard_student!r})")

    def guard_after(self, cell, role: str, undone: list[str] | None) -> None:
        if self.guard and role == "test":
            run_sync(self._guard_call)("after_test()")
        if role == "solution":
            self._guard_student += [n for n in bound_names(cell.source, functions_only=True)
                                    if n not in self._guard_student]
        elif self.guard and role in ("test", "given"):
            names = [n for n in bound_names(cell.source) if n not in self._guard_student]
            self._guard_given += [n for n in names if n not in self._guard_given]
            if names:
                run_sync(self._guard_call)(f"record({names!r})")
        if self.guard and role == "test" and not self.partial_credit:
            for output in cell.outputs:
                if output.output_type == "execute_result":
                    output.output_type = "display_data"
                    output.pop("execution_count", None)
        if undone is None:  # the guard was removed or broken by the notebook: no score
            cell.outputs.append(nbformat.v4.new_output(
                "error", ename="GuardUnavailable", evalue=GUARD_UNAVAILABLE, traceback=[f"GuardUnavailable: {GUARD_UNAVAILABLE}"]))
            if hasattr(self, "_incident"):
                self._incident(cell, "guard_unavailable")
        elif undone:
            cell.outputs.insert(0, nbformat.v4.new_output("stream", name="stdout", text=NOTICE + "; ".join(undone) + ".\n"))
            if hasattr(self, "_incident"):
                self._incident(cell, "tampered", "; ".join(undone))

    # -- talking to the kernel -------------------------------------------------------------
    async def _guard_call(self, call: str) -> list[str] | None:
        name = self._guard_module
        text = await self._guard_run(
            f"(lambda m: m.report(m.guard.{call}))(__import__('sys').modules[{name!r}])")
        for line in text.splitlines():
            if line.startswith(kernel_guard.REPORT_PREFIX):
                return json.loads(line[len(kernel_guard.REPORT_PREFIX):]) or []
        return None

    async def _guard_run(self, code: str) -> str:
        """Run code in the kernel, outside the notebook (no history, no cell); its stdout."""
        chunks: list[str] = []

        def collect(msg):
            if msg["msg_type"] == "stream" and msg["content"].get("name") == "stdout":
                chunks.append(msg["content"]["text"])
            elif msg["msg_type"] == "error":
                chunks.append("")
                self.log.warning("test guard failed in the kernel: %s: %s",
                                 msg["content"].get("ename"), msg["content"].get("evalue"))

        try:
            await self.kc.execute_interactive(code, silent=True, store_history=False, allow_stdin=False,
                                              output_hook=collect, timeout=self.guard_timeout)
        except Exception as exc:  # noqa: BLE001 - a timeout, a dead kernel: the test fails closed
            self.log.warning("test guard got no answer from the kernel (%s: %s)", type(exc).__name__, exc)
            try:
                await self.km.interrupt_kernel()
            except Exception:  # noqa: BLE001 - the kernel may be gone; the cell will say so
                pass
        return "".join(chunks)
