"""The app's shareable state as URL query parameters: parse (with notices) and serialise.

Pure Python so it can be tested without Streamlit. Every value is checked; an invalid one falls
back to its default and produces a notice that the app shows to the user.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields

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
    MAX_NEW_TOKENS,
    MAX_REACH_LAYERS,
    MAX_SEED,
    MAX_SEQUENCE_CHARS,
    MAX_STEPS,
    MAX_TEXT_CHARS,
    MAX_TOKENS,
    client_int,
)
from .names import (
    ABLATION_KINDS,
    COMPOSITION_KINDS,
    DETECTOR_KINDS,
    PATCH_CHOICES,
    PATCH_DIRECTIONS,
    PATCH_METRICS,
    PATCH_THROUGH,
    SINK_KINDS,
    TASK_NAMES,
)
from .parts import SECTIONS, VIEWS, Part, StateField, all_fields, core_fields
from .text import DEFAULT_TEXT
from .variants import VARIANTS as LAYER_VARIANTS  # the configurable layer's attention variants: kind -> spec
from .variants.spec import variant_fields
from .variants_cost import VARIANTS

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
COMPARE_WITH = ("Another sentence", "Another layer", "Another model")
CIRCUITS = ("OV", "QK", "QK positions")  # the Circuits section's token tables
MAX_RECEIVERS = 64  # receiver heads of path patching a link may name
MAX_LESSONS = 99  # the lesson numbers a link may name (the app says when no lesson has that number)
MAX_LESSON_STEPS = 8  # the steps a lesson may have (mha_viz.lessons.parse_lesson)
_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}(/[A-Za-z0-9][A-Za-z0-9._-]{0,95})?")


@dataclass(frozen=True, init=False)
class ViewState:
    """Everything a view depends on; each field is a widget key and a URL parameter.

    The fields below are the page's own; the registered variants', views' and sections' fields (mha_viz.variants:
    kv_heads, window, ...; mha_viz.parts: compare, section, off, new_tokens, ...) are attributes too, held in `parts` and read as state.section. The constructor
    and dataclasses.replace take either kind by name.
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


def _heads(raw: str) -> tuple[int, ...]:
    return tuple(dict.fromkeys(_int(p, 0, MAX_HEADS - 1) for p in raw.split(",") if p.strip()))


def _layer_heads(raw: str) -> tuple[str, ...]:
    """"1.0,1.3" -> ("1.0", "1.3"): heads as layer.head (a layer below MAX_LAYERS, a head below MAX_CLICKED_HEADS)."""
    heads = []
    for part in (p.strip() for p in raw.split(",")):
        if part:
            layer, dot, head = part.partition(".")
            if not dot:
                raise ValueError
            heads.append(f"{_int(layer, 0, MAX_LAYERS - 1)}.{_int(head, 0, MAX_CLICKED_HEADS - 1)}")
    if len(heads) > MAX_RECEIVERS:
        raise ValueError
    return tuple(dict.fromkeys(heads))


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


def _model_id(raw: str) -> str:
    """A hub id like org/name; paths and anything else are refused (they are typed, not linked)."""
    raw = raw.strip()
    if raw and (not _HUB_ID.fullmatch(raw) or ".." in raw):
        raise ValueError
    return raw


def _one_of_registered(names: Sequence[str]) -> Callable[[], str]:
    return lambda: "one of " + ", ".join(names)


def _core(name: str, parse: Callable[[str], object], expected: str | Callable[[], str], cap: int | None = None
          ) -> StateField:
    """A field of ViewState itself (its default is the dataclass's)."""
    return StateField(name, ViewState.__dataclass_fields__[name].default, parse, expected, cap)


def _ranged(name: str, default: object, lo: float, hi: float, expected: str, *, even: bool = False,
            optional: bool = False) -> StateField:
    """A number from lo to hi: the range a link may name and its widget offers (StateField.bounds). Whole numbers
    when lo and hi are ints; even: even ones only; optional: "" or "auto" is None. expected may name {lo} and {hi}."""
    whole = isinstance(lo, int) and isinstance(hi, int)

    def parse(raw: str) -> int | float | None:
        if optional and raw.strip().lower() in ("", "auto"):
            return None
        value = _int(raw, lo, hi) if whole else _float(lo, hi)(raw)
        if even and value % 2:
            raise ValueError
        return value

    def shown(x: float) -> str:
        return str(x) if isinstance(x, int) else f"{x:g}"

    return StateField(name, default, parse, expected.format(lo=shown(lo), hi=shown(hi)), bounds=(lo, hi))


