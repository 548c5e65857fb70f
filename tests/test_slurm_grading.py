"""Grading through Slurm, for real: a single-node Slurm started here (munged, slurmctld
and slurmd with a generated configuration in a temporary folder), grading workers
submitted as Slurm jobs by `python -m labtools.grade.slurm_workers` (dask-jobqueue), exactly
as the README tells an instructor, and a class graded through them with
`--scheduler`. The grades must equal those of a plain local run.

Skipped only where Slurm is not installed or not run by root (slurmd starts jobs as
their user); LABS_REQUIRE_SLURM=1 (set by CI) turns that into a failure."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from labtools.grade.run import grade

from conftest import make_course, write_zip
from test_dask_grading import LAB, _class, _scores, _submissions_in_gradebook, stop_processes

PROGRAMS = ("mungekey", "munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scancel")
SEARCH_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])


def _unavailable() -> str | None:
    missing = [p for p in PROGRAMS if not shutil.which(p, path=SEARCH_PATH)]
    if missing:
        return f"Slurm is not installed (no {', '.join(missing)}): apt-get install slurm-wlm munge"
    if os.geteuid() != 0:
        return "slurmd must run as root to start jobs: run the Slurm test as root"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Slurm:
    """munged, slurmctld and slurmd for one node (this machine, with its real CPUs and memory)."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.procs: list[subprocess.Popen] = []
        self.conf = tmp / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf), "PATH": SEARCH_PATH}
        self.node: str | None = None

    def start(self) -> None:
        tmp = self.tmp
        for sub in ("state", "spool", "log"):
            (tmp / sub).mkdir()
        key, sock = tmp / "munge.key", tmp / "munge.socket"
        subprocess.run([self._bin("mungekey"), "--create", f"--keyfile={key}"], check=True, capture_output=True)
        self._start("munged", "--foreground", "--force", f"--key-file={key}", f"--socket={sock}",
                    f"--pid-file={tmp / 'munged.pid'}", f"--log-file={tmp / 'log' / 'munged.log'}",
                    f"--seed-file={tmp / 'munged.seed'}")
        # what slurmd sees of this machine: "NodeName=vm CPUs=2 ... RealMemory=24105", the node as configured
        node = next(line for line in subprocess.run([self._bin("slurmd"), "-C"], capture_output=True, text=True,
                                                    check=True).stdout.splitlines() if line.startswith("NodeName="))
        self.node = node.split()[0].partition("=")[2]
        self.memory_mb = int(re.search(r"\bRealMemory=(\d+)", node).group(1))
        self.conf.write_text("\n".join([
            "ClusterName=labs",
            f"SlurmctldHost={self.node}(127.0.0.1)",
            "SlurmUser=root", "SlurmdUser=root",
            f"SlurmctldPort={_free_port()}", f"SlurmdPort={_free_port()}",
            "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={sock}",
            f"StateSaveLocation={tmp / 'state'}", f"SlurmdSpoolDir={tmp / 'spool'}",
            f"SlurmctldPidFile={tmp / 'slurmctld.pid'}", f"SlurmdPidFile={tmp / 'slurmd.pid'}",
            f"SlurmctldLogFile={tmp / 'log' / 'slurmctld.log'}", f"SlurmdLogFile={tmp / 'log' / 'slurmd.log'}",
            # no cgroups: a container or a CI machine need not delegate them
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core_Memory",
            "MpiDefault=none", "ReturnToService=2",
            f"{node} NodeAddr=127.0.0.1 State=UNKNOWN",
            "PartitionName=grading Nodes=ALL Default=YES MaxTime=INFINITE State=UP", ""]))
        self._start("slurmctld", "-D", "-i", "-f", str(self.conf))
        self._start("slurmd", "-D", "-f", str(self.conf), "-N", self.node)
        deadline = time.monotonic() + 60
        while self.run("sinfo", "-h", "-o", "%T").stdout.strip() != "idle":
            assert time.monotonic() < deadline, "the Slurm node did not come up:\n" + self.logs()
            time.sleep(0.5)

    def _bin(self, name: str) -> str:
        return shutil.which(name, path=SEARCH_PATH)

    def _start(self, name: str, *args: str) -> None:
        with open(self.tmp / "log" / f"{name}.out", "w") as log:
            self.procs.append(subprocess.Popen([self._bin(name), *args], stdout=log, stderr=subprocess.STDOUT,
                                               env=self.env, start_new_session=True))

    def run(self, *cmd: str) -> subprocess.CompletedProcess:
        return subprocess.run([self._bin(cmd[0]), *cmd[1:]], capture_output=True, text=True, env=self.env,
                              timeout=60)

    def jobs(self) -> list[str]:
        """The queue: "JOBID NAME STATE" per job."""
        return self.run("squeue", "-h", "-o", "%i %j %T").stdout.splitlines()

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-1500:]}" for p in sorted((self.tmp / "log").iterdir()))

    def close(self) -> None:
        if self.procs and self.node:  # the daemons were started: end the jobs before them
            self.run("scancel", "--full", f"--nodelist={self.node}")
            deadline = time.monotonic() + 30
            while self.jobs() and time.monotonic() < deadline:
                time.sleep(0.5)
        stop_processes(self.procs)


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    reason = _unavailable()
    if reason and os.environ.get("LABS_REQUIRE_SLURM") == "1":
        pytest.fail(f"{reason} (LABS_REQUIRE_SLURM=1 asks for this test to run)")
    if reason:
        pytest.skip(reason)
    cluster = _Slurm(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(scope="module")
def small_class(tmp_path_factory) -> tuple[Path, dict]:
    """Two submissions (right, one mistake) and their grades on the embedded local cluster. One worker
    process here and in Slurm: a worker's start (imports, its scratch course) costs as much as a submission."""
    tmp = tmp_path_factory.mktemp("local")
    archive = write_zip(tmp / "class.zip", _class(1, 0, 1))
    report = grade(LAB.lab_id, archive, course_dir=make_course(tmp / "course", [LAB]), hide_progress=True,
                   workers=1, log=lambda *a: None)
    return archive, _scores(report)


def _workers(slurm: _Slurm, checkout: Path, *args: str) -> tuple[subprocess.Popen, Path]:
    """`.venv/bin/python -m labtools.grade.slurm_workers ...`, run in a checkout of the course."""
    out = checkout / "slurm_workers.out"
    with open(out, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "labtools.grade.slurm_workers", "--port", "0", *args],
                                cwd=checkout, env=slurm.env, stdout=log, stderr=subprocess.STDOUT)
    return proc, out


