"""Every lab's demo class graded twice, with fresh kernels and with forks of the zygote:
the same scores, cell by cell, or the differences listed.

    .venv/bin/python tests/benchmarks/demo_scores_forked.py [lab01_attention ...]

Not a test (it grades each demo class twice: about twice the test suite's demo grading);
run it after a change to how grading kernels start, and quote its last line.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))

from conftest import make_course, write_zip  # noqa: E402

from labtools.demo import demo_class  # noqa: E402
from labtools.grade.run import grade  # noqa: E402
from labtools.labs import built_labs, get_lab  # noqa: E402


def _scores(lab, tmp: Path, kernels: str) -> tuple[dict, float]:
    course = make_course(tmp / kernels, [lab])
    with (course / "nbgrader_config.py").open("a") as fh:
        fh.write(f"\nc.LimitedKernelManager.zygote = {'none' if kernels == 'fresh' else 'auto'!r}\n")
    archive = write_zip(tmp / f"{kernels}.zip", demo_class(lab))
    start = time.perf_counter()
    report = grade(lab.lab_id, archive, course_dir=course, hide_progress=True, log=lambda *a: None)
    return ({r.student: (r.status, dict(r.cell_scores)) for r in report.results}, time.perf_counter() - start)


def main() -> None:
    labs = [get_lab(name) for name in sys.argv[1:]] or built_labs()
    differ = 0
    for lab in labs:
        with tempfile.TemporaryDirectory() as tmp:
            fresh, fresh_s = _scores(lab, Path(tmp), "fresh")
            forked, forked_s = _scores(lab, Path(tmp), "forked")
        diffs = {s: (fresh.get(s), forked.get(s)) for s in set(fresh) | set(forked) if fresh.get(s) != forked.get(s)}
        differ += bool(diffs)
        cells = sum(len(c) for _, c in fresh.values())
        print(f"{lab.lab_id}: {len(fresh)} submissions, {cells} graded cells: "
              f"{'the same' if not diffs else f'{len(diffs)} differ'} (fresh {fresh_s:.0f} s, forked {forked_s:.0f} s)")
        for student, (a, b) in sorted(diffs.items()):
            print(f"  {student}: fresh {a}\n  {' ' * len(student)}  forked {b}")
    print(f"{len(labs) - differ} of {len(labs)} labs' demo classes grade to the same scores with forked kernels")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
