"""Settings of a hosted (public) deployment: which models may load, and how much work one request may do.

Read from the environment (or, with the same names in lower case, from Streamlit secrets):
    MHA_VIZ_ALLOWED_MODELS   comma-separated model ids a public demo may load; "bundled" is the bundled
                             all-MiniLM-L6-v2. Unset: any hub id or local folder (a local install).
    MHA_VIZ_PUBLIC           1: a public demo (also implied by an allow-list). Its requests get a Budget,
                             model names never name folders on the server, big exports are refused.
    MHA_VIZ_CACHE_MB         the bytes all sessions' cached traces may hold together (default 1024).
    MHA_VIZ_MAX_MODEL_MB     a public demo without an allow-list loads hub models whose files (weights, config,
                             tokenizer) are at most this many MB, checked before any download (check_model);
                             unset, it loads only the bundled models.
    MHA_VIZ_MAX_TOKENS, MHA_VIZ_MAX_LONG_TOKENS, MHA_VIZ_MAX_TRAINING_SECONDS, MHA_VIZ_MAX_NEW_TOKENS,
    MHA_VIZ_MAX_PASSES, MHA_VIZ_MAX_EXPORT_MB, MHA_VIZ_MAX_WAIT_SECONDS
                             override one field of the public Budget (defaults below).
A secret may also drop the prefix (max_model_mb), as allowed_models does.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace

from ..params import ViewState
from ..parts import shown
from .training_budget import UNCALIBRATED, Calibration, page_training_seconds, steps_within

BUNDLED = "bundled"
LIGHT_CHARS = 300  # a text up to this long (~64 tokens) keeps a page light
TRUE = {"1", "true", "yes", "on"}
DEFAULT_CACHE_MB = 1024


@dataclass(frozen=True)
class Budget:
    """The most work one rerun of a public demo may do; checked before the work starts."""

    max_tokens: int = 256  # tokens a side of one trace (local: 512, or the model's own maximum)
    max_long_tokens: int = 2048  # tokens of a pretrained model's long trace (local: its positions, up to 32,768)
    max_training_seconds: int = 10  # CPU seconds of one page's training: steps cut by its estimate, runs stopped when spent
    max_new_tokens: int = 32  # tokens one generation writes (local: 64)
    max_passes: int = 16  # forward passes of one knockout ranking through the whole model
    max_export_mb: int = 50  # the largest file built for a download
    max_wait_seconds: int = 30  # a heavy page refused ("too busy") rather than queued behind more of others' work
    max_model_mb: int | None = None  # without an allow-list: hub models up to this size (None: bundled ones only)


ENV_FIELDS = {f"MHA_VIZ_{f.name.upper()}": f.name for f in fields(Budget)}
Secret = Callable[[str], "str | None"]


def _setting(name: str, env: Mapping[str, str], secret: Secret | None) -> str | None:
    value = env.get(name)
    if value is None and secret is not None:
        value = secret(name.lower())
        if value is None:
            value = secret(name.lower().removeprefix("mha_viz_"))
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


class ModelRefusedError(ValueError):
    """A public demo refuses a model before reading it: off its allow-list, too large, or of a size it cannot learn."""


SHIPPED = ("", "mha-viz/induction-2l", "mha-viz/recall-16k", "mha-viz/hybrid-2l")  # the bundled MiniLM and causal models: small
MB = 1 << 20  # as MHA_VIZ_CACHE_MB


def hub_model_bytes(repo_id: str) -> int:
    """Bytes of the files load_model reads for the hub id repo_id (weights, config, tokenizer), without reading them:
    the hub's file sizes (huggingface_hub's model_info) when online, the cached files' sizes when offline or when
    the hub does not answer. ModelRefusedError when neither can tell (then loading could not work anyway)."""
    from huggingface_hub import HfApi, snapshot_download

    from ..pretrained.loading import HUB_FILES, HUB_TIMEOUT, _offline, validate_hub_id

    repo_id = validate_hub_id(repo_id)
    wanted = lambda path: any(fnmatch.fnmatch(path, pattern) for pattern in HUB_FILES)
    if not _offline():
        try:
            info = HfApi().model_info(repo_id, files_metadata=True, timeout=HUB_TIMEOUT)
        except Exception:  # noqa: BLE001 - unknown, gated, no network: the cache may still tell
            info = None
        sizes = [f.size for f in (info.siblings or []) if wanted(f.rfilename)] if info is not None else []
        if sizes and None not in sizes:
            return sum(sizes)
    try:
        folder = snapshot_download(repo_id, local_files_only=True, allow_patterns=HUB_FILES)
    except Exception:  # noqa: BLE001 - not in the cache (huggingface_hub's errors vary by version)
        raise ModelRefusedError(f"could not learn the size of {repo_id} from the hub or the local cache, so this "
                                "public demo does not load it") from None
    return sum(os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(folder) for f in files
               if wanted(os.path.relpath(os.path.join(root, f), folder)))


def check_model(name: str, allowed: tuple[str, ...] | None, limits: Budget | None,
                size: Callable[[str], int] = hub_model_bytes) -> None:
    """ModelRefusedError unless this deployment may load name ("" the bundled model), checked before any
    download: an allow-list decides alone; without one a local install (limits None) loads anything, and a public
    demo the bundled models and, if its Budget has max_model_mb, hub models whose files size(name) are at most
    that big."""
    if allowed is not None:
        try:
            check_allowed(name, allowed)
        except ValueError as err:
            raise ModelRefusedError(str(err)) from None
        return
    if limits is None or name in SHIPPED:
        return
    if limits.max_model_mb is None:
        raise ModelRefusedError(
            "this public demo loads only its bundled models (all-MiniLM-L6-v2, mha-viz/induction-2l, "
            "mha-viz/recall-16k and mha-viz/hybrid-2l); its "
            "operator can list others (MHA_VIZ_ALLOWED_MODELS) or allow hub models up to a size (MHA_VIZ_MAX_MODEL_MB)")
    nbytes = size(name)
    if nbytes > limits.max_model_mb * MB:
        raise ModelRefusedError(f"{name} has {nbytes / MB:,.0f} MB of weights and files, more than the "
                                f"{limits.max_model_mb:,} MB this public demo loads (MHA_VIZ_MAX_MODEL_MB)")


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


LIGHT_NEW_TOKENS = 8  # a generation of at most this many tokens (of a text up to LIGHT_CHARS) is light work


def heavy_request(state: ViewState) -> bool:
    """Whether a whole page is heavy work: a text past LIGHT_CHARS (the cross-attention context, and the texts the
    shown view or section reads, Part.texts: a comparison's second sentence), whose passes and figures are all large.
    Such pages are drawn one at a time (mha_viz/ui/fair.py), so that light pages stay quick beside them. Other pages take the turn only for the part
    that is heavy, and only when it has to be computed: a training run, a generation of more than LIGHT_NEW_TOKENS,
    knockout and patching passes through a model, a model's detectors (not a view of a model or trace already
    cached: Circuits, Patching's small prompts or Generate's few tokens on a cached model stay light)."""
    texts = (state.text, state.context if state.cross or state.mode == "Pretrained" else "",
             *(getattr(state, name) for part in shown(state.view, state.section) for name in part.texts))
    return any(long_text(t) for t in texts)


def heavy_generation(new_tokens: int, text: str) -> bool:
    """A generation is heavy work when it writes more than LIGHT_NEW_TOKENS or reads a long text."""
    return new_tokens > LIGHT_NEW_TOKENS or long_text(text)


FULL_SIZE = ("run it at full size on your own machine: bash scripts/install.sh && ~/.venvs/mha-viz/bin/streamlit run "
             "app.py (or python -m mha_viz report for one layer)")


def within_budget(state: ViewState, limits: Budget | None,
                  calibration: Calibration = UNCALIBRATED) -> tuple[ViewState, list[str]]:
    """state with the work it asks for cut to the Budget (None: unchanged), and a notice for each cut.

    Tokens are cut where the text is read (the trace builders take limits.max_tokens); this cuts the
    training steps (to the most whose estimated cost on this machine, calibration, fits max_training_seconds; the
    runs are also stopped when that time is spent, training_budget.run_budget) and the tokens to generate.
    """
    if limits is None:
        return state, []
    changes, notices = {}, []
    seconds = page_training_seconds(state, calibration)
    if seconds > limits.max_training_seconds:
        steps = steps_within(state, limits.max_training_seconds, calibration)
        changes["steps"] = steps
        notices.append(f"This public demo trains for about {limits.max_training_seconds} s of CPU a page: "
                       f"{state.steps} steps at h = {state.h}, d_model = {state.d_model} (about {seconds:.0f} s "
                       f"on this machine) became {steps} steps. To {FULL_SIZE}.")
    if state.new_tokens > limits.max_new_tokens:
        changes["new_tokens"] = limits.max_new_tokens
        notices.append(f"This public demo writes at most {limits.max_new_tokens} tokens at a time (you asked for "
                       f"{state.new_tokens}). To {FULL_SIZE}.")
    return replace(state, **changes), notices
