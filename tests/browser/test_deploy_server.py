"""The Dockerfile's start command (scripts/serve.sh) serves the app and its health check sees it (a live server);
`mha-viz serve` listens on 127.0.0.1 unless given an address."""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from harness.browser import ROOT, free_port, stop, wait_healthy


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


def listening_addresses(port: int) -> set[str]:
    """The local addresses of every TCP socket listening on port (IPv4 and IPv6), read from /proc/net."""
    found = set()
    for table, width in (("/proc/net/tcp", 4), ("/proc/net/tcp6", 16)):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for row in rows:
            local, state = row.split()[1], row.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                # each 32-bit word in the kernel's (little-endian) byte order
                raw = b"".join(bytes.fromhex(address[i:i + 8])[::-1] for i in range(0, 2 * width, 8))
                found.add(str(ipaddress.ip_address(raw)))
    return found


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads Linux's /proc/net/tcp")
def test_mha_viz_serve_listens_on_this_machine_only() -> None:
    """`mha-viz serve` without an address: a live server whose only listening socket is 127.0.0.1 (Streamlit's own
    default is every interface, IPv4 and IPv6); with --server.address 0.0.0.0 the user's choice is kept."""
    env = {key: value for key, value in os.environ.items() if key != "STREAMLIT_SERVER_ADDRESS"}
    for options, expected in (([], {"127.0.0.1"}), (["--server.address", "0.0.0.0"], {"0.0.0.0"})):
        port = free_port()
        proc = subprocess.Popen([sys.executable, "-m", "mha_viz", "serve", "--server.port", str(port), *options],
                                cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_healthy(f"http://127.0.0.1:{port}", proc, timeout=90)
            assert listening_addresses(port) == expected
        finally:
            stop(proc)
