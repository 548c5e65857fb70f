"""Submissions per minute: sequential autograding against `grade` on a local Dask cluster.

    .venv/bin/python tests/benchmarks/parallel_grading.py [--submissions 40] [--workers 2]

Both runs grade the same class of lab01 submissions (reference answers, the untouched
release and a few common mistakes, in turn) into fresh course directories. The
sequential run is nbgrader's own `nbgrader autograde <lab> --force` over the whole
class (one process, one student after another, with the course's nbgrader_config.py:
sandbox and judge included) with a fresh kernel for every student, as nbgrader starts
them (`--LimitedKernelManager.zygote=none`); `--sequential-zygote` also times it with the
course's pre-imported kernels. The parallel one is `labtools grade --workers N` (a local
Dask cluster of N worker processes, each with its zygote), which also collects the zip and
writes feedback, so its figure is the whole job; its autograde stage alone is given too,
and where a submission's time goes on the workers (kernel start, setup cell, the
notebook's own cells, the judged tests, nbgrader's own work, feedback). CPU: the whole
machine's busy time during each run (/proc/stat: every process, the client and Dask's
scheduler included) per submission.
Not a test: run it by hand on a quiet machine and quote both figures and the ratio.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))

from conftest import make_course, write_zip  # noqa: E402

from labtools import nbcells  # noqa: E402
from labtools.grade.run import grade  # noqa: E402
from labtools.labs import get_lab  # noqa: E402
from labtools.build.submissions import fill_release  # noqa: E402
from labtools.sandbox import zygote  # noqa: E402

LAB = get_lab("lab01_attention")


def _class(n: int) -> dict[str, str]:
    source, release = nbcells.read(LAB.source_path()), nbcells.read(LAB.release_path())
    wrong = (TESTS / "fixtures" / LAB.lab_id / "softmax" / "wrong_global_max.py").read_text()
    kinds = [fill_release(release, source), release, fill_release(release, source, {"softmax": wrong})]
    return {f"s{i:03d}/{LAB.notebook_name}": nbformat.writes(kinds[i % len(kinds)]) for i in range(n)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submissions", type=int, default=40)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--sequential-zygote", action="store_true",
                        help="also time sequential autograde with the pre-imported kernels")
    args = parser.parse_args()
    files = _class(args.submissions)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        # Sequential: collect once (not timed), then nbgrader autograde over everyone.
        seq = make_course(tmp / "sequential", [LAB])
        grade(LAB.lab_id, write_zip(tmp / "one.zip", dict(list(files.items())[:1])), course_dir=seq,
              hide_progress=True, log=lambda *a: None)
        for name, text in files.items():
            student = name.split("/")[0]
            folder = seq / "submitted" / student / LAB.lab_id
            folder.mkdir(parents=True, exist_ok=True)
            (folder / LAB.notebook_name).write_text(text)
        zygote.shutdown()  # the untimed run's zygote: not left running beside the timed ones

        def autograde(*extra: str) -> tuple[float, float]:
            start, busy = time.perf_counter(), _busy_seconds()
            subprocess.run([sys.executable, "-m", "nbgrader", "autograde", LAB.lab_id, "--force", "--create",
                            "--log-level=ERROR", f"--CourseDirectory.release_directory={_release_of(seq)}",
                            *extra], cwd=seq, check=True, capture_output=True)
            return time.perf_counter() - start, _busy_seconds() - busy

        sequential, sequential_cpu = autograde("--LimitedKernelManager.zygote=none")
        forked = autograde() if args.sequential_zygote else None
        from nbgrader.api import Gradebook

        with Gradebook(f"sqlite:///{seq / 'gradebook.db'}") as gb:
            sequential_graded = sum(s.score is not None for s in gb.find_assignment(LAB.lab_id).submissions)

        par = make_course(tmp / "parallel", [LAB])
        stages: list[tuple[float, str]] = []
        start, busy = time.perf_counter(), _busy_seconds()
        report = grade(LAB.lab_id, write_zip(tmp / "class.zip", files), course_dir=par, hide_progress=True,
                       workers=args.workers, log=lambda msg: stages.append((time.perf_counter(), str(msg))))
        parallel, parallel_cpu = time.perf_counter() - start, _busy_seconds() - busy
        graded = sum(r.status.startswith("graded") for r in report.results)
    n = args.submissions
    print(f"{n} lab01 submissions (graded: {sequential_graded} sequentially, {graded} in parallel)")
    print(f"sequential nbgrader autograde: {sequential:7.1f} s  {60 * n / sequential:5.1f} submissions/min  "
          f"CPU {sequential_cpu / n:5.2f} s a submission (fresh kernels)")
    if forked is not None:
        print(f"  the same, pre-imported kernels: {forked[0]:7.1f} s  CPU {forked[1] / n:5.2f} s a submission")
    print(f"grade --workers {args.workers}:          {parallel:7.1f} s  {60 * n / parallel:5.1f} submissions/min  "
          f"CPU {parallel_cpu / n:5.2f} s a submission (whole job)")
    print(f"ratio: {sequential / parallel:.2f}x")
    print("the parallel run's stages:")
    ends = [t for t, _ in stages[1:]] + [start + parallel]
    for (t, msg), end in zip(stages, ends):
        print(f"  {end - t:6.1f} s  {msg.splitlines()[0][:70]}")
        if msg.startswith("[3/5]"):
            print(f"  autograde stage against sequential autograde: {sequential / (end - t):.2f}x")
    per = {k: v / max(graded, 1) for k, v in report.seconds.items()}
    inside = sum(per.get(k, 0.0) for k in ("kernel start", "setup cell", "notebook cells", "test cells"))
    print("one submission on a worker, on average:")
    for phase in ("kernel start", "setup cell", "notebook cells", "test cells"):
        print(f"  {per.get(phase, 0.0):6.2f} s  {phase}")
    print(f"  {per.get('autograde', 0.0) - inside:6.2f} s  nbgrader's own work (sanitize, gradebook, files)")
    print(f"  {per.get('feedback', 0.0):6.2f} s  feedback")


def _busy_seconds() -> float:
    """CPU seconds the whole machine has spent busy (not idle, not waiting for I/O) so far."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    guest = sum(fields[8:10]) if len(fields) > 9 else 0  # counted in user time already
    return (sum(fields) - idle - guest) / os.sysconf("SC_CLK_TCK")


def _release_of(course: Path) -> str:
    """The release folder the grade command generated."""
    from labtools.grade.run import RELEASE_DIR

    return RELEASE_DIR


if __name__ == "__main__":
    main()