def _core_ranged(name: str, lo: float, hi: float, expected: str, **kind: bool) -> StateField:
    """A ranged field of ViewState itself (see _ranged)."""
    return _ranged(name, ViewState.__dataclass_fields__[name].default, lo, hi, expected, **kind)


_BOOL = "true or false"
_MODEL_ID = "a Hugging Face model id such as gpt2 or org/name"
_HEAD_LIST = f"head numbers from 0 to {MAX_HEADS - 1}, comma-separated"
core_fields((
    _core("mode", _one_of(MODES), "one of " + ", ".join(MODES)),
    _core("model", _model_id, _MODEL_ID, MAX_MODEL_CHARS),
    _core("layer", lambda r: _int(r, 0, MAX_LAYERS - 1), f"a layer number from 0 to {MAX_LAYERS - 1}"),
    _core("part", _one_of(PARTS), "one of " + ", ".join(PARTS)),
    _core("special", _bool, _BOOL),
    _core("weights", _one_of(WEIGHTS), "one of " + ", ".join(WEIGHTS)),
    _core("task", _one_of(TASK_NAMES), "a task name: " + ", ".join(TASK_NAMES)),
    _core("sequence", _sequence, f"task tokens separated by spaces, at most {MAX_SEQUENCE_CHARS} characters",
          MAX_SEQUENCE_CHARS),
    _core_ranged("steps", 1, MAX_STEPS, "a number of steps from {lo} to {hi}"),
    _core("text", _text, f"at most {MAX_TEXT_CHARS} characters", MAX_LONG_TEXT_CHARS),  # longer: typed, not linked
    _core("h", lambda r: _int(r, 1, MAX_HEADS), f"a whole number of heads from 1 to {MAX_HEADS}"),
    _core("d_model", _d_model, "one of " + ", ".join(map(str, D_MODEL_CHOICES))),
    _core("variant", _one_of(LAYER_VARIANTS), _one_of_registered(LAYER_VARIANTS)),
    *variant_fields(),  # each variant's own (mha_viz.variants.spec), in the URL after the variant
    _core_ranged("diversity", 0.0, MAX_DIVERSITY, "a penalty weight from {lo} to {hi}"),
    _core_ranged("d_k", 1, MAX_HEAD_WIDTH, "auto or {lo} to {hi}", optional=True),
    _core_ranged("d_v", 1, MAX_HEAD_WIDTH, "auto or {lo} to {hi}", optional=True),
    _core_ranged("d_out", 1, MAX_HEAD_WIDTH, "auto or {lo} to {hi}", optional=True),
    _core_ranged("seed", 0, MAX_SEED, "a whole number from {lo} to {hi}"),
    _core("causal", _bool, _BOOL),
    _core("pe", _bool, _BOOL),
    _core("cross", _bool, _BOOL),
    _core("context", _text, f"at most {MAX_TEXT_CHARS} characters", MAX_TEXT_CHARS),
    _core("head", lambda r: _int(r, 0, MAX_HEADS - 1), f"a head number from 0 to {MAX_HEADS - 1}"),
    _core("view", _one_of(VIEWS), _one_of_registered(VIEWS)),
    _core("lesson", lambda r: _int(r, 0, MAX_LESSONS), f"0 (none) or a lesson number from 1 to {MAX_LESSONS}"),
    _core("step", lambda r: _int(r, 1, MAX_LESSON_STEPS), f"a lesson's step from 1 to {MAX_LESSON_STEPS}"),
))

# The built-in views and analysis sections, in menu order (a mode's menu keeps the ones it offers). Each names
# its render function (mha_viz/ui/) and declares its URL-state fields; a field two parts share is one object.
_COMPARE = StateField("compare", (), _heads, _HEAD_LIST)  # heads opened larger (Heads) or below the thumbnails
_POSITION = f"a position from 0 to {MAX_TOKENS - 1}"
_LONG_POSITION = f"a position from 0 to {MAX_MODEL_LONG_TOKENS - 1}"  # a long input's, pretrained mode's too
LONG_STATS = ("distance", "entropy", "first", "sink")  # mha_viz.pretrained.long.STAT_NAMES
_TRACE_MODES = ("Configurable", "Pretrained", "Train")
VIEWS.register(Part(
    "Generate", ("Pretrained",), "mha_viz.ui.view_parts:generate", needs=("causal_lm",),
    help="A causal language model writes, token by token, with the attention behind each new token.",
    fields=(StateField("new_tokens", 8, lambda r: _int(r, 1, MAX_NEW_TOKENS),
                       f"a number of tokens from 1 to {MAX_NEW_TOKENS}"),
            _ranged("temperature", 0.0, 0.0, 2.0, "a number from {lo} (greedy) to {hi}"),
            _ranged("top_k", 0, 0, 1_000_000, "0 (off) or a number of tokens up to {hi}"),
            _ranged("top_p", 1.0, 0.01, 1.0, "a number from {lo} to {hi} (off)"),
            _ranged("gen_seed", 0, 0, MAX_SEED, "a whole number from {lo} to {hi}"),
            StateField("gen_step", 1, lambda r: _int(r, 1, MAX_NEW_TOKENS), f"a step from 1 to {MAX_NEW_TOKENS}"))))
