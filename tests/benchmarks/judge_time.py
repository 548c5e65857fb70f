"""Grading time per submission: the judge against test cells run in the kernel (plain nbgrader).

    .venv/bin/python tests/benchmarks/judge_time.py [--labs lab01_attention lab02_multihead] [--submissions 9] [--rounds 3]

For each judged lab, the same class (reference answers, the untouched release and a
wrong answer, in turn) is autograded twice by nbgrader's own `nbgrader autograde`, one
student after another, with the course's nbgrader_config.py (sandbox, metadata
restore, sanitizing): once as configured (tests decided by the judge) and once with
`--GradingExecute.use_judge=False` (tests run in the kernel, unguarded, as
before the judge). Prints seconds per submission for each and the growth. Not a
test: run it on a quiet machine and quote the figures.
"""

from __future__ import annotations

import argparse
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


def _class(lab, n: int) -> dict[str, str]:
    source, release = nbcells.read(lab.source_path()), nbcells.read(lab.release_path())
    fixtures = sorted((TESTS / "fixtures" / lab.lab_id).glob("*/wrong_*.py"))
    wrong = fill_release(release, source, {fixtures[0].parent.name: fixtures[0].read_text()})
    kinds = [fill_release(release, source), release, wrong]
    return {f"s{i:03d}": nbformat.writes(kinds[i % len(kinds)]) for i in range(n)}


def _seconds(course: Path, lab, extra: list[str]) -> float:
    from labtools.grade.run import RELEASE_DIR as release

    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "nbgrader", "autograde", lab.lab_id, "--force", "--create",
                    "--log-level=ERROR", f"--CourseDirectory.release_directory={release}", *extra],
                   cwd=course, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--labs", nargs="+", default=["lab01_attention", "lab02_multihead"])
    parser.add_argument("--submissions", type=int, default=9)
    parser.add_argument("--rounds", type=int, default=1,
                        help="time each mode this many times, alternating, and keep each mode's fastest "
                             "(on a shared machine, load that comes and goes then hits both alike)")
    args = parser.parse_args()
    for lab_id in args.labs:
        lab = get_lab(lab_id)
        files = _class(lab, args.submissions)
        with tempfile.TemporaryDirectory() as tmp:
            course = make_course(Path(tmp) / "course", [lab])
            first = dict(list(files.items())[:1])
            grade(lab.lab_id, write_zip(Path(tmp) / "one.zip", {f"{s}/{lab.notebook_name}": t for s, t in first.items()}),
                  course_dir=course, hide_progress=True, log=lambda *a: None)  # the assignment, once, not timed
            for student, text in files.items():
                folder = course / "submitted" / student / lab.lab_id
                folder.mkdir(parents=True, exist_ok=True)
                (folder / lab.notebook_name).write_text(text)
            judged = guarded = float("inf")
            for _ in range(args.rounds):
                judged = min(judged, _seconds(course, lab, []))
                guarded = min(guarded, _seconds(course, lab, ["--GradingExecute.use_judge=False"]))
        n = args.submissions
        print(f"{lab_id}: {n} submissions, one after another (fastest of {args.rounds} round(s))")
        print(f"  judge:             {judged / n:6.2f} s per submission")
        print(f"  in the kernel:     {guarded / n:6.2f} s per submission")
        print(f"  growth:            {100 * (judged / guarded - 1):+6.1f} %")


if __name__ == "__main__":
    main()
