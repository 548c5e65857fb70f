"""nbgrader's Execute preprocessor, hardened for a class of hundreds.

- Each kernel starts under the sandbox's limits (labtools/sandbox/) (memory, file size), so a
  memory bomb raises MemoryError in its own cell, and, where bubblewrap works, in its
  sandbox: no network, no view of the hidden tests or the course directory.
- A kernel that dies (`os._exit`, a segfault, the OOM killer) no longer aborts the
  student's whole autograde: the cell gets a `KernelDied` error, a fresh kernel
  replays the cells that ran before it (outputs discarded), and the notebook goes on,
  so every later test is still scored.
- Test cells never run in the kernel: the judge (labtools/judge/runner.py) runs them from the
  lab's source, in this process, calling the student's code through the kernel as
  data, and writes their outputs. A lab whose source does not say it is judged is
  refused (`use_judge = False` runs test cells in the kernel, as plain nbgrader does:
  for comparison only).
- The kernel starts without NBGRADER_EXECUTION (LABS_FAST=1 keeps the fast mode that
  variable used to switch on), so code cannot behave differently when graded.
- What goes wrong is recorded as data where it happens (labtools/grade/incidents.py).
Timeouts are nbgrader's own (`Execute.timeout`, interrupt then move on).
"""

from __future__ import annotations

import copy
import secrets
import time

import nbformat
from nbclient.exceptions import DeadKernelError
from nbclient.util import run_sync
from nbgrader.preprocessors import Execute
from traitlets import Bool, Float, Integer, Type

from .. import incidents
from ... import judge, nbcells
from . import course_notebook
from ...sandbox.manager import LimitedKernelManager, kernel_env  # noqa: F401 - the name courses' configs use

OUT_OF_MEMORY = (
    "the notebook's processes together used more memory than a grading kernel may ({mb} MiB): the kernel "
    "and its processes were ended, and the notebook went on in a fresh kernel"
)
GPU_BROKEN = (
    "the GPU reported an error that leaves it unusable in this kernel (a device-side assert, an illegal memory "
    "access: every later use of the GPU would fail too); the notebook went on in a fresh kernel"
)
KERNEL_DIED = (
    "the kernel died while running this cell (os._exit, a crash, or out of memory); "
    "the notebook went on in a fresh kernel"
)


class LabNotJudged(RuntimeError):
    """The lab's source notebook is missing or does not say `"labtools": {"judge": true}`."""


