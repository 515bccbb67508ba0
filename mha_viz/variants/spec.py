"""A variant is one file: the VariantSpec its module registers, and the registry everything else reads.

A spec is data and pure functions (no Streamlit, no torch here): the menus, the URL fields, the sidebar controls
(mha_viz.ui.controls draws its Control list), Shapes & cost, the formulas, the training comparison and the tests all
read VARIANTS instead of naming kinds. A variant's module ends with one `register(VariantSpec(...))`:

    >>> from mha_viz.variants import VARIANTS  # the package imports every variant's module: they register
    >>> list(VARIANTS)
    ['mha', 'gqa', 'mla', 'window', 'diff', 'moh']
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..config import MHAConfig
from ..parts import StateField, add_fields, all_fields, remove_fields
from ..variants_cost import VariantShape

if TYPE_CHECKING:
    from torch import nn

Values = Mapping[str, Any]  # the page's h and the variant's own fields, by name (a control's options read them)


@dataclass(frozen=True)
class Control:
    """One widget of a variant's sidebar controls, declared; mha_viz.ui.controls draws it (key: name).

    kind: "radio" (horizontal), "number" (a number box, step 1), "slider", "select_slider", or "caption" (label is
    the text, no widget). help: its tooltip (or help(values)); options(values): the choices of a radio or select
    slider; bounds(values): a slider's or number box's (lo, hi), None: its URL field's bounds; labels(values): how a
    choice is shown; disabled(values); column: drawn side by side with the neighbouring column controls; refit: after
    it moves, the spec's fit runs.
    """

    name: str
    label: str
    kind: str
    help: str | Callable[[Values], str] = ""
    options: Callable[[Values], Sequence[Any]] | None = None
    bounds: Callable[[Values], tuple[int, int]] | None = None
    labels: Callable[[Values], Callable[[Any], str]] | None = None
    disabled: Callable[[Values], bool] | None = None
    column: bool = False
    refit: bool = False


def _nothing(*args: Any) -> None:
    return None


def _no_lines(*args: Any, **kwargs: Any) -> list[str]:
    return []


def _no_changes(values: Values) -> dict[str, Any]:
    return {}


def _title(cfg: MHAConfig, variant: LayerVariant) -> str:
    return f"{variant.spec.name} attention: h = {cfg.num_heads}"


def _stem(cfg: MHAConfig, variant: LayerVariant) -> str:
    return f"-{variant.kind}"


@dataclass(frozen=True)
class Training:
    """How the training comparison (mha_viz.training.variants, trainer) treats the variant.

    label(variant, h): its short name in tables and charts ("MLA c=16"); grid(h): the variants of it the default
    comparison trains; loss(model, tokens, variant): an extra training loss term (None: none); signed: its weights
    are signed (not distributions), so no divergence between heads is measured; unsplit: why its trained weights
    give no per-head W_K, W_V ("": they do); colour: its points' colour; legend: its legend entry ("": spec.name);
    step_cost: a training step against multi-head attention's of the same width, beyond what its weights count, as
    (on the step's fixed part, on its width part), which the public demo's training budget reads
    (mha_viz.serve.training_budget; measured on the 2-core machine of bench/RESULTS-training-cost.md).
    """

    label: Callable[[LayerVariant, int], str]
    grid: Callable[[int], Sequence[LayerVariant]] = lambda h: ()
    loss: Callable[..., Any] | None = None
    signed: bool = False
    unsplit: str = ""
    colour: str = "#7f7f7f"
    legend: str = ""
    step_cost: tuple[float, float] = (1.0, 1.0)


@dataclass(frozen=True)
class VariantSpec:
    """Everything the project knows about one attention variant.

    kind: its URL value; name: its short label ("MLA"); build(cfg, variant, *, seed, dtype): its layer;
    describe(cfg, variant): what it computes, in words (the page's caption); shape(cfg, variant): its layer as
    Shapes & cost prices it (a VariantShape of mha_viz.variants_cost); training: its Training hooks.
    fields: its own URL parameters, which are LayerVariant's parameters too (defaults, parsers, bounds);
    validate(params): ValueError when its parameters alone are invalid; check(cfg, variant): ValueError when it cannot
    run with these dimensions; kv_heads(variant): the key/value heads its layer computes (None: one per query head);
    formulas(cfg, T, S, *, causal, **params): LaTeX lines of what it changes (none: formulas() covers it);
    title(cfg, variant): an export's title ("MLA attention: h = 4"); stem(cfg, variant): what an export's file name
    adds for it ("-mla").
    controls: its sidebar widgets; fit(values): the values that must follow a new h ({name: value}); unfit(values):
    why a link's values fit no control (None: they fit); notice(old, new): what the sidebar says when fit moved them;
    fit_button: the tooltip of a button that runs fit when unfit ("": no button).
    long: its layer is multi-head attention at LayerVariant.config's sizes, so a long input is traced as mha_viz.long
    traces one; flag: the capability a source of this variant has (mha_viz.parts.Part.needs: the views offered for
    it); help: a sentence for the menu's help; example: the URL parameters of a page that shows it away from its
    defaults (the registry-parametrised tests and the browser tests draw it).
    """

    kind: str
    name: str
    build: Callable[..., nn.Module]
    describe: Callable[[MHAConfig, LayerVariant], str]
    shape: Callable[[MHAConfig, LayerVariant], VariantShape]
    training: Training
    fields: tuple[StateField, ...] = ()
    validate: Callable[[Values], None] = _nothing
    check: Callable[[MHAConfig, LayerVariant], None] = _nothing
    kv_heads: Callable[[LayerVariant], int | None] = _nothing
    formulas: Callable[..., list[str]] = _no_lines
    title: Callable[[MHAConfig, LayerVariant], str] = _title
    stem: Callable[[MHAConfig, LayerVariant], str] = _stem
    controls: tuple[Control, ...] = ()
    fit: Callable[[Values], dict[str, Any]] = _no_changes
    unfit: Callable[[Values], str | None] = _nothing
    notice: Callable[[Values, Values], str | None] = _nothing
    fit_button: str = ""
    long: bool = False
    flag: str = ""
    help: str = ""
    example: Mapping[str, str] = field(default_factory=dict)

    def defaults(self) -> dict[str, Any]:
        return {f.name: f.default for f in self.fields}


VARIANTS: dict[str, VariantSpec] = {}  # kind -> spec, in menu order


def register(spec: VariantSpec) -> VariantSpec:
    """Add a variant: its kind to every menu, its fields to the URL state. A kind already registered, or a field name
    another part or variant declares differently, is refused with a ValueError."""
    if spec.kind in VARIANTS:
        raise ValueError(f"a variant of kind {spec.kind!r} is already registered")
    known = all_fields()
    for f in spec.fields:
        if f.name in known and known[f.name] is not f:
            raise ValueError(f"{spec.kind}: the field {f.name!r} is already declared by another part or variant")
    add_fields(spec.fields)
    VARIANTS[spec.kind] = spec
    return spec


def unregister(kind: str) -> None:
    """Remove a variant and its URL fields (a field another variant shares stays)."""
    spec = VARIANTS.pop(kind)
    shared = {f.name for s in VARIANTS.values() for f in s.fields}
    remove_fields([f.name for f in spec.fields if f.name not in shared])


def spec_of(kind: str) -> VariantSpec:
    """The registered spec of this kind; ValueError naming the registered kinds when there is none."""
    spec = VARIANTS.get(kind)
    if spec is None:
        raise ValueError(f"variant must be one of {', '.join(VARIANTS)}, got {kind!r}")
    return spec


@dataclass(frozen=True, init=False)
class LayerVariant:
    """Which attention variant a configurable layer computes, with its own parameters (its spec's fields, URL names
    as the app's), read as attributes: LayerVariant("gqa", kv_heads=2).kv_heads. Another variant's parameters are
    ignored (so equal layers compare equal); a parameter it does not set has its field's default.

    The built-in variants' parameters:
    kv_heads    gqa: key/value heads, a divisor of h (1: multi-query attention)
    kv_latent   mla: width of the latent cached per token, from which every head's K and V are up-projected
    q_latent    mla: width of the query latent (0: queries projected directly from x)
    rope_dim    mla: decoupled rotary dims per head (even), in a key part shared by all heads
    window      window: a query sees the keys |i - j| < window (with causal: itself and the window - 1 before it)
    sinks       window: "none", "logit" (a learned logit per head in each softmax, gpt-oss) or "tokens" (the first
                SINK_TOKENS tokens stay visible, StreamingLLM)
    moh_k       moh: routed heads each token uses (its top-k by router score)
    moh_shared  moh: heads every token uses (the first moh_shared heads)
    """

    kind: str = "mha"
    values: tuple[tuple[str, Any], ...] = ()  # this kind's parameters, in its spec's field order

    def __init__(self, kind: str = "mha", values: tuple[tuple[str, Any], ...] = (), **params: Any) -> None:
        spec = spec_of(kind)
        given = dict(values) | params
        known = {f.name for s in VARIANTS.values() for f in s.fields}
        unknown = [name for name in given if name not in known]
        if unknown:
            raise TypeError(f"LayerVariant has no parameter {unknown[0]!r}")
        own = spec.defaults() | {name: v for name, v in given.items() if name in spec.defaults()}
        spec.validate(own)
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "values", tuple(own.items()))

    def __getattr__(self, name: str) -> Any:
        """A parameter: this variant's value, else the default of the variant field of that name."""
        if name.startswith("__") or name in ("kind", "values"):
            raise AttributeError(name)
        for key, value in self.values:
            if key == name:
                return value
        for spec in VARIANTS.values():
            for f in spec.fields:
                if f.name == name:
                    return f.default
        raise AttributeError(f"LayerVariant has no parameter {name!r}")

    def __repr__(self) -> str:
        return f"LayerVariant({', '.join([repr(self.kind), *(f'{k}={v!r}' for k, v in self.values)])})"

    @property
    def spec(self) -> VariantSpec:
        """This kind's VariantSpec (mha_viz.variants.spec)."""
        return VARIANTS[self.kind]

    def check(self, cfg: MHAConfig) -> None:
        """ValueError saying why this variant cannot run with these dimensions (nothing when it can)."""
        self.spec.check(cfg, self)

    def config(self, cfg: MHAConfig) -> MHAConfig:
        """cfg with this variant's key/value heads (gqa: kv_heads; every other kind: one K/V head per query head)."""
        self.check(cfg)
        return replace(cfg, kv_heads=self.spec.kv_heads(self))

    def shape(self, cfg: MHAConfig) -> VariantShape:
        """The layer of this variant with cfg's sizes, as Shapes & cost prices it (mha_viz.variants_cost)."""
        return self.spec.shape(self.config(cfg), self)

    def params(self) -> dict[str, Any]:
        """The parameters this kind reads, by name."""
        return dict(self.values)

    @classmethod
    def of(cls, state: Any) -> LayerVariant:
        """The variant a page state names (state.variant and its fields: a ViewState, a lesson's state)."""
        return cls(state.variant, **{f.name: getattr(state, f.name) for f in spec_of(state.variant).fields})


def variant_fields() -> list[StateField]:
    """Every registered variant's URL fields, in menu order (a field two variants share once)."""
    out: dict[str, StateField] = {}
    for spec in VARIANTS.values():
        out.update((f.name, f) for f in spec.fields if f.name not in out)
    return list(out.values())


def whole_number(name: str, value: object, lo: int, hi: int | None = None) -> None:
    """ValueError unless value is a whole number from lo (to hi): a parameter's check (VariantSpec.validate)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise ValueError(f"{name} must be a whole number ≥ {lo}, got {value!r}")
    if hi is not None and value > hi:
        raise ValueError(f"{name} must be at most {hi}, got {value}")
