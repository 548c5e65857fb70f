"""What each wrong fixture is told: the first message a student reads, and whether it names
the mistake.

    python tests/benchmarks/message_audit.py [--labs lab01_attention ...] [--exercise NAME]
                                             [--show all|unnamed] [--out audit.json]

Scores every wrong fixture of tests/fixtures/<lab>/ as tests/test_graders.py does and prints,
per fixture, its first comment line, its `# says:` pattern (the mistake's name) and the first
message of a test that failed for what the answer computes. A fixture "names" its mistake when
it has a `# says:` line and the message matches it (test_graders checks every such line); the
summary gives the share per lab. Fixtures that fail only on a GPU (`*_on_cpu`) are skipped on a
CPU. Not a test: a report for whoever improves the messages.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from labtools.judge.harness import run_exercise  # noqa: E402
from labtools.labs import built_labs  # noqa: E402
from test_graders import FIXTURES, _caught, first_message, says  # noqa: E402


def audit(lab, exercise: str | None = None) -> list[dict]:
    rows = []
    for path in sorted((FIXTURES / lab.lab_id).glob("*/wrong_*.py")):
        if exercise and path.parent.name != exercise:
            continue
        if path.stem.endswith("_on_cpu") and not torch.cuda.is_available():
            continue
        name, text = path.parent.name, path.read_text()
        results = run_exercise(lab.source_path(), name, text,
                               stop_when=lambda r, name=name: not r.passed and _caught(r.error, name))
        message = first_message(results, name)
        pattern = says(text)
        rows.append({
            "fixture": f"{name}/{path.stem}",
            "mistake": next((line for line in text.splitlines() if line.startswith("#")), ""),
            "says": pattern.pattern if pattern else None,
            "message": message,
            "named": bool(pattern and pattern.search(message)),
        })
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--labs", nargs="*", help="lab ids (default: every built lab)")
    parser.add_argument("--exercise", help="only this exercise's fixtures")
    parser.add_argument("--show", choices=("all", "unnamed"), default="unnamed")
    parser.add_argument("--out", type=Path, help="write every row as JSON")
    args = parser.parse_args()
    labs = [lab for lab in built_labs() if not args.labs or lab.lab_id in args.labs]
    everything, summary = {}, []
    for lab in labs:
        rows = audit(lab, args.exercise)
        everything[lab.lab_id] = rows
        for row in rows:
            if args.show == "all" or not row["named"]:
                print(f"## {lab.lab_id}/{row['fixture']}  [{'named' if row['named'] else 'NOT named'}]")
                print(f"   {row['mistake']}")
                print(f"   says: {row['says']}")
                print(f"   -> {row['message']}")
        named = sum(row["named"] for row in rows)
        summary.append(f"{lab.lab_id}: {named} of {len(rows)} wrong fixtures named ({named / max(len(rows), 1):.0%})")
    print("\n".join(summary))
    if args.out:
        args.out.write_text(json.dumps(everything, indent=1))


if __name__ == "__main__":
    main()