class GradingExecute(Execute):
    kernel_manager_class = Type(LimitedKernelManager, config=True)
    max_kernel_deaths = Integer(3, help="give up on a notebook after this many kernel deaths").tag(config=True)
    use_judge = Bool(True, help="decide the test cells in the judge, outside the kernel "
                     "(off: run them in the kernel, as plain nbgrader does; for comparison only)").tag(config=True)
    helper_timeout = Float(60.0, help="seconds the grader's own code may take in the kernel").tag(config=True)

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("kernel_manager_class", LimitedKernelManager)
        super().__init__(*args, **kwargs)
        self._ran: list = []
        self._deaths = 0

    def preprocess(self, nb, resources=None, *args, **kwargs):
        self._timing = {"kernel start": 0.0, "setup cell": 0.0, "notebook cells": 0.0, "test cells": 0.0}
        try:
            return self._preprocess(nb, resources, *args, **kwargs)
        finally:  # where the time went, for the grade command's report (kept by sanitize.py)
            nb.metadata.setdefault(nbcells.GRADER_KEY, {})["seconds"] = {
                k: round(v, 3) for k, v in self._timing.items()}

    def _preprocess(self, nb, resources=None, *args, **kwargs):
        incidents.reset(nb)  # what went wrong in this run, recorded as data where it happens
        self._nb = nb
        source = course_notebook(self.config, resources, "source")
        source_nb = nbcells.read(source) if source else None
        self._judge, self._ran, self._deaths = None, [], 0
        if self.use_judge and (source_nb is None or not judge.uses_judge(source_nb)):
            raise LabNotJudged(f"{source or 'the lab source notebook'}: not found, or not a judged lab "
                               "(its metadata needs \"labtools\": {\"judge\": true}); nothing was graded")
        if self.use_judge:
            self._agent_module = f"_labtools_agent_{secrets.token_hex(8)}"
            channel = judge.KernelChannel(self, f"__import__('sys').modules[{self._agent_module!r}].agent")
            self._judge = judge.Judge(source_nb, channel, [c for c in nb.cells if c.cell_type == "code"])
        return super().preprocess(nb, resources, *args, **kwargs)

    async def async_start_new_kernel(self, **kwargs):
        if self.use_judge:  # the comparison mode is plain nbgrader's, environment included
            kwargs["env"] = kernel_env(kwargs.get("env"))
        return await super().async_start_new_kernel(**kwargs)

    # nbclient binds its sync names to its own coroutines: rebind them to these.
    start_new_kernel = run_sync(async_start_new_kernel)

    async def async_start_new_kernel_client(self):
        start = time.monotonic()
        kc = await super().async_start_new_kernel_client()
        if getattr(self, "_judge", None) is not None:  # after a restart too
            self._judge.channel.reset()
            await self._run_hidden(judge.agent_bootstrap(self._agent_module))
        self._add_time("kernel start", start)
        return kc

    def _incident(self, cell, kind: str, detail: str = "") -> None:
        nb = getattr(self, "_nb", None)
        if nb is not None:
            where = nbcells.grade_id(cell) or f"code cell {next((i for i, c in enumerate(nb.cells) if c is cell), '?')}"
            incidents.record(nb, where, kind, detail)

    async def _async_handle_timeout(self, timeout, cell=None):
        # nbclient's own timeout (the kernel did not answer within Execute.timeout): known here, not from the cell's text
        if cell is not None:
            self._incident(cell, "timeout", f"no reply within {timeout} s")
        return await super()._async_handle_timeout(timeout, cell)

    def _add_time(self, phase: str, start: float) -> None:
        timing = getattr(self, "_timing", None)
        if timing is not None:
            timing[phase] += time.monotonic() - start

    start_new_kernel_client = run_sync(async_start_new_kernel_client)

    def _judge_cell(self, cell):
        """A test cell of a judged lab: decided by the judge, never run in the kernel."""
        self._judge.channel.deadline = time.monotonic() + (self.timeout or 120)
        verdict = self._judge.run(nbcells.grade_id(cell))
        if verdict.incident:
            self._incident(cell, verdict.incident, verdict.evalue)
        cell.outputs = verdict.outputs()
        cell.execution_count = None
        return cell

    def preprocess_cell(self, cell, resources, index):
        start = time.monotonic()
        try:
            return self._preprocess_cell(cell, resources, index)
        finally:
            phase = ("test cells" if nbcells.is_autograded_test(cell) else
                     "setup cell" if nbcells.grade_id(cell) == "setup" else "notebook cells")
            self._add_time(phase, start)

    def _preprocess_cell(self, cell, resources, index):
        try:
            if getattr(self, "_judge", None) is not None and nbcells.role(cell) == "test":
                return self._judge_cell(cell), resources
            cell, resources = super().preprocess_cell(cell, resources, index)
        except DeadKernelError:
            return self._after_death(cell, index), resources
        if self._out_of_memory() or self._memory_error(cell):
            return self._after_death(cell, index), resources
        if self._gpu_broken(cell):
            return self._after_gpu_error(cell, index), resources
        if cell.cell_type == "code":
            self._ran.append((cell, index))
        return cell, resources

    async def _run_hidden(self, code: str) -> None:
        """Run the grader's own code in the kernel, outside the notebook (no history, no cell)."""
        def complain(msg):
            if msg["msg_type"] == "error":
                self.log.warning("the grader's code failed in the kernel: %s: %s",
                                 msg["content"].get("ename"), msg["content"].get("evalue"))

        try:
            await self.kc.execute_interactive(code, silent=True, store_history=False, allow_stdin=False,
                                              output_hook=complain, timeout=self.helper_timeout)
        except Exception as exc:  # noqa: BLE001 - a timeout, a dead kernel: the judge's first call says so
            self.log.warning("the grader's code got no answer from the kernel (%s: %s)", type(exc).__name__, exc)

    @staticmethod
    def _gpu_broken(cell) -> bool:
        """Did the cell (the student's code, or a test calling it) end with a CUDA error? A
        device-side assert (torch.multinomial given negative probabilities, an index out of
        range in an embedding) leaves the process's CUDA context unusable: without a restart
        every later cell that touches the GPU fails, and the exercises after it lose points."""
        return cell.cell_type == "code" and any(
            o.get("output_type") == "error" and "CUDA error" in str(o.get("evalue", "")) for o in cell.get("outputs", []))

    def _after_gpu_error(self, cell, index):
        self._deaths += 1
        if self._deaths > self.max_kernel_deaths:
            raise DeadKernelError(f"the kernel was restarted {self._deaths} times; giving up on this notebook")
        self.log.warning("CUDA error in cell %s; restarting and replaying earlier cells", index)
        self._incident(cell, "gpu_error")
        cell.outputs.append(nbformat.v4.new_output("error", ename="GPUError", evalue=GPU_BROKEN,
                                                   traceback=[f"GPUError: {GPU_BROKEN}"]))
        self._restart_and_replay()
        return cell

    def _out_of_memory(self) -> bool:
        """Did the kernel's process tree run out of memory in its control group? Then end
        all of it (the kernel ended only the biggest process)."""
        group = getattr(self.km, "group", None)
        self._oom = bool(group is not None and group.new_out_of_memory())
        if self._oom:
            group.kill()
        return self._oom

    def _memory_error(self, cell) -> bool:
        """Did the cell fail with MemoryError (an allocation refused by the kernel's address-space
        limit before the control group's limit was reached)? What it allocated may still be held
        by the kernel, so every later cell would fail too: restart as after an out-of-memory kill."""
        failed = cell.cell_type == "code" and any(
            o.get("output_type") == "error" and o.get("ename") == "MemoryError" for o in cell.get("outputs", []))
        if failed:
            self._oom = True
            cell.outputs = [o for o in cell.outputs if not (o.get("output_type") == "error"
                                                             and o.get("ename") == "MemoryError")]
        return failed

    def _after_death(self, cell, index):
        self._deaths += 1
        if self._deaths > self.max_kernel_deaths:
            raise DeadKernelError(f"the kernel died {self._deaths} times; giving up on this notebook")
        self.log.warning("kernel died in cell %s; restarting and replaying earlier cells", index)
        if getattr(self, "_oom", False) or self._out_of_memory():
            text = OUT_OF_MEMORY.format(mb=self.km.memory_mb)
            self._incident(cell, "out_of_memory")
            cell.outputs.append(nbformat.v4.new_output(
                "error", ename="MemoryError", evalue=text, traceback=[f"MemoryError: {text}"]))
        else:
            self._incident(cell, "kernel_died")
            cell.outputs.append(nbformat.v4.new_output(
                "error", ename="KernelDied", evalue=KERNEL_DIED, traceback=[f"KernelDied: {KERNEL_DIED}"]))
        self._oom = False
        self._restart_and_replay()
        return cell

    def _restart_and_replay(self) -> None:
        if self.kc is not None:
            self.kc.stop_channels()
        run_sync(self.km.restart_kernel)(now=True)
        self.start_new_kernel_client()
        for cell, index in list(self._ran):
            try:
                self.execute_cell(copy.deepcopy(cell), index, store_history=False)
            except DeadKernelError:
                break
