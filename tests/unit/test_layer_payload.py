"""Layers switched in the browser (mha_viz/renderer.js), the server's half: the bytes sent to the page decode to what heads_figure draws,
within the stated bound and with the hover's three decimals (Chromium's half: tests/browser/test_layer_payload.py)."""

from __future__ import annotations

import json
import struct
from decimal import ROUND_HALF_UP, Decimal

import numpy as np
import pytest

from mha_viz import layer_payload, load_model
from mha_viz.figures.heads import MAX_CELLS_PER_SIDE, heads_figure, layer_stack

SENTENCE = "The animal didn't cross the street because it was too tired"


def decode(payload: bytes) -> tuple[dict, np.ndarray]:
    """What layer_payload.js decodes: the header and the [L, H, t, s] values (NaN where 65535), as it computes them
    (step = (hi - lo) / 65534, lo + v * step in float64) and keeps them (a Float32Array)."""
    (n,) = struct.unpack_from("<I", payload)
    meta = json.loads(payload[4:4 + n])
    q = np.frombuffer(payload[4 + n:], dtype="<u2").reshape(meta["layers"], meta["heads"], meta["rows"], meta["cols"])
    values = (meta["lo"] + q.astype(np.float64) * ((meta["hi"] - meta["lo"]) / 65534)).astype(np.float32)
    return meta, np.where(q == 65535, np.float32(np.nan), values)


def to_fixed_3(values: np.ndarray) -> np.ndarray:
    """JavaScript's toFixed(3) of float32 values (what the hover's %{z:.3f} shows), exactly, as strings."""
    return np.array([format(Decimal(float(v)).quantize(Decimal("0.001"), ROUND_HALF_UP), "f")
                     for v in values.ravel()]).reshape(values.shape)


@pytest.fixture(scope="module")
def minilm_traces():
    model = load_model()
    return [model.trace(SENTENCE, layer) for layer in range(model.num_layers["encoder"])]


def test_the_stack_is_what_heads_figure_draws_of_every_layer(minilm_traces) -> None:
    stack = layer_stack(minilm_traces)  # (L, H, t, s)
    assert stack.shape == (6, 12, 15, 15) and stack.dtype == np.float32
    for layer, trace in enumerate(minilm_traces):
        fig = heads_figure(trace)
        for head, heatmap in enumerate(fig.data):
            np.testing.assert_array_equal(stack[layer, head], np.asarray(heatmap.z))


def test_a_long_input_is_stacked_max_pooled_like_the_figure() -> None:
    model = load_model()
    text = " ".join(f"word{i}" for i in range(200))
    traces = [model.trace(text, layer) for layer in (0, 5)]
    stack = layer_stack(traces)
    assert max(stack.shape[2:]) <= MAX_CELLS_PER_SIDE < len(traces[0].query_tokens)
    np.testing.assert_array_equal(stack[1, 7], np.asarray(heads_figure(traces[1]).data[7].z))


def test_the_bytes_decode_to_the_stack_within_uint16_rounding(minilm_traces) -> None:
    stack = layer_stack(minilm_traces).copy()
    stack[0, 0, 0, :3] = np.nan  # NaN (a masked or hidden cell) survives
    payload = layer_payload.with_header(layer_payload.pack(stack, [f"head {h}" for h in range(12)]), active=2, chart="heads")
    meta, values = decode(payload)
    assert meta["active"] == 2 and meta["chart"] == "heads" and meta["labels"][11] == "head 11"
    assert np.array_equal(np.isnan(values), np.isnan(stack))
    step = (meta["hi"] - meta["lo"]) / 65534
    assert np.nanmax(np.abs(values - stack)) <= step + 2.0**-24  # the bound of layer_payload's docstring
    assert len(payload) < 2 * stack.size + 1024  # 2 bytes a cell, a small header


def random_stacks() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "softmax rows": rng.dirichlet(np.full(40, 0.3), size=(4, 8, 40)).astype(np.float32),  # (4, 8, 40, 40)
        "uniform in [0, 1]": rng.random((2, 6, 64, 64), dtype=np.float32),
        "signed, in [-0.3, 2.7]": (rng.random((2, 4, 50, 50)) * 3 - 0.3).astype(np.float32),
        "near half thousandths": (rng.integers(0, 1000, (2, 4, 32, 32)) / 1000 + 0.0005
                                  + rng.normal(0, 2e-6, (2, 4, 32, 32))).astype(np.float32),
    }


def test_the_browsers_values_keep_the_stated_bound_and_the_hovers_three_decimals(minilm_traces) -> None:
    """Decoded as the browser does (float32), every value is within step / 2 + max(|lo|, |hi|) 2^-24 of the true
    one where its code is the nearest, within step + that elsewhere, and shows the true value's 3 decimals."""
    stacks = {"MiniLM, 6 layers": layer_stack(minilm_traces), **random_stacks()}
    for name, stack in stacks.items():
        meta, values = decode(layer_payload.pack(stack, ["head"] * stack.shape[1]))
        lo, hi = meta["lo"], meta["hi"]
        step, rounding = (hi - lo) / 65534, max(abs(lo), abs(hi)) * 2.0**-24
        error = np.abs(values.astype(np.float64) - stack)
        nearest = np.rint((stack.astype(np.float64) - lo) / step)
        codes = np.frombuffer(layer_payload.pack(stack, [])[-2 * stack.size:], dtype="<u2").reshape(stack.shape)
        moved = codes != nearest
        assert error[~moved].max() <= step / 2 + rounding + 1e-12, name
        assert error.max() <= step + rounding + 1e-12 and np.abs(codes - nearest).max() <= 1, name
        if name != "near half thousandths":  # elsewhere only cells within a step of a half thousandth move
            assert 0 < moved.mean() <= step / 0.001, name
        assert np.array_equal(to_fixed_3(values), to_fixed_3(stack)), name  # the hover shows the server's digits
    digits = layer_payload.hover_digits(np.float32([0.0005, 0.0015, 0.0024999, -0.0004, -0.0126, 1.0]))
    assert digits.tolist() == [1, 2, 2, 0, -13, 1000]  # float32(0.0005) is just above a half thousandth


def test_the_stack_refuses_layers_of_different_shapes(minilm_traces) -> None:
    short = load_model().trace("a short one", 1)
    with pytest.raises(ValueError, match="shapes differ"):
        layer_stack([minilm_traces[0], short])


def test_a_stack_past_the_byte_limit_is_not_sent() -> None:
    assert layer_payload.fits((6, 12, 128, 128))
    assert not layer_payload.fits((32, 32, 128, 128))


def test_fitting_payload_is_the_payload_within_max_bytes_and_none_past_it(monkeypatch) -> None:
    from mha_viz.config import MHAConfig
    from mha_viz.sources import configurable_trace

    trace = configurable_trace("one two three four five", MHAConfig(16, 2))  # 2 heads x 5 x 5 cells: 100 bytes
    assert layer_payload.fitting_payload([trace]) == layer_payload.payload_of([trace])
    monkeypatch.setattr(layer_payload, "MAX_BYTES", 99)
    assert layer_payload.fitting_payload([trace]) is None
