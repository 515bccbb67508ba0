"""MHAConfig defaults and validation, valid_head_counts, nearest_valid_heads."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_viz import MHAConfig, nearest_valid_heads, valid_head_counts


@pytest.mark.parametrize("d_model,H", [(64, 8), (512, 8), (48, 6), (12, 4), (7, 1), (5, 5)])
def test_defaults(d_model, H):
    cfg = MHAConfig(d_model, H)
    assert cfg.d_k == cfg.d_v == d_model // H and cfg.d_k * H == d_model
    assert cfg.d_out == d_model and cfg.d_context == d_model
    assert cfg.bias is True
    assert cfg.concat_width == d_model
    assert cfg.is_standard


def test_explicit_widths():
    cfg = MHAConfig(10, 4, d_k=3, d_v=6, d_out=11, d_context=2, bias=False)
    assert (cfg.d_model, cfg.num_heads, cfg.d_k, cfg.d_v, cfg.d_out, cfg.d_context) == (10, 4, 3, 6, 11, 2)
    assert cfg.concat_width == 24
    assert not cfg.bias
    assert not cfg.is_standard
    # partially set widths: the rest take defaults
    cfg = MHAConfig(12, 3, d_v=5)
    assert (cfg.d_k, cfg.d_v, cfg.d_out, cfg.d_context) == (4, 5, 12, 12)
    assert not cfg.is_standard
    assert not MHAConfig(12, 3, d_out=6).is_standard
    assert not MHAConfig(12, 3, d_context=6).is_standard
    # setting the defaults explicitly is still standard, and equal to the default config
    assert MHAConfig(12, 3, d_k=4, d_v=4, d_out=12, d_context=12) == MHAConfig(12, 3)
    assert MHAConfig(12, 3, d_k=4, d_v=4, d_out=12, d_context=12).is_standard


def test_frozen():
    cfg = MHAConfig(8, 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.num_heads = 4  # type: ignore[misc]


@pytest.mark.parametrize("name", ["d_model", "num_heads", "d_k", "d_v", "d_out", "d_context"])
@pytest.mark.parametrize("bad", [0, -3, True, False, 2.0, 2.5, "4", None])
def test_validation_messages(name, bad):
    kw = dict(d_model=8, num_heads=2)
    kw[name] = bad
    if bad is None and name not in ("d_model", "num_heads"):
        MHAConfig(**kw)  # None means "use the default" for the optional widths
        return
    with pytest.raises(ValueError) as err:
        MHAConfig(**kw)
    assert str(err.value) == f"{name} must be a positive whole number, got {bad!r}"


@pytest.mark.parametrize(
    "d_model,H,near",
    [(64, 5, "4"), (48, 5, "4 or 6"), (12, 5, "4 or 6"), (30, 8, "6 or 10"), (7, 3, "1"), (4, 8, "4"), (100, 3, "2 or 4")],
)
def test_heads_must_divide_d_model(d_model, H, near):
    with pytest.raises(ValueError) as err:
        MHAConfig(d_model, H)
    msg = str(err.value)
    assert f"Nearest valid h: {near}." in msg
    assert f"h={H} does not divide d_model={d_model}" in msg
    # only one of d_k / d_v is not enough ...
    with pytest.raises(ValueError):
        MHAConfig(d_model, H, d_k=3)
    with pytest.raises(ValueError):
        MHAConfig(d_model, H, d_v=3)
    # ... both are
    cfg = MHAConfig(d_model, H, d_k=3, d_v=2)
    assert (cfg.d_k, cfg.d_v, cfg.d_out) == (3, 2, d_model)
    assert not cfg.is_standard


def test_valid_head_counts_examples():
    assert valid_head_counts(64) == [1, 2, 4, 8, 16, 32, 64]
    assert valid_head_counts(48) == [1, 2, 3, 4, 6, 8, 12, 16, 24, 48]
    assert valid_head_counts(7) == [1, 7]
    assert valid_head_counts(1) == [1]
    assert valid_head_counts(64, max_heads=10) == [1, 2, 4, 8]
    assert valid_head_counts(48, max_heads=48) == valid_head_counts(48)
    assert valid_head_counts(12, max_heads=100) == [1, 2, 3, 4, 6, 12]


def test_nearest_valid_heads_examples():
    assert nearest_valid_heads(64, 5) == [4]  # |4-5| = 1 < |8-5| = 3
    assert nearest_valid_heads(48, 5) == [4, 6]  # tie
    assert nearest_valid_heads(64, 8) == [8]  # already valid
    assert nearest_valid_heads(64, 100) == [64]
    assert nearest_valid_heads(30, 8) == [6, 10]
    assert nearest_valid_heads(30, 12) == [10]  # |10-12| = 2 < |15-12| = 3
    assert nearest_valid_heads(7, 3) == [1]  # |1-3| = 2 < |7-3| = 4
    assert nearest_valid_heads(64, 20, max_heads=16) == [16]
    assert nearest_valid_heads(48, 20, max_heads=12) == [12]


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 400), st.integers(1, 100), st.none() | st.integers(1, 50))
def test_head_helpers_property(d_model, h, max_heads):
    valid = valid_head_counts(d_model, max_heads)
    top = d_model if max_heads is None else min(d_model, max_heads)
    assert valid == [k for k in range(1, top + 1) if d_model % k == 0]
    assert valid[0] == 1 and valid == sorted(valid)
    near = nearest_valid_heads(d_model, h, max_heads)
    assert 1 <= len(near) <= 2 and set(near) <= set(valid)
    best = min(abs(k - h) for k in valid)
    assert all(abs(k - h) == best for k in near)
    assert set(near) == {k for k in valid if abs(k - h) == best}
    if h in valid:
        assert near == [h]
    # MHAConfig accepts h exactly when it divides d_model
    if d_model % h == 0:
        assert MHAConfig(d_model, h).d_k * h == d_model
    else:
        with pytest.raises(ValueError, match="Nearest valid h"):
            MHAConfig(d_model, h)


def test_numpy_integers_are_accepted_and_stored_as_int():
    cfg = MHAConfig(np.int64(64), np.int32(8))
    assert cfg.d_k == 8 and type(cfg.d_model) is int and type(cfg.num_heads) is int


def test_nearest_valid_heads_with_no_choice_raises_clearly():
    with pytest.raises(ValueError, match="no valid head count"):
        nearest_valid_heads(64, 5, max_heads=0)
