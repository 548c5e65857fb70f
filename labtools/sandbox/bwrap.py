"""The grading kernel's cage: resource limits, and a bubblewrap sandbox around it.

`GradingExecute` starts every kernel it autogrades through this module's `main`
(`launcher_command(...) + ["--", *command]`, the command line of
`python -m labtools.sandbox --memory-mb N --file-mb M [--ignore-sigint] -- <command>`): it
sets the limits (a memory bomb ends in a MemoryError inside its cell instead of
taking the machine down; limits the OS lacks are skipped) and execs `<command>`. With
the sandbox on, `<command>` is `bwrap ... -- <kernel command>` from `bwrap_command`:
bubblewrap (https://github.com/containers/bubblewrap, `apt install bubblewrap`), the
unprivileged sandbox Flatpak uses, runs the kernel in fresh namespaces where

- the only files it sees are the system (read-only), the Python installation the
  kernel runs (read-only), its connection directory (the ZMQ sockets it talks to the
  grader through), and a scratch directory with copies of the notebook directory's
  data files, which is its working directory: not the notebook itself (its hidden
  tests), not the course directory (sources, gradebook, other students' work);
- it can write only to that scratch directory and to private in-memory /tmp and home;
- it has no network (`--unshare-net`: ZMQ runs over ipc sockets, not TCP), no view of
  the host's processes, and it dies with the grader.

`LimitedKernelManager.sandbox` decides whether the sandbox is used ("auto", "require",
"none"); `resolve_sandbox` applies it, with a loud warning when "auto" finds no usable
bubblewrap.
"""

from __future__ import annotations

import argparse
import functools
import glob
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import weakref
from pathlib import Path

from . import policy

log = logging.getLogger(__name__)

MODES = ("auto", "require", "bwrap", "none")
REQUIRE_ENV = "LABS_REQUIRE_SANDBOX"  # "1": "auto" behaves like "require" (CI sets it)
INSTALL_HINT = ("install bubblewrap (Debian/Ubuntu: apt install bubblewrap; Fedora: dnf install bubblewrap) "
                "or set c.LimitedKernelManager.sandbox = 'none' in nbgrader_config.py to silence this")

# Where the kernel's scratch directory appears inside the sandbox, and its home.
SANDBOX_HOME = "/home/student"
SANDBOX_WORK = f"{SANDBOX_HOME}/work"
# The parts of the host every program needs, bound read-only when they exist
# (symlinks such as /bin -> usr/bin on merged-/usr systems are recreated as symlinks).
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Only these entries of /etc: the dynamic linker's cache, time zone, name lookup,
# certificates, fonts, Debian's python config. Not the whole of /etc (root-only
# files such as /etc/shadow would be readable when the grader runs as root).
ETC_ENTRIES = (
    "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone", "alternatives",
    "passwd", "group", "nsswitch.conf", "hosts", "host.conf", "gai.conf", "protocols", "services",
    "ssl", "ca-certificates", "ca-certificates.conf", "pki", "fonts", "mime.types", "os-release",
    "debian_version", "lsb-release", "matplotlibrc", "OpenCL", "vulkan", "nvidia", "glvnd",
    f"python{sys.version_info[0]}.{sys.version_info[1]}",
)
# GPU device nodes (NVIDIA, DRI for ROCm) are passed through when present.
GPU_DEVICES = ("/dev/nvidia*", "/dev/nvidia-caps", "/dev/dri", "/dev/kfd")
TMPFS_MB = 2048  # size of each in-memory filesystem (/tmp, home, /dev/shm), where bwrap supports it


class SandboxUnavailable(RuntimeError):
    """The sandbox is required (or asked for) but cannot be used here."""


# --- the limits wrapper, run outside the sandbox -------------------------------------


def apply_limits(memory_mb: int, file_mb: int) -> None:
    try:
        import resource
    except ImportError:  # Windows
        return
    for limit, megabytes in ((getattr(resource, "RLIMIT_AS", None), memory_mb),
                             (getattr(resource, "RLIMIT_FSIZE", None), file_mb)):
        if limit is not None and megabytes > 0:
            resource.setrlimit(limit, (megabytes * 2**20, megabytes * 2**20))


# Not `python -m labtools.sandbox`: -m puts the working directory first on sys.path, and
# the kernel starts in the notebook's directory (or the scratch copy of it), which holds
# whatever files the student handed in: a `labtools/` folder there would run as the
# grader, outside the sandbox.
_LAUNCH = "import sys; sys.path[0] = {root!r}; from labtools.sandbox.bwrap import main; main(sys.argv[1:])"


