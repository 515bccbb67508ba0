"""Score attribution (mha_viz.analysis.score_attribution) on TransformerLens models (random 3-layer HookedTransformers
from a config, norm weights and biases random too so they count): the (query source x key source) terms sum to
TransformerLens's own hook_attn_scores, a source taken out gives the row of a forward pass of the unmodified model
with that source, read from TransformerLens's cache, subtracted at the layer's hook_resid_pre, a dropped source breaks
the sum, and what is not split is refused with its reason."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from mha_viz.analysis import score_attribution, score_attribution_unavailable
from mha_viz.pretrained import HookedModel, load_model
from tests.unit.test_hooked import TEXT, hooked  # skips this module where transformer_lens is not installed

pytestmark = pytest.mark.usefixtures("one_thread")
LAYER = 2
CONFIGS = {
    "LN, standard positions": {"normalization_type": "LN"},
    "RMS, rotary, grouped-query": {"positional_embedding_type": "rotary", "rotary_dim": 6, "n_key_value_heads": 2,
                                   "normalization_type": "RMS"},
    "RMS, rotary, QK-norm": {"positional_embedding_type": "rotary", "rotary_dim": 8, "normalization_type": "RMS",
                             "use_qk_norm": True},
    "attention only": {"attn_only": True},
    "no norm": {"normalization_type": None},
    "split q/k/v inputs, parallel attention and MLP": {"use_split_qkv_input": True, "parallel_attn_mlp": True},
    "LNPre, local window, soft-cap": {"normalization_type": "LNPre", "attn_types": ["local", "global", "local"],
                                      "window_size": 3, "use_local_attn": True, "attn_scores_soft_cap": 4.0},
    "shortformer positions": {"positional_embedding_type": "shortformer"},
}


def random_hooked(**overrides: Any) -> Any:
    """hooked() with 3 layers, each head's output kept (hook_result), and random norm weights (w) and shifts (b)."""
    ht = hooked(n_layers=3, use_attn_result=True, **overrides)
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for name, p in ht.named_parameters():
            if name.endswith(".w"):
                p.copy_(1 + 0.3 * torch.randn(p.shape, generator=gen))
            elif name.endswith(".b"):
                p.copy_(0.3 * torch.randn(p.shape, generator=gen))
    return ht


@pytest.fixture(scope="module", params=list(CONFIGS))
def pair(request: pytest.FixtureRequest) -> tuple[Any, HookedModel, dict[str, torch.Tensor]]:
    """(the HookedTransformer, load_model of it, its cache on TEXT, batch dropped)."""
    ht = random_hooked(**CONFIGS[request.param])
    _, cache = ht.run_with_cache(ht.to_tokens(TEXT))
    return ht, load_model(ht), {name: t[0].detach() for name, t in cache.items()}


