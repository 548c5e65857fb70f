"""The zygote: imports what every lab's kernel needs once, then forks one kernel per
student, each in namespaces of its own. It never runs student code itself.

labtools/sandbox/zygote.py starts it inside a bubblewrap sandbox like a kernel's (the
system and the Python installation read-only, no network, nothing of the course), as
`python -c <this file's text> BOXES CONFIG` (JSON: the modules to preload, the folders to keep): this file is read by the grader and
passed as text, so the course directory is never bound into the sandbox. BOXES is the
one folder it shares with the grader: each kernel's box (BOXES/<id>/conn: connection
file and ZMQ sockets; BOXES/<id>/work: copies of the notebook folder's data files)
and the zygote's socket, BOXES/zygote.sock.

For each request (one JSON line on a new connection) it forks a supervisor, which
- enters new user, mount, PID, network, IPC and UTS namespaces;
- mounts a fresh /tmp, home and /dev/shm, its box's work folder as the working
  directory, and hides every other box (an empty tmpfs over BOXES, its own conn/ put back);
- forks the kernel, PID 1 of the new PID namespace, which mounts its /proc, enters a
  second user and mount namespace (the mounts above become locked: they cannot be
  undone from inside), drops every capability, may create no further user namespace,
  takes the request's rlimits, closes every inherited descriptor, re-seeds Python's,
  NumPy's and torch's random generators, tells the grader its PID (SCM_CREDENTIALS, so
  the grader sees its own PID namespace's number and can put it in the kernel's control
  group and signal it), waits for the grader's "go", and runs ipykernel;
- waits for the kernel and sends the grader its exit status.
Everything the kernel or its children leave ends with its namespaces.
"""

import ctypes
import json
import os
import signal
import socket
import struct
import sys

HOME = "/home/student"
KEEP: list = []  # folders of the Python installation: visible in every kernel (serve's "keep")
WORK = HOME + "/work"
TMPFS_OPTIONS = b"size=2147483648,mode=1777"

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = 32, 4096, 8192, 16384, 1 << 18
PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_SET_DUMPABLE = 24, 38, 4

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source, target, fstype, flags, data=None) -> None:
    enc = (lambda s: s.encode() if isinstance(s, str) else s)
    _check(_libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)),
           f"mount {target}")


def _unshare(flags: int, what: str) -> None:
    _check(_libc.unshare(flags), f"unshare ({what})")


def _map_self(uid: int, gid: int) -> None:
    """Map the user and group ids this process had outside its new user namespace onto
    themselves inside it (one id each: the only mapping an unprivileged process may write)."""
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as fh:
            fh.write(text)


