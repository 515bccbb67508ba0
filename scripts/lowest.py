"""Print pip constraints that hold every dependency of pyproject.toml at its lower bound: "name>=1.2,<2" -> name==1.2.

    python scripts/lowest.py app notebook > lowest.txt    # [project.dependencies] and the named extras
    pip install -c lowest.txt -e ".[app,notebook]"

pip has no "lowest versions" resolution of its own; with these constraints it installs each declared dependency at
the lowest version the package claims, and whatever those need at the newest versions they allow (as uv's
lowest-direct does). A dependency without a ">=" lower bound is an error: the package would claim versions no test
installs. Standard library only, so any Python 3.11 runs it.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
LOWER = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^]]*\])?\s*[^;]*?>=\s*([0-9][A-Za-z0-9.]*)")


def lowest(requirements: list[str]) -> list[str]:
    """name==lower bound of each requirement, in order."""
    pins = []
    for requirement in requirements:
        match = LOWER.match(requirement)
        if match is None:
            raise ValueError(f"no lower bound (>=) in {requirement!r}")
        pins.append(f"{match[1]}=={match[2]}")
    return pins


def declared(extras: list[str], pyproject: Path = PYPROJECT) -> list[str]:
    """[project.dependencies] and the named extras' requirements of pyproject."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    return [*project["dependencies"], *(r for extra in extras for r in project["optional-dependencies"][extra])]


if __name__ == "__main__":
    print("\n".join(lowest(declared(sys.argv[1:]))))
