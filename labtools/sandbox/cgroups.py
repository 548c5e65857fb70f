"""Limits for a grading kernel's whole process tree, with Linux control groups.

Per-process limits (`RLIMIT_AS` in sandbox.py) let a notebook that starts a few
children use several times the limit together. A control group counts every process
the kernel starts: memory (no swap), the number of processes and threads, and CPU
time. `KernelGroup.create` makes one group per kernel, under the grader's own group:

- cgroup v2 (one unified hierarchy, `/sys/fs/cgroup` or `/sys/fs/cgroup/unified`)
  where the memory and pids controllers can be enabled below the grader's group
  (a root grader, or a systemd user session that delegates them);
- otherwise cgroup v1, where the `memory` and `pids` hierarchies are writable (a root
  grader in a container or a VM: what CI has).
The kernel's launcher (sandbox.main) moves itself into the group before it execs the
kernel, so every descendant is counted. When the group's memory runs out, the kernel
ends the biggest process; the grader then ends the whole group (`kill`), says so in
the cell, and goes on with a fresh kernel. Where neither version can be used,
`create` raises `GroupUnavailable` with the reason and what to do.
"""

from __future__ import annotations

import functools
import os
import re
import secrets
import signal
import time
from pathlib import Path

from . import policy

ROOT = Path("/sys/fs/cgroup")


MODES = ("auto", "require", "none")
REQUIRE_ENV = "LABS_REQUIRE_CGROUP"  # "1": "auto" behaves like "require" (CI sets it)


class GroupUnavailable(RuntimeError):
    """No control group can be made for a kernel here."""


_warned: set[str] = set()


def resolve(mode: str, log=None) -> bool:
    """Whether kernels get a control group: probe once; "auto" warns loudly when it
    cannot (once per process), "require" (or LABS_REQUIRE_CGROUP=1) raises."""
    required = policy.required(mode, MODES, REQUIRE_ENV, "c.LimitedKernelManager.cgroup")
    if required is None:
        return False
    problem = _probe(ROOT)  # once per process and root, not once per kernel manager
    if problem is None:
        return True
    if required:
        raise GroupUnavailable(problem)
    if problem not in _warned:
        _warned.add(problem)
        import logging
        (log or logging.getLogger(__name__)).warning(
            "KERNELS ARE LIMITED PER PROCESS ONLY: %s. A notebook's child processes together can use "
            "more memory than memory_mb.", problem)
    return False


@functools.lru_cache(maxsize=None)
def _probe(root: Path) -> str | None:
    """Why no control group can be made under `root`, or None: asked once per process (a
    probe group is made and removed), not once per kernel manager."""
    try:
        KernelGroup.create(64, 16, 0).remove()
        return None
    except GroupUnavailable as exc:
        return str(exc)


def _own_paths() -> dict[str, str]:
    """{controller or "" for v2: this process's group path}, from /proc/self/cgroup."""
    paths = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            paths[name] = path
    return paths


def _v2_root() -> Path | None:
    for candidate in (ROOT, ROOT / "unified"):
        if (candidate / "cgroup.controllers").exists():
            return candidate
    return None


def _write(path: Path, value: str) -> None:
    path.write_text(value)


