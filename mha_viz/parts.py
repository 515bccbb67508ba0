"""The registry of the app's parts: its views and its analysis sections, each one `Part` object.

Pure Python (no Streamlit, no torch), so that URL parsing (mha_viz.params) can read every registered field without
the app. A part names its render function as "module:function" (resolved when it is drawn) or passes the function.
The view menu, the section menu, the URL parameters, share links and the report are built from these registries:

    >>> from mha_viz.parts import VIEWS, Part, StateField
    >>> VIEWS.register(Part("Toy", modes=("Configurable",), render="my_pkg.toy:render",
    ...                     fields=(StateField("toy_n", 3, int, "a whole number"),)))  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
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
    (a trace that lacks one gets a message instead). help: one sentence on what it shows.
    """

    name: str
    modes: tuple[str, ...]
    render: Callable[..., Any] | str
    fields: tuple[StateField, ...] = ()
    needs: tuple[str, ...] = ()
    arrays: tuple[str, ...] = ()
    help: str = ""

    def renderer(self) -> Callable[..., Any]:
        if callable(self.render):
            return self.render
        module, _, function = self.render.partition(":")
        return getattr(importlib.import_module(module), function)

    def offered(self, mode: str, source: object = None) -> bool:
        """Whether the menu of this mode offers the part for this source (None: the source is not known)."""
        return mode in self.modes and (source is None or all(capable(source, flag) for flag in self.needs))


def capable(source: object, flag: str) -> bool:
    """Whether a source has a capability flag (mha_viz.sources.Source: "num_layers", "causal_lm", "trainable",
    "long", ...): its attribute of that name, false when it has none; or one of its `variant_flags` (an attention variant's
    flag, mha_viz.variants.spec.VariantSpec.flag)."""
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

    def register(self, part: Part, *, before: str | None = None) -> Part:
        """Add a part (at the end of the menu, or before the named part). A name used by another part of any kind,
        or a field name declared differently elsewhere, is refused with a ValueError."""
        if any(part.name in r._parts for r in _REGISTRIES):
            raise ValueError(f"a part named {part.name!r} is already registered")
        known = all_fields()
        for f in part.fields:
            if f.name in known and known[f.name] is not f:
                raise ValueError(f"{part.name}: the field {f.name!r} is already declared by another part or the page")
        if before is None:
            self._parts[part.name] = part
        else:
            items = list(self._parts.items())
            at = [name for name, _ in items].index(before)
            self._parts = dict([*items[:at], (part.name, part), *items[at:]])
        return part

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
