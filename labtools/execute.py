"""nbgrader's Execute preprocessor, hardened for a class of hundreds.

- Each kernel starts under `labtools.sandbox` limits (memory, file size), so a
  memory bomb raises MemoryError in its own cell, and, where bubblewrap works, in its
  sandbox: no network, no view of the hidden tests or the course directory.
- A kernel that dies (`os._exit`, a segfault, the OOM killer) no longer aborts the
  student's whole autograde: the cell gets a `KernelDied` error, a fresh kernel
  replays the cells that ran before it (outputs discarded), and the notebook goes on,
  so every later test is still scored.
- Around every test cell the test guard (labtools/guard.py) undoes tampering with
  the test environment, so tests score what the code honestly earns.
Timeouts are nbgrader's own (`Execute.timeout`, interrupt then move on).
"""

from __future__ import annotations

import copy
import os
import shutil

import nbformat
from jupyter_client.manager import AsyncKernelManager
from nbclient.exceptions import DeadKernelError
from nbclient.util import run_sync
from nbgrader.preprocessors import Execute
from traitlets import Integer, Type, Unicode

from . import sandbox
from .guard import TestGuard, cell_role

KERNEL_DIED = (
    "the kernel died while running this cell (os._exit, a crash, or out of memory); "
    "the notebook went on in a fresh kernel"
)


class LimitedKernelManager(AsyncKernelManager):
    """Starts each grading kernel under limits and, where bubblewrap works, in a sandbox
    (see labtools/sandbox.py): its connection directory (ZMQ over ipc sockets, since the
    sandbox has no network) and its working directory (copies of the notebook
    directory's data files, not the notebook) live in a private temporary directory
    that a restart keeps and a shutdown removes."""

    memory_mb = Integer(6144, help="address-space limit of a grading kernel (0: none)").tag(config=True)
    file_mb = Integer(512, help="largest file a grading kernel may write (0: none)").tag(config=True)
    sandbox = Unicode("auto", help=(
        "run grading kernels in a bubblewrap sandbox: 'auto' (when bubblewrap works here, else a loud "
        "warning; 'require' when LABS_REQUIRE_SANDBOX=1), 'require' (fail when it cannot), 'none'")).tag(config=True)

    _bwrap: str | None = None  # the bwrap executable while sandboxed
    _box: str | None = None  # private directory: conn/ (connection file, sockets), work/ (the kernel's cwd)
    _notebook_dir: str | None = None

    async def _async_pre_start_kernel(self, **kw):
        kw["env"] = sandbox.without_secrets(kw.get("env") or os.environ)
        if self._box is None:
            self._bwrap = sandbox.resolve_sandbox(self.sandbox)
            if self._bwrap:
                self._box = sandbox.make_box_dir(owner=self)
                conn = os.path.join(self._box, "conn")
                os.mkdir(conn)
                # absolute ipc paths (jupyter_client's default is relative to the cwd)
                self.transport, self.cache_ports = "ipc", False
                self.connection_file = os.path.join(conn, "kernel.json")
                self.ip = os.path.join(conn, "kernel-ipc")
        if self._bwrap:
            work = os.path.join(self._box, "work")
            cwd = kw.get("cwd")
            if cwd and os.path.realpath(cwd) != os.path.realpath(work):  # not a restart
                self._notebook_dir = os.path.realpath(cwd)
            sandbox.prepare_work_dir(self._notebook_dir, work)
            kw["cwd"] = work
        return await super()._async_pre_start_kernel(**kw)

    def format_kernel_cmd(self, extra_arguments=None):
        cmd = super().format_kernel_cmd(extra_arguments)
        if self._bwrap:
            cmd = sandbox.bwrap_command(
                self._bwrap, cmd, work_dir=os.path.join(self._box, "work"),
                connection_file=self.connection_file, hidden=[p for p in [self._notebook_dir] if p])
        return [*sandbox.launcher_command(self.memory_mb, self.file_mb, ignore_sigint=bool(self._bwrap)), "--", *cmd]

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart=restart)
        if not restart and self._box is not None:
            shutil.rmtree(self._box, ignore_errors=True)
            self._box = self._bwrap = None


class GradingExecute(TestGuard, Execute):
    kernel_manager_class = Type(LimitedKernelManager, config=True)
    max_kernel_deaths = Integer(3, help="give up on a notebook after this many kernel deaths").tag(config=True)

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("kernel_manager_class", LimitedKernelManager)
        super().__init__(*args, **kwargs)
        self._ran: list = []
        self._deaths = 0
        self._guard_reset()

    def preprocess_cell(self, cell, resources, index):
        role = cell_role(cell)
        undone = self.guard_before(cell, role)
        try:
            cell, resources = super().preprocess_cell(cell, resources, index)
            self.guard_after(cell, role, undone)
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
