"""Parameter and FLOP counts of one attention layer, and of one full-width head for comparison.

Weights: H*d_model*d_k (W_Q) + G*d_context*d_k (W_K) + G*d_context*d_v (W_V) + d_out*H*d_v (W_O), G = kv_heads.
With d_k = d_v = d_model/H, d_out = d_context = d_model and G = H this is 4 * d_model^2, whatever H is; grouped-query
attention (G < H) shrinks W_K and W_V, and the K and V projections, by G/H.
FLOPs count a multiply-add as 2; softmax is counted as 5 per score (max, subtract, exp, sum, divide).
"""

from __future__ import annotations

from dataclasses import dataclass

from .config import MHAConfig


@dataclass(frozen=True)
class LayerCost:
    weights: dict[str, int]
    biases: dict[str, int]
    flops: dict[str, int]

    @property
    def weight_count(self) -> int:
        return sum(self.weights.values())

    @property
    def bias_count(self) -> int:
        return sum(self.biases.values())

    @property
    def params(self) -> int:
        return self.weight_count + self.bias_count

    @property
    def total_flops(self) -> int:
        return sum(self.flops.values())


def layer_cost(cfg: MHAConfig, T: int, S: int | None = None, *, cross: bool | None = None) -> LayerCost:
    """Counts for T query tokens (X) attending over S key tokens (S = T for self-attention).

    The FLOP rows name the key/value input X in self-attention and C in cross-attention (cross None:
    cross-attention when S differs from T or the context width from d_model), as the formulas do.
    """
    S = T if S is None else S
    if cross is None:
        cross = S != T or cfg.d_context != cfg.d_model
    c = "C" if cross else "X"
    H, G, d_k, d_v = cfg.num_heads, cfg.kv_heads, cfg.d_k, cfg.d_v
    weights = {
        "W_Q": H * cfg.d_model * d_k,
        "W_K": G * cfg.d_context * d_k,
        "W_V": G * cfg.d_context * d_v,
        "W_O": cfg.d_out * H * d_v,
    }
    biases = {"b_Q": H * d_k, "b_K": G * d_k, "b_V": G * d_v, "b_O": cfg.d_out} if cfg.bias else {}
    flops = {
        "Q = X W_Q": 2 * T * cfg.d_model * H * d_k,
        f"K = {c} W_K": 2 * S * cfg.d_context * G * d_k,
        f"V = {c} W_V": 2 * S * cfg.d_context * G * d_v,
        "Q K^T": 2 * H * T * S * d_k,
        "softmax": 5 * H * T * S,
        "weights @ V": 2 * H * T * S * d_v,
        "concat @ W_O^T": 2 * T * H * d_v * cfg.d_out,
    }
    return LayerCost(weights, biases, flops)


def full_width_head(cfg: MHAConfig) -> MHAConfig:
    """One head as wide as all H heads together (d_k' = H*d_k, d_v' = H*d_v)."""
    return MHAConfig(
        cfg.d_model,
        1,
        d_k=cfg.num_heads * cfg.d_k,
        d_v=cfg.num_heads * cfg.d_v,
        d_out=cfg.d_out,
        d_context=cfg.d_context,
        bias=cfg.bias,
    )