def test_slurm_jobs_grade_a_class_like_the_local_cluster(slurm, tmp_path, small_class):
    from distributed import Client

    checkout = make_course(tmp_path / "checkout", [LAB])
    launcher, out = _workers(slurm, checkout, "--jobs", "1", "--cores", "1",
                             "--memory", f"{slurm.memory_mb // 2}MB", "--walltime", "00:20:00")
    try:
        deadline = time.monotonic() + 120
        while not (found := re.search(r"Dask scheduler: (tcp://\S+)", out.read_text())):
            assert launcher.poll() is None and time.monotonic() < deadline, out.read_text() + slurm.logs()
            time.sleep(0.2)
        address = found.group(1)
        with Client(address, timeout="30s") as client:
            client.wait_for_workers(1, timeout=120)
            in_jobs = set(client.run(lambda: os.environ.get("SLURM_JOB_ID")).values())
        running = [line.split() for line in slurm.jobs()]
        assert [(name, state) for _, name, state in running] == [("dask-worker", "RUNNING")], running
        assert in_jobs == {running[0][0]}, "the workers do not run inside the Slurm job"

        archive, local_grades = small_class
        course = make_course(tmp_path / "course", [LAB])
        report = grade(LAB.lab_id, archive, course_dir=course,
                       scheduler=address, hide_progress=True, log=lambda *a: None)
        assert _scores(report) == local_grades
        assert _submissions_in_gradebook(course) == sorted(local_grades)
        assert not (checkout / "autograded").exists() and not (checkout / "gradebook.db").exists()

        launcher.send_signal(signal.SIGINT)  # Ctrl-C: the jobs are cancelled
        assert launcher.wait(60) == 0, out.read_text()
        assert "cancelling the jobs" in out.read_text()
        deadline = time.monotonic() + 30
        while slurm.jobs() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert slurm.jobs() == [], "Ctrl-C left the workers' job in the queue"
    finally:
        if launcher.poll() is None:
            launcher.kill()


def test_a_job_slurm_would_refuse_is_reported_before_anything_is_submitted(slurm, tmp_path):
    checkout = make_course(tmp_path / "checkout", [LAB])
    launcher, out = _workers(slurm, checkout, "--partition", "no-such-partition")
    try:
        assert launcher.wait(120) == 2, out.read_text()
    finally:
        if launcher.poll() is None:
            launcher.kill()
    text = out.read_text()
    assert "Slurm refuses the workers' job script" in text and "invalid partition" in text.lower(), text
    assert "#SBATCH -p no-such-partition" in text and "Traceback" not in text, text
    assert slurm.jobs() == []
