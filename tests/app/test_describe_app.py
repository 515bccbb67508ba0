"""The text alternative on the page: every chart comes with one, and a token in a title cannot end its script (what
describe() says of a figure: tests/unit/test_describe.py)."""

from __future__ import annotations

import plotly.graph_objects as go


def test_every_chart_on_a_page_comes_with_its_text_alternative() -> None:
    from tests.app.test_app import new_app

    at = new_app(view="One head").run()
    charts = at.get("plotly_chart")
    texts = [h.proto.body for h in at.get("html") if "Chart (" in h.proto.body]
    assert len(charts) >= 3 and len(texts) == len(charts)
    assert "weights = softmax(scores) [13×13]: 13 × 13 cells, strongest" in " ".join(texts)
    assert all('role\', \'figure\'' in t and "aria-label" in t for t in texts)


def test_a_token_in_a_title_cannot_end_the_script_that_names_the_chart() -> None:
    from mha_viz.ui.views import text_alternative_html

    fig = go.Figure(go.Bar(x=["a"], y=[1.0]), layout={"title": {"text": "After '&lt;/script&gt;&lt;script&gt;x()'"}})
    page = text_alternative_html(fig, "figure_k", "fallback")
    assert page.count("</script>") == 1 and "<script>x()" not in page and "&lt;/script&gt;" in page
    assert "\\u003c/script\\u003e" in page  # the name, still the token, for the script to set