def launcher_command(memory_mb: int, file_mb: int, ignore_sigint: bool = False, cgroups=()) -> list[str]:
    """The command that applies the limits and then execs the command given after it
    (after `--`), with this labtools whatever the working directory holds. `cgroups`:
    the kernel's control group directories (cgroups.py), entered first."""
    root = str(Path(__file__).resolve().parents[2])  # the folder that holds labtools/
    return [sys.executable, "-c", _LAUNCH.format(root=root), f"--memory-mb={memory_mb}",
            f"--file-mb={file_mb}", *(["--ignore-sigint"] if ignore_sigint else []),
            *[f"--cgroup={path}" for path in cgroups]]


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="labtools.sandbox.bwrap")
    parser.add_argument("--memory-mb", type=int, default=0, help="address-space limit of the kernel")
    parser.add_argument("--file-mb", type=int, default=0, help="largest file the kernel may write")
    parser.add_argument("--ignore-sigint", action="store_true",
                        help="start the command with SIGINT ignored (bwrap would die of the kernel's "
                             "interrupts; ipykernel installs its own handler)")
    parser.add_argument("--cgroup", action="append", default=[],
                        help="a control group directory to move into first (the whole process tree's limits)")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the kernel command after --")
    if args.cgroup:
        from .cgroups import KernelGroup

        KernelGroup.enter(args.cgroup)
    apply_limits(args.memory_mb, args.file_mb)
    if args.ignore_sigint:
        # The grader interrupts a cell with SIGINT to the kernel's process group, which
        # holds bwrap too; an ignored signal stays ignored across exec.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.execvp(command[0], command)


# --- deciding whether to sandbox -----------------------------------------------------


_warned: set[str] = set()


def warn_unsandboxed(reason: str) -> None:
    """Say loudly, once per process, that student code runs without the sandbox."""
    if reason in _warned:
        return
    _warned.add(reason)
    message = (f"STUDENT CODE IS NOT SANDBOXED: {reason}. Autograded notebooks can read the hidden "
               f"tests, the gradebook and other students' work, write anywhere you can, and use the "
               f"network. To sandbox them, {INSTALL_HINT}.")
    log.warning(message)
    print(f"\n*** WARNING: {message}\n", file=sys.stderr, flush=True)


@functools.lru_cache(maxsize=None)
def _bwrap_help(bwrap: str) -> str:
    try:
        return subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


