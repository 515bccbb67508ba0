"""The registry of views and analysis sections (mha_viz.parts): names and fields once, and a part registered from
outside the package (here, in the test) parsed from a URL and written back into one."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import pytest

from mha_viz.export import share_url
from mha_viz.params import DEFAULTS, PARSERS, ViewState, parse_query, to_query
from mha_viz.parts import SECTIONS, VIEWS, Part, StateField, all_fields, capable


def _count(raw: str) -> int:
    value = int(raw)
    if not 0 <= value <= 99:
        raise ValueError
    return value


TOY_N = StateField("toy_n", 3, _count, "a whole number from 0 to 99")
TOY_WORD = StateField("toy_word", "", str, "any text", cap=20)


@pytest.fixture
def toys() -> Iterator[None]:
    """A toy view (configurable mode, before Analysis) and a toy section, registered for one test."""
    VIEWS.register(Part("Toy view", ("Configurable",), "tests.app.test_registry_app:toy_view", fields=(TOY_N,),
                        help="A view only the tests know."), before="Analysis")
    SECTIONS.register(Part("Toy section", ("Configurable", "Pretrained", "Train"),
                           "tests.app.test_registry_app:toy_section", fields=(TOY_WORD,)))
    try:
        yield
    finally:
        VIEWS.unregister("Toy view")
        SECTIONS.unregister("Toy section")


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
