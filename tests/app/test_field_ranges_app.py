"""One declaration of a number's range: the URL parser accepts exactly the StateField's bounds, and the slider or
number box of that field offers exactly those bounds; a link outside them gets a notice, not a broken page."""

from __future__ import annotations

import math

import pytest
from streamlit.testing.v1 import AppTest

import mha_viz.params  # noqa: F401 - registers the views' and sections' fields
from mha_viz.parts import all_fields
from tests.app.test_gqa_app import new_app, url
from tests.renderer_json import drawn_heads

BOUNDED = {name: f for name, f in all_fields().items() if f.bounds is not None}
CAUSAL = dict(mode="Pretrained", model="mha-viz/induction-2l")
# Links that draw the widgets of the ranged fields (a new ranged field needs a link here: the walk says so).
HOSTS = (
    dict(variant="mla", seed="1"),  # MLA's controls, and Advanced open (d_k, d_v, d_out, seed)
    dict(variant="window", view="Window & sinks"),
    dict(weights="trained"),
    dict(mode="Train", h="2", d_model="32", steps="40"),
    dict(CAUSAL, view="Generate", temperature="1"),
    dict(CAUSAL, view="Analysis", section="Circuits"),
    dict(CAUSAL, view="Analysis", section="Layer reach"),
    dict(view="Analysis", section="Redundancy"),
    dict(view="Shapes & cost", cost_variant="mla"),
    dict(view="Shapes & cost", cost_variant="window"),
    dict(variant="moh", h="8"),
)


# Fields whose widget's range follows the page, not a constant: they declare no bounds, and a link's value the page
# has not got is replaced with a notice (test below). Any other slider or number box must read its field's bounds.
FOLLOWS_THE_PAGE = {
    "h": "the divisors of d_model",
    "moh_k": "the routed heads, h - moh_shared",
    "moh_shared": "below h",
    "new_tokens": "a public demo's max_new_tokens (its budget's notice says so)",
    "gen_step": "the tokens written",
    "cost_context": "a power of two (its parser's own list, CONTEXTS)",
    "reach_padding": "the positions Layer reach probes, the text's up to 64, less 2",
}


def _past(value: float, direction: int) -> float:
    """The nearest value beyond a bound: one whole number for int bounds, a little for float bounds."""
    return value + direction if isinstance(value, int) else value + direction * 1e-3


def accepts(name: str, value: float) -> bool:
    try:
        all_fields()[name].parse(str(value))
    except (ValueError, TypeError, OverflowError):
        return False
    return True


@pytest.mark.parametrize("name", sorted(BOUNDED))
def test_the_url_parser_accepts_exactly_the_declared_bounds(name: str) -> None:
    lo, hi = BOUNDED[name].bounds
    assert accepts(name, lo) and accepts(name, hi)
    assert not accepts(name, _past(lo, -1)) and not accepts(name, _past(hi, +1))


def widget_ranges(at: AppTest) -> dict[str, tuple[float, float]]:
    """key -> (min, max) of every slider, number box and select slider on the page whose key is a registered field."""
    known = all_fields()
    out = {}
    for kind in ("slider", "number_input"):
        for w in at.get(kind):
            if w.key in known:
                out[w.key] = (w.min, w.max)
    for w in at.get("select_slider"):
        if w.key in known:
            numbers = [float(o.replace(",", "")) for o in w.options]  # "1,024"
            out[w.key] = (min(numbers), max(numbers))
    return out


@pytest.mark.slow
def test_every_ranged_field_s_widget_offers_the_range_its_url_parameter_accepts() -> None:
    seen: dict[str, tuple[float, float]] = {}
    for link in HOSTS:
        at = new_app(**link).run()
        assert not at.exception, (link, at.exception)
        for name, (lo, hi) in widget_ranges(at).items():
            seen[name] = (lo, hi)
            f = all_fields()[name]
            if f.bounds is not None:
                assert (lo, hi) == f.bounds, (name, (lo, hi), f.bounds)
            else:  # a range that follows the page: within what a link may name
                assert name in FOLLOWS_THE_PAGE, f"{name}'s widget has a range: declare it as the field's bounds"
                assert accepts(name, _whole(lo)) and accepts(name, _whole(hi)), (name, lo, hi)
    assert set(BOUNDED) <= set(seen), f"no link in HOSTS draws the widget of {sorted(set(BOUNDED) - set(seen))}"