def _drop_capabilities() -> None:
    """No capability left, none to regain through exec (the bounding set emptied first)."""
    try:
        with open("/proc/sys/kernel/cap_last_cap") as fh:
            last = int(fh.read())
    except OSError:
        last = 40
    for cap in range(last + 1):
        _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    header = struct.pack("Ii", 0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = ctypes.create_string_buffer(24)  # two empty {effective, permitted, inheritable}
    _check(_libc.capset(ctypes.c_char_p(header), data), "capset")
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


def _loopback_up() -> None:
    """Bring up `lo` in the new network namespace, as bubblewrap does for a fresh kernel."""
    import fcntl

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifreq = struct.pack("16sH14s", b"lo", 0, b"")
        flags = struct.unpack("16sH14s", fcntl.ioctl(s, 0x8913, ifreq))[1]  # SIOCGIFFLAGS
        fcntl.ioctl(s, 0x8914, struct.pack("16sH14s", b"lo", flags | 0x1, b""))  # SIOCSIFFLAGS, IFF_UP


def _send(conn: socket.socket, message: dict, credentials: bool = False) -> None:
    data = [json.dumps(message).encode() + b"\n"]
    if credentials:  # the receiver reads our PID as its own namespace numbers it
        creds = struct.pack("3i", os.getpid(), os.getuid(), os.getgid())
        conn.sendmsg(data, [(socket.SOL_SOCKET, socket.SCM_CREDENTIALS, creds)])
    else:
        conn.sendall(data[0])


def _read_line(conn: socket.socket) -> bytes:
    line = b""
    while not line.endswith(b"\n"):
        chunk = conn.recv(1)
        if not chunk:
            raise EOFError("the grader closed the connection")
        line += chunk
    return line


# --- the supervisor: namespaces and mounts -------------------------------------------


def _enter_namespaces(boxes: str, request: dict) -> None:
    uid, gid = os.getuid(), os.getgid()
    box = os.path.join(boxes, request["box"])
    conn_dir, connection_file = os.path.join(box, "conn"), request["connection_file"]
    _unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS,
             "user, mount, pid, network, ipc, uts")
    _map_self(uid, gid)
    # One more user namespace may be made below this one, the kernel's own: a student's
    # code can make none (bubblewrap's --disable-userns does the same).
    with open("/proc/sys/user/max_user_namespaces", "w") as fh:
        fh.write("1")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing we mount propagates back
    # The box's folders are bound while BOXES is still visible (it may be under /tmp):
    # work/ as the working directory, conn/ on a staging point, moved back to its own
    # path once /tmp is covered (the connection file names its ipc sockets by that path).
    _mount("tmpfs", HOME, "tmpfs", MS_NOSUID | MS_NODEV, TMPFS_OPTIONS)
    staging = os.path.join(HOME, ".conn")
    os.makedirs(WORK)
    os.makedirs(staging)
    _mount(os.path.join(box, "work"), WORK, None, MS_BIND)
    _mount(conn_dir, staging, None, MS_BIND)
    if os.path.exists(connection_file):  # read-only, the mount's other (locked) flags kept
        staged = os.path.join(staging, os.path.basename(connection_file))
        _mount(connection_file, staged, None, MS_BIND)
        kept = os.statvfs(staged).f_flag & (MS_NOSUID | MS_NODEV | MS_NOEXEC | 1024 | 2048 | 4096)
        _mount(None, staged, None, MS_REMOUNT | MS_BIND | MS_RDONLY | kept)
    # The Python installation may live under /tmp (a fresh clone's virtual environment):
    # staged like conn/, moved back onto the new /tmp (still read-only, as bound by bubblewrap).
    kept = [path for path in KEEP if path.startswith("/tmp/") and os.path.isdir(path)]
    for i, path in enumerate(kept):
        os.makedirs(os.path.join(HOME, f".keep{i}"))
        _mount(path, os.path.join(HOME, f".keep{i}"), None, MS_BIND | MS_REC)
    for target in ("/tmp", "/dev/shm"):
        _mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, TMPFS_OPTIONS)
    for i, path in enumerate(kept):
        os.makedirs(path)
        _mount(os.path.join(HOME, f".keep{i}"), path, None, MS_MOVE)
        os.rmdir(os.path.join(HOME, f".keep{i}"))
    if os.path.isdir(boxes):  # BOXES is not under /tmp: hide every box under an empty tmpfs
        _mount("tmpfs", boxes, "tmpfs", MS_NOSUID | MS_NODEV, b"size=65536,mode=0755")
    os.makedirs(conn_dir)
    _mount(staging, conn_dir, None, MS_MOVE)
    os.rmdir(staging)
    _loopback_up()


def _status(code: int) -> int:
    """A wait status as subprocess.Popen's returncode."""
    return -os.WTERMSIG(code) if os.WIFSIGNALED(code) else os.WEXITSTATUS(code)


