"""Session state <-> URL: the URL seeds the widgets once per session, then mirrors them."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import streamlit as st

from ..params import CLICKED_FIELDS, DEFAULTS, TEXT_CAPS, ViewState, checked_field, parse_query, to_query, value_notice
from ..parts import all_fields
from .text import plain

_SEEDED = "_seeded_from_url"
_URL_HEAD = "_url_named_head"  # the session's first URL named a layer or a head
_OPENED = "_opened_on"  # the sections that open on their best head, once shown (open_on_best)
HEAD_FIELDS = frozenset({"layer", "head"})
_FIRST = object()  # confine's fallback: the first option
ADVANCED_OPEN = "advanced_open"  # session key of the sidebar's Advanced expander (mha_viz.ui.controls)
ADVANCED_FIELDS = ("d_k", "d_v", "d_out", "seed", "causal", "pe", "cross", "context")  # the fields under Advanced


def seed_from_url(extra_keys: frozenset[str] = frozenset()) -> list[str]:
    """On a session's first run, copy valid URL params into the widget keys; return the notices.

    Later runs re-assign every key to itself: Streamlit forgets a widget's value after a run
    in which the widget was not drawn (another view, or an error shown instead), and the view
    must survive that. Free-text values are cut to their TEXT_CAPS before anything reads them. The keys are the
    registered fields' names (mha_viz.parts.all_fields).
    """
    fields = all_fields()
    if st.session_state.get(_SEEDED):
        for name in fields:
            if name in st.session_state:
                value = st.session_state[name]
                if name in CLICKED_FIELDS:  # what a click wrote: checked like a URL value (a crafted client)
                    value = checked_field(name, value)
                st.session_state[name] = value[: TEXT_CAPS[name]] if name in TEXT_CAPS and isinstance(value, str) else value
    else:
        state, notices = parse_query(st.query_params.to_dict(), ignore=extra_keys)
        for name in fields:
            st.session_state[name] = getattr(state, name)
        open_advanced_for(state)
        st.session_state["_url_notices"] = notices
        st.session_state[_URL_HEAD] = bool(HEAD_FIELDS & set(st.query_params.to_dict()))
        st.session_state[_SEEDED] = True
    return st.session_state["_url_notices"]


def open_advanced_for(state: ViewState) -> None:
    """A state that sets an advanced field (a link's, a lesson step's) opens the Advanced section, so that it is
    seen."""
    st.session_state[ADVANCED_OPEN] = any(getattr(state, f) != getattr(DEFAULTS, f) for f in ADVANCED_FIELDS)


def current() -> ViewState:
    """The state the widgets hold now (defaults for keys no widget has set)."""
    values = {name: st.session_state.get(name, f.default) for name, f in all_fields().items()}
    for name, f in all_fields().items():  # multiselects hold lists
        if isinstance(f.default, tuple):
            values[name] = tuple(values[name] or ())
    for name, cap in TEXT_CAPS.items():  # the widgets cap typing; this caps anything else that sets them
        values[name] = str(values[name])[:cap]
    return ViewState(**values)


def value(name: str) -> object:
    """The session's value of a registered field (its widget key), else the field's default (mha_viz.parts); a
    multiselect's list as the tuple its field holds (a fragment's rerun does not pass through seed_from_url)."""
    field = all_fields()[name]
    held = st.session_state.get(name, field.default)
    return tuple(held or ()) if isinstance(field.default, tuple) else held


def share_query(state: ViewState) -> dict[str, str]:
    """The URL parameters of a link that reproduces the view: to_query, plus the layer and head even at their
    defaults once a section of this session opened on its best head (open_on_best), since a link without them
    would open that section on the best head again, not on the one shown."""
    query = to_query(state)
    if st.session_state.get(_OPENED):
        query |= {name: str(getattr(state, name)) for name in sorted(HEAD_FIELDS)}
    return query


def fit(name: str, new: object, expected: str, using: str | None = None) -> None:
    """Replace a field's value this page cannot show (a head this layer lacks, a position past the end, more tokens
    than the demo writes) by new, with the notice a link's invalid value gets (params.value_notice): never silently.
    expected: what is valid here, e.g. "a head from 0 to 3 on this layer"; using: how to name new (else its value)."""
    old = value(name)
    if old != new:
        st.session_state[name] = new
        st.warning(plain(value_notice(name, old, expected, new if using is None else using, here=True)), icon="🔗")


def write_url(state: ViewState, extra: dict[str, str] | None = None) -> None:
    """Mirror the state into the URL so that a copied link reproduces the view."""
    wanted = {**share_query(state), **(extra or {})}
    if st.query_params.to_dict() != wanted:
        st.query_params.from_dict(wanted)


TYPED = "_typed_models"  # the model names this session typed into a field (only those may be local folders)


def mark_typed(key: str) -> None:
    """on_change of a model field: remember that this session typed the name (a link did not set it)."""
    st.session_state.setdefault(TYPED, set()).add(str(st.session_state.get(key, "")).strip())


def was_typed(name: str) -> bool:
    return name in st.session_state.get(TYPED, set())


def open_on_best(section: str, best: Callable[[], tuple[int, int]]) -> bool:
    """Open a section on its most informative head (best(): its (layer, head), from the library) the first time the
    session shows it, unless the URL named a layer or head, a lesson is open (its step says which head), or the head
    open now was picked (a head other than the default L0H0 and other than those sections opened on). Returns True
    when it changed the open head (the caller reruns the page, so that everything drawn before the section shows that
    head too)."""
    opened = st.session_state.setdefault(_OPENED, {})  # {section: the head it opened on, None: it kept the open one}
    if section in opened or value("lesson"):  # a lesson step's state says which head is open
        return False
    now = (value("layer"), value("head"))
    untouched = now == (DEFAULTS.layer, DEFAULTS.head) or now in opened.values()
    if st.session_state.get(_URL_HEAD) or not untouched:
        opened[section] = None
        return False
    opened[section] = picked = best()
    if picked == now:
        return False
    st.session_state["layer"], st.session_state["head"] = picked
    return True


def show_field_in(name: str, key: str) -> None:
    """Before a second widget of the registered field `name` is drawn under `key`: it shows the field's value now
    (what its first widget, or a link, set)."""
    st.session_state[key] = value(name)


def set_field_from(key: str, name: str, after: Callable[[], None]) -> None:
    """on_change of a second widget of the field `name`: the field (so its first widget and the URL) takes the value;
    then `after`, what runs after the first widget changes."""
    st.session_state[name] = st.session_state[key]
    after()


# The one door to the session's state. Registered fields (mha_viz.parts.all_fields) are read with value(name) and
# written with put(name, new) (put_all for several, put_default for a field's default); a widget's own key that is not
# a field (a chart's click event, a second copy of a field's control) is read with widget(key); what the session
# keeps for itself (a set of stopped runs, the figures of this run, a notice shown once) is keep(key, factory),
# kept(key, default), put(key, new), take(key) and forget(key). Nothing else in mha_viz, app.py or page.py reads or
# writes st.session_state (tests/unit/test_one_state_door.py).

def put(name: str, new: object) -> None:
    """Set a registered field (its widget shows it on the next draw), a widget's key or a key the session keeps."""
    st.session_state[name] = new


