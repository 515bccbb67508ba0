"""The Window variant in the app: every window and sinks position draws the heads and the Window & sinks view."""

from __future__ import annotations

import json

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from tests.app.test_gqa_app import new_app, texts, url
from tests.plotly_json import heatmaps, z_matrix
from tests.renderer_json import drawn_heads

H = 4


def charts(at: AppTest) -> list[dict]:
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def title(fig: dict) -> str:
    return (fig["layout"].get("title") or {}).get("text") or ""


def check_heads(at: AppTest, window: int, causal: bool, sinks: str) -> None:
    assert not at.exception and not at.error, (window, causal, sinks)
    weights = drawn_heads(at)[1]
    assert len(weights) == H
    z = weights[0]  # head 0's weights as drawn: nothing outside the window (or on a kept sink token)
    T, S = z.shape
    i, j = np.arange(T)[:, None], np.arange(S)[None, :]
    visible = (np.abs(i - j) < window) | ((j < 4) if sinks == "tokens" else False)
    if causal:
        visible &= j <= i
    assert np.nan_to_num(z[~visible]).max(initial=0) == 0, (window, causal, sinks)
    assert (z[visible] > 0).all()


def check_window_view(at: AppTest, window: int, sinks: str) -> None:
    assert not at.exception and not at.error, (window, sinks)
    figs = charts(at)
    assert [title(f).split("<br>")[0][:10] for f in figs] == ["Which keys", "Sink mass:" if sinks == "logit" else
                                                              "Attention ", "What each ", "Tokens bac"]
    band = z_matrix(heatmaps(figs[0])[0])
    assert (np.diag(band) == 1).all()  # every query sees itself, inside its window
    assert (band == 1).sum(-1).max() <= 2 * window - 1
    assert ((band == 2).any()) == (sinks == "tokens" and window < 13)


@pytest.mark.slow
@pytest.mark.parametrize("sinks", ["none", "logit", "tokens"])
@pytest.mark.parametrize("causal", [False, True])
def test_every_window_and_sinks_draws_heads_and_the_window_view(sinks: str, causal: bool) -> None:
    at = new_app(variant="window", sinks=sinks, causal=str(causal).lower()).run()
    assert at.radio(key="sinks").value == sinks and at.slider(key="window").max == 32
    for window in (1, 2, 5, 32):
        at.slider(key="window").set_value(window).run()
        at.segmented_control(key="view").set_value("Heads").run()
        check_heads(at, window, causal, sinks)
        assert url(at, "variant") == "window" and url(at, "window") == (None if window == 4 else str(window))
        at.segmented_control(key="view").set_value("Window & sinks").run()
        check_window_view(at, window, sinks)


@pytest.mark.slow
def test_every_window_position_draws_heads() -> None:
    at = new_app(variant="window", sinks="logit", causal="true").run()
    for window in range(1, 33):
        at.slider(key="window").set_value(window).run()
        check_heads(at, window, True, "logit")


def test_reach_slider_is_in_the_url_and_grows_the_reach() -> None:
    at = new_app(variant="window", window="3", sinks="none", causal="true", view="Window & sinks",
                 reach_layers="1").run()
    assert not at.exception and at.slider(key="reach_layers").value == 1
    one = z_matrix(heatmaps(charts(at)[2])[0])
    np.testing.assert_array_equal(one, np.tril(np.triu(np.ones_like(one), -2)))  # itself and 2 back
    at.slider(key="reach_layers").set_value(4).run()
    assert url(at, "reach_layers") == "4"
    four = z_matrix(heatmaps(charts(at)[2])[0])
    np.testing.assert_array_equal(four, np.tril(np.triu(np.ones_like(four), -8)))  # 4 · (3 − 1) = 8 back
    assert "4 layers reach 4 · (3 − 1) = 8 tokens back" in texts(at)
    assert "attention sink" in texts(at)


def test_sink_mass_view_shows_one_minus_the_row_sums() -> None:
    at = new_app(variant="window", window="4", sinks="logit", view="Window & sinks").run()
    mass = z_matrix(heatmaps(charts(at)[1])[0])
    at.segmented_control(key="view").set_value("Heads").run()
    weights = drawn_heads(at)[1]
    rows = weights.sum(-1)  # (H, T)
    # a row of S drawn cells, each within 2e-5 of the trace's weight, sums within S * 2e-5 of the trace's row
    np.testing.assert_allclose(mass, 1 - rows, atol=weights.shape[-1] * 2e-5 + 1e-5)
    assert mass.min() > 0


def test_cross_attention_draws_heads_and_the_window_view() -> None:
    for sinks in ("none", "logit", "tokens"):
        at = new_app(variant="window", window="2", sinks=sinks, cross="true").run()
        assert not at.exception and not at.error
        assert drawn_heads(at)[1].shape[0] == H
        at.segmented_control(key="view").set_value("Window & sinks").run()
        assert not at.exception and not at.error and len(charts(at)) == 4
        assert "drawn over the query tokens" in texts(at)


def test_window_view_is_offered_only_for_the_window_variant() -> None:
    at = new_app(variant="window").run()
    assert "Window & sinks" in at.segmented_control(key="view").options
    at.segmented_control(key="variant").set_value("mha").run()
    assert "Window & sinks" not in at.segmented_control(key="view").options
