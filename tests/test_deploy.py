"""The deployment files: what the Dockerfile runs is what these tests run (Docker itself cannot run here)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.browser import ROOT, free_port

DOCKERFILE = (ROOT / "Dockerfile").read_text()


def test_dockerfile_is_slim_cpu_only_non_root_with_a_healthcheck() -> None:
    assert re.search(r"^FROM python:3\.\d+-slim$", DOCKERFILE, re.MULTILINE)
    assert "whl/cpu" in DOCKERFILE  # CPU-only torch wheels
    user = re.findall(r"^USER (\S+)$", DOCKERFILE, re.MULTILINE)
    assert user and user[-1] not in ("root", "0")
    assert re.search(r"^EXPOSE 8501$", DOCKERFILE, re.MULTILINE)
    assert "HEALTHCHECK" in DOCKERFILE and "scripts/healthcheck.py" in DOCKERFILE
    assert "bash scripts/install.sh" in DOCKERFILE  # the install step CI runs (.ci/run)
    assert 'CMD ["bash", "scripts/serve.sh"]' in DOCKERFILE
    assert "MHA_VIZ_ALLOWED_MODELS=bundled,mha-viz/induction-2l" in DOCKERFILE  # a public demo loads only the bundled models
    assert "MHA_VIZ_PUBLIC=1" in DOCKERFILE  # and works within its budget


def test_the_start_command_serves_the_app_and_the_healthcheck_sees_it() -> None:
    port = str(free_port())
    env = {**os.environ, "PORT": port, "ADDRESS": "127.0.0.1", "MHA_VIZ_VENV": sys.prefix}
    health = [sys.executable, str(ROOT / "scripts" / "healthcheck.py")]
    assert subprocess.run(health, check=False, env=env, timeout=30).returncode == 1  # nothing listens yet
    proc = subprocess.Popen(["bash", str(ROOT / "scripts" / "serve.sh")], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 90
        while subprocess.run(health, check=False, env=env, timeout=30).returncode != 0:
            assert proc.poll() is None, "serve.sh exited"
            assert time.monotonic() < deadline, "no healthy server within 90 s"
            time.sleep(0.5)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as page:
            assert page.status == 200 and b"<html" in page.read().lower()
    finally:
        proc.terminate()
        proc.wait(15)


def test_streamlit_config_is_fit_for_a_public_demo() -> None:
    config = (ROOT / ".streamlit" / "config.toml").read_text()
    assert re.search(r'^gatherUsageStats = false', config, re.MULTILINE)
    assert re.search(r'^showErrorDetails = "none"', config, re.MULTILINE)
    assert re.search(r'^toolbarMode = "minimal"', config, re.MULTILINE)
    assert Path(ROOT / "scripts" / "serve.sh").stat().st_mode & 0o111