def supervise(conn: socket.socket, boxes: str, request: dict) -> None:
    """In the forked supervisor: never returns."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.setsid()  # out of the zygote's process group: a kernel's kill(0, ...) cannot reach it
    try:
        _enter_namespaces(boxes, request)
        _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # the kernel may not ptrace its supervisor
        pid = os.fork()
        if pid == 0:
            _kernel(conn, request)
        while True:
            try:
                _, code = os.waitpid(pid, 0)
                break
            except InterruptedError:
                continue
        _send(conn, {"exit": _status(code)})
    except BaseException as exc:  # noqa: BLE001 - said to the grader, which falls back
        try:
            _send(conn, {"error": f"{type(exc).__name__}: {exc}"})
        except OSError:
            pass
    finally:
        os._exit(0)


# --- the kernel ----------------------------------------------------------------------


def _close_inherited(keep: set[int]) -> None:
    for fd in [int(name) for name in os.listdir("/proc/self/fd")]:
        if fd > 2 and fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def _reseed() -> None:
    """Every random generator as a fresh Python process would start it: from the OS."""
    import random
    import tempfile

    random.seed()
    tempfile._name_sequence = None  # its own Random, made on first use
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    if "torch" in sys.modules:
        sys.modules["torch"].seed()


def _limits(memory_mb: int, file_mb: int) -> None:
    import resource

    for limit, megabytes in ((resource.RLIMIT_AS, memory_mb), (resource.RLIMIT_FSIZE, file_mb)):
        if megabytes > 0:
            resource.setrlimit(limit, (megabytes * 2**20, megabytes * 2**20))


def _prepare(conn: socket.socket, request: dict) -> None:
    os.setsid()  # a process group of its own, the grader interrupts it and its children together
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)  # this PID namespace's
    uid, gid = os.getuid(), os.getgid()
    _unshare(CLONE_NEWUSER | CLONE_NEWNS, "user, mount (locks the mounts)")
    _map_self(uid, gid)
    _drop_capabilities()
    _limits(request.get("memory_mb", 0), request.get("file_mb", 0))
    _close_inherited({conn.fileno()})
    for sig in (signal.SIGCHLD, signal.SIGPIPE, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_IGN if sig == signal.SIGPIPE else signal.SIG_DFL)  # Python's defaults
    # ignored until ipykernel installs its own handler, as the launcher starts a fresh kernel:
    # an interrupt that comes while the kernel is still starting must not end it
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # PID 1 ignores signals it has no handler for: a terminate must still end the kernel
    signal.signal(signal.SIGTERM, lambda *_: os._exit(128 + signal.SIGTERM))
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(WORK)
    sys.path[0] = WORK  # `python -m ipykernel_launcher` puts its working directory first
    sys.argv = ["ipykernel_launcher", *request["argv"]]
    _reseed()


def _kernel(conn: socket.socket, request: dict) -> None:
    """PID 1 of the kernel's namespace: never returns."""
    code = 0
    try:
        _prepare(conn, request)
        _send(conn, {"started": True}, credentials=True)
        if _read_line(conn).strip() != b"go":
            raise RuntimeError("the grader did not say go")
        conn.close()
        if request.get("probe"):
            os._exit(0)
        del request
        from ipykernel.kernelapp import IPKernelApp

        IPKernelApp.launch_instance(argv=sys.argv[1:])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException as exc:  # noqa: BLE001
        code = 1  # as Python ends on an exception it does not catch
        try:
            _send(conn, {"error": f"{type(exc).__name__}: {exc}"})
        except (OSError, ValueError):
            print(f"labtools zygote: the kernel ended with {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
    finally:
        try:
            import atexit

            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


# --- the zygote ----------------------------------------------------------------------


def serve(boxes: str, config: dict) -> None:
    KEEP.extend(config.get("keep", []))
    modules = config.get("preload", [])
    # the inline backend, as ipykernel would set it before matplotlib is first imported
    os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    for name in modules:
        try:
            __import__(name)
        except Exception as exc:  # noqa: BLE001 - a kernel imports it itself, as today
            print(f"labtools zygote: {name} not preloaded ({exc})", file=sys.stderr, flush=True)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # supervisors are reaped by the system
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    path = os.path.join(boxes, "zygote.sock")
    server.bind(path + ".new")
    server.listen(16)
    os.rename(path + ".new", path)  # the grader connects once it exists: we are ready
    while True:
        conn, _ = server.accept()
        try:
            request = json.loads(_read_line(conn))
        except (OSError, EOFError, ValueError):
            conn.close()
            continue
        if os.fork() == 0:
            server.close()
            supervise(conn, boxes, request)
        conn.close()


if __name__ == "__main__":
    serve(sys.argv[1], json.loads(sys.argv[2]))
