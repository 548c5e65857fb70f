"""The grading sandbox (labtools/sandbox/): student code run by nbgrader autograde
cannot read the hidden tests, the sources, the gradebook or other students' work,
cannot write outside its scratch space, and has no network.

The attack tests grade a real class with real nbgrader runs; they need a working
bubblewrap and are skipped without one, unless LABS_REQUIRE_SANDBOX=1 (CI), where
they fail instead."""

from __future__ import annotations

import logging
import os
import re
import shutil
import socket
import sys
import threading
import uuid

import nbformat
import pytest

from labtools import nbcells
from labtools.sandbox import bwrap as sandbox
from labtools.grade.steps.execute import LimitedKernelManager
from labtools.grade.run import grade
from labtools.labs import get_lab
from labtools.build.submissions import fill_release

from conftest import make_course, write_zip

LAB = get_lab("lab01_attention")
REQUIRED = os.environ.get(sandbox.REQUIRE_ENV, "").strip() not in ("", "0")


def _bwrap_problem() -> str | None:
    if not sys.platform.startswith("linux"):
        return "not Linux"
    bwrap = shutil.which("bwrap")
    return sandbox.probe(bwrap) if bwrap else "bubblewrap (bwrap) is not installed"


def needs_bwrap():
    problem = _bwrap_problem()
    if problem and REQUIRED:
        pytest.fail(f"{sandbox.REQUIRE_ENV}=1 but the sandbox cannot run: {problem}")
    if problem:
        pytest.skip(f"no usable sandbox: {problem}")


# --- the attack: a student who tries everything --------------------------------------

DENIED = (  # attempts that must fail, by name
    "read-source", "read-source-relative", "read-autograded", "read-autograded-relative",
    "read-gradebook", "read-gradebook-relative", "read-config", "read-other-submission",
    "list-course", "write-course", "write-own-notebook-dir", "read-grader-environ",
    "tcp-localhost", "dns", "tcp-outward", "read-secret-env", "read-grading-flag",
)
SECRET_VARIABLE = "LABS_TEST_GRADEBOOK_PASSWORD"  # in the grader's environment during the attack

ATTACK = '''\
import os as _os, socket as _socket


def _attack(name, action):
    try:
        result = action()
    except Exception as exc:
        print(f"ATTACK {{name}}: denied {{type(exc).__name__}}")
    else:
        print(f"ATTACK {{name}}: ALLOWED {{str(result)[:60]!r}}")


def _read(path):
    with open(path, "rb") as fh:
        return fh.read(60)


def _write(path):
    with open(path, "w") as fh:
        fh.write("pwned")
    return path


_course, _me = {course!r}, {student!r}
_attack("read-source", lambda: _read(f"{{_course}}/source/{lab}/{lab}.ipynb"))
_attack("read-source-relative", lambda: _read("../../../source/{lab}/{lab}.ipynb"))
_attack("read-autograded", lambda: _read(f"{{_course}}/autograded/{{_me}}/{lab}/{lab}.ipynb"))
_attack("read-autograded-relative", lambda: _read("{lab}.ipynb"))
_attack("read-gradebook", lambda: _read(f"{{_course}}/gradebook.db"))
_attack("read-gradebook-relative", lambda: _read("../../../gradebook.db"))
_attack("read-config", lambda: _read(f"{{_course}}/nbgrader_config.py"))
_attack("read-other-submission", lambda: _read(f"{{_course}}/submitted/honest/{lab}/{lab}.ipynb"))
_attack("list-course", lambda: _os.listdir(_course))
_attack("write-course", lambda: _write(f"{{_course}}/pwned-{{_me}}.txt"))
_attack("write-own-notebook-dir", lambda: _write(f"{{_course}}/autograded/{{_me}}/{lab}/pwned.txt"))
_attack("write-host-tmp", lambda: _write({host_tmp!r}))
_attack("write-scratch", lambda: _write("scratch.txt"))
_attack("read-grader-environ", lambda: _read("/proc/{grader_pid}/environ"))
_attack("tcp-localhost", lambda: _socket.create_connection(("127.0.0.1", {port}), timeout=5))
_attack("dns", lambda: _socket.getaddrinfo("pypi.org", 443))
_attack("tcp-outward", lambda: _socket.create_connection(("1.1.1.1", 53), timeout=5))
_attack("read-secret-env", lambda: _os.environ["{secret}"])
_attack("read-grading-flag", lambda: _os.environ["NBGRADER_EXECUTION"])
print("ATTACK cwd:", _os.getcwd())
del _attack, _read, _write, _course, _me
'''


