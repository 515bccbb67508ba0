"""The app's shareable state as URL query parameters: ViewState, parse (with notices) and serialise.

Pure Python so it can be tested without Streamlit. Every value is checked (its field's parser: mha_viz.fields); an
invalid one falls back to its default and produces a notice that the app shows to the user. The page's own fields are
declared here; each view's and section's are declared by its module (mha_viz/ui/parts/), discovered below.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, fields

from .fields import BOOL, MODEL_ID, boolean, model_id, one_of, one_of_registered, ranged, short_text, whole
from .limits import (
    D_MODEL_CHOICES,
    MAX_CLICKED_HEADS,
    MAX_DIVERSITY,
    MAX_HEAD_WIDTH,
    MAX_HEADS,
    MAX_LAYERS,
    MAX_LONG_TEXT_CHARS,
    MAX_MODEL_CHARS,
    MAX_MODEL_LONG_TOKENS,
    MAX_SEED,
    MAX_SEQUENCE_CHARS,
    MAX_STEPS,
    MAX_TEXT_CHARS,
    client_int,
)
from .names import DETECTOR_KINDS, SINK_KINDS, TASK_NAMES
from .parts import SECTIONS, VIEWS, StateField, all_fields, core_fields
from .text import DEFAULT_TEXT
from .variants import VARIANTS as LAYER_VARIANTS  # the configurable layer's attention variants: kind -> spec
from .variants.spec import variant_fields

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
MODES = ("Configurable", "Pretrained", "Train")
PARTS = ("encoder", "decoder", "cross")
WEIGHTS = ("random", "trained")  # configurable mode: random Xavier weights, or trained on a task
SINKS = SINK_KINDS
DETECTORS = DETECTOR_KINDS
MAX_LESSONS = 99  # the lesson numbers a link may name (the app says when no lesson has that number)
MAX_LESSON_STEPS = 8  # the steps a lesson may have (mha_viz.lessons.parse_lesson)


@dataclass(frozen=True, init=False)
class ViewState:
    """Everything a view depends on; each field is a widget key and a URL parameter.

    The fields below are the page's own; the registered variants', views' and sections' fields (mha_viz.variants:
    kv_heads, window, ...; mha_viz.parts: compare, section, off, new_tokens, ...) are attributes too, held in
    `parts` and read as state.section. The constructor and dataclasses.replace take either kind by name.
    """

    mode: str = MODES[0]
    model: str = ""  # pretrained mode: "" is the bundled MiniLM, else a hub id
    layer: int = 0
    part: str = PARTS[0]
    special: bool = True  # pretrained mode: show special tokens ([CLS], [SEP], BOS)
    weights: str = WEIGHTS[0]  # configurable mode: random or trained weights
    task: str = TASK_NAMES[0]  # train mode and trained weights: a task name from mha_viz.training
    sequence: str = ""  # trained weights: the input, task tokens separated by spaces ("": the task's probe)
    steps: int = 600  # train mode and trained weights: optimiser steps
    text: str = DEFAULT_TEXT
    h: int = 4
    d_model: int = 64
    variant: str = "mha"  # configurable mode: the attention variant (LAYER_VARIANTS); its spec's fields are parts'
    diversity: float = 0.0  # trained weights: weight of the head-diversity penalty (mha_viz.training.diversity)
    d_k: int | None = None
    d_v: int | None = None
    d_out: int | None = None
    seed: int = 0
    causal: bool = False
    pe: bool = True
    cross: bool = False
    context: str = DEFAULT_CONTEXT
    head: int = 0  # the head opened: One head, Lines (one at a time), an analysis table's or chart's click
    view: str = "Heads"
    lesson: int = 0  # the lesson shown (mha_viz.lessons, numbered from 1); 0: none
    step: int = 1  # the lesson's step, from 1
    parts: tuple[tuple[str, object], ...] = ()  # the parts' fields that differ from their defaults, sorted by name

    def __init__(self, parts: tuple[tuple[str, object], ...] = (), **values: object) -> None:
        for f in fields(self):
            if f.name != "parts":
                object.__setattr__(self, f.name, values.pop(f.name, f.default))
        registered = all_fields()
        unknown = [name for name in values if name not in registered]
        if unknown:
            raise TypeError(f"ViewState has no field {unknown[0]!r}")
        changed = {name: value for name, value in (dict(parts) | values).items()
                   if name in registered and value != registered[name].default}
        object.__setattr__(self, "parts", tuple(sorted(changed.items())))

    def __getattr__(self, name: str) -> object:
        """A registered part's field: its value in this state, else its default."""
        for key, value in object.__getattribute__(self, "parts"):
            if key == name:
                return value
        field = all_fields().get(name)
        if field is None:
            raise AttributeError(f"ViewState has no field {name!r}")
        return field.default



