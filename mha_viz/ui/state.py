"""Session state <-> URL: the URL seeds the widgets once per session, then mirrors them."""

from __future__ import annotations

import streamlit as st

from ..params import CLICKED_FIELDS, DEFAULTS, TEXT_CAPS, ViewState, checked_field, parse_query, to_query, value_notice
from ..parts import all_fields
from .controls import ADVANCED_FIELDS, ADVANCED_OPEN
from .text import plain

_SEEDED = "_seeded_from_url"


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
        # A link that sets an advanced field opens the Advanced section, so that it is seen.
        st.session_state[ADVANCED_OPEN] = any(getattr(state, f) != getattr(DEFAULTS, f) for f in ADVANCED_FIELDS)
        st.session_state["_url_notices"] = notices
        st.session_state[_SEEDED] = True
    return st.session_state["_url_notices"]


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
    """The session's value of a registered field (its widget key), else the field's default (mha_viz.parts)."""
    return st.session_state.get(name, all_fields()[name].default)


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
    wanted = {**to_query(state), **(extra or {})}
    if st.query_params.to_dict() != wanted:
        st.query_params.from_dict(wanted)


TYPED = "_typed_models"  # the model names this session typed into a field (only those may be local folders)


def mark_typed(key: str) -> None:
    """on_change of a model field: remember that this session typed the name (a link did not set it)."""
    st.session_state.setdefault(TYPED, set()).add(str(st.session_state.get(key, "")).strip())


def was_typed(name: str) -> bool:
    return name in st.session_state.get(TYPED, set())
