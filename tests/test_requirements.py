"""Every floor in requirements.txt and environment.yml is a version that is tested (issue 29):
what the labs import, at the versions of Colab's runtime that tests/test_colab_like.py installs;
the tooling, at versions this environment holds (the one CI tests)."""

from __future__ import annotations

import importlib.metadata
import re

from packaging.requirements import Requirement
from packaging.version import Version

from labtools.labs import REPO_ROOT

from test_colab_like import colab_pins

CONDA_NAMES = {"pytorch": "torch"}
NOT_PIP = {"python", "cpuonly", "pip", "nodejs"}
# tested where Colab's runtime runs them, not at Colab's version: torch (the local CPU build, and
# Colab's 2.11 in the exact replica, by hand), ipykernel (grading kernels need the newer one)
TESTED_HERE = {"torch", "ipykernel"}


def _name(text: str) -> str:
    return re.sub(r"\[.*\]", "", text).strip().lower().replace("_", "-")


def requirements() -> dict[str, Requirement]:
    found = {}
    for line in (REPO_ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            req = Requirement(line)
            found[_name(req.name)] = req
    return found


def conda_environment() -> dict[str, str]:
    """{package: its version specifier} from environment.yml."""
    found = {}
    text = (REPO_ROOT / "environment.yml").read_text()
    for line in text[text.index("dependencies:"):].splitlines():  # not the channels
        match = re.match(r"\s+- (?:- )?([A-Za-z0-9_.\-\[\]]+)\s*([<>=!][^#\s]*)?", line)
        if match and not line.strip().startswith("- -e"):
            name = CONDA_NAMES.get(_name(match.group(1)), _name(match.group(1)))
            if name not in NOT_PIP:
                found[name] = match.group(2) or ""
    return found


def _floor(req: Requirement) -> Version | None:
    floors = [Version(s.version) for s in req.specifier if s.operator == ">="]
    return max(floors) if floors else None


def test_every_package_has_a_floor_and_the_two_files_agree():
    reqs, conda = requirements(), conda_environment()
    assert sorted(conda) == sorted(reqs), "environment.yml and requirements.txt list different packages"
    for name, req in reqs.items():
        assert _floor(req) is not None, f"{name} has no lower bound"
        assert Requirement(f"{name}{conda[name]}").specifier == req.specifier, \
            f"{name}: environment.yml says {conda[name]!r}, requirements.txt {req.specifier}"


def test_the_labs_floors_are_the_versions_of_the_colab_replica():
    """The replica installs exactly these: a floor below them would promise an untested version."""
    pins = {name: Version(pin.split("==")[1]) for name, pin in colab_pins().items()}
    checked = 0
    for name, req in requirements().items():
        if name in pins and name not in TESTED_HERE:
            assert _floor(req) == pins[name], f"{name}: floor {_floor(req)}, but Colab's replica tests {pins[name]}"
            checked += 1
    assert checked >= 8, "the labs' packages are no longer matched with Colab's record"


def test_no_floor_is_above_what_the_tests_run_on():
    for name, req in requirements().items():
        installed = Version(importlib.metadata.version(name))
        assert installed in req.specifier, f"{name} {installed} is installed here, outside {req.specifier}"
        if name in TESTED_HERE or name not in colab_pins():
            assert _floor(req) <= Version(installed.base_version)
