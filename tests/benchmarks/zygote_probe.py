"""Issue 32 feasibility probe (not a test, not used by grading): can a pre-imported process
inside the grading sandbox fork a kernel that gets namespaces of its own?

    bwrap --unshare-user --unshare-pid --unshare-net --unshare-ipc --die-with-parent \
          --ro-bind / / --proc /proc --dev /dev --tmpfs /tmp \
          --dir /tmp/zp --ro-bind "$PWD/tests/benchmarks" /tmp/zp .venv/bin/python /tmp/zp/zygote_probe.py

The "zygote" imports torch, numpy and matplotlib once; each fork enters a new user, mount,
PID, IPC and UTS namespace, mounts its own /tmp, then enters one more user and mount
namespace, so that what it mounted is locked (a student's code cannot unmount it to see
what lies below), and forks again to be PID 1 of its namespace. On this machine
(2026-11-29): imports 1.2 s in the zygote, from fork to a working torch in the grandchild
about 0.01 s; the locked /tmp cannot be unmounted (EINVAL). The zygote has 2 threads after
its imports, so a fork copies only the forking one: a design must keep the zygote free of
locks held by other threads (or import in a way that starts none).
"""

import ctypes
import os
import time

start = time.time()
import matplotlib  # noqa: E402,F401
import numpy  # noqa: E402,F401
import torch  # noqa: E402

imports = time.time() - start
libc = ctypes.CDLL(None, use_errno=True)
NEWNS, NEWUSER, NEWPID, NEWIPC, NEWUTS = 0x20000, 0x10000000, 0x20000000, 0x08000000, 0x04000000
MS_REC, MS_PRIVATE, MNT_DETACH = 0x4000, 0x40000, 2


def check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def own_user_namespace(flags: int) -> None:
    uid, gid = os.getuid(), os.getgid()
    check(libc.unshare(NEWUSER | flags), "unshare")
    with open("/proc/self/setgroups", "w") as fh:
        fh.write("deny")
    with open("/proc/self/uid_map", "w") as fh:
        fh.write(f"{uid} {uid} 1")
    with open("/proc/self/gid_map", "w") as fh:
        fh.write(f"{gid} {gid} 1")


print(f"zygote: imports {imports:.2f} s, threads {len(os.listdir('/proc/self/task'))}", flush=True)
forked = time.time()
child = os.fork()
if child == 0:
    own_user_namespace(NEWNS | NEWPID | NEWIPC | NEWUTS)
    check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "make / private")
    check(libc.mount(b"tmpfs", b"/tmp", b"tmpfs", 0, b"size=64m"), "a /tmp of its own")
    own_user_namespace(NEWNS)  # what this fork mounted is now locked
    refused = libc.umount2(b"/tmp", MNT_DETACH) != 0
    print(f"fork: unmounting its locked /tmp {'refused' if refused else 'ALLOWED'}", flush=True)
    kernel = os.fork()
    if kernel == 0:
        torch.manual_seed(0)
        print(f"kernel: pid {os.getpid()}, /tmp {os.listdir('/tmp')}, torch {torch.ones(2).sum().item()}, "
              f"{time.time() - forked:.3f} s after the fork", flush=True)
        os._exit(0)
    os.waitpid(kernel, 0)
    os._exit(0)
os.waitpid(child, 0)
