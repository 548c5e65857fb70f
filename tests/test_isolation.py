"""Issue 32, item 2: nothing one student's kernel leaves behind reaches the next student
graded on the same worker. A student who leaves files, environment variables, threads,
child processes and listening sockets, changes `sys.modules`, torch's global settings and
matplotlib's rcParams, and patches `torch.allclose` to pass everything, is graded on one
worker right before a probe that reports what it sees, and before an honest wrong answer
whose score must be the same as when it was graded before the attacker.

Where forks can have namespaces of their own (here, and in CI), every kernel is a fork of
the worker's zygote (labtools/sandbox/zygote.py), which has imported torch, NumPy and
matplotlib once; the tests check that the kernels were forks, and that the ways out of a
fork's namespaces (unmounting its private /tmp to reach the other boxes, a user namespace
of its own) are closed. With fresh kernels all of this holds by construction. They need a
working bubblewrap, like tests/test_sandbox.py."""

from __future__ import annotations

import re
import subprocess
import uuid

import nbformat
import pytest

from labtools import nbcells
from labtools.build.submissions import fill_release
from labtools.grade.run import grade
from labtools.labs import get_lab

from conftest import make_course, write_zip
from test_sandbox import needs_bwrap

LAB = get_lab("lab01_attention")
MARK = uuid.uuid4().hex[:12]  # names what the attacker leaves, so the probe and the host can look for it

DIGITS = MARK[:3].translate(str.maketrans("abcdef", "123456"))  # for a port and a sleep's argument
LEAVE = f'''\
import os as _os, sys as _sys, socket as _socket, subprocess as _subprocess, threading as _threading, time as _time
import matplotlib as _mpl, torch as _torch


def _leave(name, action):
    try:
        action()
        print(f"LEFT {{name}}: ok")
    except Exception as exc:
        print(f"LEFT {{name}}: failed {{type(exc).__name__}}: {{exc}}")


def _connection_dir():
    from ipykernel.connect import get_connection_file
    return _os.path.dirname(get_connection_file())


def _files():
    for folder in ("/tmp", _os.path.expanduser("~"), _os.getcwd(), "/dev/shm", _connection_dir()):
        with open(_os.path.join(folder, "left-{MARK}.txt"), "w") as fh:
            fh.write("left behind")


def _listen(family, address):
    s = _socket.socket(family)
    s.bind(address)
    s.listen()
    _sys.modules["left_socket_{MARK}_" + str(family)] = s  # kept open


def _patch():
    _torch.allclose = lambda *args, **kwargs: True       # every later allclose would pass
    _torch.Tensor.allclose = lambda *args, **kwargs: True


_leave("files", _files)
_leave("environ", lambda: _os.environ.__setitem__("LEFT_{MARK}", "1"))
_leave("thread", lambda: _threading.Thread(target=_time.sleep, args=(600,), name="left-{MARK}", daemon=True).start())
_leave("process", lambda: _subprocess.Popen(["sleep", "6{DIGITS}"], start_new_session=True))
_leave("unix socket", lambda: _listen(_socket.AF_UNIX, "/tmp/left-{MARK}.sock"))
_leave("tcp socket", lambda: _listen(_socket.AF_INET, ("127.0.0.1", 47{DIGITS})))
_leave("sys.modules", lambda: _sys.modules.__setitem__("left_{MARK}", _sys))
_leave("default dtype", lambda: _torch.set_default_dtype(_torch.float64))
_leave("deterministic", lambda: _torch.use_deterministic_algorithms(True))
_leave("linewidth", lambda: _mpl.rcParams.__setitem__("lines.linewidth", 9.0))
_leave("allclose", _patch)
print(f"LEFT fork: {{_os.getpid() == 1}}")


def _escape(name, call):
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    result = call(libc)
    print(f"ESCAPE {{name}}: {{'ok' if result == 0 else 'refused'}}")


_escape("umount tmp", lambda libc: libc.umount2(b"/tmp", 2))
_escape("umount home", lambda libc: libc.umount2(_os.path.expanduser("~").encode(), 2))
_escape("user namespace", lambda libc: _subprocess.run(["unshare", "--user", "true"]).returncode)
_escape("mount tmpfs", lambda libc: libc.mount(b"none", b"/mnt", b"tmpfs", 0, None))
'''
# what the attacker must manage in its own kernel for the test to mean anything (the sandbox has no
# network, so a TCP socket on its own loopback may fail: that is fine)
MUST_LEAVE = ("files", "environ", "thread", "process", "unix socket", "sys.modules", "default dtype",
              "deterministic", "linewidth", "allclose")

