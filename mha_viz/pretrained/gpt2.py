"""GPT-2: causal self-attention with one fused projection.

    [Q | K | V] = x W_attn + b_attn        c_attn, a Conv1D: weight (d_model, 3*d_model)
    scores = Q K^T / sqrt(d_k) + causal mask   (also / (layer + 1) with scale_attn_by_inverse_layer_idx)
    output = concat W_proj + b_proj        c_proj, a Conv1D: weight (H*d_v, d_model) = W_O^T
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn

from .adapter import Adapter, Recorder, Site, split_heads


class GPT2Adapter(Adapter):
    """h[i].attn.c_attn (q, k, v side by side) and h[i].attn.c_proj."""

    architectures = ("gpt2",)
    kind = "decoder"

    def site(self, part: str, layer: int) -> Site:
        a = self.base.h[layer].attn
        return Site(a, a.c_attn, a.c_attn, a.c_attn, a.c_proj, a.num_heads, a.num_heads, a.head_dim)

    def heads(self, site: Site, rec: Recorder) -> tuple[Tensor, Tensor, Tensor]:
        q, k, v = rec.projected[site.q].split(site.num_heads * site.head_dim, dim=-1)  # 3 x (T, H*d)
        return tuple(split_heads(x, site.num_heads) for x in (q, k, v))  # 3 x (H, T, d)

    def projection_weights(self, site: Site) -> dict[str, Tensor | None]:
        """c_attn.weight (d_model, 3*H*d) holds W_Q | W_K | W_V side by side, each (d_model, H*d)."""
        H, d = site.num_heads, site.head_dim
        weights = site.q.weight.split(H * d, dim=1)  # 3 x (d_model, H*d)
        biases = site.q.bias.split(H * d) if site.q.bias is not None else (None,) * 3  # 3 x (H*d,)
        out: dict[str, Tensor | None] = {}
        for name, W, b in zip("QKV", weights, biases, strict=True):
            out[f"W_{name}"] = W.unflatten(1, (H, d)).transpose(0, 1)  # (H, d_model, d)
            out[f"b_{name}"] = None if b is None else b.unflatten(0, (H, d))  # (H, d)
        return out

    def out_weights(self, site: Site) -> tuple[Tensor, Tensor | None]:
        return site.out.weight.T, site.out.bias  # Conv1D stores (in, out); W_O is (out, in)

    def residual_stream(self) -> tuple[Sequence[nn.Module], nn.Module]:
        return self.base.h, self.base.ln_f