@functools.lru_cache(maxsize=None)
def probe(bwrap: str) -> str | None:
    """None when `bwrap` can start a program in fresh namespaces here, else why not.

    Fails, for example, in containers without user namespaces, or on Ubuntu 24.04
    where AppArmor keeps unprivileged programs from creating them."""
    cmd = [*_namespaces(bwrap), "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
           "--", sys.executable, "-c", "pass"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{bwrap} could not be run ({exc})"
    if proc.returncode != 0:
        detail = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        return f"{bwrap} cannot create a sandbox here ({detail})"
    return None


# Environment variables that look like credentials: the grader's shell may hold them (a
# gradebook password, cloud keys) and a kernel must not see them, sandboxed or not.
SECRET_WORDS = {"PASSWORD", "PASSWD", "PASS", "SECRET", "TOKEN", "CREDENTIAL", "CREDENTIALS", "KEY", "APIKEY",
                "PRIVATE", "AUTH", "SESSION", "COOKIE"}
SECRET_NAMES = {"DATABASE_URL", "SSH_AUTH_SOCK", "GOOGLE_APPLICATION_CREDENTIALS"}
SECRET_PREFIXES = ("PG", "AWS_", "AZURE_", "GCP_", "MYSQL_")


def without_secrets(env: dict) -> dict:
    """A copy of `env` without the variables that look like credentials."""
    def secret(name: str) -> bool:
        upper = name.upper()
        return (upper in SECRET_NAMES or upper.startswith(SECRET_PREFIXES)
                or any(word in SECRET_WORDS for word in upper.split("_")))
    return {name: value for name, value in env.items() if not secret(name)}


def resolve_sandbox(mode: str) -> str | None:
    """The bwrap executable to sandbox kernels with, or None to run them unsandboxed.

    "none": None, silently. "require" (or "bwrap"): bwrap, or SandboxUnavailable.
    "auto": bwrap when it is installed and works here, else None with a loud warning;
    like "require" when the environment variable LABS_REQUIRE_SANDBOX is 1."""
    required = policy.required(mode, MODES, REQUIRE_ENV, "LimitedKernelManager.sandbox")
    if required is None:
        return None
    mode = (mode or "auto").lower()
    if not sys.platform.startswith("linux"):
        reason = f"the sandbox (bubblewrap) needs Linux, and this is {sys.platform}"
        if required:
            raise SandboxUnavailable(reason)
        warn_unsandboxed(reason)
        return None
    bwrap = shutil.which("bwrap")
    problem = probe(bwrap) if bwrap else "bubblewrap (bwrap) is not installed"
    if problem is None:
        return bwrap
    if required:
        why = f"LimitedKernelManager.sandbox = {mode!r}" if mode != "auto" else f"{REQUIRE_ENV}=1"
        raise SandboxUnavailable(f"{problem}, and {why} requires the grading sandbox: {INSTALL_HINT}")
    warn_unsandboxed(problem)
    return None


# --- building the bwrap command ------------------------------------------------------


def _namespaces(bwrap: str) -> list[str]:
    """New namespaces of every kind (no network, no host processes), and death with the
    grader. No --new-session: the grader interrupts a cell with SIGINT to the kernel's
    process group, which a new session would leave (the kernel has no controlling
    terminal to protect anyway)."""
    args = [bwrap, "--unshare-all", "--die-with-parent"]
    if "--disable-userns" in _bwrap_help(bwrap):  # bubblewrap >= 0.8: no user namespaces inside
        args += ["--unshare-user", "--disable-userns"]
    return args


def _within(path: str, root: str) -> bool:
    path, root = os.path.normpath(path), os.path.normpath(root)
    return path == root or path.startswith(root.rstrip("/") + "/")


def python_paths(executable: str) -> list[str]:
    """The directories a Python installation needs, for `executable` (the kernel's
    interpreter) and for the interpreter running this code: their prefixes, the base
    installation behind a virtual environment, and site-packages."""
    import site

    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *site.getsitepackages()}
    if site.ENABLE_USER_SITE and os.path.isdir(site.getusersitepackages()):
        paths.add(site.getusersitepackages())
    exe = shutil.which(executable) or executable
    if os.path.isabs(exe):
        for candidate in (exe, os.path.realpath(exe)):
            prefix = os.path.dirname(os.path.dirname(candidate))
            paths.add(prefix)
            cfg = Path(prefix, "pyvenv.cfg")
            if cfg.is_file():  # a virtual environment: also the installation it was made from
                for line in cfg.read_text(errors="replace").splitlines():
                    key, _, value = line.partition("=")
                    if key.strip() == "home" and value.strip():
                        paths.add(os.path.dirname(os.path.realpath(value.strip())))
    paths = {os.path.normpath(p) for p in paths if p and os.path.isabs(p) and os.path.isdir(p)}
    # keep only outermost directories; system directories are bound anyway
    outer = sorted(p for p in paths if not any(q != p and _within(p, q) for q in paths))
    return [p for p in outer if not any(_within(p, s) for s in SYSTEM_PATHS)]


def sandbox_env() -> dict[str, str]:
    """The environment every sandboxed kernel gets on top of the grader's (secrets removed)."""
    return {
        "HOME": SANDBOX_HOME, "TMPDIR": "/tmp", "PWD": SANDBOX_WORK,
        "XDG_CACHE_HOME": f"{SANDBOX_HOME}/.cache", "XDG_CONFIG_HOME": f"{SANDBOX_HOME}/.config",
        "MPLCONFIGDIR": f"{SANDBOX_HOME}/.config/matplotlib", "IPYTHONDIR": f"{SANDBOX_HOME}/.ipython",
        "JUPYTER_RUNTIME_DIR": f"{SANDBOX_HOME}/.local/share/jupyter/runtime",
        "HF_HOME": f"{SANDBOX_HOME}/.cache/huggingface",
        # there is no network: say so, so that libraries do not wait for one
        "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
        # Inside the sandbox the kernel's parent is bwrap's init (pid 1): ipykernel would take
        # the grader's pid for a parent that is gone and quit. --die-with-parent ties the
        # kernel to the grader instead.
        "JPY_PARENT_PID": "1",
    }


def check_hidden(binds: list[str], hidden: list[str]) -> None:
    """Refuse to bind a directory that holds one that student code must not see."""
    for path in binds:
        for secret in hidden:
            if _within(secret, path):
                raise SandboxUnavailable(
                    f"the Python installation at {path} contains {secret}, which the sandbox must hide "
                    f"from student code: use a Python (virtual environment) outside the course directory")


