"""Settings of a hosted (public) deployment: which models may load, and how much work one request may do.

Read from the environment (or, with the same names in lower case, from Streamlit secrets):
    MHA_VIZ_ALLOWED_MODELS   comma-separated model ids a public demo may load; "bundled" is the bundled
                             all-MiniLM-L6-v2. Unset: any hub id or local folder (a local install).
    MHA_VIZ_PUBLIC           1: a public demo (also implied by an allow-list). Its requests get a Budget,
                             model names never name folders on the server, big exports are refused.
    MHA_VIZ_CACHE_MB         the bytes all sessions' cached traces may hold together (default 1024).
    MHA_VIZ_MAX_TOKENS, MHA_VIZ_MAX_TRAINING, MHA_VIZ_MAX_NEW_TOKENS, MHA_VIZ_MAX_PASSES,
    MHA_VIZ_MAX_EXPORT_MB    override one field of the public Budget (defaults below).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace

from .params import ViewState

BUNDLED = "bundled"
LIGHT_CHARS = 300  # a text up to this long (~64 tokens) keeps a page light
TRUE = {"1", "true", "yes", "on"}
DEFAULT_CACHE_MB = 1024


@dataclass(frozen=True)
class Budget:
    """The most work one rerun of a public demo may do; checked before the work starts."""

    max_tokens: int = 256  # tokens a side of one trace (local: 512, or the model's own maximum)
    max_training: int = 600 * 128  # optimiser steps x d_model of one training run (local: 5000 x 128)
    max_new_tokens: int = 32  # tokens one generation writes (local: 64)
    max_passes: int = 16  # forward passes of one knockout ranking through the whole model
    max_export_mb: int = 50  # the largest file built for a download


ENV_FIELDS = {f"MHA_VIZ_{f.name.upper()}": f.name for f in fields(Budget)}
Secret = Callable[[str], "str | None"]


def _setting(name: str, env: Mapping[str, str], secret: Secret | None) -> str | None:
    value = env.get(name)
    if value is None and secret is not None:
        value = secret(name.lower())
    return None if value is None else str(value).strip()


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


def is_public(env: Mapping[str, str] = os.environ, secret: Secret | None = None) -> bool:
    """A public demo: MHA_VIZ_PUBLIC is set true, or an allow-list is."""
    flag = (_setting("MHA_VIZ_PUBLIC", env, secret) or "").lower()
    allowed = _setting("MHA_VIZ_ALLOWED_MODELS", env, secret)
    return flag in TRUE or bool(allowed)


def budget(env: Mapping[str, str] = os.environ, secret: Secret | None = None) -> Budget | None:
    """The Budget of a public demo (defaults, overridden field by field), or None for a local install.

    ValueError for an override that is not a positive whole number.
    """
    if not is_public(env, secret):
        return None
    changes = {}
    for name, field in ENV_FIELDS.items():
        raw = _setting(name, env, secret)
        if raw is None:
            continue
        if not raw.isdigit() or int(raw) < 1:
            raise ValueError(f"{name} must be a positive whole number, got {raw!r}")
        changes[field] = int(raw)
    return replace(Budget(), **changes)


def cache_bytes(env: Mapping[str, str] = os.environ, secret: Secret | None = None) -> int:
    """MHA_VIZ_CACHE_MB as bytes (default 1024 MB): what all sessions' cached traces may hold together."""
    raw = _setting("MHA_VIZ_CACHE_MB", env, secret) or str(DEFAULT_CACHE_MB)
    if not raw.isdigit():
        raise ValueError(f"MHA_VIZ_CACHE_MB must be a whole number of megabytes, got {raw!r}")
    return int(raw) << 20


def long_text(text: str) -> bool:
    """A text past LIGHT_CHARS: a model's forward pass over it (and its traces) is heavy work."""
    return len(text) > LIGHT_CHARS


def heavy_request(state: ViewState) -> bool:
    """Whether a page asks for heavy work: training, writing, analysis through a pretrained model, or a text
    past LIGHT_CHARS (the cross-attention context and a comparison's second sentence count too). Such pages are
    drawn one at a time (mha_viz/ui/fair.py), so that light pages stay quick beside them."""
    texts = (state.text, state.context if state.cross or state.mode == "Pretrained" else "",
             state.other_text if state.view == "Analysis" else "")
    return (state.mode == "Train" or (state.mode == "Configurable" and state.weights == "trained")
            or state.view == "Generate" or (state.view == "Analysis" and state.mode == "Pretrained")
            or any(long_text(t) for t in texts))


FULL_SIZE = ("run it at full size on your own machine: bash scripts/install.sh && ~/.venvs/mha-viz/bin/streamlit run "
             "app.py (or python -m mha_viz report for one layer)")


def within_budget(state: ViewState, limits: Budget | None) -> tuple[ViewState, list[str]]:
    """state with the work it asks for cut to the Budget (None: unchanged), and a notice for each cut.

    Tokens are cut where the text is read (the trace builders take limits.max_tokens); this cuts the
    training steps and the tokens to generate.
    """
    if limits is None:
        return state, []
    changes, notices = {}, []
    trains = state.mode == "Train" or (state.mode == "Configurable" and state.weights == "trained")
    if trains and state.steps * state.d_model > limits.max_training:
        steps = max(1, limits.max_training // state.d_model)
        changes["steps"] = steps
        notices.append(f"This public demo trains at most {limits.max_training:,} steps × d_model: {state.steps} steps "
                       f"at d_model = {state.d_model} became {steps} steps. To {FULL_SIZE}.")
    if state.new_tokens > limits.max_new_tokens:
        changes["new_tokens"] = limits.max_new_tokens
        notices.append(f"This public demo writes at most {limits.max_new_tokens} tokens at a time (you asked for "
                       f"{state.new_tokens}). To {FULL_SIZE}.")
    return replace(state, **changes), notices
