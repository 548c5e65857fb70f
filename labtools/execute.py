"""nbgrader's Execute preprocessor, hardened for a class of hundreds.

- Each kernel starts under `labtools.sandbox` limits (memory, file size), so a
  memory bomb raises MemoryError in its own cell.
- A kernel that dies (`os._exit`, a segfault, the OOM killer) no longer aborts the
  student's whole autograde: the cell gets a `KernelDied` error, a fresh kernel
  replays the cells that ran before it (outputs discarded), and the notebook goes on,
  so every later test is still scored.
Timeouts are nbgrader's own (`Execute.timeout`, interrupt then move on).
"""

from __future__ import annotations

import copy
import sys

import nbformat
from jupyter_client.manager import AsyncKernelManager
from nbclient.exceptions import DeadKernelError
from nbclient.util import run_sync
from nbgrader.preprocessors import Execute
from traitlets import Integer, Type

KERNEL_DIED = (
    "the kernel died while running this cell (os._exit, a crash, or out of memory); "
    "the notebook went on in a fresh kernel"
)


class LimitedKernelManager(AsyncKernelManager):
    memory_mb = Integer(6144, help="address-space limit of a grading kernel (0: none)").tag(config=True)
    file_mb = Integer(512, help="largest file a grading kernel may write (0: none)").tag(config=True)

    def format_kernel_cmd(self, extra_arguments=None):
        cmd = super().format_kernel_cmd(extra_arguments)
        return [sys.executable, "-m", "labtools.sandbox", f"--memory-mb={self.memory_mb}",
                f"--file-mb={self.file_mb}", "--", *cmd]


class GradingExecute(Execute):
    kernel_manager_class = Type(LimitedKernelManager, config=True)
    max_kernel_deaths = Integer(3, help="give up on a notebook after this many kernel deaths").tag(config=True)

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("kernel_manager_class", LimitedKernelManager)
        super().__init__(*args, **kwargs)
        self._ran: list = []
        self._deaths = 0

    def preprocess_cell(self, cell, resources, index):
        try:
            cell, resources = super().preprocess_cell(cell, resources, index)
        except DeadKernelError:
            self._deaths += 1
            if self._deaths > self.max_kernel_deaths:
                raise
            self.log.warning("kernel died in cell %s; restarting and replaying earlier cells", index)
            cell.outputs.append(nbformat.v4.new_output(
                "error", ename="KernelDied", evalue=KERNEL_DIED, traceback=[f"KernelDied: {KERNEL_DIED}"]))
            self._restart_and_replay()
            return cell, resources
        if cell.cell_type == "code":
            self._ran.append((cell, index))
        return cell, resources

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
