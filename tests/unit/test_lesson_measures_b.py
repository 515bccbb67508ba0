"""The measures of lessons 5-7 give the numbers their explanations quote: each checked against a direct computation
through the library (or the arithmetic of the shapes), and against the answer the lesson calls right."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from mha_viz.lessons import LESSON_FILES, Step, lesson
from mha_viz.lessons.measures import MEASURES
from mha_viz.params import ViewState, parse_query


def step(name: str, n: int) -> Step:
    return lesson(LESSON_FILES.index(name) + 1).steps[n - 1]


def state_of(s: Step) -> ViewState:
    state, notices = parse_query(s.state)
    assert not notices
    return state


def measured(name: str, n: int) -> tuple[dict, ViewState, Step]:
    s = step(name, n)
    state = state_of(s)
    return MEASURES[s.question.measure](state), state, s


def right(s: Step) -> str:
    return s.question.choices[s.question.answer]


@cache
def model(name: str):
    from mha_viz.pretrained import load_model

    return load_model(name or None)


def mask(H: int, off: tuple[int, ...]) -> list[float]:
    return [0.0 if h in off else 1.0 for h in range(H)]


def test_near_duplicate_pairs_are_the_pairs_below_the_threshold() -> None:
    from mha_viz.divergence import js_divergence
    from mha_viz.training.precomputed import trained_layer

    values, state, s = measured("heads_matter.toml", 1)
    w = trained_layer(state.task, state.h, state.d_model).trace(None).weights  # (H, T, T)
    pairs = [(a, b) for a in range(state.h) for b in range(a + 1, state.h)]
    mean_jsd = {(a, b): float(js_divergence(w[a], w[b]).mean()) for a, b in pairs}
    below = [p for p, d in mean_jsd.items() if d < state.threshold]
    assert values["pairs"] == len(below) == int(right(s)) and values["all_pairs"] == len(pairs) == 28
    assert values["closest"] == pytest.approx(min(mean_jsd.values()), abs=1e-6)


@pytest.mark.parametrize("n", [2, 3, 4])
def test_knockout_probabilities_are_the_models_with_those_heads_masked(n: int) -> None:
    values, state, _ = measured("heads_matter.toml", n)
    m = model(state.model)
    before = m.next_token_probs(state.text)
    after = m.next_token_probs(state.text, head_masks={state.layer: mask(4, state.off)})
    big = m.tokenizer.convert_tokens_to_ids(values["token"])
    assert int(np.argmax(before)) == big
    assert values["p_before"] == pytest.approx(float(before[big]), abs=1e-5)
    assert values["p_after"] == pytest.approx(float(after[big]), abs=1e-5)
    assert values["new_token"] == m.tokenizer.convert_ids_to_tokens(int(np.argmax(after)))
    if n == 2:  # one induction head off: the prediction stays
        assert abs(values["p_after"] - values["p_before"]) < 0.01 and values["final_change"] > 0.1
    if n == 3:  # the previous-token head off: it collapses
        assert values["p_after"] < 0.01 and values["new_token"] != values["token"]
    if n == 4:  # one head of four kept: still the top token
        assert values["kept"] == 1 and values["new_token"] == values["token"] and values["p_after"] > 0.5


def test_pruning_half_a_layer_is_measured_on_the_final_hidden_state() -> None:
    values, state, s = measured("heads_matter.toml", 5)
    m = model(state.model)
    full = m.final_hidden(state.text)

    def change(off: tuple[int, ...]) -> float:
        knocked = m.final_hidden(state.text, head_masks={state.layer: mask(12, off)})
        return float(np.linalg.norm(full - knocked) / np.linalg.norm(full))

    singles = np.array([change((h,)) for h in range(12)])
    assert values["joint"] == pytest.approx(change(state.off), abs=1e-5)
    assert values["top"] == pytest.approx(singles.max(), abs=1e-5) and values["top_head"] == int(singles.argmax())
    assert set(np.argsort(singles)[:6]) == set(state.off)  # the six that matter least alone
    assert abs(values["joint"] - values["top"]) < 0.03 and right(s).startswith("as much as")


def test_the_greedy_first_token_is_the_most_likely_next_token() -> None:
    values, state, s = measured("induction.toml", 1)
    m = model(state.model)
    probs = m.next_token_probs(state.text)
    first = m.tokenizer.convert_ids_to_tokens(int(np.argmax(probs)))
    assert values["first"] == first == right(s) and values["p_first"] == pytest.approx(float(probs.max()), abs=1e-5)
    assert values["written"].split()[0] == first and values["n"] == state.new_tokens


def test_detector_heads_are_where_the_attention_on_repeated_tokens_goes() -> None:
    from mha_viz.analysis.head_detectors import repeated_tokens

    values, state, s = measured("induction.toml", 2)
    m = model(state.model)
    ids, start, n = repeated_tokens(m, seed=0)
    a = np.stack([m.attentions_for_ids(row.tolist()) for row in ids])  # (B, L, H, T, T)
    q = np.arange(start + 1, start + 2 * n)
    previous = a[..., q, q - 1].mean((0, -1))  # (L, H)
    q = np.arange(start + n, start + 2 * n)
    induction = a[..., q, q - n + 1].mean((0, -1))
    best = np.unravel_index(int(previous.argmax()), previous.shape)
    assert values["prev_head"] == f"{best[0]}.{best[1]}" == right(s)
    assert values["prev_score"] == pytest.approx(float(previous.max()), abs=1e-4)
    found = [f"{layer}.{head}" for layer, head in np.argwhere(induction > 0.5)]
    assert values["induction_heads"] == ", ".join(found) and values["n_induction"] == len(found) == 4
    assert right(step("induction.toml", 3)).startswith("Four")


def test_logit_by_layer_adds_up_to_the_models_logit() -> None:
    values, state, s = measured("induction.toml", 4)
    m = model(state.model)
    dla = m.logit_attribution(state.text, position=-1)
    assert values["layer0"] + values["layer1"] + values["rest"] == pytest.approx(dla.logit, abs=1e-3)
    assert values["token"] == m.tokenizer.convert_ids_to_tokens(int(np.argmax(m.next_token_probs(state.text))))
    assert values["layer1"] > 10 * abs(values["layer0"]) and right(s) == "The heads of layer 1"


def test_k_composition_singles_out_the_previous_token_head() -> None:
    from mha_viz.analysis.composition import composition_scores

    values, state, s = measured("induction.toml", 5)
    scores = composition_scores(model(state.model), "k")[0, :, 1, :]  # (layer-0 writers, layer-1 readers)
    assert values["writer"] == f"0.{int(scores.mean(1).argmax())}" == right(s)
    assert values["always"] and (scores.argmax(0) == int(values["writer"][2])).all()
    writer = int(values["writer"][2])
    assert values["low"] == pytest.approx(float(scores[writer].min()), abs=1e-5)
    assert values["other"] == pytest.approx(float(np.delete(scores, writer, axis=0).max()), abs=1e-5)
    assert values["low"] > values["other"] > values["baseline"]


def test_key_sources_single_out_the_previous_token_heads_output_on_the_key_side() -> None:
    from mha_viz.analysis import score_attribution

    values, state, s = measured("induction.toml", 6)
    m = model(state.model)
    query = len(m.tokens(state.text)) - 1
    shares = []
    for head in range(4):
        sa = score_attribution(m, state.text, layer=1, head=head, query=query)
        table = sa.table(sa.winner)
        columns = table.sum(0)  # (sources,) each key source's part of the score
        assert sa.sources[int(np.argmax(columns))] == "0.2"  # the answer the lesson calls right, for every head
        shares.append(columns[sa.sources.index("0.2")] / sa.scores[sa.keys.index(sa.winner)])
        assert values["removed"] >= sa.removed[sa.sources.index("0.2"), sa.winner]
    assert values["share_low"] == pytest.approx(min(shares)) and values["share_high"] == pytest.approx(max(shares))
    assert right(s) == "Head 0.2's output" and values["share_low"] > 0.5 and values["removed"] < 0.05
    assert values["top_query"] in ("token", "0.3") and values["token_rank"] in ("first", "second")


def test_kv_sharing_is_the_arithmetic_of_the_shapes() -> None:
    values, state, s = measured("long_contexts.toml", 1)
    d_k = state.d_model // state.h
    assert values["group"] == state.h // state.kv_heads == int(right(s))
    assert values["numbers"] == state.kv_heads * 2 * d_k and values["mha_numbers"] == state.h * 2 * d_k


@pytest.mark.parametrize("n", [3, 4])
def test_kv_caches_of_the_presets_are_their_configs_arithmetic(n: int) -> None:
    values, state, s = measured("long_contexts.toml", n)
    context = state.cost_context
    llama = 32 * 8 * (128 + 128) * 2 * context  # layers, KV heads, d_k + d_v, bf16 bytes, tokens
    mistral = 32 * 8 * (128 + 128) * 2 * min(context, 4096)
    deepseek = 61 * (512 + 64) * 2 * context  # layers, latent + rotary, bf16, tokens
    assert values["llama_bytes"] == llama and values["mistral_bytes"] == mistral and values["deepseek_bytes"] == deepseek
    assert values["llama_ratio"] == 4 and values["context"] == context
    if n == 3:
        assert right(s) == "4 times smaller"
    else:
        short = MEASURES["kv_cache_models"](ViewState())  # the default context, 8,192
        assert short["mistral_bytes"] == values["mistral_bytes"] and short["llama_bytes"] < values["llama_bytes"]
        assert right(s).startswith("Mistral-7B")


def test_latent_cache_counts_the_latent_against_mhas_keys_and_values() -> None:
    from mha_viz.config import MHAConfig
    from mha_viz.sources import configurable_trace
    from mha_viz.variants import LayerVariant

    values, state, s = measured("long_contexts.toml", 5)
    trace = configurable_trace(state.text, MHAConfig(state.d_model, state.h), variant=LayerVariant(
        "mla", kv_latent=state.kv_latent, q_latent=state.q_latent, rope_dim=state.rope_dim))
    assert values["numbers"] == 16 + 4 and values["mha_numbers"] == 4 * (trace.d_k + trace.d_v)
    assert 5 < values["ratio"] < 10 and right(s) == "About 7 times"
    deepseek = 128 * (128 + 64 + 128) / (512 + 64)  # MHA's heads × (d_k + rotary + d_v) against latent + rotary
    assert values["deepseek_ratio"] == pytest.approx(deepseek) == MEASURES["kv_cache_models"](state)["deepseek_ratio"]


def test_window_reach_is_the_farthest_token_stacked_windows_connect() -> None:
    from mha_viz.analysis.reach import reach

    values, state, s = measured("long_contexts.toml", 6)
    T = 20
    R = reach(T, state.window, state.reach_layers, causal=True)  # [query, key] after the stacked layers
    last = T - 1
    assert values["reach"] == last - int(np.flatnonzero(R[last]).min()) == int(right(s).split()[0])
