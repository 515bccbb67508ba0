"""scripts/replicas.sh for real: two replicas behind Debian's nginx, driven by Playwright in Chromium.

One run of the script (module fixture, ~30 s): the page paints its heatmaps through nginx and the
head slider works over the proxied websocket; one browser keeps one replica (its route cookie);
a replica whose process group is killed is started again while nginx and the other replica serve;
browsers with different cookies spread over both replicas, and nginx's access log shows every
route on a single replica; stopping the script stops every process it started. One address's flood
(sessions, requests in progress, idle connections) stops at the site file's per-client limits while
a browser from another address paints its page.
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.browser import CHROMIUM, ROOT, chromium, painted_heatmaps, slider, wait_for_heatmaps

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
for missing, install in ((not Path(CHROMIUM).exists(), "chromium"), (NGINX is None, "nginx")):
    if missing:
        if os.environ.get("CI"):
            raise RuntimeError(f"{install} is missing: .ci/run (scripts/install.sh --dev) must install Debian's {install}")
        pytest.skip(f"{install} not installed (apt-get install -y --no-install-recommends {install})",
                    allow_module_level=True)

LOG_LINE = re.compile(r'"(?P<request>[^"]*)" (?P<status>\d+) .* upstream=(?P<upstream>\S+) route=(?P<route>\S+)$')


def free_ports(count: int) -> list[int]:
    """`count` consecutive free ports (nginx's, then one per replica) in 8510-8599, else any free ones."""
    for start in range(8510, 8600 - count + 1):
        try:
            for p in range(start, start + count):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
            return list(range(start, start + count))
        except OSError:
            continue
    socks = [socket.socket() for _ in range(count)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def descendants(pid: int) -> set[int]:
    """Every live process whose parent chain leads to pid."""
    parent = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    parent[int(d)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, pp in parent.items() if pp in frontier} - found
        found |= frontier
    return found


def alive(pids: set[int]) -> set[int]:
    out = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                    out.add(pid)
        except OSError:
            pass
    return out


@contextlib.contextmanager
def replicas(run_dir: Path) -> Iterator[tuple[str, Path, subprocess.Popen, list[int]]]:
    """bash scripts/replicas.sh 2 on free ports, logs in run_dir; yields (url, run_dir, proc, replica ports)."""
    port, *replica_ports = free_ports(3)
    env = {**os.environ, "PORT": str(port), "REPLICA_PORTS": " ".join(map(str, replica_ports)),
           "RUN_DIR": str(run_dir), "NGINX": NGINX, "HF_HUB_OFFLINE": "1"}
    out = open(run_dir / "script.out", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(["bash", str(ROOT / "scripts" / "replicas.sh"), "2"], cwd=ROOT, env=env,
                            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    try:
        while b"behind nginx at" not in (run_dir / "script.out").read_bytes():
            assert proc.poll() is None, f"replicas.sh exited:\n{(run_dir / 'script.out').read_text()}"
            assert time.monotonic() < deadline, f"replicas.sh not ready in 90 s:\n{(run_dir / 'script.out').read_text()}"
            time.sleep(0.3)
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=5) as r:
            assert r.status == 200
        yield url, run_dir, proc, replica_ports
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        out.close()


@pytest.fixture(scope="module")
def front(tmp_path_factory):
    """bash scripts/replicas.sh 2 on free ports; yields (url, run_dir, proc, replica ports)."""
    with replicas(tmp_path_factory.mktemp("replicas")) as running:
        yield running


def access_log(run_dir: Path) -> list[dict[str, str]]:
    lines = (run_dir / "access.log").read_text().splitlines()
    rows = [m.groupdict() for m in map(LOG_LINE.search, lines) if m]
    assert len(rows) == len(lines), "access.log lines not in the mha_viz log_format"
    return rows


def open_page(browser, url: str, cookie: str | None = None):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    if cookie:
        context.add_cookies([{"name": "mha_viz_route", "value": cookie, "url": url}])
    page = context.new_page()
    page.errors = []
    page.on("pageerror", lambda err: page.errors.append(str(err)))
    page.goto(f"{url}/?d_model=48")
    wait_for_heatmaps(page, 4, timeout=60)
    return context, page


def route_of(context) -> str:
    return next(c["value"] for c in context.cookies() if c["name"] == "mha_viz_route")


def replica_lines(run_dir: Path) -> dict[int, tuple[int, int]]:
    """RUN_DIR/replicas: index -> (port, pid)."""
    rows = [line.split() for line in (run_dir / "replicas").read_text().splitlines() if line.strip()]
    return {int(i): (int(port), int(pid)) for i, port, pid, _ in rows}


def answers(url: str, cookie: str | None = None) -> int:
    request = urllib.request.Request(url, headers={"Cookie": f"mha_viz_route={cookie}"} if cookie else {})
    with urllib.request.urlopen(request, timeout=10) as r:
        return r.status


def test_two_replicas_behind_nginx(front) -> None:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    url, run_dir, proc, replica_ports = front
    upstreams = {f"127.0.0.1:{p}" for p in replica_ports}
    with chromium() as browser:
        # A browser through nginx: heatmaps paint, the websocket carries a slider change, and
        # everything it sends (page, static files, websocket) reaches one replica.
        context, page = open_page(browser, url)
        route = route_of(context)
        assert re.fullmatch(r"[0-9a-f]{32}", route)
        sockets = []
        page.on("websocket", lambda ws: sockets.append(ws.url))
        old = painted_heatmaps(page)
        for _ in range(3):
            slider(page, "Number of heads").press("ArrowLeft")  # 4 -> 3 (3 divides 48)
            try:
                wait_for_heatmaps(page, 3, changed_from=old, timeout=20)
                break
            except PlaywrightTimeout:  # pressed while the first rerun redrew the slider: press again
                continue
        assert len(painted_heatmaps(page)) == 3
        page.reload()  # a new websocket, same cookie
        wait_for_heatmaps(page, 3, timeout=60)
        assert sockets == [f"ws://{url.split('//')[1]}/_stcore/stream"]
        assert route_of(context) == route and page.errors == []
        context.close()

        # Route cookies spread over the replicas: 32 plain requests with 32 different cookies.
        for i in range(32):
            request = urllib.request.Request(f"{url}/", headers={"Cookie": f"mha_viz_route={i:032x}"})
            with urllib.request.urlopen(request, timeout=10) as r:
                assert r.headers.get("Set-Cookie") is None  # a browser's cookie is kept, not replaced
        time.sleep(0.5)
        on = {row["route"]: row["upstream"] for row in access_log(run_dir) if row["request"] == "GET / HTTP/1.1"}
        assert {on[f"{i:032x}"] for i in range(32)} == upstreams, "32 cookies all on one replica"

        # Two browsers whose cookies hash to different replicas: each paints, and each one's page,
        # static files and websocket reach its own replica (a cookie set before the first request
        # is what a browser sends after a restart of nginx: the same replica again).
        pair = {}
        for i in range(32):
            pair.setdefault(on[f"{i:032x}"], f"{i:032x}")
        for upstream, cookie in pair.items():
            context, page = open_page(browser, url, cookie)
            assert route_of(context) == cookie and page.errors == []
            context.close()

    time.sleep(1.5)  # nginx writes a websocket's line when it closes
    rows = access_log(run_dir)
    served: dict[str, set[str]] = {}
    for row in rows:
        served.setdefault(row["route"], set()).add(row["upstream"])
    assert all(len(ups) == 1 for ups in served.values()), {r: u for r, u in served.items() if len(u) > 1}
    assert served[route] <= upstreams
    assert sum(1 for row in rows if row["route"] == route and row["request"].startswith("GET /_stcore/stream")
               and row["status"] == "101") == 2  # the first page's websocket and the reloaded page's
    for upstream, cookie in pair.items():
        assert served[cookie] == {upstream}
        assert any(row["route"] == cookie and row["request"].startswith("GET /_stcore/stream") for row in rows)

    # Stopping the script stops nginx, both replicas and anything they started.
    started = descendants(proc.pid) | {proc.pid}
    pids_file = [int(line.split()[2]) for line in (run_dir / "replicas").read_text().splitlines()]
    assert set(pids_file) <= started
    proc.send_signal(signal.SIGTERM)
    proc.wait(30)
    time.sleep(0.5)
    assert alive(started) == set(), f"still running after replicas.sh stopped: {alive(started)}"
    for p in [int(url.rsplit(":", 1)[1]), *replica_ports]:
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", p)) != 0, f"port {p} still answers"


def test_a_replica_that_dies_is_started_again_while_nginx_and_the_other_keep_serving(tmp_path) -> None:
    """Kill one replica's process group: the script stays, nginx answers every browser (its cookies hash to
    both replicas) from the other replica, and the dead one is started again on its port and is healthy.
    A run of its own: nginx's log of the failed-over requests names two upstreams a line."""
    with replicas(tmp_path) as running:
        kill_a_replica_and_see_it_back(*running)


def kill_a_replica_and_see_it_back(url: str, run_dir: Path, proc: subprocess.Popen, replica_ports: list[int]) -> None:
    (port, pid) = replica_lines(run_dir)[1]
    assert port == replica_ports[0]
    group = descendants(pid) | {pid}
    os.killpg(pid, signal.SIGKILL)
    deadline = time.monotonic() + 120
    while True:
        assert proc.poll() is None, f"replicas.sh exited:\n{(run_dir / 'script.out').read_text()}"
        for i in range(8):  # browsers whose cookies hash to either replica: all served
            assert answers(f"{url}/", f"{i:032x}") == 200
        assert answers(f"{url}/_stcore/health") == 200
        new_port, new_pid = replica_lines(run_dir)[1]
        if new_pid != pid:
            try:
                if answers(f"http://127.0.0.1:{port}/_stcore/health") == 200:
                    break
            except OSError:
                pass  # started, not listening yet
        assert time.monotonic() < deadline, f"replica 1 not back in 120 s:\n{(run_dir / 'script.out').read_text()}"
        time.sleep(0.5)
    assert new_port == port and alive(group) == set()  # the old group is gone, the new one serves on the same port
    assert replica_lines(run_dir)[2][1] in descendants(proc.pid)  # the other replica was never stopped
    assert f"replica 1 (pid {pid}) exited" in (run_dir / "script.out").read_text()
    # nginx sends browsers to the restarted replica again
    served_by_it = re.compile(rf'"GET / HTTP/1.1" 200 .* upstream=127\.0\.0\.1:{port} route=')
    deadline = time.monotonic() + 60
    while True:
        before = len((run_dir / "access.log").read_text().splitlines())
        for i in range(32):
            assert answers(f"{url}/", f"{i:032x}") == 200
        time.sleep(0.5)
        if any(map(served_by_it.search, (run_dir / "access.log").read_text().splitlines()[before:])):
            break
        assert time.monotonic() < deadline, "nginx never sent a request to the restarted replica"
        time.sleep(1)


# ------------------------------------------------------------------------------------------ per-client limits

ATTACKER = "127.0.0.2"  # another loopback address: to nginx a client other than the browser's 127.0.0.1
REFUSED = "HTTP/1.1 429 Too Many Requests"


def site_setting(pattern: str) -> int:
    """A number in the shipped site file (deploy/nginx/mha-viz.conf), e.g. a limit_conn's limit."""
    found = re.findall(pattern, (ROOT / "deploy" / "nginx" / "mha-viz.conf").read_text())
    assert len(set(found)) == 1, (pattern, found)
    return int(found[0])


def from_attacker(port: int, request: bytes = b"") -> socket.socket:
    """A TCP connection to nginx from ATTACKER, after sending request (nothing: an idle connection)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30, source_address=(ATTACKER, 0))
    sock.sendall(request)
    return sock


def session_request(port: int, i: int) -> bytes:
    """A websocket handshake to Streamlit's session endpoint, with its own route cookie."""
    key = base64.b64encode(os.urandom(16)).decode()
    return (f"GET /_stcore/stream HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nCookie: mha_viz_route={i:032x}\r\n\r\n").encode()


def status_line(sock: socket.socket) -> str:
    """The first line of the answer on sock ('' if nginx closed it without one)."""
    data = b""
    while b"\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data.split(b"\r\n")[0].decode()


def answered(sock: socket.socket) -> str | None:
    """The status line already received on sock, or None if nothing has come yet (without waiting)."""
    if not select.select([sock], [], [], 0)[0]:
        return None
    return sock.recv(4096, socket.MSG_PEEK).split(b"\r\n")[0].decode()


def test_one_address_cannot_take_the_front_from_other_visitors(tmp_path) -> None:
    """From one address: 300 sessions (websockets) at once get the site file's 32, the rest 429 from nginx at once;
    requests in progress stop at its 128 per address (200 requests whose bodies never come: the first 96 beside the
    32 sessions are held, the others 429); and 300 idle TCP connections are closed by nginx after its
    client_header_timeout. Meanwhile a browser from another address opens a page: it paints over its websocket.
    Loopback only, about 800 sockets, all closed at the end."""
    sessions = site_setting(r"limit_conn mha_viz_sessions (\d+);")
    per_address = site_setting(r"limit_conn mha_viz_per_address (\d+);")
    header_timeout = site_setting(r"client_header_timeout (\d+)s;")
    held: list[socket.socket] = []
    with replicas(tmp_path) as (url, run_dir, _proc, _):
        port = int(url.rsplit(":", 1)[1])
        try:
            flood = [from_attacker(port, session_request(port, i)) for i in range(300)]
            statuses = [status_line(sock) for sock in flood]
            assert statuses.count("HTTP/1.1 101 Switching Protocols") == sessions
            assert statuses.count(REFUSED) == 300 - sessions, sorted(set(statuses))
            held += [sock for sock, status in zip(flood, statuses) if status != REFUSED]
            for sock, status in zip(flood, statuses):
                if status == REFUSED:
                    sock.close()

            post = f"POST / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 1000\r\n\r\n".encode()  # no body
            posts = [from_attacker(port, post) for _ in range(200)]
            held += posts
            expected = 200 - (per_address - sessions)
            deadline = time.monotonic() + 60
            while sum(answered(sock) == REFUSED for sock in posts) < expected and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(0.5)  # any further answer would have come by now
            assert sum(answered(sock) == REFUSED for sock in posts) == expected
            others = {answered(sock) for sock in posts} - {REFUSED}
            assert others <= {None, ""}, others  # held (nginx waits for their bodies; '': closed after its timeout)

            idle = [from_attacker(port) for _ in range(300)]
            held += idle
            with chromium() as browser:  # another visitor, from 127.0.0.1
                context, page = open_page(browser, url)
                assert len(painted_heatmaps(page)) == 4 and page.errors == []
                context.close()

            deadline = time.monotonic() + header_timeout + 30
            for sock in idle:  # nginx closes them (recv: b"", or a reset)
                sock.settimeout(max(0.1, deadline - time.monotonic()))
                try:
                    assert sock.recv(1) == b""
                except ConnectionResetError:
                    pass
        finally:
            for sock in held:
                sock.close()
        log = (run_dir / "nginx-error.log").read_text()
        assert f'limiting connections by zone "mha_viz_sessions", client: {ATTACKER}' in log
        assert f'limiting connections by zone "mha_viz_per_address", client: {ATTACKER}' in log
        assert re.search(rf'limiting requests, excess: [\d.]+ by zone "mha_viz_new_sessions", client: {ATTACKER}', log)
        assert "client: 127.0.0.1," not in log  # the browser was never limited