def _attack_notebook(course, student, port, host_tmp, crash_first=False):
    source, release = nbcells.read(LAB.source_path()), nbcells.read(LAB.release_path())
    nb = fill_release(release, source)  # reference answers: the honest score is full marks
    code = ATTACK.format(course=str(course), student=student, lab=LAB.lab_id, host_tmp=host_tmp,
                         grader_pid=os.getpid(), port=port, secret=SECRET_VARIABLE)
    first = next(c for c in nb.cells if nbcells.is_solution(c) and c.cell_type == "code")
    first.source = code + "\n" + first.source
    if crash_first:  # the attack then runs in the kernel that replaced a dead one
        index = nb.cells.index(first)
        nb.cells.insert(index, nbformat.v4.new_code_cell("import os\nos._exit(1)"))
    return nbformat.writes(nb)


class _Listener:
    """A TCP server on 127.0.0.1 that records whether anyone got through."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self):
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self):
        self._stop.set()
        self._thread.join()
        self.sock.close()


@pytest.fixture(scope="module")
def attacked(tmp_path_factory):
    needs_bwrap()
    course = make_course(tmp_path_factory.mktemp("sandbox"), [LAB])
    with (course / "nbgrader_config.py").open("a") as fh:
        fh.write('\nc.LimitedKernelManager.sandbox = "require"\n')
    host_tmp = f"/tmp/labtools-attack-{uuid.uuid4().hex}.txt"
    listener = _Listener()
    source, release = nbcells.read(LAB.source_path()), nbcells.read(LAB.release_path())
    files = {
        f"honest/{LAB.notebook_name}": nbformat.writes(fill_release(release, source)),
        f"attacker/{LAB.notebook_name}": _attack_notebook(course, "attacker", listener.port, host_tmp),
        f"restarted/{LAB.notebook_name}": _attack_notebook(course, "restarted", listener.port, host_tmp,
                                                           crash_first=True),
        f"untouched/{LAB.notebook_name}": nbformat.writes(release),
    }
    os.environ[SECRET_VARIABLE] = "hunter2"
    try:
        report = grade(LAB.lab_id, write_zip(course.parent / "class.zip", files), course_dir=course,
                       hide_progress=True, log=lambda *a: None)
    finally:
        listener.close()
        del os.environ[SECRET_VARIABLE]
    return course, report, listener, host_tmp


def _attack_lines(course, student) -> dict[str, str]:
    nb = nbformat.read(course / "autograded" / student / LAB.lab_id / LAB.notebook_name, as_version=4)
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    return dict(re.findall(r"^ATTACK ([\w-]+):? (.*)$", text, re.M))


@pytest.mark.parametrize("student", ["attacker", "restarted"])
def test_every_attack_is_denied(attacked, student):
    course, report, _, _ = attacked
    lines = _attack_lines(course, student)
    assert set(DENIED) <= set(lines), f"the attack did not run to the end: {lines}"
    allowed = {name: lines[name] for name in DENIED if not lines[name].startswith("denied")}
    assert not allowed, f"the sandbox let these through: {allowed}"
    assert lines["write-scratch"].startswith("ALLOWED"), "the kernel's own working directory must be writable"
    assert lines["cwd"] == sandbox.SANDBOX_WORK


def test_nothing_leaked_to_the_host(attacked):
    course, _, listener, host_tmp = attacked
    assert listener.connections == 0, "a kernel reached a TCP server of the host"
    assert not os.path.exists(host_tmp), "a kernel wrote into the host's /tmp"
    assert not list(course.glob("pwned*")) and not list(course.glob("autograded/*/*/pwned*"))
    assert not list(course.rglob("scratch.txt")), "the scratch directory is not the notebook's directory"


def test_attackers_are_flagged_for_review_and_the_class_is_graded(attacked):
    """The probes (sockets, the environment, processes) ran in the sandbox and were denied;
    the judge, reading that code, runs no test of those notebooks and reports them for
    review, while the rest of the class is graded as usual."""
    _, report, _, _ = attacked
    honest = report.result("honest")
    assert honest.status == "graded" and honest.auto_score == honest.auto_max > 0
    for name in ("attacker", "restarted"):
        result = report.result(name)
        assert result.status.startswith("graded; ") and "needs review by hand" in result.status, result.status
        assert result.auto_score == 0
    assert "killed the kernel" in report.result("restarted").status
    assert report.result("untouched").auto_score == 0


# --- the command and the settings ------------------------------------------------------


def test_the_command_binds_no_secret_and_hides_the_notebook(tmp_path):
    course = tmp_path / "course"
    notebook_dir = course / "autograded" / "alice" / LAB.lab_id
    notebook_dir.mkdir(parents=True)
    box = tmp_path / "box"
    (box / "conn").mkdir(parents=True)
    kernel = [sys.executable, "-m", "ipykernel_launcher", "-f", str(box / "conn" / "kernel.json")]
    cmd = sandbox.bwrap_command("bwrap", kernel, work_dir=str(box / "work"),
                                connection_file=str(box / "conn" / "kernel.json"), hidden=[str(notebook_dir)])
    assert cmd[-len(kernel):] == kernel and cmd[-len(kernel) - 1] == "--"
    options = cmd[:-len(kernel) - 1]
    for flag in ("--unshare-all", "--die-with-parent", "--proc", "--dev"):
        assert flag in options
    assert "--share-net" not in options and "--new-session" not in options
    sources = [options[i + 1] for i, a in enumerate(options) if a in ("--bind", "--ro-bind", "--ro-bind-try",
                                                                     "--dev-bind", "--bind-try")]
    for src in sources:
        assert not str(course).startswith(src.rstrip("/") + "/") and src != str(course), src
        assert not src.startswith(str(course)), src
        assert src not in ("/", "/home", "/root", "/tmp", "/etc", "/var", "/run"), src
    writable = [options[i + 1] for i, a in enumerate(options) if a in ("--bind", "--bind-try")]
    assert sorted(writable) == sorted([str(box / "work"), str(box / "conn")])
    assert options[options.index("--chdir") + 1] == sandbox.SANDBOX_WORK
    assert options[options.index(str(box / "work")) + 1] == sandbox.SANDBOX_WORK
    assert "/tmp" in [options[i + 1] for i, a in enumerate(options) if a == "--tmpfs"]


def test_a_python_under_tmp_stays_visible(tmp_path, monkeypatch):
    """A fresh clone in /tmp has its .venv there: it must be bound after /tmp's tmpfs."""
    venv = "/tmp/some-clone/.venv"
    monkeypatch.setattr(sandbox, "python_paths", lambda exe: [venv])
    cmd = sandbox.bwrap_command("bwrap", [f"{venv}/bin/python", "-m", "ipykernel_launcher"],
                                work_dir=str(tmp_path / "work"), connection_file=str(tmp_path / "conn" / "k.json"))
    tmpfs_tmp = next(i for i, a in enumerate(cmd) if a == "--tmpfs" and cmd[i + 1] == "/tmp")
    bind_venv = next(i for i, a in enumerate(cmd) if a == "--ro-bind" and cmd[i + 1] == venv)
    assert bind_venv > tmpfs_tmp


