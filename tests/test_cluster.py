"""The Dask dashboard's address is printed only when its optional dependency (bokeh) is
there. Fast: the Dask client and cluster are stand-ins that record how they were made."""

from __future__ import annotations

import contextlib
import importlib.util

import distributed
import pytest

from labtools.grade.cluster import GradeCluster, dask_client

LINK = "http://127.0.0.1:40123/status"


class _Client(contextlib.nullcontext):
    dashboard_link = LINK

    def __init__(self, *args, **kwargs):
        super().__init__(self)

    def wait_for_workers(self, n, timeout=None):
        pass

    def scheduler_info(self):
        return {"workers": {"tcp://10.0.0.7:4000": {}}}

    def run_on_scheduler(self, function):  # the preflight's fingerprint: this environment's own
        return function()

    def run(self, function, on_error="raise"):
        return {"tcp://10.0.0.7:4000": function()}


class _LocalCluster(contextlib.nullcontext):
    made: list[dict] = []

    def __init__(self, **kwargs):
        super().__init__(self)
        self.made.append(kwargs)


@pytest.fixture
def bokeh(monkeypatch):
    """Set `.present` to make labtools believe bokeh is installed (or not)."""
    real = importlib.util.find_spec

    class Switch:
        present = False

    def find_spec(name, *args, **kwargs):
        if name == "bokeh":
            return real("json") if Switch.present else None  # any spec stands for "importable"
        return real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    monkeypatch.setattr(distributed, "Client", _Client)
    monkeypatch.setattr(distributed, "LocalCluster", _LocalCluster)
    _LocalCluster.made.clear()
    return Switch


@pytest.mark.parametrize("scheduler", ["", "tcp://10.0.0.7:8786"], ids=["local", "remote"])
def test_the_dashboard_is_printed_when_bokeh_is_installed(bokeh, scheduler):
    bokeh.present = True
    lines = []
    with dask_client(GradeCluster(scheduler=scheduler, workers=2), log=lines.append):
        pass
    assert len(lines) == 1 and lines[0].endswith(f"; dashboard {LINK}"), lines
    if not scheduler:
        assert _LocalCluster.made[0]["dashboard_address"] == ":0"  # a free port, never a fixed one


@pytest.mark.parametrize("scheduler", ["", "tcp://10.0.0.7:8786"], ids=["local", "remote"])
def test_no_dashboard_without_bokeh(bokeh, scheduler):
    lines = []
    with dask_client(GradeCluster(scheduler=scheduler, workers=2), log=lines.append):
        pass
    assert len(lines) == 1 and "dashboard" not in lines[0], lines
    assert "worker" in lines[0]
    if not scheduler:
        # the scheduler's HTTP server runs anyway (health checks): on a free port, never 8787
        assert _LocalCluster.made[0]["dashboard_address"] == ":0"