VIEWS.register(Part("Training", ("Train",), "mha_viz.ui.view_parts:training",
                    help="h heads and one head trained side by side on a task, with their accuracy."))
VIEWS.register(Part(
    "Heads", ("Configurable", "Pretrained"), "mha_viz.ui.view_parts:heads", arrays=("weights",),  # Train: Training
    help="Every head's attention weights, one heatmap a head.",
    fields=(_COMPARE,
            StateField("zoom", 0, lambda r: _int(r, 0, MAX_MODEL_LONG_TOKENS - 1), _LONG_POSITION),  # a long input's window
            StateField("zoom_k", 0, lambda r: _int(r, 0, MAX_MODEL_LONG_TOKENS - 1), _LONG_POSITION),
            StateField("long_stat", "distance", _one_of(LONG_STATS), "one of " + ", ".join(LONG_STATS)))))
VIEWS.register(Part(
    "Lines", _TRACE_MODES, "mha_viz.ui.view_parts:lines", arrays=("weights",),
    help="Attention as lines from each query token to the keys it reads.",
    fields=(StateField("lines_all", True, _bool, _BOOL),  # every head overlaid, else only `head`
            StateField("pick", "", _pick, "q or k and a position, e.g. q3"))))  # "q3": query 3's lines only
VIEWS.register(Part("Overview", ("Pretrained",), "mha_viz.ui.view_parts:overview", arrays=("weights",),
                    help="Every layer's heads as thumbnails; a click opens one.", fields=(_COMPARE,)))
VIEWS.register(Part(
    "One head", _TRACE_MODES, "mha_viz.ui.view_parts:one_head",
    arrays=("queries", "keys", "values", "scores", "head_outputs"),
    help="One head step by step: Q, K, V, scores, softmax, output; why one score is what it is.",
    fields=(StateField("q_pos", 0, lambda r: _int(r, 0, MAX_TOKENS - 1), _POSITION),
            StateField("k_pos", 0, lambda r: _int(r, 0, MAX_TOKENS - 1), _POSITION))))
VIEWS.register(Part("Concat → W_O", _TRACE_MODES, "mha_viz.ui.view_parts:concat",
                    arrays=("concat", "W_O", "output", "head_outputs"),
                    help="The heads' outputs concatenated, then mixed by W_O into the layer's output."))
VIEWS.register(Part("Analysis", _TRACE_MODES, "mha_viz.ui.view_parts:analysis", arrays=("weights",),
                    help="Which heads do what, and which heads matter: the analysis sections.",
                    fields=(StateField("section", "Head statistics", _one_of(SECTIONS),
                                       _one_of_registered(SECTIONS)),)))
VIEWS.register(Part("Two maps", ("Configurable", "Pretrained"), "mha_viz.ui.differential:two_maps",
                    needs=("differential",), arrays=("maps", "lambdas"),
                    help="Differential attention: each head's two softmax maps, their signed difference, and what it "
                         "cancels."))
VIEWS.register(Part("Window & sinks", ("Configurable",), "mha_viz.ui.window:render", needs=("windowed",),
                    arrays=("weights",), help="The sliding window's band, each head's sink mass, and what a token "
                    "reaches through L stacked windowed layers.",
                    fields=(_ranged("reach_layers", 2, 1, MAX_REACH_LAYERS, "a number of layers from {lo} to {hi}"),)))
VIEWS.register(Part("Latent (MLA)", ("Configurable", "Pretrained"), "mha_viz.ui.latent:render", needs=("latent",),
                    arrays=("queries", "keys", "values", "scores"),
                    help="Multi-head latent attention: the latent each token caches, one head's keys and values "
                         "rebuilt from it, the cache beside MHA's, and why the rotary part is kept apart."))