def test_a_python_inside_the_course_directory_is_refused(tmp_path, monkeypatch):
    course = tmp_path / "course"
    notebook_dir = course / "autograded" / "alice" / LAB.lab_id
    notebook_dir.mkdir(parents=True)
    monkeypatch.setattr(sandbox, "python_paths", lambda exe: [str(course)])
    with pytest.raises(sandbox.SandboxUnavailable, match="outside the course directory"):
        sandbox.bwrap_command("bwrap", [sys.executable], work_dir=str(tmp_path / "w"),
                              connection_file=str(tmp_path / "c" / "kernel.json"), hidden=[str(notebook_dir)])
    # a virtual environment inside the course directory is fine: only it is bound
    monkeypatch.setattr(sandbox, "python_paths", lambda exe: [str(course / ".venv")])
    cmd = sandbox.bwrap_command("bwrap", [sys.executable], work_dir=str(tmp_path / "w"),
                                connection_file=str(tmp_path / "c" / "kernel.json"), hidden=[str(notebook_dir)])
    assert str(course / ".venv") in cmd


def test_a_labtools_folder_handed_in_does_not_replace_the_launcher(tmp_path):
    """The launcher runs outside the sandbox, in the notebook's directory: a student's
    `labtools/sandbox/bwrap.py` there must not be what it imports."""
    import subprocess

    fake = tmp_path / "labtools"
    (fake / "sandbox").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "sandbox" / "__init__.py").write_text("")
    (fake / "sandbox" / "bwrap.py").write_text("open('HIJACKED', 'w').close()\ndef main(argv):\n    pass\n")
    cmd = [*sandbox.launcher_command(1024, 16), "--", sys.executable, "-c", "print('kernel ran')"]
    out = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "kernel ran", out.stderr
    assert not (tmp_path / "HIJACKED").exists()