def test_the_terms_sum_to_transformer_lens_own_scores_for_every_head(pair) -> None:
    ht, model, cache = pair
    T = len(model.encode(TEXT).ids)
    for layer in range(ht.cfg.n_layers):
        own = cache[f"blocks.{layer}.attn.hook_attn_scores"].double().numpy()  # (H, T, T), soft-capped, -inf masked
        for head in range(ht.cfg.n_heads):
            for query in (0, T // 2, T - 1):
                sa = score_attribution(model, TEXT, layer=layer, head=head, query=query)
                assert sa.keys == tuple(np.flatnonzero(np.isfinite(own[head, query])))  # causal, and the window
                totals = np.array([sa.total(key) for key in sa.keys])  # terms + the soft cap's change, where capped
                assert np.abs(totals - own[head, query, list(sa.keys)]).max() <= 1e-5
                assert np.allclose(sa.weights, cache[f"blocks.{layer}.attn.hook_pattern"][head, query], atol=1e-7)
                assert max(sa.check.values()) <= 1e-5
                # negative control: the source that adds most, dropped from both sides, no longer adds up
                sums = sa.terms.sum((1, 2))
                share = np.abs(sa.terms.sum(2) + sa.terms.sum(1) - np.diagonal(sa.terms, axis1=1, axis2=2)).max(0)
                i = int(np.argmax(share))
                kept = np.delete(np.delete(sa.terms, i, axis=1), i, axis=2).sum((1, 2))
                assert np.abs(kept - sums).max() > 1e-3


def test_the_sources_are_the_embeddings_each_earlier_head_bias_and_mlp_then_bias(pair) -> None:
    ht, model, _ = pair
    sa = score_attribution(model, TEXT, layer=LAYER, head=0, query=3)
    cfg = ht.cfg
    earlier = [name for l in range(LAYER) for name in (*(f"{l}.{h}" for h in range(cfg.n_heads)),
                                                       f"{l} attention bias", *([] if cfg.attn_only else [f"{l} MLP"]))]
    embeddings = ["token", "position"] if cfg.positional_embedding_type == "standard" else ["token"]
    after_norm = ["position"] if cfg.positional_embedding_type == "shortformer" else []  # added to ln1(x), not to x
    assert sa.sources == (*embeddings, *earlier, *after_norm, "bias")
    assert sa.norm == {"LN": "LayerNorm", "LNPre": "LayerNorm", "RMS": "RMSNorm", None: "no norm"}[cfg.normalization_type]
    assert sa.removed.shape == (len(sa.sources) - 1, len(sa.tokens))


def source_in_cache(ht: Any, cache: dict[str, torch.Tensor], name: str) -> torch.Tensor:
    """(T, d) what source `name` adds to the stream, read from TransformerLens's cache: hook_embed, hook_pos_embed,
    a head's hook_result, b_O, hook_mlp_out."""
    if name in ("token", "position"):
        return cache["hook_embed" if name == "token" else "hook_pos_embed"]
    layer, _, what = name.partition(" ") if " " in name else name.partition(".")
    block = ht.blocks[int(layer)]
    if what == "attention bias":
        return block.attn.b_O.detach().expand(cache["hook_embed"].shape)
    if what == "MLP":
        return cache[f"blocks.{layer}.hook_mlp_out"]
    return cache[f"blocks.{layer}.attn.hook_result"][:, int(what)]


def row_without(ht: Any, tokens: torch.Tensor, src: torch.Tensor, layer: int, head: int, query: int,
                after_norm: bool = False) -> np.ndarray:
    """(T,) hook_pattern[head, query] of layer, the unmodified model run with src (T, d) subtracted from what the
    layer reads, its hook_resid_pre; after_norm (shortformer positions): from the attention's query and key inputs,
    by a forward pre-hook on the module."""
    seen: dict[str, torch.Tensor] = {}

    def without_positions(module, args, kwargs):
        return args, {**kwargs, "query_input": kwargs["query_input"] - src, "key_input": kwargs["key_input"] - src}

    handle = ht.blocks[layer].attn.register_forward_pre_hook(without_positions, with_kwargs=True) if after_norm else None
    try:
        with torch.no_grad():
            ht.run_with_hooks(tokens, fwd_hooks=[
                *(() if after_norm else [(f"blocks.{layer}.hook_resid_pre", lambda resid, hook: resid - src)]),
                (f"blocks.{layer}.attn.hook_pattern", lambda pattern, hook: seen.update(row=pattern[0, head, query]))])
    finally:
        if handle is not None:
            handle.remove()
    return seen["row"].double().numpy()


def test_a_removed_sources_row_is_a_forward_pass_without_it(pair) -> None:
    """removed[a]: the query's row with source a subtracted from what layer LAYER reads (its hook_resid_pre), against
    hook_pattern of the unmodified TransformerLens model run with that hook."""
    ht, model, cache = pair
    tokens = ht.to_tokens(TEXT)
    T = tokens.shape[1]
    head, query = 1, T - 1
    sa = score_attribution(model, TEXT, layer=LAYER, head=head, query=query)
    moved = 0.0
    shortformer = ht.cfg.positional_embedding_type == "shortformer"
    for i, name in enumerate(sa.sources[:-1]):
        expected = row_without(ht, tokens, source_in_cache(ht, cache, name), LAYER, head, query,
                               after_norm=shortformer and name == "position")
        assert np.abs(sa.removed[i] - expected).max() <= 1e-5, name
        moved = max(moved, float(np.abs(expected - sa.weights).max()))
    assert moved > 1e-3  # the removals mattered: the rows compared are not the unchanged one


def test_one_key_and_what_is_not_split_are_refused_with_reasons() -> None:
    model = load_model(random_hooked(**CONFIGS["RMS, rotary, grouped-query"]))
    assert score_attribution_unavailable(model) is None
    one = score_attribution(model, TEXT, layer=1, head=2, query=5, key=3)
    every = score_attribution(model, TEXT, layer=1, head=2, query=5)
    assert one.keys == (3,) and np.allclose(one.table(3), every.table(3))
    with pytest.raises(ValueError, match="does not see key 6"):
        score_attribution(model, TEXT, layer=1, head=2, query=5, key=6)
    for bad, match in (({"layer": 3}, "not a layer"), ({"head": 4}, "not a head"), ({"query": 99}, "not a position"),
                       ({"key": -1}, "not a position")):
        with pytest.raises(ValueError, match=match):
            score_attribution(model, TEXT, **{"layer": 1, "head": 0, "query": 2, **bad})

