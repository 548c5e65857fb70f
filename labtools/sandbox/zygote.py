"""Pre-imported grading kernels: one zygote per grading process forks a kernel per student.

A fresh kernel starts Python and imports torch, NumPy, matplotlib and ipykernel for every
submission: most of a lab 1 kernel's start. The zygote (zygote_main.py, in a bubblewrap
sandbox like a kernel's) imports them once and forks; each fork gets new namespaces, its
own /tmp, home, /dev/shm and working directory, every other box hidden, the kernel's
limits, fresh random generators, and no capability (see zygote_main.py). It never runs
student code, so nothing one student does reaches the next (tests/test_isolation.py).

`shared(bwrap)` is this process's zygote (started on first use, restarted if it died), or
None where forks cannot have namespaces of their own: then kernels start afresh, as
before, and that is said once. `ForkedKernel` is the grader's handle on one fork,
shaped like subprocess.Popen so that jupyter_client's local provisioner drives it.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from . import bwrap as sandbox

log = logging.getLogger(__name__)

MODES = ("auto", "none")
# What every lab's kernel imports: the zygote imports them once, its forks inherit them.
PRELOAD = ("numpy", "torch", "matplotlib", "matplotlib.pyplot", "matplotlib_inline.backend_inline",
           "IPython", "ipykernel.kernelapp", "ipykernel.ipkernel", "zmq")
START_TIMEOUT = 120.0  # seconds for the zygote's imports, on a loaded machine
_SOURCE = Path(__file__).with_name("zygote_main.py")


class ZygoteError(RuntimeError):
    """The zygote could not give a kernel: the caller starts a fresh one instead."""


class ForkedKernel:
    """The grader's handle on one forked kernel, with subprocess.Popen's methods.

    `conn` is the socket the request went out on: the kernel's supervisor sends the
    kernel's exit status there; `pid` is the kernel's PID as this process sees it."""

    stdin = stdout = stderr = None

    def __init__(self, conn: socket.socket, pid: int):
        self.conn, self.pid, self.returncode = conn, pid, None
        self._buffer = b""
        try:  # a pidfd signals this process and no other, even once the PID is reused
            self._pidfd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            self._pidfd = None

    def _read(self, timeout: float | None) -> None:
        if self.returncode is not None:
            return
        ready, _, _ = select.select([self.conn], [], [], timeout)
        if not ready:
            return
        try:
            chunk = self.conn.recv(4096)
        except OSError:
            chunk = b""
        if not chunk:  # the supervisor is gone without a word: it was killed
            self._finish(-signal.SIGKILL)
            return
        self._buffer += chunk
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            message = json.loads(line)
            if "exit" in message:
                self._finish(int(message["exit"]))
                return

    def _finish(self, code: int) -> None:
        self.returncode = code
        self.conn.close()
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None

    def poll(self) -> int | None:
        self._read(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired("forked kernel", timeout)
            self._read(left)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        """To the kernel's process group (the kernel and what it started), as jupyter_client
        signals a kernel it started; to the kernel alone (by pidfd) if that fails."""
        if self.poll() is not None:
            return
        try:
            os.killpg(self.pid, signum)  # the kernel leads its own group (zygote_main.py)
            return
        except OSError:
            pass
        if self._pidfd is not None:
            signal.pidfd_send_signal(self._pidfd, signum)
        else:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


def _receive_pid(conn: socket.socket, timeout: float) -> int:
    """The kernel's first message, with its credentials: its PID in our namespace."""
    conn.settimeout(timeout)
    try:
        data, ancillary, _, _ = conn.recvmsg(4096, socket.CMSG_SPACE(12))
    except socket.timeout:
        raise ZygoteError(f"the forked kernel did not report within {timeout:.0f} s") from None
    finally:
        conn.settimeout(None)
    if not data:
        raise ZygoteError("the zygote closed the connection before the kernel started")
    message = json.loads(data.split(b"\n", 1)[0])
    if "error" in message:
        raise ZygoteError(message["error"])
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
            return struct.unpack("3i", payload[:12])[0]
    raise ZygoteError("the forked kernel sent no credentials")