def test_the_work_directory_gets_data_files_but_no_notebook(tmp_path):
    notebook_dir = tmp_path / "nb"
    (notebook_dir / "data").mkdir(parents=True)
    (notebook_dir / "lab.ipynb").write_text("{hidden tests}")
    (notebook_dir / "data" / "x.csv").write_text("1,2")
    (notebook_dir / "words.txt").write_text("hi")
    work = tmp_path / "work"
    sandbox.prepare_work_dir(str(notebook_dir), str(work))
    assert sorted(p.relative_to(work).as_posix() for p in work.rglob("*")) == ["data", "data/x.csv", "words.txt"]


@pytest.fixture
def no_bwrap(monkeypatch):
    real_which = shutil.which
    monkeypatch.setattr(sandbox.shutil, "which", lambda name, *a, **k: None if name == "bwrap" else real_which(name, *a, **k))
    monkeypatch.delenv(sandbox.REQUIRE_ENV, raising=False)
    monkeypatch.setattr(sandbox, "_warned", set())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only")
def test_auto_without_bubblewrap_warns_loudly_once(no_bwrap, capsys, caplog):
    with caplog.at_level(logging.WARNING, logger="labtools.sandbox"):
        assert sandbox.resolve_sandbox("auto") is None
        assert sandbox.resolve_sandbox("auto") is None
    err = capsys.readouterr().err
    assert err.count("STUDENT CODE IS NOT SANDBOXED") == 1
    assert "bubblewrap (bwrap) is not installed" in err and "apt install bubblewrap" in err
    assert any("NOT SANDBOXED" in r.getMessage() for r in caplog.records)


def test_require_without_bubblewrap_fails_clearly(no_bwrap, monkeypatch):
    for mode in ("require", "bwrap"):
        with pytest.raises(sandbox.SandboxUnavailable, match="bubblewrap"):
            sandbox.resolve_sandbox(mode)
    monkeypatch.setenv(sandbox.REQUIRE_ENV, "1")
    with pytest.raises(sandbox.SandboxUnavailable, match=sandbox.REQUIRE_ENV):
        sandbox.resolve_sandbox("auto")