VIEWS.register(Part("Router (MoH)", ("Configurable",), "mha_viz.ui.mixture:render", needs=("routed",),
                    arrays=("gates", "concat"),
                    help="Mixture-of-heads: which heads the router gives each token, each head's load, the gated concat."))
# The variants compared under Shapes & cost: prefixed cost_, because they price a layer beside MHA and do not change
# the layer the page computes (a configurable-mode `variant` control would).
CONTEXTS = tuple(2**i for i in range(8, 21))  # 256 ... 1,048,576 tokens


def _context(raw: str) -> int:
    value = int(raw.strip())
    if value not in CONTEXTS:
        raise ValueError
    return value


VIEWS.register(Part(
    "Shapes & cost", ("Configurable",), "mha_viz.ui.view_parts:shapes",
    help="Every matrix's shape and the layer's cost in parameters and operations, and attention variants beside MHA.",
    fields=(StateField("cost_variant", "gqa", _one_of(VARIANTS), "one of " + ", ".join(VARIANTS)),
            StateField("cost_kv_heads", 1, lambda r: _int(r, 1, MAX_HEADS), f"a number of KV heads from 1 to {MAX_HEADS}"),
            _ranged("cost_kv_latent", 16, 1, 4096, "a latent width from {lo} to {hi}"),
            _ranged("cost_q_latent", 0, 0, 4096, "0 (none) or a latent width up to {hi}"),
            _ranged("cost_rope_dim", 4, 0, 256, "a number of rotary dimensions from {lo} to {hi}"),
            _ranged("cost_window", 64, 1, CONTEXTS[-1], "a window from {lo} to {hi}"),
            StateField("cost_sinks", "none", _one_of(SINKS), "one of " + ", ".join(SINKS)),
            StateField("cost_moh_k", 1, lambda r: _int(r, 1, MAX_HEADS), f"a number of heads from 1 to {MAX_HEADS}"),
            StateField("cost_context", 8192, _context,
                       f"a power of two from {CONTEXTS[0]} to {CONTEXTS[-1]}"))))
VIEWS.register(Part("Formulas", ("Configurable",), "mha_viz.ui.view_parts:formulas",
                    help="The layer's equations with this layer's sizes."))

_ANALYSIS = "mha_viz.ui.analysis:"
SECTIONS.register(Part("Head statistics", _TRACE_MODES, _ANALYSIS + "head_statistics",
                       help="Entropy, confidence and where each head looks, one row a head."))
SECTIONS.register(Part("Redundancy", _TRACE_MODES, _ANALYSIS + "redundancy_section",
                       help="Which heads attend alike (Jensen-Shannon divergence).",
                       fields=(_ranged("threshold", 0.05, 0.0, 0.5, "a number from {lo} to {hi}"),)))
SECTIONS.register(Part("Contribution", _TRACE_MODES, _ANALYSIS + "contribution", arrays=("head_outputs", "W_O"),
                       help="How much each head adds to the output; norm-based attention.",
                       fields=(StateField("norm", False, _bool, _BOOL),)))
SECTIONS.register(Part("Knockout", _TRACE_MODES, _ANALYSIS + "knockout", arrays=("head_outputs", "W_O", "output"),
                       help="Switch heads off and measure what changes.",
                       fields=(StateField("off", (), _heads, _HEAD_LIST),
                               StateField("rank_final", False, _bool, _BOOL),
                               StateField("ablation", "zero", _one_of(ABLATION_KINDS),
                                          "one of " + ", ".join(ABLATION_KINDS)),
                               StateField("ablation_text", "", _text, f"at most {MAX_TEXT_CHARS} characters",
                                          MAX_TEXT_CHARS))))
SECTIONS.register(Part("Rollout", _TRACE_MODES, _ANALYSIS + "rollout",
                       help="Attention chained through the layers (Abnar and Zuidema 2020).",
                       fields=(StateField("rollout_layer", None, _optional_int(MAX_LAYERS - 1),
                                          f"last or a layer number from 0 to {MAX_LAYERS - 1}"),)))
SECTIONS.register(Part(
    "Compare", _TRACE_MODES, _ANALYSIS + "compare",
    help="This layer against another sentence, layer or model.",
    fields=(StateField("compare_with", COMPARE_WITH[0], _one_of(COMPARE_WITH), "one of " + ", ".join(COMPARE_WITH)),
            StateField("other_text", "", _text, f"at most {MAX_TEXT_CHARS} characters", MAX_TEXT_CHARS),
            StateField("other_layer", None, _optional_int(MAX_LAYERS - 1),
                       f"a layer number from 0 to {MAX_LAYERS - 1}"),
            StateField("other_model", "", _model_id, _MODEL_ID, MAX_MODEL_CHARS),
            StateField("compare_head", None, _optional_int(MAX_HEADS - 1),  # None: the mean over heads
                       f"mean or a head number from 0 to {MAX_HEADS - 1}"),
            StateField("by_position", False, _bool, _BOOL))))
