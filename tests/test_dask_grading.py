"""Grading on Dask distributed with real processes: a `dask scheduler` and `dask worker`s
started by their command lines, a worker killed in the middle of a run, a run
interrupted and started again. Each must give exactly the grades of a plain local run."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook

from labtools import nbcells
from labtools.grade.run import GRADED_MARK, GradingError, grade
from labtools.labs import get_lab
from labtools.build.submissions import fill_release

from conftest import make_course, write_zip

LAB = get_lab("lab01_attention")
BIN = Path(sys.executable).parent


def _class(n_correct: int, n_untouched: int = 1, wrong: int = 1) -> dict[str, str]:
    """An LMS-like folder: reference answers, untouched releases, and answers with a mistake."""
    source, release = nbcells.read(LAB.source_path()), nbcells.read(LAB.release_path())
    files = {f"ok{i}/{LAB.notebook_name}": nbformat.writes(fill_release(release, source)) for i in range(n_correct)}
    files.update({f"blank{i}/{LAB.notebook_name}": nbformat.writes(release) for i in range(n_untouched)})
    mistake = "def softmax(x, dim=-1):\n    import torch\n    return torch.exp(x) / torch.exp(x).sum()\n"
    files.update({f"wrong{i}/{LAB.notebook_name}": nbformat.writes(fill_release(release, source, {"softmax": mistake}))
                  for i in range(wrong)})
    return files


def _scores(report) -> dict:
    return {r.student: (r.auto_score, r.auto_max, r.status, dict(r.cell_scores)) for r in report.results}


def _submissions_in_gradebook(course: Path) -> list[str]:
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        return sorted(s.student.id for s in gb.find_assignment(LAB.lab_id).submissions)


@pytest.fixture(scope="module")
def local_graded(tmp_path_factory):
    """The reference: the class graded on the embedded local cluster of two workers (course, report)."""
    tmp = tmp_path_factory.mktemp("local")
    course = make_course(tmp / "course", [LAB])
    archive = write_zip(tmp / "class.zip", _class(2, 1, 1))
    return course, grade(LAB.lab_id, archive, course_dir=course, hide_progress=True, workers=2, log=lambda *a: None)


@pytest.fixture(scope="module")
def local_run(local_graded):
    return _scores(local_graded[1])


def test_two_local_workers_leave_one_consistent_gradebook(local_graded):
    course, report = local_graded
    scores = {r.student: (r.auto_score, r.auto_max, r.status) for r in report.results}
    top = scores["ok0"][1]
    assert top > 0
    assert scores["ok0"] == scores["ok1"] == (top, top, "graded")
    assert scores["blank0"] == (0.0, top, "graded")
    assert 0 < scores["wrong0"][0] < top and scores["wrong0"][2] == "graded"
    assert _submissions_in_gradebook(course) == ["blank0", "ok0", "ok1", "wrong0"]
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        assert sorted(s.id for s in gb.students) == ["blank0", "ok0", "ok1", "wrong0"]
    assert len(report.csv_path.read_text().splitlines()) == 1 + 4


class _Cluster:
    """`dask scheduler` and `dask worker` processes, as an instructor starts them."""

    def __init__(self, tmp: Path, env: dict | None = None):
        self.tmp = tmp
        self.file = tmp / "scheduler.json"
        self.procs: list[subprocess.Popen] = []
        self.workers: list[subprocess.Popen] = []
        self.scheduler = self._start([str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0",
                                      "--no-dashboard", "--scheduler-file", str(self.file)], "scheduler", env=env)
        deadline = time.monotonic() + 60
        while not self.file.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert self.file.exists(), "the dask scheduler did not start: " + (tmp / "scheduler.log").read_text()[-2000:]
        self.address = json.loads(self.file.read_text())["address"]

    def _start(self, cmd, name, cwd=None, env=None):
        log = open(self.tmp / f"{name}.log", "w")
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(proc)
        return proc

    def add_worker(self, checkout: Path, name: str, env: dict | None = None) -> subprocess.Popen:
        """A worker in its own checkout of the course: it sees the lab there, not the client's folder."""
        env = {**os.environ, **(env or {}), "LABTOOLS_COURSE": str(checkout)}
        proc = self._start([str(BIN / "dask"), "worker", self.address, "--nthreads", "1", "--no-nanny",
                            "--no-dashboard", "--name", name], name, cwd=checkout, env=env)
        self.workers.append(proc)
        return proc

    def wait_for_workers(self, n: int) -> None:
        from distributed import Client

        with Client(self.address, timeout="30s") as client:
            client.wait_for_workers(n, timeout=120)

    def close(self):
        stop_processes(self.procs)


