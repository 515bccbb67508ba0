"""Numbers a lesson's answer quotes, measured on the live models: each a function of the app state returning named
values for the explanation's {placeholders}. A lesson names one by `measure = "<name>"`; add one with @measure."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import cache, lru_cache, partial
from typing import TYPE_CHECKING, Any

import numpy as np

from ..params import ViewState
from ..token_labels import id_label

if TYPE_CHECKING:
    from ..pretrained import PretrainedModel

Measure = Callable[[ViewState], dict[str, Any]]
MEASURES: dict[str, Measure] = {}


def measure(function: Measure) -> Measure:
    """Register a measure under its function's name."""
    MEASURES[function.__name__] = function
    return function


@measure
def layer_shapes(state: ViewState) -> dict[str, Any]:
    """d_model, h, d_k = d_model / h, and the layer's weights 4 d_model^2 (standard widths)."""
    d, h = state.d_model, state.h
    return {"d_model": d, "h": h, "d_k": d // h if d % h == 0 else d / h, "weights": 4 * d * d}


# Lessons 1, 2 and 4 (one head, heads specialise, concat and W_O): numbers from the trained layers, the bundled
# pretrained models and the configurable layer, computed with the library exactly as the app computes what it shows.
LESSON_HEADS = (1, 2, 4)  # the h that lessons 1 and 2 compare (shipped trained layers at d_model = 64)


def _trained(state: ViewState, h: int | None = None):
    """The trained layer the trained-weights page shows for this state (h: another head count)."""
    from ..training import trained_layer

    return trained_layer(state.task, state.h if h is None else h, state.d_model, state.seed, state.steps)


def _layer_trace(state: ViewState):
    """The AttentionTrace of the configurable page's layer: trained weights, or random (seeded) ones."""
    if state.weights == "trained":
        return _trained(state).trace(state.sequence or None)
    from ..config import MHAConfig
    from ..sources import configurable_trace

    return configurable_trace(state.text, MHAConfig(state.d_model, state.h, d_k=state.d_k, d_v=state.d_v,
                                                    d_out=state.d_out), seed=state.seed, causal=state.causal,
                              positional=state.pe)


@lru_cache(maxsize=4)
def _detector_scores(model: str) -> dict[str, np.ndarray]:
    """detect_heads of a pretrained model ("" the bundled MiniLM), seed 0 as the app runs it; only the small score
    arrays are kept, not the model."""
    from ..analysis import detect_heads

    return detect_heads(_model(model), seed=0)


@lru_cache(maxsize=16)
def _first_shares(model: str, text: str, layer: int) -> tuple[np.ndarray, tuple[str, ...]]:
    """Head statistics' first column of a pretrained model's layer on text (special tokens shown), and its keys."""
    from ..analysis.head_stats import trace_head_stats

    loaded = _model(model)
    trace = loaded.trace(text, layer)
    return trace_head_stats(trace, loaded.tokenizer.all_special_tokens).first, trace.key_tokens


def _key(name: str) -> str:
    return name.replace(" ", "_")


@measure
def it_row(state: ViewState) -> dict[str, Any]:
    """Head 0's row for the query "it" (the first one) on the state's sentence: its sum, its weight on "animal" and on
    the sentence's last word, and the key it weighs most."""
    trace = _layer_trace(state)
    tokens = [t.lower() for t in trace.query_tokens]
    if "it" not in tokens:
        raise ValueError("it_row needs a sentence with the word 'it'")
    row = trace.weights[0, tokens.index("it")].astype(float)  # (S,)
    keys = [t.lower() for t in trace.key_tokens]
    top = int(row.argmax())
    return {"row_sum": float(row.sum()), "w_animal": float(row[keys.index("animal")]) if "animal" in keys else 0.0,
            "last_word": trace.key_tokens[-1], "w_last": float(row[-1]), "top_key": trace.key_tokens[top],
            "w_top": float(row[top]), "n_keys": len(row), "uniform": 1.0 / len(row)}


@measure
def trained_heads(state: ViewState) -> dict[str, Any]:
    """The trained layer of this state: its accuracy (mean and per relation, accuracy_<relation>), each head's
    attention mass on each relation (mass_<relation> of head 0; head<i>_<relation> of every head), and the number of
    heads whose largest mass is each relation (heads_on_<relation>)."""
    layer = _trained(state)
    out: dict[str, Any] = {"h": layer.num_heads, "accuracy": float(layer.mean_accuracy)}
    best = layer.scores.argmax(1)  # (H,) the relation each head follows most
    for r, name in enumerate(layer.relations):
        out[f"accuracy_{_key(name)}"] = float(layer.accuracy[r])
        out[f"mass_{_key(name)}"] = float(layer.scores[0, r])
        out[f"heads_on_{_key(name)}"] = int((best == r).sum())
        for head in range(layer.num_heads):
            out[f"head{head}_{_key(name)}"] = float(layer.scores[head, r])
    return out


@measure
def trained_accuracy(state: ViewState) -> dict[str, Any]:
    """Mean accuracy of the trained layers with h = 1, 2 and 4 (accuracy_h<h>) on the state's task, d_model, seed and
    steps, as the accuracy-per-h chart shows them."""
    return {f"accuracy_h{h}": float(_trained(state, h).mean_accuracy) for h in LESSON_HEADS}


@measure
def head_detectors(state: ViewState) -> dict[str, Any]:
    """The state's pretrained model: for each detector kind (previous, duplicate, induction), the head that scores
    highest (<kind>_layer, <kind>_head, <kind>_score), the second-highest score of any head (<kind>_next) and the
    lowest score in the top head's layer (<kind>_layer_min), as Analysis → Head detectors finds them (seed 0)."""
    out: dict[str, Any] = {}
    for kind, scores in _detector_scores(state.model).items():
        layer, head = divmod(int(scores.argmax()), scores.shape[1])
        ranked = np.sort(scores.ravel())[::-1]
        out |= {f"{kind}_layer": layer, f"{kind}_head": head, f"{kind}_score": float(ranked[0]),
                f"{kind}_next": float(ranked[1]), f"{kind}_layer_min": float(scores[layer].min())}
    return out


@measure
def first_token_head(state: ViewState) -> dict[str, Any]:
    """The state's pretrained model at the state's layer, on its text: the head with the largest share on the first
    token (Head statistics' first column), that share, the first token, and what a uniform row would give it."""
    first, keys = _first_shares(state.model, state.text, state.layer)  # (H,), (S,)
    head = int(first.argmax())
    return {"layer": state.layer, "head": head, "first_share": float(first[head]), "first_token": keys[0],
            "median_share": float(np.median(first)), "uniform": 1.0 / len(keys)}


@measure
def concat_widths(state: ViewState) -> dict[str, Any]:
    """h, d_v, the width of the concatenation h·d_v that reaches W_O, and d_model (arithmetic on the layer's shapes)."""
    trace = _layer_trace(state)
    return {"h": trace.num_heads, "d_v": trace.d_v, "width": trace.num_heads * trace.d_v,
            "d_model": int(trace.W_O.shape[0])}


@measure
def wo_path(state: ViewState) -> dict[str, Any]:
    """The two identities of the concat → W_O path on the state's layer: the largest difference between concat·W_Oᵀ + b
    and the output (concat_error), and between the sum of the heads' contributions + b and the output (sum_error), with
    the larger of the two (max_error) and the float rounding allowed (tolerance)."""
    trace = _layer_trace(state)
    concat_error, sum_error = trace.check_wo_path().values()
    return {"concat_error": concat_error, "sum_error": sum_error, "max_error": max(concat_error, sum_error),
            "tolerance": trace.rounding_tolerance()}


@measure
def concat_sum(state: ViewState) -> dict[str, Any]:
    """Analysis → Concat vs sum on the state's layer: the relative error of the real path, of the best shared W' and of
    the mean block, and the numbers per token each path gives W_O."""
    from ..analysis.concat_sum import concat_vs_sum

    r = concat_vs_sum(_layer_trace(state))
    return {"concat_error": r.concat_error, "fitted_error": r.fitted_error, "mean_error": r.mean_error,
            "concat_dims": r.concat_dims, "sum_dims": r.sum_dims, "fits_any": r.fits_any}


@measure
def contributions(state: ViewState) -> dict[str, Any]:
    """Analysis → Contribution on the state's layer: each head's mean ‖head_h·W_O^(h)ᵀ‖ over the queries
    (contribution<h>), the largest and the smallest, and their ratio."""
    from ..analysis.contribution import contribution_norms

    means = contribution_norms(_layer_trace(state)).mean(-1)  # (H,)
    top, low = int(means.argmax()), int(means.argmin())
    return {**{f"contribution{h}": float(v) for h, v in enumerate(means)}, "top_head": top,
            "top": float(means[top]), "low_head": low, "low": float(means[low]), "ratio": float(means[top] / means[low])}
@measure
def wo_readout(state: ViewState) -> dict[str, Any]:
    """Analysis → W_O at work on the state's trained layer (mha_viz.analysis.trained_readout): each head's mean direct
    contribution through its block of W_O to the right answer's logit in each relation's readout
    (head<i>_<relation>), the relation each head attends to most (head<i>_attends), and how many of the V source
    tokens each head's token map sends to themselves in the readout of its own relation (head<i>_copies of vocab)."""
    from ..analysis.readout import trained_readout

    layer = _trained(state)
    r = trained_readout(layer)
    V = len(r.vocab)
    out: dict[str, Any] = {"vocab": V, "h": len(r.heads)}
    for head in range(len(r.heads)):
        own = int(layer.scores[head].argmax())  # the relation this head attends to
        out[f"head{head}_attends"] = layer.relations[own]
        out[f"head{head}_copies"] = round(float(r.copying[head, r.answers.index(layer.relations[own])]) * V)
        for a, answer in enumerate(r.answers):
            out[f"head{head}_{_key(answer)}"] = round(float(r.contributions[head, a]), 1) + 0.0  # no "-0.0"
    return out


# Lessons 5-7 (not all heads matter, induction heads, cheaper attention for long contexts): measured on the page's
# trained layer, the bundled models or the cost formulas of mha_viz.variants_cost, as the app's views show them.

@cache
def _load_once(name: str) -> PretrainedModel:
    """A bundled model ("" is MiniLM, else mha-viz/induction-2l), loaded once per process."""
    from ..pretrained import load_model

    return load_model(name or None, folders=False)


_loader: Callable[[str], PretrainedModel] = _load_once


def use_models(loader: Callable[[str], PretrainedModel]) -> None:
    """Where measures get a bundled model by name ("": MiniLM): an app passes its own cached loader, so that the
    lessons read the models it already holds instead of loading copies of their own."""
    global _loader
    _loader = loader


def _model(name: str) -> PretrainedModel:
    return _loader(name)


def _heads(heads: Iterable[tuple[int, int] | int]) -> str:
    return ", ".join(".".join(map(str, h)) if isinstance(h, tuple) else str(h) for h in heads)


@measure
def near_duplicate_heads(state: ViewState) -> dict[str, Any]:
    """The trained layer's head pairs closer than the threshold (mean Jensen-Shannon divergence, Analysis → Redundancy)
    on its sequence: how many of how many, and the closest and farthest pair."""
    from ..analysis.redundancy import redundancy
    from ..sources import TrainedSource
    from ..training.precomputed import trained_layer

    layer = trained_layer(state.task, state.h, state.d_model, state.seed, state.steps)
    result = redundancy(TrainedSource(layer, state.sequence).trace(0).weights, state.threshold)
    upper = result.divergence[np.triu_indices(state.h, 1)]
    return {"pairs": len(result.duplicates), "all_pairs": len(upper), "threshold": state.threshold,
            "closest": float(upper.min()), "farthest": float(upper.max()), "accuracy": layer.mean_accuracy}


@measure
def knockout_next_token(state: ViewState) -> dict[str, Any]:
    """A causal model's next token after the text with every head on and with heads `off` of `layer` zeroed
    (Analysis → Knockout): the token, its probability before and after, the new top token, the final state's change."""
    from ..analysis.knockout import model_knockout, next_token_knockout

    model = _model(state.model)
    before, after = next_token_knockout(model, state.text, state.layer, state.off)
    top, new_top = int(np.argmax(before)), int(np.argmax(after))
    name = partial(id_label, model.tokenizer)
    return {"token": name(top), "p_before": float(before[top]), "p_after": float(after[top]),
            "new_token": name(new_top), "p_new": float(after[new_top]), "off": _heads((state.layer, h) for h in state.off),
            "kept": model.num_heads["decoder"] - len(state.off),
            "final_change": model_knockout(model, state.text, state.layer, state.off).effect}


@measure
def pruned_heads(state: ViewState) -> dict[str, Any]:
    """Heads `off` of `layer` switched off together in the page's pretrained model, against each head alone (the
    Knockout section's ranking by the final hidden state): the joint change and the largest single change."""
    from ..analysis.knockout import model_knockout, model_knockout_ranking

    model = _model(state.model)
    ranking = model_knockout_ranking(model, state.text, state.layer)
    top = int(np.argmax(ranking))
    return {"n_off": len(state.off), "heads": model.num_heads[model.parts[0]], "layer": state.layer,
            "joint": model_knockout(model, state.text, state.layer, state.off).effect,
            "off_max": float(ranking[list(state.off)].max()), "top_head": top, "top": float(ranking[top]),
            "least": float(ranking.min())}


@measure
def greedy_continuation(state: ViewState) -> dict[str, Any]:
    """What the causal model writes after the text, greedily, new_tokens tokens (the Generate view at temperature 0)."""
    from ..sampling import GREEDY

    gen = _model(state.model).generate(state.text, state.new_tokens, GREEDY)
    first = gen.steps[0]
    return {"first": first.token, "p_first": float(first.probs[first.token_id]), "written": " ".join(gen.tokens),
            "n": len(gen.tokens)}


@measure
def detected_heads(state: ViewState) -> dict[str, Any]:
    """The Head detectors' scores (seed 0) of the page's model: its best previous-token head and its induction heads
    (score above 0.5)."""
    from ..analysis import detect_heads

    scores = detect_heads(_model(state.model), seed=0)
    prev, ind = scores["previous"], scores["induction"]
    best = tuple(map(int, np.unravel_index(int(np.argmax(prev)), prev.shape)))
    found = [tuple(map(int, i)) for i in np.argwhere(ind > 0.5)]
    second = np.sort(prev.ravel())[-2]
    return {"prev_head": _heads([best]), "prev_score": float(prev[best]), "prev_next": float(second),
            "induction_heads": _heads(found), "n_induction": len(found),
            "induction_min": float(min(ind[h] for h in found)) if found else 0.0,
            "induction_max": float(ind.max()), "induction_layers": _heads(sorted({h[0] for h in found}))}


@measure
def logit_by_layer(state: ViewState) -> dict[str, Any]:
    """Direct logit attribution of the top next token after the text's last position (Analysis → Logit attribution):
    each layer's heads summed, the largest head, and the total against the model's own logit."""
    dla = _model(state.model).logit_attribution(state.text, position=-1)
    by_layer = dla.heads.sum(1)
    top = tuple(map(int, np.unravel_index(int(np.argmax(dla.heads)), dla.heads.shape)))
    return {"token": dla.token, "p": dla.probability, "logit": dla.logit, "layer0": float(by_layer[0]),
            "layer1": float(by_layer[-1]), "top_head": _heads([top]), "top": float(dla.heads[top]),
            "rest": float(sum(dla.terms.values()))}


@measure
def k_composition(state: ViewState) -> dict[str, Any]:
    """K-composition of the page's model (Analysis → Composition): for the layer-1 readers, the layer-0 writer whose
    output their keys read most, its scores, the best other writer's, and the random baseline."""
    from ..analysis.composition import composition
    from ..sources import ModelSource

    result = composition(ModelSource(_model(state.model), state.text, "decoder"), "k")
    into = result.scores[0, :, 1, :]  # (writers in layer 0, readers in layer 1)
    writers = into.mean(1)
    best = int(np.argmax(writers))
    others = np.delete(into, best, axis=0)
    return {"writer": f"0.{best}", "low": float(into[best].min()), "high": float(into[best].max()),
            "other": float(others.max()), "baseline": result.baseline,
            "always": bool((into.argmax(0) == best).all())}


@measure
def key_sources(state: ViewState) -> dict[str, Any]:
    """Score attribution at the text's last token in layer 1 (Analysis → Why this key), every head at its top key:
    the share of the score carried by head 0.2's output on the key side, the weight left on that key with 0.2 taken
    out of the stream, the largest term's query source, and the rank and share of (query: token) x (key: 0.2)."""
    from ..analysis import score_attribution

    model = _model(state.model)
    query = len(model.tokens(state.text)) - 1
    shares, removed, tops, token_shares, ranks = [], [], [], [], []
    for head in range(model.adapter.site("decoder", 1).num_heads):
        sa = score_attribution(model, state.text, layer=1, head=head, query=query)
        key, source = sa.winner, sa.sources.index("0.2")
        table, score = sa.table(key), float(sa.scores[sa.keys.index(key)])
        shares.append(table[:, source].sum() / score)
        removed.append(float(sa.removed[source, key]))
        tops.append(sa.largest(key, 1)[0][0])
        token_term = table[sa.sources.index("token"), source]
        token_shares.append(token_term / score)
        ranks.append(int((np.abs(table) > abs(token_term)).sum()) + 1)
    rank = max(ranks)
    return {"share_low": min(shares), "share_high": max(shares), "removed": max(removed),
            "top_query": max(set(tops), key=tops.count), "token_low": min(token_shares),
            "token_high": max(token_shares),
            "token_rank": "first" if rank == 1 else "second" if rank == 2 else f"at most {rank}th"}


@measure
def kv_sharing(state: ViewState) -> dict[str, Any]:
    """The page's grouped-query layer: query heads per key/value head, and the numbers one token caches per layer
    beside MHA's (g·(d_k + d_v) against h·(d_k + d_v), mha_viz.variants_cost)."""
    from ..variants_cost import VariantShape, kv_bytes_per_token, mha_baseline

    shape = VariantShape("gqa", state.d_model, state.h, kv_heads=state.kv_heads)
    ours, mha = kv_bytes_per_token(shape, 1), kv_bytes_per_token(mha_baseline(shape), 1)
    return {"h": state.h, "kv_heads": state.kv_heads, "group": state.h // state.kv_heads, "numbers": ours,
            "mha_numbers": mha, "ratio": mha / ours}


@measure
def kv_cache_models(state: ViewState) -> dict[str, Any]:
    """The KV cache of the Shapes & cost presets at the context slider's length (bf16, every layer), beside MHA with
    the same heads: Llama-3-8B (GQA), DeepSeek-V3 (MLA), Mistral-7B (window)."""
    from ..variants_cost import PRESETS, human_bytes, kv_cache_bytes, mha_baseline

    n = state.cost_context
    out: dict[str, Any] = {"context": n}
    for key, name in (("llama", "Llama-3-8B"), ("deepseek", "DeepSeek-V3"), ("mistral", "Mistral-7B")):
        preset = PRESETS[name]
        cache_, mha = preset.model_kv_cache_bytes(n), preset.layers * kv_cache_bytes(mha_baseline(preset.shape), n)
        out |= {f"{key}_cache": human_bytes(cache_), f"{key}_mha": human_bytes(mha), f"{key}_ratio": mha / cache_,
                f"{key}_bytes": cache_}
    out["llama_kv_heads"], out["llama_h"] = PRESETS["Llama-3-8B"].shape.kv_heads, PRESETS["Llama-3-8B"].shape.h
    out["mistral_window"] = PRESETS["Mistral-7B"].shape.window
    return out


@measure
def latent_cache(state: ViewState) -> dict[str, Any]:
    """The page's MLA layer (as the Latent (MLA) view counts it): numbers cached per token, latent + rotary, against
    MHA with the same heads and widths, h·(d_k + d_v)."""
    from ..config import MHAConfig
    from ..sources import configurable_trace
    from ..variants import LayerVariant
    from ..variants_cost import PRESETS, kv_bytes_per_token, mha_baseline

    variant = LayerVariant.of(state)
    trace = configurable_trace(state.text, MHAConfig(state.d_model, state.h), seed=state.seed, variant=variant)
    ours = state.kv_latent + state.rope_dim
    mha = trace.num_heads * (trace.d_k + trace.d_v)
    deepseek = PRESETS["DeepSeek-V3"].shape
    return {"latent": state.kv_latent, "rope": state.rope_dim, "numbers": ours, "mha_numbers": mha,
            "ratio": mha / ours, "h": trace.num_heads,
            "deepseek_ratio": kv_bytes_per_token(mha_baseline(deepseek)) / kv_bytes_per_token(deepseek)}


@measure
def window_reach(state: ViewState) -> dict[str, Any]:
    """A sliding window of w keys: what one layer reads back, what reach_layers stacked layers reach, and what the
    window's cache keeps against the whole text (mha_viz.analysis.reach)."""
    from ..analysis.reach import reach_back
    from ..text import tokenize

    n = len(tokenize(state.text))
    return {"window": state.window, "back": state.window - 1, "layers": state.reach_layers,
            "reach": reach_back(state.window, state.reach_layers), "tokens": n}


# Lesson 8 (beyond softmax): the bundled hybrid's Gated DeltaNet layer (mha_viz.analysis.mixer_stats, as Head
# statistics shows it) and the state a linear layer keeps (mha_viz.variants_cost, as Shapes & cost prices it).

@measure
def linear_layer(state: ViewState) -> dict[str, Any]:
    """The page's mixer layer on the text: its rows' sums (range over every head and row), the share of |M| that
    subtracts (per head, range) and its most negative entry (where it is)."""
    from ..analysis import mixer_stats

    trace = _model(state.model).trace(state.text, state.layer)
    negative = mixer_stats(trace).negative  # (H,)
    M = trace.weights.astype(np.float64)  # (H, T, T), signed
    rows = M.sum(-1)  # (H, T)
    head, t, s = map(int, np.unravel_index(int(np.argmin(M)), M.shape))
    return {"row_min": float(rows.min()), "row_max": float(rows.max()), "negative_min": float(negative.min()),
            "negative_max": float(negative.max()), "most_negative": float(M[head, t, s]), "negative_head": head,
            "negative_back": t - s}


@measure
def linear_state(state: ViewState) -> dict[str, Any]:
    """What Qwen3-Next-80B-A3B keeps at the context slider's length (bf16): its 36 Gated DeltaNet layers' fixed state,
    its 12 attention layers' KV cache, and the KV cache the same 48 layers would keep if all were attention."""
    from ..variants_cost import PRESETS, human_bytes, kv_cache_bytes

    qwen, n = PRESETS["Qwen3-Next-80B-A3B"], state.cost_context
    layer_kv = kv_cache_bytes(qwen.shape, n)  # one attention layer's KV cache for the context
    total, all_attention = qwen.model_kv_cache_bytes(n), qwen.layers * layer_kv
    return {"context": n, "state": human_bytes(qwen.state_bytes()), "state_layer": human_bytes(qwen.linear.bytes()),
            "kv": human_bytes(qwen.attention_layers * layer_kv), "total": human_bytes(total),
            "all_attention": human_bytes(all_attention), "saving": all_attention / total,
            "state_tokens": qwen.linear.bytes() / kv_cache_bytes(qwen.shape, 1)}


RECALL_LENGTH, RECALL_SEQUENCES, RECALL_NEEDLES = 512, 4, 4  # lesson 8's recall measurement: 16 queries


@measure
def linear_memory(state: ViewState) -> dict[str, Any]:
    """The page's Gated DeltaNet layer's decays and half-lives (range over heads), and the model's recall with and
    without the layer's short convolution (cut to the token itself, on a copy of the model: the loaded one is shared)."""
    import copy

    import torch

    from ..analysis import mixer_stats
    from ..training.recall import recall_accuracy

    model = _model(state.model)
    stats = mixer_stats(model.trace(state.text, state.layer))
    cut = copy.deepcopy(model.model)
    mixer = getattr(cut.model.layers[state.layer], "linear_attn", None)
    if mixer is None:
        raise ValueError(f"layer {state.layer} of {state.model} is not a Gated DeltaNet layer with a convolution")
    with torch.no_grad():
        mixer.conv1d.weight[..., :-1] = 0  # (channels, 1, taps): keep only the last tap, the token itself
    runs = dict(sequences=RECALL_SEQUENCES, needles=RECALL_NEEDLES)
    return {"decay_min": float(stats.decay.min()), "decay_max": float(stats.decay.max()),
            "half_life_min": float(stats.half_life.min()), "half_life_max": float(stats.half_life.max()),
            "recall": recall_accuracy(model, RECALL_LENGTH, **runs), "recall_cut": recall_accuracy(cut, RECALL_LENGTH, **runs),
            "queries": RECALL_SEQUENCES * RECALL_NEEDLES, "length": RECALL_LENGTH}