PROBE = f'''\
import os as _os, sys as _sys, socket as _socket, threading as _threading
import matplotlib as _mpl, torch as _torch


def _seen(name, value):
    print(f"PROBE {{name}}: {{value}}")


from ipykernel.connect import get_connection_file as _connection_file
_seen("files", sorted(p for folder in ("/tmp", _os.path.expanduser("~"), _os.getcwd(), "/dev/shm",
                                       _os.path.dirname(_connection_file()))
                      for p in _os.listdir(folder) if "{MARK}" in p))
_seen("boxes", [b for b in _os.listdir(_os.path.dirname(_os.path.dirname(_os.path.dirname(_connection_file()))))
                if b != _os.path.basename(_os.path.dirname(_os.path.dirname(_connection_file())))])
_seen("environ", "LEFT_{MARK}" in _os.environ)
_seen("threads", [t.name for t in _threading.enumerate() if "{MARK}" in t.name])
_seen("processes", sorted(open(f"/proc/{{p}}/cmdline", "rb").read().decode(errors="replace").replace("\\0", " ")
                          for p in _os.listdir("/proc") if p.isdigit() and p != str(_os.getpid())
                          and _os.path.exists(f"/proc/{{p}}/cmdline") and b"sleep" in open(f"/proc/{{p}}/cmdline", "rb").read()))
def _connects(family, address):
    s = _socket.socket(family)
    s.settimeout(2)
    try:
        s.connect(address)
        return True
    except OSError:
        return False
    finally:
        s.close()
_seen("unix socket", _connects(_socket.AF_UNIX, "/tmp/left-{MARK}.sock"))
_seen("tcp socket", _connects(_socket.AF_INET, ("127.0.0.1", 47{DIGITS})))
_seen("sys.modules", "left_{MARK}" in _sys.modules)
_seen("default dtype", _torch.get_default_dtype())
_seen("deterministic", _torch.are_deterministic_algorithms_enabled())
_seen("linewidth", _mpl.rcParams["lines.linewidth"])
_seen("allclose", _torch.allclose(_torch.zeros(1), _torch.ones(1)))
_seen("fork", _os.getpid() == 1)
'''
CLEAN = {"files": "[]", "boxes": "[]", "environ": "False", "threads": "[]", "processes": "[]", "unix socket": "False",
         "tcp socket": "False", "sys.modules": "False", "default dtype": "torch.float32",
         "deterministic": "False", "linewidth": "1.5", "allclose": "False"}
WRONG_SOFTMAX = "def softmax(x, dim=-1):\n    import torch\n    return torch.exp(x) / torch.exp(x).sum()\n"


def _notebook(code: str | None = None, answers: dict | None = None) -> str:
    source, release = nbcells.read(LAB.source_path()), nbcells.read(LAB.release_path())
    nb = fill_release(release, source, answers or {})
    if code is not None:
        first = next(c for c in nb.cells if nbcells.is_solution(c) and c.cell_type == "code")
        first.source = code + "\n" + first.source
    return nbformat.writes(nb)


def _lines(course, student, prefix) -> dict[str, str]:
    nb = nbformat.read(course / "autograded" / student / LAB.lab_id / LAB.notebook_name, as_version=4)
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    return dict(re.findall(rf"^{prefix} ([\w .]+): (.*)$", text, re.M))


@pytest.fixture(scope="module")
def back_to_back(tmp_path_factory):
    """One worker grades, in this order: an honest wrong answer, the attacker, the probe, and
    the same honest wrong answer again."""
    needs_bwrap()
    course = make_course(tmp_path_factory.mktemp("isolation"), [LAB])
    with (course / "nbgrader_config.py").open("a") as fh:
        fh.write('\nc.LimitedKernelManager.sandbox = "require"\n')
    wrong = _notebook(answers={"softmax": WRONG_SOFTMAX})
    files = {f"a_wrong/{LAB.notebook_name}": wrong,
             f"b_attacker/{LAB.notebook_name}": _notebook(LEAVE),
             f"c_probe/{LAB.notebook_name}": _notebook(PROBE),
             f"d_wrong/{LAB.notebook_name}": wrong}
    report = grade(LAB.lab_id, write_zip(course.parent / "class.zip", files), course_dir=course, workers=1,
                   hide_progress=True, log=lambda *a: None)
    return course, report


def test_the_attacker_left_everything_it_meant_to(back_to_back):
    course, _ = back_to_back
    left = _lines(course, "b_attacker", "LEFT")
    failed = {name: left.get(name) for name in MUST_LEAVE if left.get(name) != "ok"}
    assert not failed, f"the attack could not leave these, so the probe proves nothing about them: {failed}"


def test_the_kernels_were_forks_of_the_zygote_and_could_not_get_out(back_to_back):
    """Both kernels ran as forks (PID 1 of their own namespace; a fresh kernel is bubblewrap's
    PID 2), and the attacker could neither undo its private mounts nor make namespaces."""
    course, _ = back_to_back
    assert _lines(course, "b_attacker", "LEFT").get("fork") == "True", "the kernel was not a fork of the zygote"
    assert "True" in _lines(course, "c_probe", "PROBE").get("fork", ""), "the probe's kernel was not a fork"
    escapes = _lines(course, "b_attacker", "ESCAPE")
    assert set(escapes) == {"umount tmp", "umount home", "user namespace", "mount tmpfs"}, escapes
    assert all(v == "refused" for v in escapes.values()), f"ways out of the fork's sandbox: {escapes}"


def test_the_next_student_sees_nothing_of_it(back_to_back):
    course, _ = back_to_back
    seen = _lines(course, "c_probe", "PROBE")
    assert set(CLEAN) <= set(seen), f"the probe did not run to the end: {seen}"
    leaked = {name: seen[name] for name in CLEAN if seen[name] != CLEAN[name]}
    assert not leaked, f"the next student saw what the attacker left: {leaked}"


def test_an_honest_answer_scores_the_same_before_and_after_the_attacker(back_to_back):
    _, report = back_to_back
    before, after = report.result("a_wrong"), report.result("d_wrong")
    assert before.status == after.status == "graded"
    assert 0 < before.auto_score < before.auto_max  # the wrong softmax loses points
    assert (after.auto_score, dict(after.cell_scores)) == (before.auto_score, dict(before.cell_scores))


def test_nothing_the_attacker_started_outlives_its_kernel(back_to_back):
    leftover = subprocess.run(["pgrep", "-f", f"sleep 6{DIGITS}"],
                              capture_output=True, text=True).stdout.split()
    assert not leftover, f"processes the attacker started are still running: {leftover}"
