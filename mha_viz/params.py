"""The app's shareable state as URL query parameters: parse (with notices) and serialise.

Pure Python so it can be tested without Streamlit. Every value is checked; an invalid one falls
back to its default and produces a notice that the app shows to the user.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace

from .limits import (
    D_MODEL_CHOICES,
    MAX_CLICKED_HEADS,
    MAX_HEAD_WIDTH,
    MAX_HEADS,
    MAX_LAYERS,
    MAX_LONG_TOKENS,
    MAX_MODEL_CHARS,
    MAX_NEW_TOKENS,
    MAX_SEED,
    MAX_SEQUENCE_CHARS,
    MAX_STEPS,
    MAX_TEXT_CHARS,
    MAX_TOKENS,
    client_int,
)
from .text import DEFAULT_TEXT

EXAMPLES = {
    "Ambiguous 'it'": DEFAULT_TEXT,
    "Ambiguous 'it' (2)": "The animal didn't cross the street because it was too wide",
    "Repeated words": "the cat sat on the mat and the dog sat on the cat",
    "Agreement": "The keys to the old wooden cabinet are on the table",
    "Hinglish": "yaar the movie was too long but the songs were achhe",
}
# For the bundled causal model (its 165-word vocabulary): the second half starts to repeat the first.
CAUSAL_EXAMPLE = "the red fox saw a big owl by the lake . the red fox saw a"
DEFAULT_CONTEXT = "L'animal n'a pas traversé la rue parce qu'il était trop fatigué"
VIEWS = ("Heads", "Lines", "One head", "Concat → W_O", "Analysis", "Shapes & cost", "Formulas", "Overview", "Training",
         "Generate")
MODES = ("Configurable", "Pretrained", "Train")
PARTS = ("encoder", "decoder", "cross")
TASK_NAMES = ("prev-first", "prev-2back-first", "prev-match")  # mha_viz.training.TASKS (a test keeps them equal)
WEIGHTS = ("random", "trained")  # configurable mode: random Xavier weights, or trained on a task
SECTIONS = ("Head statistics", "Redundancy", "Contribution", "Knockout", "Rollout", "Compare", "Concat vs sum",
            "Logit attribution", "Head detectors")
DETECTORS = ("previous", "duplicate", "induction")  # mha_viz.analysis.KINDS (a test keeps them equal)
COMPARE_WITH = ("Another sentence", "Another layer", "Another model")
_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}(/[A-Za-z0-9][A-Za-z0-9._-]{0,95})?")


@dataclass(frozen=True)
class ViewState:
    """Everything a view depends on; each field is a widget key and a URL parameter."""

    mode: str = MODES[0]
    model: str = ""  # pretrained mode: "" is the bundled MiniLM, else a hub id
    layer: int = 0
    part: str = PARTS[0]
    special: bool = True  # pretrained mode: show special tokens ([CLS], [SEP], BOS)
    weights: str = WEIGHTS[0]  # configurable mode: random or trained weights
    task: str = "prev-first"  # train mode and trained weights: a task name from mha_viz.training
    sequence: str = ""  # trained weights: the input, task tokens separated by spaces ("": the task's probe)
    steps: int = 600  # train mode and trained weights: optimiser steps
    text: str = DEFAULT_TEXT
    h: int = 4
    d_model: int = 64
    d_k: int | None = None
    d_v: int | None = None
    d_out: int | None = None
    seed: int = 0
    causal: bool = False
    pe: bool = True
    cross: bool = False
    context: str = DEFAULT_CONTEXT
    compare: tuple[int, ...] = ()  # heads opened larger (Heads) or below the thumbnails (Overview)
    zoom: int = 0  # Heads, long inputs: first (query) position of the full-resolution window
    zoom_k: int = 0  # Heads, inputs past MAX_TOKENS: first key position of the full-resolution window
    head: int = 0  # One head, Lines (one at a time)
    lines_all: bool = True  # Lines: every head overlaid, else only `head`
    pick: str = ""  # Lines: "q3" keeps query 3's lines, "k5" key 5's; "" all lines
    q_pos: int = 0  # One head, why one score: the query position
    k_pos: int = 0  # ... and the key position
    view: str = VIEWS[0]
    section: str = SECTIONS[0]  # Analysis
    off: tuple[int, ...] = ()  # Analysis, knockout: heads switched off
    rank_final: bool = False  # Analysis, knockout: also rank by the final hidden state
    norm: bool = False  # Analysis, contribution: norm-based attention
    threshold: float = 0.05  # Analysis, redundancy: near-duplicate below this mean JSD (bits)
    rollout_layer: int | None = None  # Analysis, rollout: through this layer (None: the last)
    compare_with: str = COMPARE_WITH[0]  # Analysis, compare
    other_text: str = ""
    other_layer: int | None = None
    other_model: str = ""
    compare_head: int | None = None  # None: the mean over heads
    by_position: bool = False
    detector: str = "induction"  # Analysis, head detectors: the kind of head shown
    dla_position: int | None = None  # Analysis, logit attribution: the position (None: the last)
    dla_token: str = ""  # ... and the token whose logit is split ("": the model's top prediction)
    new_tokens: int = 8  # Generate: how many tokens to write
    temperature: float = 0.0  # 0 is greedy
    top_k: int = 0  # 0: no top-k filter
    top_p: float = 1.0  # 1: no nucleus filter
    gen_seed: int = 0  # the sampling seed
    step: int = 1  # the generated token shown, from 1


DEFAULTS = ViewState()
# The longest value of every free-text field: the server cuts anything longer (the widgets cap typing,
# but a crafted message or a script could send more).
TEXT_CAPS = {"text": MAX_TEXT_CHARS, "context": MAX_TEXT_CHARS, "other_text": MAX_TEXT_CHARS,
             "sequence": MAX_SEQUENCE_CHARS, "model": MAX_MODEL_CHARS, "other_model": MAX_MODEL_CHARS,
             "dla_token": 100}


def _int(raw: str, lo: int, hi: int) -> int:
    value = int(raw.strip())
    if not lo <= value <= hi:
        raise ValueError
    return value


def _bool(raw: str) -> bool:
    low = raw.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise ValueError


def _text(raw: str) -> str:
    if len(raw) > MAX_TEXT_CHARS:
        raise ValueError
    return raw


def _short_text(n: int):
    def parse(raw: str) -> str:
        if len(raw) > n:
            raise ValueError
        return raw

    return parse


def _optional_width(raw: str) -> int | None:
    return None if raw.strip().lower() in ("", "auto") else _int(raw, 1, MAX_HEAD_WIDTH)


def _heads(raw: str) -> tuple[int, ...]:
    return tuple(dict.fromkeys(_int(p, 0, MAX_HEADS - 1) for p in raw.split(",") if p.strip()))


def _optional_int(hi: int):
    def parse(raw: str) -> int | None:
        return None if raw.strip().lower() in ("", "auto", "mean", "last") else _int(raw, 0, hi)

    return parse


def _float(lo: float, hi: float):
    def parse(raw: str) -> float:
        value = float(raw.strip())
        if not lo <= value <= hi:  # NaN fails too
            raise ValueError
        return value

    return parse


def _pick(raw: str) -> str:
    """"" (no token picked), "q<position>" or "k<position>"."""
    raw = raw.strip()
    if raw and not re.fullmatch(r"[qk]\d{1,4}", raw):
        raise ValueError
    return raw


def _sequence(raw: str) -> str:
    if len(raw) > MAX_SEQUENCE_CHARS:
        raise ValueError
    return " ".join(raw.split())


def _d_model(raw: str) -> int:
    value = int(raw.strip())
    if value not in D_MODEL_CHOICES:
        raise ValueError
    return value


def _one_of(choices: tuple[str, ...]):
    def parse(raw: str) -> str:
        if raw not in choices:
            raise ValueError
        return raw

    return parse


def _task(raw: str) -> str:
    if raw not in TASK_NAMES:
        raise ValueError
    return raw


def _model_id(raw: str) -> str:
    """A hub id like org/name; paths and anything else are refused (they are typed, not linked)."""
    raw = raw.strip()
    if raw and (not _HUB_ID.fullmatch(raw) or ".." in raw):
        raise ValueError
    return raw


PARSERS = {
    "mode": (_one_of(MODES), "one of " + ", ".join(MODES)),
    "model": (_model_id, "a Hugging Face model id such as gpt2 or org/name"),
    "layer": (lambda r: _int(r, 0, MAX_LAYERS - 1), f"a layer number from 0 to {MAX_LAYERS - 1}"),
    "part": (_one_of(PARTS), "one of " + ", ".join(PARTS)),
    "special": (_bool, "true or false"),
    "task": (_task, "a task name: " + ", ".join(TASK_NAMES)),
    "steps": (lambda r: _int(r, 1, MAX_STEPS), f"a number of steps from 1 to {MAX_STEPS}"),
    "text": (_text, f"at most {MAX_TEXT_CHARS} characters"),
    "h": (lambda r: _int(r, 1, MAX_HEADS), f"a whole number of heads from 1 to {MAX_HEADS}"),
    "d_model": (_d_model, "one of " + ", ".join(map(str, D_MODEL_CHOICES))),
    "d_k": (_optional_width, f"auto or 1 to {MAX_HEAD_WIDTH}"),
    "d_v": (_optional_width, f"auto or 1 to {MAX_HEAD_WIDTH}"),
    "d_out": (_optional_width, f"auto or 1 to {MAX_HEAD_WIDTH}"),
    "seed": (lambda r: _int(r, 0, MAX_SEED), f"a whole number from 0 to {MAX_SEED}"),
    "causal": (_bool, "true or false"),
    "pe": (_bool, "true or false"),
    "cross": (_bool, "true or false"),
    "context": (_text, f"at most {MAX_TEXT_CHARS} characters"),
    "compare": (_heads, f"head numbers from 0 to {MAX_HEADS - 1}, comma-separated"),
    "head": (lambda r: _int(r, 0, MAX_HEADS - 1), f"a head number from 0 to {MAX_HEADS - 1}"),
    "view": (_one_of(VIEWS), "one of " + ", ".join(VIEWS)),
    "weights": (_one_of(WEIGHTS), "one of " + ", ".join(WEIGHTS)),
    "sequence": (_sequence, f"task tokens separated by spaces, at most {MAX_SEQUENCE_CHARS} characters"),
    "zoom": (lambda r: _int(r, 0, MAX_LONG_TOKENS - 1), f"a position from 0 to {MAX_LONG_TOKENS - 1}"),
    "zoom_k": (lambda r: _int(r, 0, MAX_LONG_TOKENS - 1), f"a position from 0 to {MAX_LONG_TOKENS - 1}"),
    "lines_all": (_bool, "true or false"),
    "pick": (_pick, "q or k and a position, e.g. q3"),
    "q_pos": (lambda r: _int(r, 0, MAX_TOKENS - 1), f"a position from 0 to {MAX_TOKENS - 1}"),
    "k_pos": (lambda r: _int(r, 0, MAX_TOKENS - 1), f"a position from 0 to {MAX_TOKENS - 1}"),
    "section": (_one_of(SECTIONS), "one of " + ", ".join(SECTIONS)),
    "off": (_heads, f"head numbers from 0 to {MAX_HEADS - 1}, comma-separated"),
    "rank_final": (_bool, "true or false"),
    "norm": (_bool, "true or false"),
    "threshold": (_float(0.0, 0.5), "a number from 0 to 0.5"),
    "rollout_layer": (_optional_int(MAX_LAYERS - 1), f"last or a layer number from 0 to {MAX_LAYERS - 1}"),
    "compare_with": (_one_of(COMPARE_WITH), "one of " + ", ".join(COMPARE_WITH)),
    "other_text": (_text, f"at most {MAX_TEXT_CHARS} characters"),
    "other_layer": (_optional_int(MAX_LAYERS - 1), f"a layer number from 0 to {MAX_LAYERS - 1}"),
    "other_model": (_model_id, "a Hugging Face model id such as gpt2 or org/name"),
    "compare_head": (_optional_int(MAX_HEADS - 1), f"mean or a head number from 0 to {MAX_HEADS - 1}"),
    "by_position": (_bool, "true or false"),
    "detector": (_one_of(DETECTORS), "one of " + ", ".join(DETECTORS)),
    "dla_position": (_optional_int(MAX_TOKENS - 1), f"last or a position from 0 to {MAX_TOKENS - 1}"),
    "dla_token": (_short_text(100), "a token, at most 100 characters"),
    "new_tokens": (lambda r: _int(r, 1, MAX_NEW_TOKENS), f"a number of tokens from 1 to {MAX_NEW_TOKENS}"),
    "temperature": (_float(0.0, 2.0), "a number from 0 (greedy) to 2"),
    "top_k": (lambda r: _int(r, 0, 1_000_000), "0 (off) or a number of tokens"),
    "top_p": (_float(0.01, 1.0), "a number from 0.01 to 1 (off)"),
    "gen_seed": (lambda r: _int(r, 0, MAX_SEED), f"a whole number from 0 to {MAX_SEED}"),
    "step": (lambda r: _int(r, 1, MAX_NEW_TOKENS), f"a step from 1 to {MAX_NEW_TOKENS}"),
}


def _shorten(raw: str, n: int = 40) -> str:
    return raw if len(raw) <= n else raw[:n] + "…"


def parse_query(params: Mapping[str, str | list[str]], ignore: frozenset[str] = frozenset()) -> tuple[ViewState, list[str]]:
    """ViewState from query params; invalid or unknown params give defaults and a notice each."""
    values: dict[str, object] = {}
    notices: list[str] = []
    for key, raw in params.items():
        if key in ignore:
            continue
        raw = raw[-1] if isinstance(raw, list) else raw
        if key not in PARSERS:
            notices.append(f"Ignored unknown URL parameter '{_shorten(key, 20)}'.")
            continue
        parse, expected = PARSERS[key]
        try:
            values[key] = parse(raw)
        except (ValueError, TypeError, OverflowError):
            notices.append(f"URL parameter {key}='{_shorten(raw)}' is not valid ({expected}); using the default {getattr(DEFAULTS, key)!r}.")
    return replace(DEFAULTS, **values), notices


def _format(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    if isinstance(value, float):
        return f"{value:g}"
    return "auto" if value is None else str(value)


def to_query(state: ViewState) -> dict[str, str]:
    """The values that differ from the defaults, as strings (short, readable URLs).

    A value that parse_query would refuse (a local folder typed as the model, say) is left out,
    so a shared link never carries it.
    """
    query = {}
    for f in fields(ViewState):
        value = getattr(state, f.name)
        if value == getattr(DEFAULTS, f.name):
            continue
        text = _format(value)
        try:
            PARSERS[f.name][0](text)
        except (ValueError, TypeError, OverflowError):
            continue
        query[f.name] = text
    return query


# Values a browser sends back (a layer button, a click on a heatmap, a box drawn, a picked table row) are
# checked like URL values: a crafted client can send any JSON there (negative, NaN, huge, strings, lists).
CLICKED_FIELDS = ("layer", "head", "compare", "pick", "zoom", "zoom_k")  # the fields such values write


def checked_field(name: str, value: object) -> object:
    """A session's value of one of CLICKED_FIELDS, checked as its URL parameter is (heads up to
    MAX_CLICKED_HEADS: pretrained models have more than a link names); its default when invalid, and for
    compare the valid heads only."""
    if name == "compare":
        heads = (client_int(h, 0, MAX_CLICKED_HEADS - 1) for h in value) if isinstance(value, (list, tuple)) else ()
        return tuple(dict.fromkeys(h for h in heads if h is not None))
    if name == "pick":
        return value if isinstance(value, str) and re.fullmatch(r"[qk]\d{1,4}", value) else ""
    top = {"layer": MAX_LAYERS, "head": MAX_CLICKED_HEADS}.get(name, MAX_LONG_TOKENS)
    checked = client_int(value, 0, top - 1)
    return getattr(DEFAULTS, name) if checked is None else checked