def _whole(x: float) -> float:
    return int(x) if float(x).is_integer() and not math.isinf(x) else x


@pytest.mark.parametrize("window", ["33", "512"])
def test_a_window_link_beyond_the_slider_gives_a_notice_and_a_page_that_keeps_working(window: str) -> None:
    at = new_app(variant="window", window=window).run()
    assert not at.exception
    notices = " ".join(w.value for w in at.warning)
    lo, hi = all_fields()["window"].bounds
    assert f"window='{window}'" in notices and f"from {lo} to {hi}" in notices, notices
    slider = at.slider(key="window")
    assert (slider.min, slider.max) == (lo, hi) and lo <= slider.value <= hi
    assert len(drawn_heads(at)[1]) == 4  # the heads are drawn
    slider.set_value(hi).run()  # the session works after
    assert not at.exception and at.slider(key="window").value == hi and url(at, "window") == str(hi)
    at.segmented_control(key="view").set_value("Window & sinks").run()
    assert not at.exception and at.get("plotly_chart")


def notices(at: AppTest) -> str:
    return " ".join(w.value for w in at.warning).replace("\\", "")  # Markdown escapes


def test_every_ranged_field_beyond_its_range_in_a_link_gets_a_notice_naming_it_its_value_and_its_range() -> None:
    beyond = {name: str(_past(f.bounds[1], +1)) for name, f in BOUNDED.items()}
    at = new_app(**beyond).run()
    assert not at.exception
    said = notices(at)
    for name, raw in beyond.items():
        assert f"URL parameter {name}='{raw}' is not valid ({BOUNDED[name].describe()})" in said, name
        _lo, hi = BOUNDED[name].bounds
        assert f"{hi:g}" in BOUNDED[name].describe() if isinstance(hi, float) else str(hi) in BOUNDED[name].describe()


# Values a link may name (within their fields' bounds) that this page has not got: 4 heads, a 12-token text, the
# tokens written. Each used to be replaced silently.
BEYOND_THE_PAGE = [
    (dict(h="4", head="7", view="One head"), "head", "7", "this layer's heads are 0 to 3"),
    (dict(h="4", compare="1,9", view="Heads"), "compare", "1,9", "this layer's heads are 0 to 3"),
    (dict(h="4", view="Analysis", section="Knockout", off="0,6"), "off", "0,6", "this layer's heads are 0 to 3"),
    (dict(h="4", view="Analysis", section="Compare", compare_head="9",
          other_text="the cat sat on the mat"), "compare_head", "9",
     "this layer's heads are 0 to 3"),
    (dict(h="4", view="One head", q_pos="300"), "q_pos", "300", "a position from 0 to"),
    (dict(CAUSAL, view="Generate", new_tokens="4", gen_step="9"), "gen_step", "9", "a step from 1 to 4"),
]


@pytest.mark.parametrize(("link", "name", "raw", "valid"), BEYOND_THE_PAGE, ids=[b[1] for b in BEYOND_THE_PAGE])
def test_a_link_s_value_this_page_has_not_got_is_replaced_with_a_notice(link, name: str, raw: str, valid: str) -> None:
    assert name in all_fields() and accepts(name, raw.split(",")[-1])  # a valid URL value, just not here
    at = new_app(**link).run()
    assert not at.exception
    said = notices(at)
    assert f"URL parameter {name}='{raw}' is not valid here ({valid}" in said, said
    at.run()  # said once, then the page goes on with the value it used
    assert not at.exception and f"{name}='{raw}'" not in notices(at)