class KernelGroup:
    """One kernel's control group(s): one directory in v2, one per controller in v1."""

    def __init__(self, version: int, dirs: dict[str, Path]):
        self.version = version
        self.dirs = dirs  # "memory", "pids", "cpu" (v1) or "unified" (v2) -> directory
        self._oom_seen = 0

    # -- making one ---------------------------------------------------------------------
    @classmethod
    def create(cls, memory_mb: int, max_tasks: int, cpus: float) -> "KernelGroup":
        if not Path("/proc/self/cgroup").exists():
            raise GroupUnavailable("control groups are a Linux feature; this is not Linux")
        name = f"labtools-kernel-{secrets.token_hex(6)}"
        reasons = []
        for make in (cls._create_v2, cls._create_v1):
            try:
                group = make(name)
            except (OSError, GroupUnavailable) as exc:
                reasons.append(str(exc))
                continue
            try:
                group._limit(memory_mb, max_tasks, cpus)
            except OSError as exc:
                group.remove()
                reasons.append(f"cannot set limits in {group.version and 'cgroup v%d' % group.version}: {exc}")
                continue
            return group
        raise GroupUnavailable("; ".join(reasons) + ". Run the grader as root, or in a systemd user session "
                               "that delegates the memory and pids controllers (systemd-run --user --scope "
                               "-p Delegate=yes ...), or set c.LimitedKernelManager.cgroup = 'none'")

    @classmethod
    def _create_v2(cls, name: str) -> "KernelGroup":
        root = _v2_root()
        if root is None:
            raise GroupUnavailable("no cgroup v2 hierarchy is mounted")
        parent = root / _own_paths().get("", "/").lstrip("/")
        wanted = {"memory", "pids"}
        if not wanted <= set((root / "cgroup.controllers").read_text().split()):
            raise GroupUnavailable(f"cgroup v2 at {root} lacks the memory or pids controller "
                                   "(they are in use by cgroup v1)")
        enabled = set((parent / "cgroup.subtree_control").read_text().split())
        if not wanted <= enabled:
            try:
                _write(parent / "cgroup.subtree_control", " ".join(f"+{c}" for c in sorted(wanted - enabled)))
            except OSError as exc:
                raise GroupUnavailable(f"cannot enable memory and pids below {parent}: {exc.strerror}") from None
        group = parent / name
        group.mkdir()
        return cls(2, {"unified": group})

    @classmethod
    def _create_v1(cls, name: str) -> "KernelGroup":
        own = _own_paths()
        dirs = {}
        for controller in ("memory", "pids", "cpu"):
            base = ROOT / controller
            if not (base / "cgroup.procs").exists():
                if controller == "cpu":
                    continue  # CPU is limited where it can be; memory and processes are required
                raise GroupUnavailable(f"no cgroup v1 {controller} hierarchy at {base}")
            group = base / own.get(controller, "/").lstrip("/") / name
            try:
                group.mkdir()
            except OSError as exc:
                for made in dirs.values():
                    made.rmdir()
                raise GroupUnavailable(f"cannot make a cgroup v1 {controller} group ({exc.strerror})") from None
            dirs[controller] = group
        return cls(1, dirs)

    def _limit(self, memory_mb: int, max_tasks: int, cpus: float) -> None:
        memory, period = memory_mb * 2**20, 100_000
        if self.version == 2:
            d = self.dirs["unified"]
            if memory_mb > 0:
                _write(d / "memory.max", str(memory))
                if (d / "memory.swap.max").exists():
                    _write(d / "memory.swap.max", "0")
                _write(d / "memory.oom.group", "1")  # the kernel's OOM ends the whole group
            if max_tasks > 0:
                _write(d / "pids.max", str(max_tasks))
            if cpus > 0 and (d / "cpu.max").exists():
                _write(d / "cpu.max", f"{int(cpus * period)} {period}")
            return
        if memory_mb > 0:
            _write(self.dirs["memory"] / "memory.limit_in_bytes", str(memory))
            if (self.dirs["memory"] / "memory.memsw.limit_in_bytes").exists():
                _write(self.dirs["memory"] / "memory.memsw.limit_in_bytes", str(memory))
        if max_tasks > 0:
            _write(self.dirs["pids"] / "pids.max", str(max_tasks))
        if cpus > 0 and "cpu" in self.dirs:
            _write(self.dirs["cpu"] / "cpu.cfs_period_us", str(period))
            _write(self.dirs["cpu"] / "cpu.cfs_quota_us", str(int(cpus * period)))

    # -- using one ----------------------------------------------------------------------
    @property
    def paths(self) -> list[str]:
        return [str(d) for d in self.dirs.values()]

    @staticmethod
    def enter(paths: list[str], pid: int | None = None) -> None:
        """Move a process into the groups: this one (the launcher, just before it execs the
        kernel) or `pid` (a forked kernel, before it runs anything)."""
        for path in paths:
            _write(Path(path) / "cgroup.procs", str(os.getpid() if pid is None else pid))

    def pids(self) -> list[int]:
        d = next(iter(self.dirs.values()))
        try:
            return [int(p) for p in (d / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def out_of_memory_kills(self) -> int:
        """How many processes the kernel ended for want of memory in this group so far."""
        try:
            if self.version == 2:
                text = (self.dirs["unified"] / "memory.events").read_text()
            else:
                text = (self.dirs["memory"] / "memory.oom_control").read_text()
        except OSError:
            return 0
        found = re.search(r"^oom_kill (\d+)", text, re.M)  # v1 kernels before 4.13 lack it: then 0
        return int(found.group(1)) if found else 0

    def new_out_of_memory(self) -> bool:
        """Did the group run out of memory since the last call?"""
        kills = self.out_of_memory_kills()
        new, self._oom_seen = kills > self._oom_seen, kills
        return new

    def kill(self) -> None:
        """End every process in the group."""
        if self.version == 2 and (self.dirs["unified"] / "cgroup.kill").exists():
            _write(self.dirs["unified"] / "cgroup.kill", "1")
            return
        for _ in range(20):  # a process may fork while we kill: repeat until empty
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.05)

    def remove(self) -> None:
        self.kill()
        for d in self.dirs.values():
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)  # the last processes are still exiting