def test_a_bubblewrap_that_cannot_sandbox_is_reported(tmp_path, monkeypatch, capsys):
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(sandbox.shutil, "which", lambda name, *a, **k: str(fake))
    monkeypatch.delenv(sandbox.REQUIRE_ENV, raising=False)
    monkeypatch.setattr(sandbox, "_warned", set())
    monkeypatch.setattr(sys, "platform", "linux")
    assert sandbox.resolve_sandbox("auto") is None
    assert "uid map: Permission denied" in capsys.readouterr().err
    with pytest.raises(sandbox.SandboxUnavailable, match="uid map"):
        sandbox.resolve_sandbox("require")


def test_none_is_silent_and_runs_the_kernel_unsandboxed(tmp_path, monkeypatch, capsys):
    from nbclient import NotebookClient

    monkeypatch.setattr(sandbox, "_warned", set())
    monkeypatch.setenv(sandbox.REQUIRE_ENV, "1")  # "none" is an explicit choice: it wins
    assert sandbox.resolve_sandbox("none") is None
    (tmp_path / "secret.ipynb").write_text("{}")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import os; print(sorted(os.listdir('.')))")])
    km = LimitedKernelManager(sandbox="none")
    NotebookClient(nb, km=km, timeout=60, resources={"metadata": {"path": str(tmp_path)}}).execute()
    assert "secret.ipynb" in nb.cells[0].outputs[0]["text"]
    assert "NOT SANDBOXED" not in capsys.readouterr().err
    assert km.transport == "tcp"


@pytest.mark.parametrize("part", ["sandbox", "cgroups"])
def test_both_parts_follow_one_rule_for_auto_require_and_none(part, monkeypatch):
    from labtools.sandbox import bwrap, cgroups, policy

    module = bwrap if part == "sandbox" else cgroups
    ask = lambda mode: policy.required(mode, module.MODES, module.REQUIRE_ENV, part)  # noqa: E731
    for flag, auto in [("", False), ("0", False), ("1", True), ("yes", True)]:
        monkeypatch.setenv(module.REQUIRE_ENV, flag)
        assert ask("auto") is auto and ask(None) is auto and ask("AUTO") is auto
        assert ask("require") is True and ask("none") is None  # 'none' stays off even where CI requires
    with pytest.raises(ValueError, match=f"{part} must be one of"):
        ask("sometimes")


def test_a_bad_setting_is_named():
    with pytest.raises(ValueError, match="sandbox must be one of"):
        sandbox.resolve_sandbox("docker")


def test_grade_refuses_once_before_grading_when_the_sandbox_is_required(no_bwrap, monkeypatch, tmp_path):
    """With workers, each kernel starts in a subprocess whose output nobody sees: the grade
    command itself must stop before grading, with the reason."""
    from labtools.grade.run import GradingError, grade

    from conftest import make_course, write_zip

    lab = get_lab("lab01_attention")
    course = make_course(tmp_path / "course", [lab])
    monkeypatch.setenv(sandbox.REQUIRE_ENV, "1")
    archive = write_zip(tmp_path / "class.zip", {f"s1/{lab.notebook_name}": lab.release_path().read_text()})
    with pytest.raises(GradingError, match="bubblewrap"):
        grade(lab.lab_id, archive, course_dir=course, hide_progress=True, workers=2, log=lambda *a: None)
    assert not (course / "submitted").exists(), "nothing may be graded without the required sandbox"


def test_kernels_get_no_credentials_from_the_grader():
    env = {"PGPASSWORD": "x", "PGHOST": "db", "OPENAI_API_KEY": "k", "HF_TOKEN": "t", "DATABASE_URL": "u",
           "AWS_SECRET_ACCESS_KEY": "a", "GITHUB_TOKEN": "g", "MY_SERVICE_PASSWORD": "p",
           "PATH": "/bin", "LABS_FAST": "1", "TOKENIZERS_PARALLELISM": "false", "MKL_NUM_THREADS": "1",
           "KEYBOARD": "us", "LANG": "C.UTF-8"}
    assert sandbox.without_secrets(env) == {"PATH": "/bin", "LABS_FAST": "1", "TOKENIZERS_PARALLELISM": "false",
                                            "MKL_NUM_THREADS": "1", "KEYBOARD": "us", "LANG": "C.UTF-8"}
