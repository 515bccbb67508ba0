"""Concat -> W_O on the bundled MiniLM in the app: the W_O panel's clipped colour scale is stated under the figure."""

from __future__ import annotations

import numpy as np

from tests.app.test_app import figure, new_app
from tests.plotly_json import heatmaps, z_matrix


def test_minilms_concat_view_states_where_its_colours_are_clipped() -> None:
    at = new_app(mode="Pretrained", view="Concat → W_O").run()
    assert not at.exception and not at.error
    fig = next(f for f in (figure(at, i) for i in range(len(at.get("plotly_chart")))) if "coloraxis2" in f["layout"])
    limit = fig["layout"]["coloraxis2"]["cmax"]
    W_O = z_matrix(heatmaps(fig)[1])
    said = [c.value for c in at.caption if c.value.startswith("Concat and output: colours clipped")]
    assert len(said) == 1 and f"W_O: colours clipped at ±{limit:.3g}" in said[0]
    assert f"{np.mean(np.abs(W_O) > limit):.1%} of the values lie beyond" in said[0].split("W_O:")[1]
