"""course.py, the bootstrap of the two README commands (stdlib only)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from labtools.labs import REPO_ROOT

from conftest import course_module



def test_a_local_cpu_wheel_is_found_through_pip_find_links(tmp_path, monkeypatch):
    tag = "cp%d%d" % sys.version_info[:2]
    (tmp_path / f"torch-2.13.0+cpu-{tag}-{tag}-manylinux_2_28_x86_64.whl").write_bytes(b"")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    assert course_module().local_torch_wheel(sys.executable) == "torch==2.13.0"


def test_no_local_wheel_means_no_pin(tmp_path, monkeypatch):
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    monkeypatch.setenv("PIP_CONFIG_FILE", str(tmp_path / "none.conf"))
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    course = course_module()
    monkeypatch.setattr(course.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, "", ""))
    assert course.local_torch_wheel(sys.executable) is None


def test_an_installed_torch_is_never_reinstalled(monkeypatch):
    """Colab and any machine with torch keep their build: install_torch does nothing."""
    course = course_module()
    calls = []
    monkeypatch.setattr(course, "pip", lambda *a, **k: calls.append(a))
    course.install_torch(sys.executable)  # this interpreter has torch
    assert calls == []


def test_without_a_command_it_explains_itself():
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "course.py")], capture_output=True, text=True)
    assert proc.returncode == 2 and "course.py demo" in proc.stdout and "course.py test" in proc.stdout


@pytest.mark.slow
def test_the_demo_says_what_matters_and_no_library_noise(tmp_path):
    """Issue 28: progress, grade tables and real problems only. nbgrader's gradebook made
    SQLAlchemy print two SAWarning lines per object "not in session", in every worker."""
    proc = subprocess.run([sys.executable, "-m", "labtools", "demo", "lab01_attention", "--out", str(tmp_path / "demo")],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "Grades for lab01_attention" in out and "lovelaceada" in out
    noise = [line for line in out.splitlines() if "Warning" in line or "warnings.warn" in line or "site-packages" in line]
    assert noise == [], noise[:5]