def _sequence(raw: str) -> str:
    if len(raw) > MAX_SEQUENCE_CHARS:
        raise ValueError
    return " ".join(raw.split())


def _d_model(raw: str) -> int:
    value = int(raw.strip())
    if value not in D_MODEL_CHOICES:
        raise ValueError
    return value


def _core(name: str, parse: Callable[[str], object], expected: str | Callable[[], str], cap: int | None = None
          ) -> StateField:
    """A field of ViewState itself (its default is the dataclass's)."""
    return StateField(name, ViewState.__dataclass_fields__[name].default, parse, expected, cap)


def _core_ranged(name: str, lo: float, hi: float, expected: str, **kind: bool) -> StateField:
    """A ranged field of ViewState itself (mha_viz.fields.ranged)."""
    return ranged(name, ViewState.__dataclass_fields__[name].default, lo, hi, expected, **kind)


core_fields((
    _core("mode", one_of(MODES), "one of " + ", ".join(MODES)),
    _core("model", model_id, MODEL_ID, MAX_MODEL_CHARS),
    _core("layer", lambda r: whole(r, 0, MAX_LAYERS - 1), f"a layer number from 0 to {MAX_LAYERS - 1}"),
    _core("part", one_of(PARTS), "one of " + ", ".join(PARTS)),
    _core("special", boolean, BOOL),
    _core("weights", one_of(WEIGHTS), "one of " + ", ".join(WEIGHTS)),
    _core("task", one_of(TASK_NAMES), "a task name: " + ", ".join(TASK_NAMES)),
    _core("sequence", _sequence, f"task tokens separated by spaces, at most {MAX_SEQUENCE_CHARS} characters",
          MAX_SEQUENCE_CHARS),
    _core_ranged("steps", 1, MAX_STEPS, "a number of steps from {lo} to {hi}"),
    _core("text", short_text(MAX_TEXT_CHARS), f"at most {MAX_TEXT_CHARS} characters", MAX_LONG_TEXT_CHARS),  # longer: typed, not linked
    _core("h", lambda r: whole(r, 1, MAX_HEADS), f"a whole number of heads from 1 to {MAX_HEADS}"),
    _core("d_model", _d_model, "one of " + ", ".join(map(str, D_MODEL_CHOICES))),
    _core("variant", one_of(LAYER_VARIANTS), one_of_registered(LAYER_VARIANTS)),
    *variant_fields(),  # each variant's own (mha_viz.variants.spec), in the URL after the variant
    _core_ranged("diversity", 0.0, MAX_DIVERSITY, "a penalty weight from {lo} to {hi}"),
    _core_ranged("d_k", 1, MAX_HEAD_WIDTH, "auto or {lo} to {hi}", optional=True),
    _core_ranged("d_v", 1, MAX_HEAD_WIDTH, "auto or {lo} to {hi}", optional=True),
    _core_ranged("d_out", 1, MAX_HEAD_WIDTH, "auto or {lo} to {hi}", optional=True),
    _core_ranged("seed", 0, MAX_SEED, "a whole number from {lo} to {hi}"),
    _core("causal", boolean, BOOL),
    _core("pe", boolean, BOOL),
    _core("cross", boolean, BOOL),
    _core("context", short_text(MAX_TEXT_CHARS), f"at most {MAX_TEXT_CHARS} characters", MAX_TEXT_CHARS),
    _core("head", lambda r: whole(r, 0, MAX_HEADS - 1), f"a head number from 0 to {MAX_HEADS - 1}"),
    _core("view", one_of(VIEWS), one_of_registered(VIEWS)),
    _core("lesson", lambda r: whole(r, 0, MAX_LESSONS), f"0 (none) or a lesson number from 1 to {MAX_LESSONS}"),
    _core("step", lambda r: whole(r, 1, MAX_LESSON_STEPS), f"a lesson's step from 1 to {MAX_LESSON_STEPS}"),
))

