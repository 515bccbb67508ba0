"""Run the app in a real Streamlit server and drive it with Playwright + Debian's Chromium.

Shared by the browser tests (tests/browser/) and the benchmarks in bench/. Nothing is downloaded: the
browser is /usr/bin/chromium (apt-get install -y --no-install-recommends chromium).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]


def niced_chromium(folder: Path) -> str:
    """A wrapper that starts Debian's Chromium at the lowest CPU priority (the benchmarks' other visitors, whose
    browsers would be on their own machines). Playwright starts a browser in a session of its own, and with the
    kernel's autogroup scheduling a session is one group with a fair share of the CPU whatever its processes'
    nice: so the wrapper sets its group's nice too."""
    wrapper = folder / "chromium-nice"
    wrapper.write_text(f'#!/bin/sh\necho 19 > /proc/self/autogroup 2>/dev/null\nexec nice -n 19 {CHROMIUM} "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


def require_tools(tools: dict[str, str]) -> None:
    """Skip the calling test module unless every tool {executable: Debian package} is installed; in CI, fail instead
    (scripts/install.sh --dev installs them)."""
    import os
    import shutil

    import pytest

    for tool, package in tools.items():
        if not shutil.which(tool):
            if os.environ.get("CI"):
                raise RuntimeError(f"{tool} is missing: scripts/install.sh --dev must install {package}")
            pytest.skip(f"{tool} not installed (apt-get install -y --no-install-recommends {package})",
                        allow_module_level=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, proc: subprocess.Popen, timeout: float, log_tail=lambda: "", interval: float = 0.3,
                 path: str = "/_stcore/health", server: str = "streamlit") -> None:
    """Poll url + path (Streamlit's health check, or another server's) every `interval` seconds until it answers
    200; raise if the process exits or time runs out."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"{url}{path}", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{server} did not become healthy on {url}{log_tail()}") from None
            time.sleep(interval)


@contextlib.contextmanager
def streamlit_server(timeout: float = 90.0, log: Path | None = None) -> Iterator[tuple[str, subprocess.Popen]]:
    """Start `streamlit run app.py` on a free port; yield (base URL, process); stop it afterwards.

    log: a file for the server's stdout and stderr (default: discarded)."""
    port = free_port()
    cmd = [
        sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"),
        "--server.port", str(port), "--server.address", "127.0.0.1", "--server.headless", "true",
        "--server.fileWatcherType", "none", "--browser.gatherUsageStats", "false",
    ]
    out = subprocess.DEVNULL if log is None else open(log, "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env={**os.environ})
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, timeout)
        yield url, proc
    finally:
        stop(proc)
        if log is not None:
            out.close()


def stop(proc: subprocess.Popen) -> None:
    """Terminate a server process, killing it if it has not exited after 15 s."""
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def chromium() -> Iterator[object]:
    """A headless Debian Chromium driven by Playwright."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


# The painted heatmaps of the page's heads, as image data: the one renderer's canvases (mha_viz/renderer.js, in a
# component's open shadow root: the first renderer that paints heads) or, on a page without one, the first Plotly
# chart's heatmap images (one <image> per heatmap).
HEATMAPS_JS = """() => {
    const roots = [];
    const walk = (root) => {
        for (const e of root.querySelectorAll('*')) {
            if (e.dataset && e.dataset.mhaViz === 'renderer') roots.push(e);
            if (e.shadowRoot) walk(e.shadowRoot);
        }
    };
    walk(document);
    for (const r of roots) {  // each canvas's image, encoded once a paint (the root counts its paints): polled every
        const canvases = [...r.querySelectorAll('canvas.mv-heatmap')];  // frame, it must not take the CPU it measures
        if (!canvases.length) continue;
        const paint = r.dataset.painted + ':' + canvases.length;
        if (r.mvImagesAt !== paint) [r.mvImages, r.mvImagesAt] = [canvases.map(c => c.toDataURL()), paint];
        return r.mvImages;
    }
    const chart = document.querySelectorAll('[data-testid="stPlotlyChart"]')[0];
    return chart ? [...chart.querySelectorAll('.heatmaplayer image')].map(e => e.getAttribute('href')) : [];
}"""


def renderers(page) -> list[dict]:
    """Each renderer root on the page (mha_viz/renderer.js; Playwright's locators see into shadow roots): its view,
    paint count, heads painted, its width, and the right edge of what it drew (px)."""
    return page.locator('[data-mha-viz="renderer"]').evaluate_all("""roots => roots.map(r => {
        const drawn = [...r.querySelectorAll('canvas, button, .mv-panel, .mv-legend')].map(e => e.getBoundingClientRect());
        return {view: r.dataset.view, painted: Number(r.dataset.painted || 0),
                heads: r.querySelectorAll('canvas.mv-heatmap').length, width: r.getBoundingClientRect().width,
                right: Math.max(0, ...drawn.map(b => b.right)), left: r.getBoundingClientRect().left};
    })""")


def wait_for_view(page, timeout: float = 120.0) -> None:
    """Wait until the page shows a view: a Plotly chart drawn, or the renderer's heads painted."""
    page.wait_for_function(
        f"""() => document.querySelector('[data-testid="stPlotlyChart"] .main-svg') !== null
            || ({HEATMAPS_JS})().length > 0""", polling=100, timeout=timeout * 1000)


def painted_heatmaps(page) -> list[str]:
    """The image data of every head painted on the page (HEATMAPS_JS)."""
    return page.evaluate(HEATMAPS_JS)


def slider(page, label: str):
    """The keyboard-focusable thumb of the slider with this label; for "Layer", the pressed button of the pretrained
    page's layer control, which the arrow keys move the same way."""
    if label == "Layer":
        return page.locator('.st-key-layer_switch button[aria-pressed="true"]')
    return page.locator(f'[data-testid="stSlider"]:has-text("{label}") input[type="range"]')


def wait_for_query(page, pattern: str, timeout: float = 60.0) -> None:
    """Wait until the page's query string matches the regular expression pattern.

    The app updates its URL with history.replaceState; Playwright's page.url and wait_for_url only
    see that after another round trip, so this polls location.search in the page itself.
    """
    page.wait_for_function("p => new RegExp(p).test(location.search)", arg=pattern, polling=100,
                           timeout=timeout * 1000)


def slider_value(page, label: str) -> str:
    """The value a slider (or select slider) with this label shows on its thumb."""
    return page.locator(f'[data-testid="stSlider"]:has-text("{label}") [data-testid="stSliderThumbValue"]').inner_text()


def wait_for_heads(page, count: int, timeout: float = 120.0) -> None:
    """Wait until `count` heads are painted by the renderer (mha_viz/renderer.js: a pretrained model's Heads view,
    its canvases in the component's shadow root, which Playwright's locators see into)."""
    page.locator('[data-mha-viz="renderer"] canvas').nth(count - 1).wait_for(timeout=timeout * 1000)


def wait_for_heatmaps(page, count: int, *, changed_from: list[str] | None = None, timeout: float = 120.0) -> float:
    """Wait until the page's heads (HEATMAPS_JS) are `count` painted heatmaps (all different from `changed_from`).

    Returns the seconds waited. Polls in the page with requestAnimationFrame, so the time is
    close to when the paint happened.
    """
    start = time.perf_counter()
    page.wait_for_function(
        f"""([n, old]) => {{
            const imgs = ({HEATMAPS_JS})();
            if (imgs.length !== n) return false;
            return old === null || imgs.every(h => h && !old.includes(h));
        }}""",
        arg=[count, changed_from],
        polling="raf",
        timeout=timeout * 1000,
    )
    return time.perf_counter() - start
