"""Where `labtools grade` runs its tasks: a Dask cluster.

By default an embedded local cluster of worker processes (one per core), started
for the run and stopped after it; with a scheduler address (`--scheduler
tcp://HOST:8786`, or `c.GradeCluster.scheduler` in nbgrader_config.py) any Dask
cluster: workers started by hand, by dask-jobqueue on Slurm, by dask-kubernetes.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os

from traitlets import Integer, Unicode
from traitlets.config import Configurable


class ClusterUnavailable(RuntimeError):
    """The scheduler cannot be reached, no worker joined it, or they cannot grade."""


# What a grading task's outcome depends on, besides the lab (which each task checks itself):
# the course's code and the versions of what runs the notebook.
_PACKAGES = ("torch", "nbgrader", "nbclient", "nbconvert", "ipykernel", "distributed", "transformers")


def fingerprint() -> dict:
    """This process's labtools (a hash of its code), Python and key packages. Run on the
    scheduler and every worker: Dask unpickles the task graph on the scheduler, so it
    needs the course's code too, and a worker on another commit would grade otherwise."""
    import hashlib
    import platform
    from importlib import metadata
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]  # labtools/
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    versions = {}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "missing"
    return {"labtools": digest.hexdigest()[:16], "python": platform.python_version(), **versions}


def _differences(here: dict, there: dict) -> list[str]:
    if not isinstance(there, dict):
        return [f"it cannot run the course's code ({type(there).__name__}: {str(there)[:200]})"]
    what = {"labtools": "the course's code (labtools)"}
    return [f"{what.get(k, k)} {there.get(k, 'missing')} there, {v} here" if k != "labtools" else
            f"{what[k]} differs (another commit or checkout)" for k, v in here.items() if there.get(k) != v]


def preflight(client, log=print) -> None:
    """Refuse a cluster whose scheduler or workers cannot grade as this command would,
    before anything is graded; raises ClusterUnavailable with what differs and what to do."""
    here = fingerprint()
    remedy = ("start `dask scheduler` and `dask worker` with the course's environment (e.g. "
              "`.venv/bin/dask scheduler` in a checkout of the course at the same commit; `git pull` "
              "and restart the ones that differ)")
    try:
        scheduler = client.run_on_scheduler(fingerprint)
    except Exception as exc:  # noqa: BLE001 - whatever the scheduler failed with, it cannot take our tasks
        scheduler = exc
    problems = [f"the scheduler: {d}" for d in _differences(here, scheduler)]
    try:
        workers = client.run(fingerprint, on_error="return")
    except Exception as exc:  # noqa: BLE001
        workers = {"every worker": exc}
    for address, there in sorted(workers.items()):
        problems += [f"worker {address}: {d}" for d in _differences(here, there)]
    if problems:
        raise ClusterUnavailable("this Dask cluster cannot grade for this course: " + "; ".join(problems[:6])
                                 + ("; ..." if len(problems) > 6 else "") + f". Nothing was graded: {remedy}.")


class GradeCluster(Configurable):
    """Settings of nbgrader_config.py read by `labtools grade`."""

    scheduler = Unicode("", help="address of a Dask scheduler (tcp://HOST:8786); empty: a local cluster").tag(config=True)
    workers = Integer(0, help="local worker processes; 0: one per CPU core").tag(config=True)
    connect_timeout = Integer(15, help="seconds to wait for the scheduler").tag(config=True)
    worker_wait = Integer(120, help="seconds to wait for a first worker on a remote cluster").tag(config=True)


def default_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


@contextlib.contextmanager
def dask_client(settings: GradeCluster, log=print):
    """A connected `distributed.Client`; raises ClusterUnavailable with what to do."""
    from distributed import Client, LocalCluster

    logging.getLogger("distributed").setLevel(logging.ERROR)
    if settings.scheduler:
        try:
            client = Client(settings.scheduler, timeout=f"{settings.connect_timeout}s")
        except (OSError, TimeoutError, ValueError) as exc:
            raise ClusterUnavailable(
                f"cannot reach the Dask scheduler at {settings.scheduler} ({type(exc).__name__}: {exc}). "
                "Start it with `dask scheduler` and workers with `dask worker ADDRESS` in a checkout of the "
                "course, or leave out --scheduler to grade on this machine.") from None
        with client:
            try:
                client.wait_for_workers(1, timeout=settings.worker_wait)
            except (TimeoutError, OSError):
                raise ClusterUnavailable(
                    f"the Dask scheduler at {settings.scheduler} has no worker after {settings.worker_wait} s: "
                    "start some with `dask worker ADDRESS --nthreads 1` in a checkout of the course") from None
            preflight(client)
            workers = len(client.scheduler_info().get("workers", {}))
            log(f"  Dask cluster {settings.scheduler}: {workers} worker(s)" + _dashboard(client))
            yield client
        return
    n = settings.workers or default_workers()
    # the scheduler serves HTTP (health checks) with or without bokeh: always on a free port,
    # never on 8787, where a second class graded at once would print "Port 8787 is already in use"
    with LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=":0",
                      silence_logs=logging.ERROR) as cluster, Client(cluster) as client:
        log(f"  local Dask cluster: {n} worker process(es)" + _dashboard(client))
        yield client


def _dashboard(client) -> str:
    try:
        link = client.dashboard_link if importlib.util.find_spec("bokeh") else ""
    except Exception:  # noqa: BLE001 - the dashboard is optional
        link = ""
    return f"; dashboard {link}" if link else ""