def put_all(**values: object) -> None:
    """put several fields or keys at once (a worked example's fields, a picked layer and head)."""
    st.session_state.update(values)


def confine(name: str, options: Sequence[object], fallback: object = _FIRST) -> None:
    """Before a choice widget of the field name: unless the session holds one of options (a link's value may be
    another, or none is set yet), the field becomes fallback (else the first option)."""
    if st.session_state.get(name) not in options:
        st.session_state[name] = options[0] if fallback is _FIRST else fallback


def put_default(name: str) -> None:
    """Give a registered field its default where the session holds no value for it yet (a part registered after
    the session's first run)."""
    st.session_state.setdefault(name, all_fields()[name].default)


def widget(key: str, default: object = None) -> object:
    """A widget's value or event (a chart's selection, a component's value) under its key, else default."""
    return st.session_state.get(key, default)


def has(key: str) -> bool:
    return key in st.session_state


def keep(key: str, factory: Callable[[], object]) -> object:
    """What the session keeps under key (not a field: never in the URL), made by factory() the first time."""
    if key not in st.session_state:
        st.session_state[key] = factory()
    return st.session_state[key]


def kept(key: str, default: object = None) -> object:
    """What the session keeps under key, else default (nothing is kept)."""
    return st.session_state.get(key, default)


def forget(key: str) -> None:
    st.session_state.pop(key, None)


def take(key: str, default: object = None) -> object:
    """What the session keeps under key (a notice shown once), forgotten as it is read; else default."""
    return st.session_state.pop(key, default)
