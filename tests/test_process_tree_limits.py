"""Limits for a grading kernel's whole process tree (labtools/sandbox/cgroups.py).

A notebook whose cell starts two children that together, not each, use more memory
than a kernel may have: graded next to an honest notebook, the kernel of the first
is ended and the cell says why, its other exercises are still scored, and the honest
notebook, graded at the same time, keeps full marks.
"""

from __future__ import annotations

import os
import subprocess
import sys

import nbformat
import pytest

from labtools import nbcells
from labtools.sandbox import cgroups
from labtools.grade.run import grade
from labtools.labs import get_lab
from labtools.build.submissions import fill_release

from conftest import make_course, write_zip

LAB = get_lab("lab01_attention")
LIMIT_MB = 3072  # a kernel importing torch needs about 2 GiB of address space
CHILD_MB = 1800  # each child alone is well under the limit, and under the per-process limit too

TWO_CHILDREN = f'''
import subprocess, sys
children = [subprocess.Popen([sys.executable, "-c",
            "import time; block = b'x' * ({CHILD_MB} << 20); time.sleep(3)"]) for _ in range(2)]
for child in children:
    child.wait()
'''


def _available() -> str | None:
    try:
        cgroups.KernelGroup.create(64, 16, 0).remove()
        return None
    except cgroups.GroupUnavailable as exc:
        return str(exc)


needs_cgroups = pytest.mark.skipif(
    _available() is not None and os.environ.get(cgroups.REQUIRE_ENV) != "1",
    reason=f"no control group can be made here: {_available()}")


@needs_cgroups
def test_children_together_over_the_limit_end_that_kernel_only(tmp_path):
    source, release = nbcells.read(LAB.source_path()), nbcells.read(LAB.release_path())
    reference = fill_release(release, source)
    hog = fill_release(release, source)
    cell = next(c for c in hog.cells if nbcells.grade_id(c) == "create_causal_mask")
    cell.source += "\n" + TWO_CHILDREN
    course = make_course(tmp_path / "course", [LAB])
    with open(course / "nbgrader_config.py", "a") as config:
        config.write(f"\nc.LimitedKernelManager.memory_mb = {LIMIT_MB}\nc.LimitedKernelManager.cgroup = 'require'\n"
                     # starting processes is flagged for review by the judge (tests/test_tampering.py); here
                     # the tests run in the kernel so that the limit's effect on the rest is what is measured
                     "c.GradingExecute.use_judge = False\n")
    archive = write_zip(tmp_path / "class.zip", {f"{s}/{LAB.notebook_name}": nbformat.writes(nb)
                                                 for s, nb in (("honest", reference), ("forker", hog))})
    report = grade(LAB.lab_id, archive, course_dir=course, hide_progress=True, workers=2, log=lambda *a: None)
    results = {r.student: r for r in report.results}

    honest, forker = results["honest"], results["forker"]
    assert honest.status == "graded" and honest.auto_score == honest.auto_max > 0, honest
    assert "ran out of memory" in forker.status, forker.status
    lost = {gid for gid, (got, top) in forker.cell_scores.items() if got < top}
    assert lost and all("create_causal_mask" in gid for gid in lost), forker.cell_scores
    nb = nbformat.read(str(course / "autograded" / "forker" / LAB.lab_id / LAB.notebook_name), as_version=4)
    said = [o for c in nb.cells if nbcells.grade_id(c) == "create_causal_mask" for o in c.outputs
            if o.get("output_type") == "error"]
    assert said and f"({LIMIT_MB} MiB)" in said[0]["evalue"], said


@needs_cgroups
def test_a_group_counts_every_process_and_ends_them_all():
    group = cgroups.KernelGroup.create(256, 64, 1.0)
    try:
        launcher = [sys.executable, "-c", "import sys; sys.path[0] = sys.argv.pop(1); "
                    "from labtools.sandbox.bwrap import main; main(sys.argv[1:])", os.getcwd(),
                    *[f"--cgroup={p}" for p in group.paths], "--"]
        # two children of 160 MiB each: together over 256 MiB
        parent = subprocess.Popen([*launcher, sys.executable, "-c", (
            "import subprocess, sys\n"
            "cs = [subprocess.Popen([sys.executable, '-c', \"import time; b = b'x' * (160 << 20); "
            "time.sleep(3)\"]) for _ in range(2)]\n"
            "[c.wait() for c in cs]\n")])
        parent.wait(timeout=60)
        assert group.new_out_of_memory(), "the group did not run out of memory"
        assert not group.new_out_of_memory(), "the same event must be reported once"
        group.kill()
        assert group.pids() == []
    finally:
        group.remove()


def test_without_control_groups_the_reason_and_the_way_out_are_said(monkeypatch, tmp_path):
    monkeypatch.setattr(cgroups, "ROOT", tmp_path)  # an empty /sys/fs/cgroup
    with pytest.raises(cgroups.GroupUnavailable) as raised:
        cgroups.resolve("require")
    text = str(raised.value)
    assert "cgroup v2" in text and "cgroup v1" in text and "c.LimitedKernelManager.cgroup = 'none'" in text
    monkeypatch.delenv(cgroups.REQUIRE_ENV, raising=False)
    assert cgroups.resolve("auto") is False  # warns, grades on
    assert cgroups.resolve("none") is False
    with pytest.raises(ValueError):
        cgroups.resolve("sometimes")


def test_the_control_group_probe_runs_once_per_process(monkeypatch):
    """A probe group is made and removed once, not once per notebook's kernel manager."""
    made = []
    real = cgroups.KernelGroup.create
    monkeypatch.setattr(cgroups.KernelGroup, "create", staticmethod(lambda *a: made.append(a) or real(*a)))
    cgroups._probe.cache_clear()
    first = [cgroups.resolve("auto") for _ in range(3)]
    assert len(made) <= 1 and len(set(first)) == 1
