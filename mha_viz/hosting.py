"""Settings of a hosted (public) deployment, read from the environment.

MHA_VIZ_ALLOWED_MODELS   comma-separated model ids a public demo may load; "bundled" is the bundled
                         all-MiniLM-L6-v2. Unset: any hub id or local folder (a local install).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

BUNDLED = "bundled"


def allowed_models(env: Mapping[str, str] = os.environ, secret: str | None = None) -> tuple[str, ...] | None:
    """The allow-list ("" stands for the bundled model), or None when any model may load.

    secret is the same comma-separated list from another source (e.g. Streamlit secrets);
    the environment wins when both are set.
    """
    raw = env.get("MHA_VIZ_ALLOWED_MODELS") or secret
    if not raw:
        return None
    ids = [part.strip() for part in raw.split(",") if part.strip()]
    return tuple(dict.fromkeys("" if i == BUNDLED else i for i in ids)) or ("",)


def check_allowed(name: str, allowed: tuple[str, ...] | None) -> None:
    """ValueError unless the allow-list (None: no list) lets name ("" the bundled model) load."""
    if allowed is not None and name not in allowed:
        raise ValueError(f"this demo only loads {', '.join(m or 'the bundled model' for m in allowed)}")
