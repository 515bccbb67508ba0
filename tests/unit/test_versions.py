"""pyproject.toml declares compatible ranges, requirements*.txt the exact tested set, and the two agree:

- every dependency and extra of pyproject.toml is a range ">=lowest,<next major": the lower bound is what
  scripts/lowest.sh installs and tests, the upper bound the next major release after the pinned one;
- the exact pins (requirements.txt for the app, Docker and CI; requirements-dev.txt and requirements-model.txt for
  the test tools) lie in those ranges, and every declared dependency is pinned there;
- where these tests run, the installed versions are the pins (CI installs requirements-dev.txt), or, in the run of
  scripts/lowest.sh (MHA_VIZ_LOWEST=1), the lower bounds.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
PIN = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^]]*\])?==([0-9][A-Za-z0-9.]*)")
sys.path.insert(0, str(ROOT / "scripts"))
from lowest import declared, lowest  # scripts/ is no package

EXTRAS = ("app", "big-models", "notebook", "figures")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements() -> dict[str, Requirement]:
    """name -> Requirement of pyproject.toml's dependencies and every extra."""
    return {canonical(r.name): r for r in map(Requirement, declared(list(EXTRAS)))}


def pins(file: str) -> dict[str, str]:
    """name -> version of a requirements file's name==version lines, following -r includes."""
    found = {}
    for line in (ROOT / file).read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("-r "):
            found |= pins(line[3:].strip())
        elif match := PIN.fullmatch(line):
            found[canonical(match[1])] = match[2]
    return found


def every_pin() -> dict[str, str]:
    return pins("requirements-dev.txt") | pins("requirements-model.txt")


def installed(name: str) -> str:
    return importlib.metadata.version(name).split("+", 1)[0]  # torch 2.13.0+cpu: the CPU build of 2.13.0


def test_the_extras_are_all_read() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert set(project["optional-dependencies"]) == set(EXTRAS)


def test_every_declared_dependency_is_a_range_from_a_lower_bound_to_the_next_major_release() -> None:
    pinned = every_pin()
    assert {"torch", "numpy", "plotly", "transformers", "streamlit"} <= requirements().keys()
    for name, requirement in requirements().items():
        operators = sorted(s.operator for s in requirement.specifier)
        assert operators == ["<", ">="], f"{requirement}: a range >=lowest,<next major"
        upper = next(Version(s.version) for s in requirement.specifier if s.operator == "<")
        assert upper == Version(f"{Version(pinned[name]).major + 1}"), f"{requirement}: < the next major release"


def test_the_exact_pins_lie_in_the_declared_ranges_and_pin_every_dependency() -> None:
    runtime, pinned = pins("requirements.txt"), every_pin()
    assert {"streamlit", "plotly", "torch", "numpy", "transformers"} <= runtime.keys()
    outside = {name: pinned.get(name) for name, r in requirements().items()
               if name not in pinned or not r.specifier.contains(pinned[name], prereleases=True)}
    assert outside == {}, f"pins missing or outside pyproject.toml's ranges: {outside}"
    assert runtime.keys() <= requirements().keys()  # what the app installs, the package declares


def test_the_lower_bounds_become_constraints_and_a_dependency_without_one_is_refused() -> None:
    constraints = lowest(declared(list(EXTRAS)))
    assert len(constraints) == len(requirements())
    assert "torch==2.13" in constraints  # the one CPU build on this project's machines
    assert lowest(["numpy>=2.0,<3", "mkdocstrings[python]>=1.0,<2"]) == ["numpy==2.0", "mkdocstrings==1.0"]
    with pytest.raises(ValueError, match="no lower bound"):
        lowest(["numpy<3"])


def test_the_installed_versions_are_the_pins_or_in_the_lowest_run_the_lower_bounds() -> None:
    if os.environ.get("MHA_VIZ_LOWEST") == "1":
        expected = {canonical(c.split("==")[0]): c.split("==")[1] for c in lowest(declared(list(EXTRAS)))}
        found = {name: installed(name) for name in expected}
        assert {n: Version(v) for n, v in found.items()} == {n: Version(v) for n, v in expected.items()}
    else:
        expected = pins("requirements.txt")
        assert {name: installed(name) for name in expected} == expected
