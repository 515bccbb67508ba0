"""What the views show of grouped-query attention: the heads grid framed by K/V group, the K/V group of one head
measured, and One head's formula for a model that norms each head (DiffLlama)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import torch
import transformers as tf
from transformers import AutoTokenizer

from mha_viz import MultiHeadAttention
from mha_viz.analysis.kv_groups import kv_group
from mha_viz.figures import head_steps_figure, heads_figure
from mha_viz.figures.generation import step_attention_figure
from mha_viz.figures.heads import GROUP_COLOURS, group_style
from mha_viz.pretrained import PretrainedModel, bundled_model_dir
from tests.tiny_causal import random_causal_lm, tiny_causal

SMALL = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64,
         "max_position_embeddings": 64, "pad_token_id": 0, "bos_token_id": 101, "eos_token_id": 102}


def frames(fig: dict) -> list[dict]:
    return [s for s in fig["layout"].get("shapes", []) if s["type"] == "rect" and s["xref"].endswith(" domain")]


def frame_of_each_heatmap(fig: dict) -> list[tuple[str, str]]:
    """(colour, dash) of the frame around each heatmap, in the heatmaps' order; fails if one has none or two."""
    by_axis = {}
    for s in frames(fig):
        key = (s["xref"].split()[0], s["yref"].split()[0])
        assert key not in by_axis, key
        by_axis[key] = (s["line"]["color"], s["line"]["dash"])
    heatmaps = [t for t in fig["data"] if t["type"] == "heatmap"]
    assert len(by_axis) == len(heatmaps)
    return [by_axis[(t.get("xaxis", "x"), t.get("yaxis", "y"))] for t in heatmaps]