def _root_args(bwrap: str, executable: str, *, hidden: list[str], nested: bool) -> list[str]:
    """The sandbox's namespaces and read-only root: the system, the Python installation of
    `executable`, devices, and in-memory /tmp, home and /dev/shm. `nested`: for the zygote
    (zygote.py), whose forks make namespaces of their own: user namespaces stay allowed
    and the host's /proc is bound (a new /proc may only be mounted where a whole one is
    visible); each fork mounts its own over it."""
    help_text = _bwrap_help(bwrap)

    def tmpfs(dest: str) -> list[str]:
        size = ["--size", str(TMPFS_MB * 2**20)] if "--size" in help_text else []
        return [*size, "--tmpfs", dest]

    args = [bwrap, "--unshare-all", "--die-with-parent"] if nested else _namespaces(bwrap)
    for path in SYSTEM_PATHS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for entry in ETC_ENTRIES:
        args += ["--ro-bind-try", f"/etc/{entry}", f"/etc/{entry}"]
    binds = python_paths(executable)
    if os.path.isabs(executable) and not any(_within(executable, p) for p in [*binds, *SYSTEM_PATHS]):
        binds.append(executable)  # a kernel executable outside any installation we know
    args += ["--bind", "/proc", "/proc"] if nested else ["--proc", "/proc"]
    args += ["--dev", "/dev", *tmpfs("/dev/shm"), "--ro-bind-try", "/sys", "/sys"]
    for pattern in GPU_DEVICES:
        for device in sorted(glob.glob(pattern)):
            args += ["--dev-bind", device, device]
    args += [*tmpfs("/tmp"), *tmpfs(SANDBOX_HOME)]
    # After the tmpfs mounts: a Python installed under /tmp (a fresh CI clone) stays visible.
    check_hidden(binds, hidden)
    for path in binds:
        args += ["--ro-bind", path, path]
    return args


def bwrap_command(bwrap: str, kernel_cmd: list[str], *, work_dir: str, connection_file: str,
                  hidden: list[str] = ()) -> list[str]:
    """`bwrap ... -- kernel_cmd`: the kernel in its sandbox.

    `work_dir` (host) becomes the kernel's writable working directory SANDBOX_WORK;
    the directory of `connection_file`, where the kernel creates its ipc sockets, is
    bound read-write at its own path (the connection file itself read-only). Paths in `hidden` (the notebook's directory, the course
    directory) must not be visible: binding any directory that holds one of them is
    refused."""
    connection_dir = os.path.dirname(connection_file)
    args = _root_args(bwrap, kernel_cmd[0], hidden=list(hidden), nested=False)
    args += ["--bind", work_dir, SANDBOX_WORK,
             "--bind", connection_dir, connection_dir, "--ro-bind-try", connection_file, connection_file,
             "--chdir", SANDBOX_WORK]
    # Everything else of the new root is read-only.
    args += ["--remount-ro", "/"]
    for name, value in sandbox_env().items():
        args += ["--setenv", name, value]
    return [*args, "--", *kernel_cmd]


def zygote_command(bwrap: str, python_cmd: list[str], *, boxes: str) -> list[str]:
    """`bwrap ... -- python_cmd`: the zygote (zygote.py) in a sandbox like a kernel's, with
    `boxes` (host), the folder of its kernels' boxes, bound read-write at its own path."""
    args = _root_args(bwrap, python_cmd[0], hidden=[], nested=True)
    args += ["--bind", boxes, boxes, "--chdir", "/", "--remount-ro", "/"]
    for name, value in sandbox_env().items():
        args += ["--setenv", name, value]
    return [*args, "--", *python_cmd]


def make_box_dir(owner=None) -> str:
    """A private temporary directory for one kernel manager, removed at the latest when
    `owner` is garbage-collected or the process exits. Its path stays short: ipc
    socket paths are limited to about 100 bytes."""
    base = tempfile.gettempdir()
    if len(base) > 40 and os.path.isdir("/tmp"):
        base = "/tmp"
    box = tempfile.mkdtemp(prefix="labtools-kernel-", dir=base)
    if owner is not None:
        weakref.finalize(owner, shutil.rmtree, box, True)
    return box


def prepare_work_dir(notebook_dir: str | None, work_dir: str) -> None:
    """A fresh `work_dir` holding copies of the files beside the notebook (data files
    an instructor ships with a lab), without any notebook: the autograded notebook
    there holds the hidden tests."""
    if os.path.isdir(work_dir):
        shutil.rmtree(work_dir)
    if notebook_dir and os.path.isdir(notebook_dir):
        shutil.copytree(notebook_dir, work_dir, symlinks=True,
                        ignore=shutil.ignore_patterns("*.ipynb", ".ipynb_checkpoints"))
    else:
        os.makedirs(work_dir)


if __name__ == "__main__":
    main(sys.argv[1:])
