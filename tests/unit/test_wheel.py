"""The package as a user installs it: the wheel built from this checkout carries every file of mha_viz/ (the bundled
causal model, the precomputed layers, the lessons, the scripts of the app and the widget), and installed into a
fresh venv it works from there, not from the checkout: `mha-viz --help`, the library and the bundled causal model,
`mha-viz report`, the packaged page in AppTest and `mha-viz serve`.

The fresh venv's dependencies are this test environment's (the pinned versions: test_versions.py), linked in
read-only through a .pth file so that nothing is downloaded; pip installs the wheel with every extra (the app's
Streamlit among them) from no index, so a declared requirement those versions do not satisfy fails the install."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import urllib.request
import zipfile
from pathlib import Path

import pytest

from harness.browser import free_port, stop, wait_healthy

ROOT = Path(__file__).resolve().parents[2]
NOT_BUILT = shutil.ignore_patterns(".git", "build", "dist", "site", "*.egg-info", "__pycache__", ".pytest_cache",
                                   ".hypothesis", "tests", "bench", "assets", "docs")
PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
TEXT = "red fox blue sky green tree red"


def package_files() -> set[str]:
    """Every file of the mha_viz package in this checkout, as a wheel names it."""
    return {p.relative_to(ROOT).as_posix() for p in (ROOT / "mha_viz").rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}


def build_wheel(where: Path) -> Path:
    """The wheel of a copy of this checkout (a build leaves build/ and *.egg-info where it runs)."""
    source = where / "source"
    shutil.copytree(ROOT, source, symlinks=True, ignore=NOT_BUILT)
    run([*PIP, "wheel", "--no-deps", "--no-build-isolation", "--quiet", "-w", str(where / "dist"), str(source)],
        cwd=where)
    (wheel,) = (where / "dist").glob("mha_viz-*.whl")
    return wheel


def linked_dependencies(where: Path) -> Path:
    """A folder of links to this environment's installed packages, mha-viz itself left out."""
    where.mkdir(parents=True)
    site = Path(sysconfig.get_paths()["purelib"])
    for entry in site.iterdir():
        if "mha_viz" not in entry.name:
            (where / entry.name).symlink_to(entry)
    return where


def run(command: list[str], cwd: Path, env: dict[str, str] | None = None,
        timeout: float = 600) -> subprocess.CompletedProcess:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
    return done


INSTALLED = f"""
import json, sys
from pathlib import Path
import mha_viz
venv = Path(sys.prefix)
assert Path(mha_viz.__file__).is_relative_to(venv), mha_viz.__file__
library = "streamlit" not in sys.modules
model = mha_viz.load_model(mha_viz.INDUCTION_MODEL)
trace = model.trace({TEXT!r}, 1)
widget = mha_viz.show(model, {TEXT!r}, layer=1).layer if hasattr(mha_viz, "show") else None
from mha_viz.pretrained import induction_model_dir
print(json.dumps({{"model_dir": str(induction_model_dir()), "library_only": library, "widget": widget,
                  "weights": list(trace.weights.shape), "next": model.generate({TEXT!r}, 1).tokens[0]}}))
"""

PAGE = """
import sys
from pathlib import Path
from streamlit.testing.v1 import AppTest
import mha_viz
page = Path(mha_viz.__file__).parent / "ui" / "app" / "page.py"
at = AppTest.from_file(str(page), default_timeout=240).run()
assert not at.exception, at.exception
print(len([e for e in at.get("bidi_component") if e.key == "heads"]))  # the Heads view's grid (renderer.js)
"""


@pytest.mark.slow
def test_the_wheel_installs_into_a_fresh_venv_and_works_from_there(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        carried = {n for n in names if n.startswith("mha_viz/")}
        assert carried == package_files(), (sorted(package_files() - carried), sorted(carried - package_files()))
        for name in ("app.py", "page.py", ".streamlit/config.toml"):  # files, not links
            assert archive.read(f"mha_viz/ui/app/{name}") == (ROOT / name).read_bytes(), name
        entry_points = next(archive.read(n).decode() for n in names if n.endswith(".dist-info/entry_points.txt"))
        metadata = next(archive.read(n).decode() for n in names if n.endswith(".dist-info/METADATA"))
    extras = [line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Provides-Extra:")]
    assert "app" in extras  # every extra is installed: its pins must be the tested ones too
    assert "mha-viz = mha_viz.__main__:main" in entry_points
    assert {"mha_viz/models/induction-2l/model.safetensors", "mha_viz/renderer.js",
            "mha_viz/lessons/one_head.toml", "mha_viz/training/precomputed/variants-grid.json"} <= carried

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path)
    python, script = venv / "bin" / "python", venv / "bin" / "mha-viz"
    site = Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                    cwd=tmp_path).stdout.strip())
    # named site-packages: Streamlit takes a copy found elsewhere for its development mode (no --server.port)
    linked = linked_dependencies(tmp_path / "dependencies" / "site-packages")
    (site / "tested_dependencies.pth").write_text(f"{linked}\n")
    run([*PIP, "--python", str(python), "install", "--no-index", "--no-cache-dir", "--quiet",
         f"{wheel}[{','.join(extras)}]"], cwd=tmp_path)

    work = tmp_path / "work"  # outside the checkout, without its PYTHONPATH
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"HF_HUB_OFFLINE": "1"}
    usage = run([str(script), "--help"], cwd=work, env=env).stdout
    assert usage.startswith("usage: mha-viz ") and "report" in usage and "serve" in usage

    found = json.loads(run([str(python), "-c", INSTALLED], cwd=work, env=env).stdout.splitlines()[-1])
    assert Path(found["model_dir"]).is_relative_to(venv) and found["library_only"]
    assert found["weights"] == [4, 8, 8] and found["next"] == "fox"
    assert found["widget"] in (None, 1)  # mha_viz.show, where the package has it: a widget on layer 1

    done = run([str(script), "report", "--model", "mha-viz/induction-2l", "--layer", "1", "--text", TEXT,
                "--out", "induction.html"], cwd=work, env=env)
    assert "wrote induction.html" in done.stdout and (work / "induction.html").stat().st_size > 10_000

    grids = int(run([str(python), "-c", PAGE], cwd=work, env=env).stdout.splitlines()[-1])
    assert grids == 1  # the packaged page drew its first page: its heads, painted by the packaged renderer

    port = free_port()
    log = work / "serve.log"
    with log.open("wb") as out:
        server = subprocess.Popen([str(script), "serve", "--server.port", str(port), "--server.address", "127.0.0.1"],
                                  cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", server, timeout=180, log_tail=lambda: "\n" + log.read_text()[-3000:])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30) as answer:
            index = answer.read()
        assert b"mha_viz_viewport=" in index  # app.py's middleware: the packaged server, not a plain script
    finally:
        stop(server)
