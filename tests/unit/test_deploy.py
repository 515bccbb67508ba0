"""The deployment files: what the Dockerfile runs is what these tests run (Docker itself cannot run here; the start
command against a live server: tests/browser/test_deploy_server.py)."""

from __future__ import annotations

import re
from pathlib import Path

from harness.browser import ROOT

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


def test_streamlit_config_is_fit_for_a_public_demo() -> None:
    config = (ROOT / ".streamlit" / "config.toml").read_text()
    assert re.search(r'^gatherUsageStats = false', config, re.MULTILINE)
    assert re.search(r'^showErrorDetails = "none"', config, re.MULTILINE)
    assert re.search(r'^toolbarMode = "minimal"', config, re.MULTILINE)
    assert Path(ROOT / "scripts" / "serve.sh").stat().st_mode & 0o111