@pytest.mark.parametrize("H, G", [(8, 2), (8, 1), (12, 4), (16, 8)])
def test_heads_grid_frames_each_head_in_its_kv_groups_style(H: int, G: int) -> None:
    t = MultiHeadAttention(48, H, kv_heads=G, seed=0)(torch.randn(5, 48))
    fig = json.loads(heads_figure(t).to_json())
    styles = frame_of_each_heatmap(fig)
    group = H // G
    for h in range(H):
        assert styles[h] == styles[h // group * group], h  # the same frame as the first head of its group
    assert len(set(styles)) == G  # and no two groups alike
    titles = [a["text"] for a in fig["layout"]["annotations"]]
    assert all(f"head {h} (K/V head {h // group})" in titles for h in range(H))
    assert fig["layout"]["coloraxis"]["colorscale"][0][1] != styles[0][0]  # one colour axis, untouched
    assert {tr["coloraxis"] for tr in fig["data"] if tr["type"] == "heatmap"} == {"coloraxis"}


@pytest.mark.parametrize("width", [358, 564, 1000])
def test_group_titles_wrap_alike_in_every_row_and_keep_clear_of_the_colour_bar(width: int) -> None:
    from mha_viz.figures.common import LINE_EM, PANEL_TITLE_PX, under_toolbar
    from mha_viz.figures.heads import COMPACT_BAR_PX

    t = MultiHeadAttention(64, 8, kv_heads=2, seed=0)(torch.randn(13, 64))
    fig = under_toolbar(heads_figure(t, width=width), width)  # as the app draws it (mha_viz.ui.views.chart)
    titles = [a.text for a in fig.layout.annotations if a.text.startswith("head")]
    assert len(titles) == 8 and len({title.count("<br>") for title in titles}) == 1  # every row alike
    assert [title.replace("<br>", " ") for title in titles] == [f"head {h} (K/V head {h // 4})" for h in range(8)]
    lines = titles[0].count("<br>") + 1
    bar = fig.layout.coloraxis.colorbar
    if bar.orientation == "h":  # the bar above the heads: its block ends where the first row's titles may start
        bar_bottom = (1 - bar.y) * fig.layout.height + COMPACT_BAR_PX - 4
        assert fig.layout.margin.t - bar_bottom >= lines * LINE_EM * PANEL_TITLE_PX * 0.75, (fig.layout.margin.t, bar_bottom)


def test_picked_heads_keep_their_groups_frame() -> None:
    t = MultiHeadAttention(64, 8, kv_heads=2, seed=0)(torch.randn(5, 64))
    fig = json.loads(heads_figure(t, [5, 1, 4]).to_json())
    assert frame_of_each_heatmap(fig) == [tuple(group_style(g)[k] for k in ("color", "dash")) for g in (1, 0, 1)]


def test_mha_heads_grid_has_no_group_frames() -> None:
    t = MultiHeadAttention(64, 8, seed=0)(torch.randn(5, 64))
    assert not frames(json.loads(heads_figure(t).to_json()))


def test_group_styles_differ_for_many_groups_and_avoid_the_heatmap_blues() -> None:
    styles = {(group_style(g)["color"], group_style(g)["dash"]) for g in range(3 * len(GROUP_COLOURS))}
    assert len(styles) == 3 * len(GROUP_COLOURS)
    for colour in GROUP_COLOURS:  # none is a blue like the weights' scale
        r, g, b = (int(colour[i:i + 2], 16) for i in (1, 3, 5))
        assert not (b > r and b > g), colour


def test_pretrained_gqa_trace_is_framed_by_its_kv_heads() -> None:
    t = tiny_causal("llama").trace("the cat sat on the mat", 0)  # 4 query heads, 2 K/V heads
    assert t.kv_heads == (0, 0, 1, 1)
    styles = frame_of_each_heatmap(json.loads(heads_figure(t).to_json()))
    assert styles[0] == styles[1] != styles[2] == styles[3]


def test_kv_group_measures_the_shared_k_and_v() -> None:
    t = MultiHeadAttention(64, 8, kv_heads=2, seed=0)(torch.randn(6, 64))
    g = kv_group(t, 5)
    assert (g.kv_head, g.sharing) == (1, (4, 6, 7))
    assert g.max_key_difference == g.max_value_difference == 0.0
    mqa = kv_group(MultiHeadAttention(64, 4, kv_heads=1, seed=0)(torch.randn(6, 64)), 0)
    assert mqa.sharing == (1, 2, 3) and mqa.max_key_difference == 0.0


def test_kv_group_reports_a_difference_when_keys_differ() -> None:
    t = MultiHeadAttention(64, 8, kv_heads=2, seed=0)(torch.randn(6, 64))
    keys = t.keys.copy()
    keys[6] += 0.25  # a trace whose K were not shared: the measure must say so
    g = kv_group(replace(t, keys=keys), 4)
    assert g.max_key_difference == pytest.approx(0.25) and g.max_value_difference == 0.0


def test_kv_group_refuses_mha_and_missing_heads() -> None:
    with pytest.raises(ValueError, match="no grouped-query"):
        kv_group(MultiHeadAttention(64, 4, seed=0)(torch.randn(3, 64)), 0)
    with pytest.raises(ValueError, match="no head 8"):
        kv_group(MultiHeadAttention(64, 8, kv_heads=2, seed=0)(torch.randn(3, 64)), 8)


@pytest.fixture(scope="module")
def diffllama() -> PretrainedModel:
    config = tf.DiffLlamaConfig(vocab_size=30522, num_key_value_heads=2, lambda_std_dev=0.3, **SMALL)
    return PretrainedModel(random_causal_lm(config), AutoTokenizer.from_pretrained(bundled_model_dir()),
                           name="tiny-diffllama")


def test_one_head_of_diffllama_names_the_head_norm(diffllama: PretrainedModel) -> None:
    t = diffllama.trace("the cat sat on the mat", 1)
    mixed = np.einsum("hts,hsd->htd", t.weights, t.values)
    assert np.abs(mixed - t.head_outputs).max() > 1e-3  # the head output is not weights · V alone
    titles = [a.text for a in head_steps_figure(t, 0).layout.annotations]
    assert any(x.startswith("head output = (1 − λ_init)·RMSNorm(weights · V)") for x in titles), titles
    plain = MultiHeadAttention(64, 4, seed=0)(torch.randn(3, 64))
    assert any(a.text.startswith("head output = weights · V  [") for a in head_steps_figure(plain, 0).layout.annotations)


def test_generate_draws_diffllamas_signed_head_weights_on_the_signed_scale(diffllama: PretrainedModel) -> None:
    gen = diffllama.generate("the cat sat on the mat", 3)
    step = gen.steps[-1]
    ids = list(gen.input_ids(2))
    with torch.no_grad():  # the model's own 4 softmax maps, paired (i, i + 2) into 2 heads, lambda written out
        own = diffllama.model(input_ids=torch.tensor([ids]), output_attentions=True).attentions
        expected = []
        for layer, maps in enumerate(own):
            a = diffllama.model.model.layers[layer].self_attn
            lam = (torch.exp((a.lambda_q1 * a.lambda_k1).sum()) - torch.exp((a.lambda_q2 * a.lambda_k2).sum())
                   + a.lambda_init)
            expected.append((maps[0, :2, -1] - lam * maps[0, 2:, -1]).numpy())
            assert np.allclose(step.attentions[layer].sum(-1), 1 - float(lam), atol=1e-5)  # rows sum to 1 - lambda
    assert step.attentions.shape == (2, 2, len(ids))
    assert np.abs(step.attentions - np.stack(expected)).max() < 1e-5
    assert (step.attentions < 0).any()
    opened = diffllama.attentions_for_ids(ids)  # what the Generate view opens on a click: the same heads
    assert opened.shape[1] == diffllama.num_heads["decoder"] == 2
    assert np.abs(opened[:, :, -1] - step.attentions).max() < 1e-5
    heat = step_attention_figure(step.attentions, gen.key_tokens(2)).data[0]
    assert heat.zmin == -heat.zmax < 0 and heat.colorscale[0][1] == "rgb(103,0,31)"  # RdBu, centred at 0


def test_generate_keeps_softmax_weights_on_blues_from_zero() -> None:
    gen = tiny_causal("llama").generate("the cat sat", 2)
    heat = step_attention_figure(gen.steps[-1].attentions, gen.key_tokens(1)).data[0]
    assert heat.zmin == 0 and heat.colorscale[0][1] == "rgb(247,251,255)"  # Blues