# The views and analysis sections: one module each, found by discovery (mha_viz/ui/parts/, pure at import).
VIEWS.discover("mha_viz.ui.parts.views")
SECTIONS.discover("mha_viz.ui.parts.sections")

DEFAULTS = ViewState()


class _Live(Mapping):
    """A read-only mapping computed from the registry at each use, so that a part registered later is in it."""

    def __init__(self, build: Callable[[], dict]) -> None:
        self._build = build

    def __getitem__(self, key: str) -> object:
        return self._build()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._build())

    def __len__(self) -> int:
        return len(self._build())


# Every URL parameter: name -> (parse, what a valid value looks like).
PARSERS: Mapping[str, tuple[Callable[[str], object], str]] = _Live(
    lambda: {name: (f.parse, f.describe()) for name, f in all_fields().items()})
# The longest value of every free-text field: the server cuts anything longer (the widgets cap typing,
# but a crafted message or a script could send more).
TEXT_CAPS: Mapping[str, int] = _Live(lambda: {name: f.cap for name, f in all_fields().items() if f.cap is not None})


def _shorten(raw: str, n: int = 40) -> str:
    return raw if len(raw) <= n else raw[:n] + "…"


def value_notice(name: str, value: object, expected: str, using: object, *, here: bool = False) -> str:
    """The one notice for a value the app cannot use, from a link or beyond what this page has (here: a head this
    layer lacks, a position past the text's end): the parameter, the value, what a valid one is, what is used."""
    raw = value if isinstance(value, str) else _format(value)
    used = using if isinstance(using, str) else _format(using)
    return f"URL parameter {name}='{_shorten(raw)}' is not valid{' here' if here else ''} ({expected}); using {used}."


def parse_query(params: Mapping[str, str | list[str]], ignore: frozenset[str] = frozenset()) -> tuple[ViewState, list[str]]:
    """ViewState from query params; invalid or unknown params give defaults and a notice each."""
    values: dict[str, object] = {}
    notices: list[str] = []
    known = all_fields()
    for key, raw in params.items():
        if key in ignore:
            continue
        raw = raw[-1] if isinstance(raw, list) else raw
        field = known.get(key)
        if field is None:
            notices.append(f"Ignored unknown URL parameter '{_shorten(key, 20)}'.")
            continue
        try:
            values[key] = field.parse(raw)
        except (ValueError, TypeError, OverflowError):
            notices.append(value_notice(key, raw, field.describe(), f"the default {field.default!r}"))
    return ViewState(**values), notices


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
    for f in all_fields().values():
        value = getattr(state, f.name)
        if value == f.default:
            continue
        text = _format(value)
        try:
            f.parse(text)
        except (ValueError, TypeError, OverflowError):
            continue
        query[f.name] = text
    return query


# Values a browser sends back (a layer button, a click on a heatmap or a long overview, a picked table row) are
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
    top = {"layer": MAX_LAYERS, "head": MAX_CLICKED_HEADS}.get(name, MAX_MODEL_LONG_TOKENS)
    checked = client_int(value, 0, top - 1)
    return getattr(DEFAULTS, name) if checked is None else checked
