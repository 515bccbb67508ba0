"""MiniMax (MiniMax-Text-01): lightning attention (decayed linear attention) in most layers, softmax attention in the
others (config.layer_types).

Lightning layers (self_attn with a slope_rate), head h with its own decay rate l_h:
    [q | k | v] = SiLU(x W_qkv), per head
    mixed_h = M_h @ v_h    M_h[t, s] = (q_t . k_s) exp(-l_h (t - s))   (s <= t; mha_viz.mixers.decayed_linear_matrix)
    head outputs = sigmoid(x W_gate) * RMSNorm(mixed over all heads at once); then out_proj
Softmax layers: LLaMA's (rotary, grouped K/V heads). Each block's stream passes its two norms:
    n1 = input_layernorm(x);  n2 = post_attention_layernorm(alpha_a n1 + beta_a attention(n1));  x' = alpha_m n2 +
    beta_m MLP(n2)     (alpha, beta: config's full_attn_/linear_attn_ and mlp_ alpha and beta factors)
"""

from __future__ import annotations

from functools import partial

import torch
from torch import Tensor, nn

from ..mixers import DecayedLinear
from .adapter import NormedBlock, Site, per_head, register
from .llama import LlamaAdapter
from .mixing import MixerAdapter, Mixing


@register
class MiniMaxAdapter(MixerAdapter, LlamaAdapter):
    """layers[i].self_attn: lightning attention (it has a slope_rate) or LLaMA-style softmax attention."""

    architectures = ("minimax",)
    attribution_unavailable = ("MiniMax scales each block's residual and attention output by alpha and beta factors "
                               "before adding them, so its logits do not split into one term per head as mha-viz reads "
                               "them")
    weights_unavailable = ("a lightning attention head's weights depend on the input through its activation and its "
                           "output passes a norm over all heads and a gate before W_O: no W_Q K^T or W_OV per head")

    scores_unavailable = None  # score attribution freezes every norm on the way, as in a post-norm encoder

    def normed_block(self, layer: int) -> NormedBlock:
        block = self.base.layers[layer]
        return NormedBlock(block.input_layernorm, block.post_attention_layernorm,
                           (block.attn_alpha_factor, block.attn_beta_factor), (block.mlp_alpha_factor,
                                                                               block.mlp_beta_factor))

    def mixer(self, layer: int) -> nn.Module | None:
        a = self.base.layers[layer].self_attn
        return a if hasattr(a, "slope_rate") else None

    def kind_of(self, module: nn.Module) -> str:
        return "linear"

    def attention_site(self, layer: int) -> Site:
        return LlamaAdapter.site(self, "decoder", layer)

    def mixer_site(self, layer: int, module: nn.Module) -> Site:
        m = module
        return Site(m, None, None, None, m.out_proj, m.num_attention_heads, m.num_attention_heads, m.head_dim,
                    core=m.norm)

    def mixing(self, module: nn.Module, x: Tensor) -> Mixing:
        m, T = module, x.shape[0]
        H = m.num_attention_heads
        q, k, v = m.act_fn(m.qkv_proj(x)).float().view(T, H, 3 * m.head_dim).split(m.head_dim, dim=-1)  # (T, H, d)
        q, k, v = (t.transpose(0, 1) for t in (q, k, v))  # (H, T, d)
        log_decay = (-m.slope_rate.float().view(H, 1)).expand(H, T)  # (H, T): the same rate at every token
        return Mixing(
            kind="linear",
            name="lightning attention",
            factors=DecayedLinear(q, k, log_decay),  # M (H, T, T)
            values=v,
            finish=partial(_norm_and_gate, m, x),
            finish_formula="sigmoid(x W_gate) * RMSNorm(M @ values, over all heads)",
            arrays={"decay": log_decay.exp()},
            no_scores=("a lightning attention layer has no softmax scores: its weights are the exact mixing matrix, "
                       "q . k times each head's decay over the distance (signed, not a probability)"),
        )


def _norm_and_gate(module: nn.Module, x: Tensor, mixed: Tensor) -> Tensor:
    """Lightning attention's norm over all heads then its output gate: mixed (H, T, d) -> (H, T, d)."""
    H = mixed.shape[0]
    normed = module.norm(mixed.transpose(0, 1).flatten(1))  # (T, H*d)
    return per_head((torch.sigmoid(module.output_gate(x)) * normed).float(), H)
