"""The pre-imported kernels (labtools/sandbox/zygote.py): each grading kernel a fork of one
zygote, in namespaces of its own, driven by jupyter_client like a process it started.

What a fork must be, tested on the kernel itself: PID 1 of its own namespace with the
preloaded modules already imported; fresh random generators (two forks never draw the same
numbers); the kernel's limits (address space, control group); interrupted, shut down and
killed as a fresh kernel is; and, where forks cannot have namespaces, a fresh kernel with
one warning. Isolation between students graded back to back: tests/test_isolation.py."""

from __future__ import annotations

import asyncio
import signal
import time

import nbformat
import pytest
from nbclient import NotebookClient

from labtools.sandbox import bwrap as sandbox
from labtools.sandbox import cgroups, zygote
from labtools.grade.steps.execute import LimitedKernelManager

from test_sandbox import needs_bwrap

REPORT = """\
import os, sys, random, resource
import numpy, torch
print("PID", os.getpid())
print("PRELOADED", all(m in sys.modules for m in ("torch", "numpy", "matplotlib.pyplot")))
print("DRAWS", random.random(), float(numpy.random.rand()), float(torch.rand(1)))
print("AS", resource.getrlimit(resource.RLIMIT_AS)[0])
print("CWD", os.getcwd())
"""


def _run(code: str, tmp_path, **traits) -> tuple[dict, LimitedKernelManager]:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    km = LimitedKernelManager(sandbox="require", cgroup="none", **traits)
    NotebookClient(nb, km=km, timeout=60, resources={"metadata": {"path": str(tmp_path)}}).execute()
    text = "".join(o.get("text", "") for o in nb.cells[0].outputs)
    return dict(line.split(" ", 1) for line in text.splitlines() if " " in line), km


@pytest.fixture
def forks():
    needs_bwrap()
    if zygote.shared(sandbox.resolve_sandbox("require")) is None:
        pytest.skip("forks cannot have namespaces of their own here (see the warning)")
    yield
    zygote.shutdown()


def test_a_fork_is_pid_1_of_its_namespace_with_the_modules_imported_and_the_kernels_limits(forks, tmp_path):
    seen, km = _run(REPORT, tmp_path, memory_mb=3072)
    assert seen["PID"] == "1", "the kernel was not a fork of the zygote"
    assert seen["PRELOADED"] == "True"
    assert int(seen["AS"]) == 3072 * 2**20
    assert seen["CWD"] == sandbox.SANDBOX_WORK


def test_two_forks_draw_different_random_numbers(forks, tmp_path):
    first, _ = _run(REPORT, tmp_path)
    second, _ = _run(REPORT, tmp_path)
    assert first["PID"] == second["PID"] == "1"
    a, b = first["DRAWS"].split(), second["DRAWS"].split()
    assert all(x != y for x, y in zip(a, b)), f"Python, NumPy and torch must be re-seeded in each fork: {a} {b}"


def test_a_fork_is_interrupted_shut_down_and_killed_like_a_fresh_kernel(forks, tmp_path):
    async def interrupted_then_killed():
        km = LimitedKernelManager(sandbox="require", cgroup="none")
        await km.start_kernel(cwd=str(tmp_path))
        kc = km.client()
        kc.start_channels()
        try:
            await kc.wait_for_ready(timeout=60)
            kc.execute("import time; time.sleep(60)")
            await asyncio.sleep(1)
            start = time.monotonic()
            await km.interrupt_kernel()
            reply = await kc.get_shell_msg(timeout=20)
            assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "KeyboardInterrupt"
            assert time.monotonic() - start < 10
            assert await km.is_alive()
            process = km.provisioner.process
            assert isinstance(process, zygote.ForkedKernel)
            process.send_signal(signal.SIGKILL)
            assert process.wait(timeout=10) == -signal.SIGKILL
            assert not await km.is_alive()
        finally:
            kc.stop_channels()
            await km.shutdown_kernel(now=True)

    async def shut_down_politely():
        km = LimitedKernelManager(sandbox="require", cgroup="none")
        await km.start_kernel(cwd=str(tmp_path))
        process = km.provisioner.process
        await km.shutdown_kernel()
        return process.returncode

    asyncio.run(interrupted_then_killed())
    assert asyncio.run(shut_down_politely()) == 0


def test_a_fork_is_in_its_kernels_control_group(forks, tmp_path):
    if not cgroups.resolve("auto"):
        pytest.skip("no control groups here")

    async def grouped():
        km = LimitedKernelManager(sandbox="require", cgroup="require")
        await km.start_kernel(cwd=str(tmp_path))
        try:
            return km.provisioner.process.pid, km.group.pids()
        finally:
            await km.shutdown_kernel(now=True)

    pid, members = asyncio.run(grouped())
    assert pid in members


def test_where_forks_cannot_have_namespaces_kernels_start_afresh_and_it_is_said_once(monkeypatch, tmp_path, capfd):
    needs_bwrap()
    zygote.shutdown()
    # the zygote's sandbox as a kernel's: no user namespace may be made inside it
    monkeypatch.setattr(sandbox, "zygote_command", lambda bwrap, cmd, boxes: sandbox.bwrap_command(
        bwrap, cmd, work_dir=boxes, connection_file=f"{boxes}/none.json"))  # binds boxes at its own path
    monkeypatch.setattr(zygote, "_failed", None)
    first, _ = _run(REPORT, tmp_path)
    second, _ = _run(REPORT, tmp_path)
    assert first["PID"] != "1" and second["PID"] != "1"  # fresh kernels: bubblewrap's PID 2
    err = capfd.readouterr().err
    assert err.count("pre-imported kernel is unavailable here") == 1, err
    assert "start afresh" in err


def test_the_zygote_can_be_turned_off(tmp_path):
    needs_bwrap()
    seen, _ = _run(REPORT, tmp_path, zygote="none")
    assert seen["PID"] != "1"
    with pytest.raises(ValueError, match="zygote must be one of"):
        zygote.wanted("sometimes")


def test_a_kernel_cannot_signal_the_zygote_through_its_process_group(forks, tmp_path):
    """kill(0, ...) reaches every process of the caller's group, namespaces or not: each fork
    leads a group of its own, so the zygote (and the next student's kernel) is out of reach."""
    z = zygote.shared(sandbox.resolve_sandbox("require"))
    seen, _ = _run("import os, signal\nos.kill(0, signal.SIGUSR1)\n"
                   "try:\n    os.kill(-1, signal.SIGUSR1)\nexcept ProcessLookupError:\n    pass\n"
                   "print('SENT', os.getpgrp() == os.getpid())\n", tmp_path)
    assert seen["SENT"] == "True"  # the kernel leads its own group
    time.sleep(0.5)
    assert z.alive() and zygote.shared(sandbox.resolve_sandbox("require")) is z