def stop_processes(procs: list[subprocess.Popen]) -> None:
    """End processes started with start_new_session=True, with what they started: the last first."""
    for proc in reversed(procs):
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


@pytest.fixture
def cluster(tmp_path):
    c = _Cluster(tmp_path)
    yield c
    c.close()


def _checkout(tmp: Path, name: str) -> Path:
    """A copy of the course as a worker machine would have it (no shared folder)."""
    return make_course(tmp / name, [LAB])


def test_a_scheduler_and_two_workers_give_the_local_grades(cluster, tmp_path, local_run):
    for i in range(2):
        cluster.add_worker(_checkout(tmp_path, f"worker{i}-checkout"), f"w{i}")
    cluster.wait_for_workers(2)
    course = make_course(tmp_path / "course", [LAB])
    report = grade(LAB.lab_id, write_zip(tmp_path / "class.zip", _class(2, 1, 1)), course_dir=course,
                   scheduler=cluster.address, hide_progress=True, log=lambda *a: None)
    assert _scores(report) == local_run
    assert _submissions_in_gradebook(course) == sorted(local_run)
    # the client alone wrote the course folders; each worker graded in a scratch course of its own
    assert sorted(p.name for p in (course / "autograded").iterdir()) == sorted(local_run)
    for student in local_run:
        if report.result(student).status == "graded":
            assert (course / "feedback" / student / LAB.lab_id / f"{LAB.lab_id}.html").exists()
    for i in range(2):
        assert not (tmp_path / f"worker{i}-checkout" / "autograded").exists()
        assert not (tmp_path / f"worker{i}-checkout" / "gradebook.db").exists()


def test_a_worker_with_another_version_of_the_lab_refuses(cluster, tmp_path):
    checkout = _checkout(tmp_path, "stale-checkout")
    path = checkout / "source" / LAB.lab_id / LAB.notebook_name
    nb = nbcells.read(path)
    nb.cells[0].source += "\n"
    nbformat.write(nb, str(path))
    cluster.add_worker(checkout, "stale")
    cluster.wait_for_workers(1)
    course = make_course(tmp_path / "course", [LAB])
    with pytest.raises(GradingError, match="another version of lab01_attention.*git pull"):
        grade(LAB.lab_id, write_zip(tmp_path / "class.zip", _class(1, 0, 0)), course_dir=course,
              scheduler=cluster.address, hide_progress=True, log=lambda *a: None)


def _shadowing_labtools(folder: Path, how: str) -> dict:
    """An environment whose `labtools` is not the course's: one that cannot be imported (a
    scheduler started outside the course's environment), or the course's code at another commit."""
    package = folder / "labtools"
    if how == "broken":
        package.mkdir(parents=True)
        (package / "__init__.py").write_text("raise ImportError('this is not the course environment')\n")
    else:
        shutil.copytree(Path(__file__).resolve().parents[1] / "labtools", package,
                        ignore=shutil.ignore_patterns("__pycache__"))
        with open(package / "cluster.py", "a") as f:
            f.write("\n# another commit\n")
    return {**os.environ, "PYTHONPATH": str(folder)}


def _refused(tmp_path, cluster, match):
    course = make_course(tmp_path / "course", [LAB])
    with pytest.raises(GradingError, match=match) as refused:
        grade(LAB.lab_id, write_zip(tmp_path / "class.zip", _class(1, 0, 0)), course_dir=course,
              scheduler=cluster.address, hide_progress=True, log=lambda *a: None)
    assert "Nothing was graded" in str(refused.value) and "dask scheduler" in str(refused.value)
    assert not (course / "submitted").exists() and not (course / "autograded").exists()


def test_a_scheduler_without_the_courses_code_is_refused_before_grading(tmp_path):
    cluster = _Cluster(tmp_path, env=_shadowing_labtools(tmp_path / "elsewhere", "broken"))
    try:
        cluster.add_worker(_checkout(tmp_path, "worker-checkout"), "w0")
        cluster.wait_for_workers(1)
        _refused(tmp_path, cluster, "the scheduler: it cannot run the course's code")
    finally:
        cluster.close()


def test_a_worker_on_another_commit_of_labtools_is_refused_before_grading(cluster, tmp_path):
    cluster.add_worker(_checkout(tmp_path, "worker-checkout"), "stale-code",
                       env=_shadowing_labtools(tmp_path / "other-commit", "changed"))
    cluster.wait_for_workers(1)
    _refused(tmp_path, cluster, "worker tcp://.*the course's code \\(labtools\\) differs")