SECTIONS.register(Part("Concat vs sum", _TRACE_MODES, _ANALYSIS + "concat_sum",
                       arrays=("head_outputs", "W_O", "output", "concat"),
                       help="What concatenating the heads keeps that summing them would lose."))
SECTIONS.register(Part(
    "Logit attribution", _TRACE_MODES, _ANALYSIS + "logit_attribution",
    help="Each head's share of the logit of the next token (direct logit attribution).",
    fields=(StateField("dla_position", None, _optional_int(MAX_TOKENS - 1),  # None: the last position
                       f"last or a position from 0 to {MAX_TOKENS - 1}"),
            StateField("dla_token", "", _short_text(100), "a token, at most 100 characters", 100))))
SECTIONS.register(Part("Head detectors", _TRACE_MODES, _ANALYSIS + "head_detectors",
                       help="Previous-token, duplicate-token and induction scores of every head.",
                       fields=(StateField("detector", "induction", _one_of(DETECTORS),
                                          "one of " + ", ".join(DETECTORS)),)))
SECTIONS.register(Part(
    "Circuits", _TRACE_MODES, "mha_viz.ui.circuits:render",
    help="Why a head does what it does, from its weights: QK and OV circuits, singular values, copying scores.",
    fields=(StateField("circuit", CIRCUITS[0], _one_of(CIRCUITS), "one of " + ", ".join(CIRCUITS)),
            _ranged("circuit_k", 10, 1, 50, "a number of columns per row from {lo} to {hi}"))))

SECTIONS.register(Part("Composition", ("Pretrained",), "mha_viz.ui.composition:render", needs=("composable",),
                       help="How much each head reads what an earlier head writes (Q-, K-, V-composition).",
                       fields=(StateField("composition", "k", _one_of(COMPOSITION_KINDS),
                                          "one of " + ", ".join(COMPOSITION_KINDS)),)))
# W_O at work: offered where a source has a known readout over a small vocabulary (the token_readout flag: a trained
# layer's relation readouts, a small language model's unembedding), in every mode such a source appears in.
SECTIONS.register(Part("W_O at work", _TRACE_MODES, "mha_viz.ui.readout:wo_at_work", needs=("token_readout",),
                       help="Each head's block of W_O followed to the readout: what it writes for the right answer.",
                       fields=(StateField("wo_answer", 0, lambda r: _int(r, 0, 7), "an answer number from 0 to 7"),)))

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
    top = {"layer": MAX_LAYERS, "head": MAX_CLICKED_HEADS}.get(name, MAX_MODEL_LONG_TOKENS)
    checked = client_int(value, 0, top - 1)
    return getattr(DEFAULTS, name) if checked is None else checked
SECTIONS.register(Part(
    "Patching", _TRACE_MODES, "mha_viz.ui.patching:render", needs=("causal_lm",),
    help="Which heads and positions carry a behaviour: activation patching between a clean and a corrupted prompt.",
    fields=(StateField("patch_pair", "", _short_text(100), "a ready-made pair's name, at most 100 characters", 100),
            StateField("patch_clean", "", _short_text(2000), "at most 2000 characters", 2000),
            StateField("patch_corrupted", "", _short_text(2000), "at most 2000 characters", 2000),
            StateField("patch_answer", "", _short_text(100), "a token, at most 100 characters", 100),
            StateField("patch_wrong", "", _short_text(100), "a token, at most 100 characters", 100),
            StateField("patch_metric", "logit_diff", _one_of(PATCH_METRICS), "one of " + ", ".join(PATCH_METRICS)),
            StateField("patch_site", "head", _one_of(PATCH_CHOICES), "one of " + ", ".join(PATCH_CHOICES)),
            StateField("patch_direction", "denoise", _one_of(PATCH_DIRECTIONS),
                       "one of " + ", ".join(PATCH_DIRECTIONS)),
            # path patching: the receiver heads ("layer.head"; none: the model's default receivers) and their input
            StateField("patch_receivers", (), _layer_heads,
                       f"heads as layer.head, comma-separated, e.g. 1.0,1.3, at most {MAX_RECEIVERS}"),
            StateField("patch_through", "k", _one_of(PATCH_THROUGH), "one of " + ", ".join(PATCH_THROUGH)))))
