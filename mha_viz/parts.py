"""The registry of the app's parts: its views and its analysis sections, each one `Part` object.

Pure Python (no Streamlit, no torch), so that URL parsing (mha_viz.params) can read every registered field without
the app. A part names its render function as "module:function" (resolved when it is drawn) or passes the function.
The view menu, the section menu, the URL parameters, share links and the report are built from these registries.

Each built-in part is one module of mha_viz/ui/parts/views/ or mha_viz/ui/parts/sections/ that declares `PART` at its
top and its `render` below; discover() imports every module of such a package and registers its PART (mha_viz.params
runs it for both, so a link is read with every part's fields). A part module imports Streamlit and the app only inside
render, so that discovering it stays pure (tests/unit/test_parts_discovery.py checks both):

    >>> from mha_viz.parts import VIEWS, Part, StateField
    >>> VIEWS.register(Part("Toy", modes=("Configurable",), render="my_pkg.toy:render",
    ...                     fields=(StateField("toy_n", 3, int, "a whole number"),)))  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StateField:
    """One piece of shareable state: a widget key, a URL parameter and a ViewState attribute of the same name.

    parse: the URL's text -> the value (ValueError, TypeError or OverflowError when invalid); expected: what a valid
    value looks like, for the notice about an invalid one (or a function giving it); cap: for free text, the longest value the server keeps.
    bounds: for a number, the smallest and largest value: the range a link may name and the range its slider or
    number box offers (the widget reads it: bounds), declared once here so that the two agree.
    """

    name: str
    default: object
    parse: Callable[[str], object]
    expected: str | Callable[[], str]
    cap: int | None = None
    bounds: tuple[float, float] | None = None

    def describe(self) -> str:
        """What a valid value looks like (expected, called when it is a function: a list that can grow)."""
        return self.expected() if callable(self.expected) else self.expected


@dataclass(frozen=True)
class Part:
    """A view or an analysis section.

    modes: the app's modes it appears in (Configurable, Pretrained, Train). render: the function that draws it (it
    takes the app's context for the kind of part: mha_viz.ui.view_parts.ViewContext or
    mha_viz.ui.analysis.SectionContext), or "module:function". fields: its URL-state fields. needs: capability flags a
    source must have for the part to be offered (e.g. "causal_lm"; see capable). arrays: the trace arrays it draws
    (a trace that lacks one gets a message instead). help: one sentence on what it shows. order: its place in the
    menu (lower first; the built-in parts use 10, 20, ...). does: what the page does differently for it (DOES).
    texts: the free-text fields it reads besides the page's own text (a page that shows it is heavy work when one is
    long: mha_viz.serve.hosting.heavy_request).
    """

    name: str
    modes: tuple[str, ...]
    render: Callable[..., Any] | str
    fields: tuple[StateField, ...] = ()
    needs: tuple[str, ...] = ()
    arrays: tuple[str, ...] = ()
    help: str = ""
    order: float = 1000.0
    does: tuple[str, ...] = ()
    texts: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        unknown = set(self.does) - set(DOES)
        if unknown:
            raise ValueError(f"{self.name}: unknown capability {min(unknown)!r} (known: {', '.join(DOES)})")

    def can(self, capability: str) -> bool:
        """Whether the part declares this capability (one of DOES)."""
        return capability in self.does

    def renderer(self) -> Callable[..., Any]:
        if callable(self.render):
            return self.render
        module, _, function = self.render.partition(":")
        return getattr(importlib.import_module(module), function)

    def offered(self, mode: str, source: object = None) -> bool:
        """Whether the menu of this mode offers the part for this source (None: the source is not known)."""
        return mode in self.modes and (source is None or all(capable(source, flag) for flag in self.needs))


EVERY_MODE = ("Configurable", "Pretrained", "Train")  # the app's modes (mha_viz.params.MODES)

# What a view may declare it does (Part.does), so that the page asks the part, not its name.
DOES = {
    "trains": "it trains (or reads from the cache) its own layer: the page neither trains nor traces before it",
    "draws_long": "it draws a long input whole (the other views read its first tokens)",
    "reads_long": "it reads a long input whole without drawing it whole (Generate: the prompt goes into the KV cache)",
    "switches_layers": "its chart repaints another layer in the browser: the layer buttons carry every layer's weights",
}


def capable(source: object, flag: str) -> bool:
    """Whether a source has a capability flag (mha_viz.sources.Source: "num_layers", "causal_lm", "trainable",
    "long", ...): its attribute of that name, false when it has none; or one of its `variant_flags` (an attention
    variant's flag, mha_viz.variants.spec.VariantSpec.flag)."""
    return bool(getattr(source, flag, None)) or flag in getattr(source, "variant_flags", ())


_CORE: dict[str, StateField] = {}  # the page's own fields (mha_viz.params), before any part's


def core_fields(fields: Sequence[StateField]) -> dict[str, StateField]:
    """Declare the page's own fields (once, by mha_viz.params), in URL order; fields added before and not named here
    (add_fields: a variant's) follow them. Parts may not declare another field by these names."""
    earlier = {name: f for name, f in _CORE.items() if name not in {f.name for f in fields}}
    _CORE.clear()
    _CORE.update((f.name, f) for f in fields)
    _CORE.update(earlier)
    return dict(_CORE)


def add_fields(fields: Sequence[StateField]) -> None:
    """Add page fields that are not a view's or a section's (an attention variant's: mha_viz.variants.spec)."""
    _CORE.update((f.name, f) for f in fields)


def remove_fields(names: Sequence[str]) -> None:
    """Forget page fields added by add_fields (a variant unregistered)."""
    for name in names:
        _CORE.pop(name, None)


class Registry(Sequence[str]):
    """The registered parts of one kind, in menu order; as a sequence, their names."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._parts: dict[str, Part] = {}

    def register(self, part: Part) -> Part:
        """Add a part, in the menu at its order (after the parts of the same order registered before it). A name
        used by another part of any kind, or a field name declared differently elsewhere, is refused with a
        ValueError."""
        if any(part.name in r._parts for r in _REGISTRIES):
            raise ValueError(f"a part named {part.name!r} is already registered")
        known = all_fields()
        for f in part.fields:
            if f.name in known and known[f.name] is not f:
                raise ValueError(f"{part.name}: the field {f.name!r} is already declared by another part or the page")
        items = sorted([*self._parts.values(), part], key=lambda p: p.order)  # stable: equal orders keep theirs
        self._parts = {p.name: p for p in items}
        return part

    def discover(self, package: str) -> list[Part]:
        """Import every module of the package (pkgutil) and register the PART each declares, in menu order;
        returns them. A module without PART is refused (a part's helpers live outside its package)."""
        found = []
        for info in pkgutil.iter_modules(importlib.import_module(package).__path__, package + "."):
            module = importlib.import_module(info.name)
            if not isinstance(getattr(module, "PART", None), Part):
                raise TypeError(f"{info.name} declares no PART (mha_viz.parts.Part)")
            found.append(module.PART)
        for part in sorted(found, key=lambda p: p.order):
            self.register(part)
        return found

    def unregister(self, name: str) -> None:
        del self._parts[name]

    def part(self, name: str) -> Part:
        return self._parts[name]

    def menu(self, mode: str, source: object = None) -> tuple[str, ...]:
        """The names this mode's menu offers for this source, in order."""
        return tuple(name for name, p in self._parts.items() if p.offered(mode, source))

    def fields(self) -> Iterator[StateField]:
        for p in self._parts.values():
            yield from p.fields

    def __getitem__(self, index):  # a name, or a tuple of names for a slice
        return tuple(self._parts)[index]

    def __len__(self) -> int:
        return len(self._parts)

    def __iter__(self) -> Iterator[str]:
        return iter(tuple(self._parts))

    def __contains__(self, name: object) -> bool:
        return name in self._parts

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {list(self._parts)})"


VIEWS = Registry("view")
SECTIONS = Registry("section")
_REGISTRIES = (VIEWS, SECTIONS)


def shown(view: str, section: str) -> tuple[Part, ...]:
    """The registered parts a page of this view shows: the view, and the section it names when the view declares the
    field "section" (the Analysis view); none for a view that is not registered."""
    if view not in VIEWS:
        return ()
    part = VIEWS.part(view)
    if any(f.name == "section" for f in part.fields) and section in SECTIONS:
        return part, SECTIONS.part(section)
    return (part,)


def all_fields() -> dict[str, StateField]:
    """Every URL-state field by name: the page's, then the views', then the sections' (a field shared by two parts
    once), in the order a URL lists them."""
    out = dict(_CORE)
    for registry in _REGISTRIES:
        for f in registry.fields():
            out.setdefault(f.name, f)
    return out


def bounds(name: str) -> tuple[float, float]:
    """The (min, max) the widget of a ranged field offers: the range its URL parameter accepts (StateField.bounds)."""
    lo_hi = all_fields()[name].bounds
    if lo_hi is None:
        raise ValueError(f"the field {name!r} declares no bounds")
    return lo_hi
