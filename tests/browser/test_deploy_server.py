"""The Dockerfile's start command (scripts/serve.sh) serves the app and its health check sees it (a live server)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request

from harness.browser import ROOT, free_port


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