def test_an_unreachable_scheduler_is_reported_before_anything_is_staged(tmp_path):
    course = make_course(tmp_path / "course", [LAB])
    started = time.monotonic()
    with pytest.raises(GradingError, match="cannot reach the Dask scheduler at tcp://127.0.0.1:9.*dask scheduler"):
        grade(LAB.lab_id, write_zip(tmp_path / "class.zip", _class(1, 0, 0)), course_dir=course,
              scheduler="tcp://127.0.0.1:9", hide_progress=True, log=lambda *a: None)
    assert time.monotonic() - started < 60
    assert not (course / "submitted").exists() and not (course / "gradebook.db").exists()


def test_a_worker_killed_mid_run_loses_nothing(cluster, tmp_path, local_run):
    from distributed import Client

    victim = cluster.add_worker(_checkout(tmp_path, "victim"), "victim")
    cluster.add_worker(_checkout(tmp_path, "survivor"), "survivor")
    cluster.wait_for_workers(2)
    course = make_course(tmp_path / "course", [LAB])
    outcome = {}

    def run():
        try:
            outcome["report"] = grade(LAB.lab_id, write_zip(tmp_path / "class.zip", _class(2, 1, 1)),
                                      course_dir=course, scheduler=cluster.address, hide_progress=True,
                                      log=lambda *a: None)
        except BaseException as exc:  # noqa: BLE001 - reported below
            outcome["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    killed_while = None
    with Client(cluster.address, timeout="30s") as client:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and thread.is_alive():
            busy = {client.scheduler_info()["workers"].get(addr, {}).get("name"): tasks
                    for addr, tasks in client.processing().items() if tasks}
            if busy.get("victim"):
                time.sleep(2)  # well inside the submission: its kernel is running
                killed_while = list(busy["victim"])
                victim.kill()
                break
            time.sleep(0.2)
    thread.join(600)
    assert killed_while, "the victim worker never got a submission to grade"
    assert "error" not in outcome, outcome.get("error")
    assert _scores(outcome["report"]) == local_run, "a submission was lost or graded differently"
    assert _submissions_in_gradebook(course) == sorted(local_run), "a submission is missing or counted twice"


def test_an_interrupted_run_resumes_without_grading_twice(tmp_path, local_run):
    course = make_course(tmp_path / "course", [LAB])
    archive = write_zip(tmp_path / "class.zip", _class(2, 1, 1))
    cmd = [sys.executable, "-m", "labtools", "grade", LAB.lab_id, str(archive), "--course-dir", str(course),
           "--workers", "1"]
    first = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 300
    marks = []
    while time.monotonic() < deadline and first.poll() is None:
        marks = list((course / "autograded").glob(f"*/{LAB.lab_id}/{GRADED_MARK}"))
        if marks:
            break
        time.sleep(0.2)
    assert marks and first.poll() is None, "the first run finished before it could be interrupted"
    first.send_signal(signal.SIGINT)  # Ctrl-C
    out, _ = first.communicate(timeout=120)
    assert "run the same command again" in out, out[-2000:]
    done = {p.parent.parent.name: p.stat().st_mtime_ns for p in
            (course / "autograded").glob(f"*/{LAB.lab_id}/{GRADED_MARK}")}
    assert 0 < len(done) < len(local_run)

    second = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stdout + second.stderr
    assert f"autograding {len(local_run) - len(done)} submission(s) ({len(done)} graded before" in second.stdout
    for student, mtime in done.items():
        assert (course / "autograded" / student / LAB.lab_id / GRADED_MARK).stat().st_mtime_ns == mtime, \
            f"{student} was graded again"
    assert _submissions_in_gradebook(course) == sorted(local_run)
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        got = {s: gb.find_submission(LAB.lab_id, s).score for s in local_run}
    assert got == {s: v[0] for s, v in local_run.items()}

    # --regrade takes every submission again: the count it announces says so (then Ctrl-C:
    # grading them all again would only repeat the first run)
    third = subprocess.Popen(cmd + ["--regrade"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    announced = next((line for line in third.stdout if "autograding" in line), "")
    third.send_signal(signal.SIGINT)
    rest, _ = third.communicate(timeout=120)
    assert announced.endswith(f"autograding {len(local_run)} submission(s)\n"), announced + rest[-2000:]
