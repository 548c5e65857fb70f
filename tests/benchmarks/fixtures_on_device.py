"""Every grader fixture, the pending ones included, scored on the lab's own device.

    python tests/benchmarks/fixtures_on_device.py [--labs lab05_variants ...] [--out results.json]

The CI machine has no GPU, so a test that catches a tensor left on the CPU only fails
where the lab picks CUDA. Run this on a GPU machine (it needs torch, transformers,
nbformat and the lab's other packages, not nbgrader): it scores each fixture of
tests/fixtures/<lab>/ and tests/fixtures/pending/<lab>/ (and the demo class's answers) as
tests/test_graders.py does,
one process per lab, and prints and writes where a fixture's result differs from its
name (a correct answer that lost points, a wrong answer at full marks). Not a test.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
FIXTURES = REPO / "tests" / "fixtures"


def _fixtures(lab_id: str) -> list[tuple[str, str, str, bool]]:
    """(exercise, name, answer, pending) for the lab's fixtures, pending ones, and the demo
    class's answers (labtools/demo_answers: correct in another style, or a common mistake)."""
    found = [(path.parent.name, path.stem, path.read_text(), "pending" in path.parts)
             for folder in (FIXTURES / lab_id, FIXTURES / "pending" / lab_id) for path in sorted(folder.glob("*/*.py"))]
    demo = REPO / "labtools" / "demo_answers" / f"{lab_id}.json"
    if demo.exists():
        answers = json.loads(demo.read_text())
        found += [(exercise, f"{kind}_demo_answer", text, False)
                  for kind in ("correct", "wrong") for exercise, text in sorted(answers.get(kind, {}).items())]
    return found


def score_lab(job: tuple[str, int]) -> list[dict]:
    """Score a lab's fixtures from the start-th on, stopping after one that broke CUDA: a
    device-side assert leaves the process's CUDA context unusable, so the rest need a new one."""
    lab_id, start_at = job
    import torch

    from labtools.judge.harness import run_exercise, score

    torch.set_num_threads(2)
    source = REPO / "source" / lab_id / f"{lab_id}.ipynb"
    rows = []
    for exercise, name, answer, pending in _fixtures(lab_id)[start_at:]:
        wrong = name.startswith("wrong_")
        start = time.perf_counter()
        try:
            results = run_exercise(source, exercise, answer,
                                   stop_when=(lambda r: not r.passed) if wrong else None)
            earned, possible = score(results)
            errors = [f"{r.grade_id}: {r.error}" for r in results if not r.passed]
        except Exception as exc:  # noqa: BLE001 - report it and go on with the next fixture
            earned, possible, errors = 0.0, 1.0, [f"harness: {type(exc).__name__}: {exc}"]
        full = earned == possible
        rows.append({"lab": lab_id, "exercise": exercise, "fixture": name,
                     "pending": pending, "earned": earned, "possible": possible,
                     "as_expected": full != wrong, "errors": errors[:2],
                     "seconds": round(time.perf_counter() - start, 2)})
        if "CUDA error" in str(errors):
            break
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--labs", nargs="*", default=sorted(p.name for p in (REPO / "source").iterdir() if p.is_dir()))
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    import torch

    print(f"torch {torch.__version__}, CUDA available: {torch.cuda.is_available()}"
          + (f" ({torch.cuda.get_device_name()})" if torch.cuda.is_available() else ""), flush=True)
    rows: list[dict] = []
    todo = {lab: 0 for lab in args.labs}
    while todo:
        # a new pool each round: a process whose CUDA context broke is not used again
        with multiprocessing.get_context("spawn").Pool(len(todo)) as pool:
            done = pool.map(score_lab, list(todo.items()))
        for (lab, start_at), lab_rows in zip(list(todo.items()), done):
            rows += lab_rows
            todo[lab] = start_at + len(lab_rows)
            if todo[lab] >= len(_fixtures(lab)):
                del todo[lab]
    for lab in args.labs:
        mine = [r for r in rows if r["lab"] == lab]
        print(f"{lab}: {sum(r['as_expected'] for r in mine)}/{len(mine)} as their names say, "
              f"{sum(r['seconds'] for r in mine):.0f} s", flush=True)
    for r in rows:
        if not r["as_expected"] or r["pending"]:
            tag = "AS NAMED" if r["as_expected"] else "NOT AS NAMED"
            print(f"  {tag}{' (pending)' if r['pending'] else ''}: {r['lab']}/{r['exercise']}/{r['fixture']} "
                  f"{r['earned']:g}/{r['possible']:g} {r['errors'][:1]}")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
