"""Score attribution's streams in Gemma 3n: AltUp's K streams X (K, T, d), each source's share of every one carried
through the layers. With every data-dependent coefficient frozen at its value in the real forward pass (the routers'
coefficients, the norms' scales), each stream is linear in the sources:

    embeddings   X_0 = E;  X_i = P_i(E) m_i  (i >= 1, m_i: the magnitude normalisation)   all of it source "token"
    predict      P_j = X_j + sum_i C_t[j, i] X_i           C: prediction_coefs(router), per position t
    attention    n = input_layernorm(P_a)                  a: the active stream; the traced layer reads n
    LAuReL       laurel = n + post_laurel_norm(n W_left W_right)                          linear: no source of its own
    gathered     g = (P_a + post_attention_layernorm(sum_h c_h W_O^h) + laurel) / sqrt(2)  heads "i.h"
    MLP          y = g + post_feedforward_layernorm(MLP(pre_feedforward_layernorm(g)))    "i MLP": its real output
    correct      X'_j = P_j + (1 + D_t[j]) (y - P_a)       D: correction_coefs(router), per position t
    per-layer    X'_j += post_per_layer_input_norm(...)  for j >= 1                        "i per-layer input"
The traced layer reads its active prediction P_a through input_layernorm. A KV-shared layer (the last
num_kv_shared_layers) reads the keys an earlier layer computed from its own active prediction: its key side's
sources (key_sources) are that layer's, through that layer's input_layernorm (key_affine), W_K and k_norm. No bias
anywhere: the constant part "bias" is 0. Cost: every source's share of the K streams, float64, sources x (K, T, d).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from .score_frozen import Frozen, inner_norms
from .score_streams import Calls, Stream, head_parts, removed_each_side

if TYPE_CHECKING:
    from ..pretrained.adapter import Site
    from ..pretrained.model import PretrainedModel

MAX_SHARES_BYTES = 2 * 2**30  # every source's float64 share of the K streams (Gemma 3n E2B, its last layer: ~20 MB a
# token), refused beyond with the reason


class AltUpStream(Stream):
    """Gemma 3n's layer L: its active prediction x (T, d) split into its sources (the module docstring), every
    freezing checked against what the real modules returned (checks)."""

    def __init__(self, model: PretrainedModel, ids: Sequence[int], layer: int) -> None:
        from ..pretrained.adapter import Recorder

        adapter, self.model, self.part = model.adapter, model, "decoder"
        text = adapter.altup()
        blocks, config = text.layers, text.config
        a, K, T = config.altup_active_idx, config.altup_num_inputs, len(ids)
        if config.attention_bias:
            raise ValueError("score attribution is unavailable: a Gemma 3n with attention biases (the released models "
                             "have none)")
        count = 1 + sum(adapter.site("decoder", i).num_heads + 2 for i in range(layer))  # token, heads, MLP, per-layer
        need = count * K * T * config.hidden_size * 8
        if need > MAX_SHARES_BYTES:
            raise ValueError(f"score attribution is unavailable here: layer {layer}'s {count} sources' "
                             f"shares of Gemma 3n's {K} streams at {T} tokens would take {need / 2**20:,.0f} MiB, more "
                             f"than {MAX_SHARES_BYTES / 2**20:,.0f} MiB: use a shorter text or an earlier layer")
        kv_from = adapter.kv_source(layer)  # None: the layer computes its own keys
        key_layer = layer if kv_from is None else kv_from
        sites = [adapter.site("decoder", i) for i in range(layer + 1)]
        watched = [m for b in blocks[:layer + 1] for m in (
            b.altup.router_norm, b.altup.prediction_coefs, b.altup.correction_coefs, b.input_layernorm, b.laurel,
            b.laurel.post_laurel_norm, b.self_attn.o_proj, b.post_attention_layernorm, b.post_feedforward_layernorm,
            b.post_per_layer_input_norm)]
        self.inner: dict[nn.Module, Tensor] = {}
        with (Calls(watched) as seen, _streams_in(blocks[:layer + 1]) as streams, Recorder(sites[-1]) as rec,
              inner_norms(sites[-1].attention, self.inner)):
            outputs = adapter.forward(list(ids))
        self.call = dict(rec.arguments)
        shares = {"token": streams[0]}  # (K, T, d) each source's share of every stream: layer 0's is the token's
        self.residual_error = self.post_error = 0.0
        self.checks = {"frozen input norms vs the norms (earlier layers)": 0.0, "frozen LAuReL vs LAuReL": 0.0}
        for i, block in enumerate(blocks[:layer + 1]):
            self._against(shares, streams[i])
            C = seen.output(block.altup.prediction_coefs, 0).view(T, K, K)  # (T, K, K)
            shares = {n: s + torch.einsum("tji,itd->jtd", C, s) for n, s in shares.items()}  # predict
            self._against({n: s[a] for n, s in shares.items()}, seen.input(block.input_layernorm, 0))
            if i == key_layer:
                self.key_sources = {n: s[a].float() for n, s in shares.items()}  # (T, d) each
                self.key_x = seen.input(block.input_layernorm, 0)  # (T, d)
            if i == layer:
                break
            shares = self._block(block, sites[i], seen, shares, a)
        self.x = seen.input(blocks[layer].input_layernorm, 0)  # (T, d) layer L's active prediction
        zero = 1e-6 * float(self.x.abs().max())  # what a difference of two float32 streams leaves of a part that adds 0
        self.sources = {n: s[a].float() for n, s in shares.items() if s[a].abs().amax() > zero}
        self.residual_error = max(self.residual_error, float((sum(s.double() for s in self.sources.values())
                                                              - self.x).abs().max()))
        self._rebuild(sites[-1], rec, outputs, layer, "decoder")
        self.key_site = adapter.site("decoder", key_layer)
        if kv_from is None:
            self.key_sources = None  # the keys read the query's own stream
            return
        key_norm = blocks[kv_from].input_layernorm
        self.key_norm, self.key_affine = key_norm, Frozen.of(key_norm, self.key_x)
        whole = self.key_affine.linear(sum(s.double() for s in self.key_sources.values()))  # (T, d)
        self.checks[f"frozen norm vs layer {kv_from}'s attention input (the keys')"] = float(
            (whole - seen.output(key_norm, 0)).abs().max())
        self.variations = replace(self.variations, k_norm=self.key_site.attention.k_norm)  # the keys' own, frozen too

    def _against(self, shares: dict[str, Tensor], real: Tensor) -> None:
        """residual_error: the shares' sum against the real stream (or streams) there."""
        self.residual_error = max(self.residual_error, float((sum(shares.values()) - real).abs().max()))

    def _block(self, block: nn.Module, site: Site, seen: Calls, shares: dict[str, Tensor], a: int
               ) -> dict[str, Tensor]:
        """Each source's share of every stream (K, T, d) after block's attention, LAuReL, MLP, correct and
        per-layer input, from its share of the predictions; the new sources' too."""
        from ..pretrained.adapter import loaded

        K, T, d = next(iter(shares.values())).shape
        n_in = seen.input(block.input_layernorm, 0)  # (T, d) the active prediction
        normed = Frozen.of(block.input_layernorm, n_in)
        laurel_in = seen.input(block.laurel.post_laurel_norm, 0)  # (T, d) n W_left W_right
        laurel_norm = Frozen.of(block.laurel.post_laurel_norm, laurel_in)
        with loaded(block.laurel):
            W_lr = (block.laurel.linear_right.weight @ block.laurel.linear_left.weight).detach().double().cpu().T
        out = seen.input(block.post_attention_layernorm, 0)  # (T, d) the attention's output
        post = Frozen.of(block.post_attention_layernorm, out)

        def laurel(p: Tensor) -> Tensor:  # (T, d) -> (T, d): n + post_laurel_norm(n W_left W_right), frozen
            n = normed.linear(p)
            return n + laurel_norm.linear(n @ W_lr)

        for name, frozen, module in (("frozen input norms vs the norms (earlier layers)", normed.linear(n_in),
                                      block.input_layernorm), ("frozen LAuReL vs LAuReL", laurel(n_in), block.laurel)):
            self.checks[name] = max(self.checks[name], float((frozen - seen.output(module, 0)).abs().max()))
        real = seen.output(block.post_attention_layernorm, 0)  # (T, d)
        self.post_error = max(self.post_error, float((post.linear(out) - real).abs().max()))
        heads, _ = head_parts(self.model.adapter, site, seen.input(site.out, 0))  # no b_O (attention_bias: refused)
        heads = post.linear(heads)  # (H, T, d) each head through the frozen norm
        i = block.self_attn.layer_idx
        gathered = {n: (p[a] + laurel(p[a])) / math.sqrt(2) for n, p in shares.items()}  # (T, d) each
        new = {**{f"{i}.{h}": head / math.sqrt(2) for h, head in enumerate(heads)},  # (T, d) each: what enters y
               f"{i} MLP": seen.output(block.post_feedforward_layernorm, 0)}
        gathered |= new
        predictions = {**shares, **dict.fromkeys(new, torch.zeros(K, T, d, dtype=torch.float64))}  # none of P
        self._against(gathered, seen.input(block.altup.router_norm, 1))  # correct's router reads y
        D = 1 + seen.output(block.altup.correction_coefs, 0).T[..., None]  # (K, T, 1)
        corrected = {n: p + D * (gathered[n] - p[a]) for n, p in predictions.items()}  # (K, T, d) each
        per_layer = torch.zeros(K, T, d, dtype=torch.float64)
        per_layer[1:] = seen.output(block.post_per_layer_input_norm, 0)  # added to streams 1.. (K - 1, T, d)
        return {**corrected, f"{i} per-layer input": per_layer}

    def projection(self, site: Site, head: int) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        """Head's W_Q (d, d_k) and its keys' W_K (the key layer's, for a KV-shared layer), zero biases; float64."""
        from ..pretrained.adapter import loaded

        kv, d_k = site.kv_heads[head], site.head_dim
        with loaded(site.q, self.key_site.k):
            W = {"Q": site.q.weight[head * d_k:(head + 1) * d_k], "K": self.key_site.k.weight[kv * d_k:(kv + 1) * d_k]}
            W = {n: w.detach().double().cpu().T for n, w in W.items()}  # (d, d_k) each
        return W, {n: torch.zeros(d_k, dtype=torch.float64) for n in "QK"}

    def removed(self, norm: nn.Module, W: dict[str, Tensor], b: dict[str, Tensor], head: int, query: int) -> Tensor:
        """A layer that computes its own keys: Stream.removed. A KV-shared one: (query sources + key sources, T): the
        row with each query source taken out of the active prediction (through the real input_layernorm), then with
        each key source taken out of the key layer's (through its real input_layernorm), the other side as it was;
        the real q_norm and k_norm, the rotation and the mask as the layer's."""
        if self.key_sources is None:
            return super().removed(norm, W, b, head, query)
        return removed_each_side(self.variations, head, query, W, b, (norm, self.x, list(self.sources.values())),
                                 (self.key_norm, self.key_x, list(self.key_sources.values())), self.dtype)


@contextmanager
def _streams_in(blocks: Sequence[nn.Module]) -> Iterator[list[Tensor]]:
    """While open, each block's input streams (K, T, d), float64, batch dropped, in order."""
    seen: list[Tensor] = []

    def keep(module: nn.Module, args: tuple, kwargs: dict) -> None:
        seen.append((args[0] if args else kwargs["hidden_states"]).detach()[:, 0].double().cpu())

    handles = [block.register_forward_pre_hook(keep, with_kwargs=True) for block in blocks]
    try:
        yield seen
    finally:
        for handle in handles:
            handle.remove()
