"""The documentation site (mkdocs.yml, docs/): `mkdocs build --strict` passes offline, with the API reference
generated from the docstrings, and strict mode fails a build whose page names an object that does not exist or
that leaves a page (a notebook example) out of the nav."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Any download the build tried would fail: the proxies point at a closed port.
OFFLINE = {"HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9", "NO_PROXY": "",
           "HF_HUB_OFFLINE": "1", "NO_MKDOCS_2_WARNING": "1"}


def build(config: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
                          cwd=config.parent, capture_output=True, text=True, timeout=600, check=False,
                          env={**os.environ, **OFFLINE})


@pytest.mark.slow
def test_the_docs_build_offline_in_strict_mode(tmp_path: Path) -> None:
    done = build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert done.returncode == 0, done.stderr
    trace = (tmp_path / "site" / "api" / "trace" / "index.html").read_text(encoding="utf-8")
    assert 'id="mha_viz.AttentionTrace.check_wo_path"' in trace  # a method's docstring, in the reference
    start = (tmp_path / "site" / "getting-started" / "index.html").read_text(encoding="utf-8")
    assert 'id="the-command-line"' in start and "each from the lowest release its unit tests pass with" in start
    assert "fonts.googleapis.com" not in start  # the site itself reads offline


@pytest.mark.slow
@pytest.mark.parametrize(("page", "text", "named"), [
    ("index.md", "# mha-viz\n\nSee [the trace][mha_viz.NoSuchTrace].\n", "mha_viz.NoSuchTrace"),
    ("examples/left_out.md", "# A page the nav does not list\n", "left_out.md"),
], ids=["missing-object", "page-not-in-nav"])
def test_strict_mode_fails_a_broken_site(tmp_path: Path, page: str, text: str, named: str) -> None:
    """The same site with a page naming a missing object, or a page the nav leaves out: the build fails."""
    copy = tmp_path / "copy"
    shutil.copytree(ROOT / "docs", copy / "docs")
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    (copy / "mha_viz").symlink_to(ROOT / "mha_viz")  # mkdocstrings reads the package beside the config
    (copy / "docs" / page).write_text(text, encoding="utf-8")
    done = build(copy / "mkdocs.yml", tmp_path / "site")
    assert done.returncode != 0
    assert named in done.stderr
