"""Grading workers on a Slurm cluster, submitted through dask-jobqueue.

Run it on a login node, in the course checkout (with its .venv) that the compute
nodes see at the same path:

    .venv/bin/python -m labtools.grade.slurm_workers --jobs 4 --cores 4

It checks the job script with `sbatch --test-only`, submits the jobs, prints the
address of the Dask scheduler it runs, and keeps the workers until Ctrl-C (which
cancels the jobs). Grade from another shell with that address:

    .venv/bin/python -m labtools grade LAB submissions.zip --scheduler tcp://HOST:8786

Nothing here is needed to grade: any Dask cluster's scheduler address will do. This
only fills in what a grading worker needs from its job (the course checkout as its
directory, the course's Python, one submission per worker process).
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

LOG_DIR = Path(".grading", "slurm")  # in the course's scratch folder (grading.SCRATCH, ignored by git)
KERNEL_GIB = 7  # a grading kernel may use 6 GiB (LimitedKernelManager.memory_mb), its worker about 1 more


class SlurmError(RuntimeError):
    """Slurm cannot run the workers' jobs here; the message says what to do."""


@dataclass(frozen=True)
class WorkerJobs:
    """What to ask Slurm for: `jobs` jobs of `cores` worker processes each."""

    course: Path
    jobs: int = 1
    cores: int = 4
    memory: str | None = None  # per job, in Dask's notation ("28GB"); None: KERNEL_GIB per core
    walltime: str = "02:00:00"
    partition: str | None = None
    account: str | None = None
    port: int = 8786  # the scheduler's; 0 picks a free one
    interface: str | None = None  # the login node's network interface the compute nodes reach
    sbatch_options: tuple[str, ...] = ()  # extra `#SBATCH` options, e.g. "--constraint=cpu"

    @property
    def job_memory(self) -> str:
        return self.memory or f"{KERNEL_GIB * self.cores}GiB"


def slurm_cluster(spec: WorkerJobs):
    """A dask_jobqueue.SLURMCluster whose jobs run grading workers in `spec.course`."""
    from dask_jobqueue import SLURMCluster

    course = shlex.quote(str(spec.course))
    # the scheduler always serves HTTP (health checks); without bokeh on any free port, never on 8787
    dashboard = ":8787" if importlib.util.find_spec("bokeh") else ":0"
    scheduler = {"port": spec.port, "dashboard_address": dashboard}
    if spec.interface:
        scheduler["interface"] = spec.interface
    log_dir = spec.course / LOG_DIR
    log_dir.mkdir(parents=True, exist_ok=True)
    return SLURMCluster(
        cores=spec.cores, processes=spec.cores,  # one thread per worker process: one submission at a time
        memory=spec.job_memory, walltime=spec.walltime, queue=spec.partition, account=spec.account,
        python=sys.executable,  # the course's environment, as on the login node
        # the worker finds the lab in its checkout, not in the grade command's folder
        job_script_prologue=[f"cd {course}", f"export LABTOOLS_COURSE={course}"],
        job_extra_directives=list(spec.sbatch_options),
        scheduler_options=scheduler, log_directory=str(log_dir), name="labtools-grading")


def check_job_script(script: str) -> None:
    """Ask Slurm whether it would run the script (`sbatch --test-only`), before submitting it."""
    try:
        done = subprocess.run(["sbatch", "--test-only"], input=script, capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise SlurmError("there is no `sbatch` here: run this on a login node of the Slurm cluster") from None
    if done.returncode != 0:
        raise SlurmError("Slurm refuses the workers' job script: "
                         f"{(done.stderr or done.stdout).strip()}\n--- job script ---\n{script}")


def run(spec: WorkerJobs, say=print) -> None:
    """Submit the jobs, say the scheduler's address, keep the workers until Ctrl-C or SIGTERM."""
    if not (spec.course / "source").is_dir():
        raise SlurmError(f"{spec.course} is not a course checkout (no source/): run this in the course's folder")
    try:
        import dask_jobqueue  # noqa: F401 - its import sets a SIGINT handler that exits at once
    except ImportError:
        raise SlurmError("dask-jobqueue is not installed: .venv/bin/pip install -r requirements.txt") from None
    logging.getLogger("distributed").setLevel(logging.ERROR)
    for sig in (signal.SIGINT, signal.SIGTERM):  # Ctrl-C and `kill` end the loop below, which cancels the jobs
        signal.signal(sig, signal.default_int_handler)
    with slurm_cluster(spec) as cluster:
        check_job_script(cluster.job_script())
        cluster.scale(jobs=spec.jobs)
        say(f"Dask scheduler: {cluster.scheduler_address}", flush=True)
        if importlib.util.find_spec("bokeh"):
            say(f"Dask dashboard: {cluster.dashboard_link}", flush=True)
        say(f"Grade with: .venv/bin/python -m labtools grade LAB SUBMISSIONS --scheduler {cluster.scheduler_address}\n"
            f"{spec.jobs} job(s) of {spec.cores} worker(s) submitted (logs in {spec.course / LOG_DIR}); "
            "Ctrl-C cancels them", flush=True)
        seen = -1
        try:
            while True:
                workers = len(cluster.scheduler_info.get("workers", {}))
                if workers != seen:
                    say(f"  {workers} worker(s) connected", flush=True)
                    seen = workers
                time.sleep(2)
        except KeyboardInterrupt:
            say("stopping: cancelling the jobs", flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m labtools.grade.slurm_workers", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=1, help="Slurm jobs to submit (default 1)")
    parser.add_argument("--cores", type=int, default=4,
                        help="CPU cores per job; each runs one worker process grading one submission (default 4)")
    parser.add_argument("--memory", help=f"memory per job, e.g. 28GB (default {KERNEL_GIB} GiB per core)")
    parser.add_argument("--walltime", default="02:00:00", help="time limit of each job (default 02:00:00)")
    parser.add_argument("--partition", help="Slurm partition (default: the cluster's default)")
    parser.add_argument("--account", help="Slurm account to charge")
    parser.add_argument("--port", type=int, default=8786, help="the scheduler's port (default 8786; 0: any free)")
    parser.add_argument("--interface", help="network interface of this machine that the compute nodes reach, e.g. ib0")
    parser.add_argument("--sbatch", action="append", default=[], metavar="OPTION",
                        help="an extra #SBATCH option, e.g. --sbatch=--constraint=cpu (repeatable)")
    parser.add_argument("--course-dir", default=".", help="the course checkout (default: this directory)")
    args = parser.parse_args(argv)
    if args.jobs < 1 or args.cores < 1:
        parser.error("--jobs and --cores must be at least 1")
    spec = WorkerJobs(course=Path(args.course_dir).resolve(), jobs=args.jobs, cores=args.cores, memory=args.memory,
                      walltime=args.walltime, partition=args.partition, account=args.account, port=args.port,
                      interface=args.interface, sbatch_options=tuple(args.sbatch))
    try:
        run(spec)
    except SlurmError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # before the workers were up; leaving the cluster cancelled what was submitted
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
