"""pyproject.toml declares only the versions the tests run on: every dependency (and extra) an exact pin, the same
pin as in requirements.txt, and the version installed where these tests run (CI installs requirements-dev.txt)."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PIN = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([0-9][A-Za-z0-9.]*)")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return [*project["dependencies"], *(r for extra in project["optional-dependencies"].values() for r in extra)]


def pins(requirements: str) -> dict[str, str]:
    """name -> version of a requirements file's name==version lines, following -r includes."""
    found = {}
    for line in (ROOT / requirements).read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("-r "):
            found |= pins(line[3:].strip())
        elif match := PIN.fullmatch(line):
            found[canonical(match[1])] = match[2]
    return found


def declared_pins() -> dict[str, str]:
    return {canonical(m[1]): m[2] for m in map(PIN.fullmatch, declared()) if m}


def test_every_declared_dependency_is_an_exact_pin() -> None:
    ranges = [r for r in declared() if not PIN.fullmatch(r)]
    assert declared() and ranges == [], f"untested ranges in pyproject.toml: {ranges}"


def test_pyproject_and_requirements_pin_the_same_versions() -> None:
    runtime, every = pins("requirements.txt"), pins("requirements-dev.txt") | pins("requirements-model.txt")
    assert {"streamlit", "plotly", "torch"} <= runtime.keys()
    assert declared_pins() == {name: every[name] for name in declared_pins()}
    assert runtime.items() <= declared_pins().items()  # what the app installs, the package declares


def test_the_declared_versions_are_the_installed_ones() -> None:
    assert declared_pins().keys() == {canonical(re.split(r"[^A-Za-z0-9._-]", r, maxsplit=1)[0]) for r in declared()}
    installed = {name: importlib.metadata.version(name).split("+", 1)[0] for name in declared_pins()}  # 2.13.0+cpu
    assert installed == declared_pins()