class Zygote:
    """One zygote process and its folder of boxes."""

    def __init__(self, bwrap: str):
        self.boxes = tempfile.mkdtemp(prefix="labtools-zyg-", dir="/tmp" if os.path.isdir("/tmp") else None)
        self.socket_path = os.path.join(self.boxes, "zygote.sock")
        # the Python installation's folders, put back over each kernel's own /tmp
        config = {"preload": list(PRELOAD), "keep": sandbox.python_paths(sys.executable)}
        python = [sys.executable, "-c", _SOURCE.read_text(), self.boxes, json.dumps(config)]
        self.process = _start_in_own_thread(sandbox.zygote_command(bwrap, python, boxes=self.boxes))
        end = time.monotonic() + START_TIMEOUT
        while not os.path.exists(self.socket_path):
            if self.process.poll() is not None:
                self.close()
                raise ZygoteError(f"the zygote exited while importing (status {self.process.returncode})")
            if time.monotonic() > end:
                self.close()
                raise ZygoteError(f"the zygote was not ready within {START_TIMEOUT:.0f} s")
            time.sleep(0.02)
        # A fork that goes all the way but runs no kernel: are namespaces possible here?
        box = self.new_box()
        try:
            self.spawn(box, argv=[], env={}, connection_file=os.path.join(box, "conn", "none.json"),
                       probe=True).wait(timeout=60)
        except (ZygoteError, subprocess.TimeoutExpired) as exc:
            self.close()
            raise ZygoteError(f"a forked kernel cannot have namespaces of its own here ({exc})") from None
        finally:
            shutil.rmtree(box, ignore_errors=True)

    def alive(self) -> bool:
        return self.process.poll() is None

    def new_box(self) -> str:
        """A kernel's box: conn/ and work/, inside the folder the zygote sees."""
        box = tempfile.mkdtemp(prefix="k-", dir=self.boxes)
        os.mkdir(os.path.join(box, "conn"))
        os.mkdir(os.path.join(box, "work"))
        return box

    def spawn(self, box: str, *, argv: list[str], env: dict, connection_file: str, memory_mb: int = 0,
              file_mb: int = 0, cgroups: list[str] = (), probe: bool = False) -> ForkedKernel:
        request = {"box": os.path.basename(box), "argv": argv, "env": env, "connection_file": connection_file,
                   "memory_mb": memory_mb, "file_mb": file_mb, "probe": probe}
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
            conn.connect(self.socket_path)
            conn.sendall(json.dumps(request).encode() + b"\n")
            pid = _receive_pid(conn, timeout=60)
            if cgroups:  # before the kernel runs anything: its whole tree is limited
                from .cgroups import KernelGroup

                KernelGroup.enter(list(cgroups), pid)
            conn.sendall(b"go\n")
        except OSError as exc:
            conn.close()
            raise ZygoteError(f"the zygote did not answer ({exc})") from None
        except ZygoteError:
            conn.close()
            raise
        return ForkedKernel(conn, pid)

    def close(self, remove_boxes: bool = True) -> None:
        """Stop the zygote (its kernels end with it); `remove_boxes`: also remove every box,
        which only the last cleanup may do while a kernel may still be using one."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        if remove_boxes:
            shutil.rmtree(self.boxes, ignore_errors=True)


def _start_in_own_thread(command: list[str]) -> subprocess.Popen:
    """Popen from a thread that lives as long as the zygote: bubblewrap's --die-with-parent
    ends the sandbox when the thread that started it ends (a grading thread of a Dask
    worker may end any time), and here that is only when the zygote has exited."""
    started: list = []
    ready = threading.Event()

    def parent() -> None:
        try:
            started.append(subprocess.Popen(command, stdin=subprocess.DEVNULL, start_new_session=True))
        except OSError as exc:
            started.append(exc)
        ready.set()
        if isinstance(started[0], subprocess.Popen):
            started[0].wait()

    threading.Thread(target=parent, name="labtools-zygote", daemon=True).start()
    ready.wait()
    if isinstance(started[0], OSError):
        raise started[0]
    return started[0]


_lock = threading.Lock()
_zygote: Zygote | None = None
_failed: str | None = None  # why forks cannot be used here; said once
_retired: list[Zygote] = []  # stopped zygotes whose boxes a kernel may still use: removed at exit


def wanted(mode: str) -> bool:
    mode = (mode or "auto").lower()
    if mode not in MODES:
        raise ValueError(f"c.LimitedKernelManager.zygote must be one of {', '.join(MODES)}, not {mode!r}")
    return mode == "auto"


def give_up(reason: str) -> None:
    """Stop forking in this process (a fork failed); say why, once."""
    global _zygote, _failed
    with _lock:
        if _failed is None:
            _failed = reason
            _say(reason)
        if _zygote is not None:
            _zygote.close(remove_boxes=False)
            _retired.append(_zygote)
            _zygote = None


def _say(reason: str) -> None:
    message = ("grading kernels start afresh for every submission (slower, as safe): the "
               f"pre-imported kernel is unavailable here: {reason}")
    log.warning(message)
    print(f"\n*** labtools: {message}\n", file=sys.stderr, flush=True)


def shared(bwrap: str) -> Zygote | None:
    """This process's zygote, started on first use; None (said once) where it cannot work."""
    global _zygote, _failed
    with _lock:
        if _failed is not None:
            return None
        if _zygote is not None and _zygote.alive():
            return _zygote
        if _zygote is not None:  # it died (it was killed): a new one
            _zygote.close(remove_boxes=False)
            _retired.append(_zygote)
        try:
            _zygote = Zygote(bwrap)
        except (ZygoteError, OSError) as exc:
            _zygote, _failed = None, str(exc)
            _say(_failed)
            return None
        return _zygote


def can_fork(kernel_cmd: list[str]) -> list[str] | None:
    """ipykernel's arguments when `kernel_cmd` is this Python's ipykernel (what a fork
    runs), else None: another interpreter or kernel starts afresh."""
    if len(kernel_cmd) < 3 or kernel_cmd[1:3] != ["-m", "ipykernel_launcher"]:
        return None
    exe = shutil.which(kernel_cmd[0]) or kernel_cmd[0]
    if os.path.realpath(exe) != os.path.realpath(sys.executable):
        return None
    return kernel_cmd[3:]


@atexit.register
def shutdown() -> None:
    """Stop this process's zygote (and every kernel forked from it); the next kernel starts a new one."""
    global _zygote
    with _lock:
        for each in [*_retired, *([_zygote] if _zygote is not None else [])]:
            each.close()
        _retired.clear()
        _zygote = None
