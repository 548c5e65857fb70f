"""The kernel manager of grading: each kernel under limits, in a sandbox where it can be.

The one place where the sandbox's parts meet jupyter_client: bwrap.py (the namespaces,
the launcher that applies rlimits) and cgroups.py (the whole process tree's limits).
"""

from __future__ import annotations

import os
import shutil

from jupyter_client.manager import AsyncKernelManager
from traitlets import Float, Integer, Unicode

from . import bwrap as sandbox
from . import cgroups, zygote


def kernel_env(env: dict | None) -> dict:
    """The grading kernel's environment: no sign that it is being graded."""
    env = dict(os.environ if env is None else env)
    if env.pop("NBGRADER_EXECUTION", None) is not None:
        env["LABS_FAST"] = "1"
    return env


class LimitedKernelManager(AsyncKernelManager):
    """Starts each grading kernel under limits and, where bubblewrap works, in a sandbox
    (see labtools/sandbox/bwrap.py): its connection directory (ZMQ over ipc sockets, since the
    sandbox has no network) and its working directory (copies of the notebook
    directory's data files, not the notebook) live in a private temporary directory
    that a restart keeps and a shutdown removes."""

    memory_mb = Integer(6144, help="address-space limit of a grading kernel (0: none)").tag(config=True)
    file_mb = Integer(512, help="largest file a grading kernel may write (0: none)").tag(config=True)
    sandbox = Unicode("auto", help=(
        "run grading kernels in a bubblewrap sandbox: 'auto' (when bubblewrap works here, else a loud "
        "warning; 'require' when LABS_REQUIRE_SANDBOX=1), 'require' (fail when it cannot), 'none'")).tag(config=True)

    cgroup = Unicode("auto", help=(
        "limit the kernel's whole process tree (memory_mb of memory, max_tasks processes and threads, "
        "cpus CPUs) with a control group: 'auto' (when possible, else a loud warning; 'require' when "
        "LABS_REQUIRE_CGROUP=1), 'require', 'none'")).tag(config=True)
    zygote = Unicode("auto", help=(
        "start sandboxed kernels as forks of a zygote that has imported torch, NumPy, matplotlib and "
        "ipykernel once (labtools/sandbox/zygote.py): 'auto' (where forks can have namespaces of their "
        "own, else fresh kernels, said once), 'none' (a fresh kernel for every notebook, as plain "
        "nbgrader does)")).tag(config=True)
    max_tasks = Integer(512, help="processes and threads a grading kernel may have in all (0: none)").tag(config=True)
    cpus = Float(2.0, help="CPUs' worth of time a grading kernel's processes may use together (0: none)").tag(
        config=True)

    group: cgroups.KernelGroup | None = None  # the kernel's control group, while it has one
    _bwrap: str | None = None  # the bwrap executable while sandboxed
    _box: str | None = None  # private directory: conn/ (connection file, sockets), work/ (the kernel's cwd)
    _notebook_dir: str | None = None
    _zygote: zygote.Zygote | None = None  # the zygote this kernel's box belongs to
    _fork_argv: list[str] | None = None  # ipykernel's arguments, when this start is a fork

    async def _async_pre_start_kernel(self, **kw):
        kw["env"] = sandbox.without_secrets(kw.get("env") or os.environ)
        if self.group is None and cgroups.resolve(self.cgroup, self.log):
            self.group = cgroups.KernelGroup.create(self.memory_mb, self.max_tasks, self.cpus)
        if self._box is None:
            self._bwrap = sandbox.resolve_sandbox(self.sandbox)
            if self._bwrap:
                if zygote.wanted(self.zygote):
                    self._zygote = zygote.shared(self._bwrap)
                if self._zygote is not None:
                    self._box = self._zygote.new_box()
                else:
                    self._box = sandbox.make_box_dir(owner=self)
                    os.mkdir(os.path.join(self._box, "conn"))
                conn = os.path.join(self._box, "conn")
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
        self._fork_argv = zygote.can_fork(cmd) if self._zygote is not None else None
        if self._fork_argv is not None:
            # the fork sees what a sandboxed kernel sees: refuse the same installations
            sandbox.check_hidden(sandbox.python_paths(cmd[0]), [p for p in [self._notebook_dir] if p])
            return cmd  # run by _async_launch_kernel in a fork, not as a command
        if self._bwrap:
            cmd = sandbox.bwrap_command(
                self._bwrap, cmd, work_dir=os.path.join(self._box, "work"),
                connection_file=self.connection_file, hidden=[p for p in [self._notebook_dir] if p])
        return [*sandbox.launcher_command(self.memory_mb, self.file_mb, ignore_sigint=bool(self._bwrap),
                                          cgroups=self.group.paths if self.group else ()), "--", *cmd]

    async def _async_launch_kernel(self, kernel_cmd, **kw):
        if self._fork_argv is None:
            return await super()._async_launch_kernel(kernel_cmd, **kw)
        env = {**(kw.get("env") or sandbox.without_secrets(os.environ)), **sandbox.sandbox_env()}
        if not self._zygote.alive():  # it was killed: this kernel starts afresh, the next forks again
            self._zygote = None
            return await super()._async_launch_kernel(self.format_kernel_cmd(kw.get("extra_arguments")), **kw)
        try:
            process = self._zygote.spawn(
                self._box, argv=self._fork_argv, env=env, connection_file=self.connection_file,
                memory_mb=self.memory_mb, file_mb=self.file_mb, cgroups=self.group.paths if self.group else ())
        except zygote.ZygoteError as exc:  # this kernel starts afresh; the next ones too
            zygote.give_up(str(exc))
            self._zygote = None
            return await super()._async_launch_kernel(self.format_kernel_cmd(kw.get("extra_arguments")), **kw)
        provisioner = self.provisioner
        provisioner.process, provisioner.pid, provisioner.pgid = process, process.pid, None
        provisioner.cwd = kw.get("cwd")
        self._reconcile_connection_info(provisioner.connection_info)

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart=restart)
        if self.group is not None:
            self.group.kill()  # children the kernel left behind, too
            if not restart:
                self.group.remove()
                self.group = None
        if not restart and self._box is not None:
            shutil.rmtree(self._box, ignore_errors=True)
            self._box = self._bwrap = self._zygote = self._fork_argv = None
