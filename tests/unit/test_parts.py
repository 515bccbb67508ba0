"""The registry of views and analysis sections (mha_viz.parts): names and fields once, and a part registered from
outside the package (here, in the test) parsed from a URL and written back into one."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from mha_viz.export import share_url
from mha_viz.params import DEFAULTS, PARSERS, ViewState, parse_query, to_query
from mha_viz.parts import SECTIONS, VIEWS, Part, StateField, all_fields, capable

# The recipes of CONTRIBUTING.md, each part in one file of a package of its own, as a contributor writes it
# (mha_viz/ui/parts/views/<name>.py, mha_viz/ui/parts/sections/<name>.py): found by the same discovery.
TOY_VIEW = '''"""Toy view: a view only the tests know."""

from __future__ import annotations

from mha_viz.fields import whole
from mha_viz.parts import Part, StateField

PART = Part("Toy view", ("Configurable",), f"{__name__}:render", order=75, help="A view only the tests know.",
            fields=(StateField("toy_n", 3, lambda r: whole(r, 0, 99), "a whole number from 0 to 99"),))


def render(c) -> None:
    import streamlit as st

    n = st.number_input("Toy count", 0, 99, key="toy_n")
    st.markdown(f"Toy view: {c.trace.num_heads} heads, n = {n}")
'''
TOY_SECTION = '''"""Toy section: a section only the tests know."""

from __future__ import annotations

from mha_viz.fields import short_text
from mha_viz.parts import EVERY_MODE, Part, StateField

PART = Part("Toy section", EVERY_MODE, f"{__name__}:render",
            fields=(StateField("toy_word", "", short_text(20), "any text", cap=20),))


def render(c) -> None:
    import streamlit as st

    word = st.text_input("Toy word", key="toy_word", max_chars=20)
    st.markdown(f"Toy section of layer {c.layer}: {word or 'no word'}")
'''


@pytest.fixture
def toys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A toy view (configurable mode, before Analysis) and a toy section, each one file, discovered for one test."""
    for kind, text in (("views", TOY_VIEW), ("sections", TOY_SECTION)):
        (tmp_path / "toy_parts" / kind).mkdir(parents=True)
        (tmp_path / "toy_parts" / "__init__.py").write_text("", encoding="utf-8")
        (tmp_path / "toy_parts" / kind / "__init__.py").write_text("", encoding="utf-8")
        (tmp_path / "toy_parts" / kind / "toy.py").write_text(text, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    found = [*VIEWS.discover("toy_parts.views"), *SECTIONS.discover("toy_parts.sections")]
    assert [p.name for p in found] == ["Toy view", "Toy section"]
    try:
        yield
    finally:
        VIEWS.unregister("Toy view")
        SECTIONS.unregister("Toy section")
        for name in [m for m in sys.modules if m == "toy_parts" or m.startswith("toy_parts.")]:
            del sys.modules[name]


def test_names_and_fields_are_registered_once() -> None:
    names = [*VIEWS, *SECTIONS]
    assert len(names) == len(set(names)) and "Heads" in VIEWS and "Knockout" in SECTIONS
    declared: dict[str, StateField] = {}
    for registry in (VIEWS, SECTIONS):
        for name in registry:
            for f in registry.part(name).fields:
                assert declared.setdefault(f.name, f) is f, f"{f.name} is declared twice"
    assert set(declared) <= set(all_fields()) and set(PARSERS) == set(all_fields())
    with pytest.raises(ValueError, match="already registered"):
        VIEWS.register(Part("Knockout", ("Configurable",), "x:y"))  # a section's name: refused for a view too
    with pytest.raises(ValueError, match="'off' is already declared"):
        SECTIONS.register(Part("Another knockout", ("Configurable",), "x:y", fields=(StateField("off", 0, int, "?"),)))
    with pytest.raises(ValueError, match="'text' is already declared"):
        VIEWS.register(Part("Texts", ("Configurable",), "x:y", fields=(StateField("text", "", str, "?"),)))
    assert "Another knockout" not in SECTIONS and "Texts" not in VIEWS


BUILT_IN = {"Generate", "Training", "Heads", "Lines", "Overview", "One head", "Concat → W_O", "Analysis",
            "Shapes & cost", "Formulas"}


def test_each_mode_offers_its_built_in_views_in_order() -> None:
    def built_in(*args) -> tuple[str, ...]:  # the menu without the views added since (a new view may join it)
        return tuple(v for v in VIEWS.menu(*args) if v in BUILT_IN)

    assert built_in("Configurable") == ("Heads", "Lines", "One head", "Concat → W_O", "Analysis", "Shapes & cost",
                                        "Formulas")
    assert built_in("Train") == ("Training", "Lines", "One head", "Concat → W_O", "Analysis")

    class Encoder:  # a source without the causal_lm capability
        causal_lm = False

    class Decoder:
        causal_lm = True

    assert built_in("Pretrained", Encoder()) == ("Heads", "Lines", "Overview", "One head", "Concat → W_O", "Analysis")
    assert built_in("Pretrained", Decoder())[0] == "Generate"
    assert not capable(object(), "long") and capable(Decoder(), "causal_lm")


def test_a_registered_view_and_section_round_trip_through_the_url_and_a_share_link(toys) -> None:
    assert VIEWS.menu("Configurable").index("Toy view") == VIEWS.menu("Configurable").index("Analysis") - 1
    assert "Toy view" not in VIEWS.menu("Train") and "Toy section" in SECTIONS.menu("Train")
    query = {"h": "2", "view": "Toy view", "toy_n": "7", "section": "Toy section", "toy_word": "hello"}
    state, notices = parse_query(query)
    assert notices == [] and (state.view, state.toy_n, state.section, state.toy_word) == ("Toy view", 7, "Toy section",
                                                                                           "hello")
    assert to_query(state) == query
    link = share_url("http://host/app", to_query(state))
    assert "view=Toy%20view" in link and "toy_n=7" in link and "section=Toy%20section" in link
    parsed = {k: v[-1] for k, v in parse_qs(urlsplit(link).query).items()}
    assert parse_query(parsed) == (state, [])  # the link reproduces the view
    assert to_query(ViewState(toy_n=3)) == {}  # the default leaves the URL short
    bad, notices = parse_query({"toy_n": "700", "view": "Toy"})
    assert bad.toy_n == 3 and bad.view == DEFAULTS.view
    assert "toy_n='700' is not valid (a whole number from 0 to 99)" in notices[0]
    assert "Toy view" in notices[1]  # the notice lists the registered views
    assert DEFAULTS.toy_n == 3  # a state made before the registration reads the new field's default
    assert ViewState() == DEFAULTS and hash(ViewState()) == hash(DEFAULTS)  # made before and after: the same state


def test_an_unregistered_part_s_fields_are_unknown_parameters() -> None:
    state, notices = parse_query({"view": "Toy view", "toy_n": "7"})
    assert state == DEFAULTS and len(notices) == 2 and "Ignored unknown URL parameter 'toy_n'" in notices[1]
    with pytest.raises(TypeError):
        ViewState(toy_n=7)
    with pytest.raises(AttributeError):
        DEFAULTS.toy_n  # noqa: B018
