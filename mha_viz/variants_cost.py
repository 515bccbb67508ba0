"""Parameters, FLOPs per token and KV-cache bytes of one attention layer for each variant of multi-head attention.

Pure Python (no numpy, no torch). A layer is described by a VariantShape; `variant_cost` counts it for one new query
token attending over a context of n tokens (a decoding step), and `mha_baseline` gives the classic MHA layer beside
it: the same d_model, h and head widths, every head with its own keys and values. Symbols: d = d_model, h query
heads, g = kv_heads (key/value heads), d_k = head_dim (query/key width of a head; MLA: the part without rotation),
d_v = v_dim, d_c = kv_latent, d_q = q_latent, d_r = rope_dim, w = window, s = sink tokens, k = moh_k heads used
(plus shared heads), b = bytes per cached number (2 for bf16).

Parameters (weights; biases and norms where the layer has them)::

    MHA, GQA, window, MoH  W_Q d·h·d_k + W_K d·g·d_k + W_V d·g·d_v + W_O h·d_v·d     (MHA: g = h; MQA: g = 1)
    + biases               h·d_k + g·d_k + g·d_v + d
    + q/k norms (Qwen3)    2·d_k
    + sink logits          h                      (one learned logit per head, gpt-oss)
    differential           as GQA (h maps of width d_k pair into h/2 differential heads, DiffLlama) + λ: 4·d_k
    MoH router             d·h  (+ 2·d to weigh shared against routed heads when there are shared heads)
    MLA                    W_DQ d·d_q + norm d_q + W_UQ d_q·h·(d_k + d_r)   (no query latent: W_Q d·h·(d_k + d_r))
                           + W_DKV d·(d_c + d_r) + norm d_c + W_UKV d_c·h·(d_k + d_v) + W_O h·d_v·d

FLOPs of one new token over n cached tokens (a multiply-add is 2, softmax 5 per score; norms and rotations, which
do not grow with n, are left out). m = the keys a query reads: n, or min(n, w + s) with a window::

    Q 2·d·h_q·d_k, K 2·d·g·d_k, V 2·d·g·d_v, scores 2·h_q·m·d_k, softmax 5·h_q·(m + 1 if sink logits else m),
    weights @ V 2·h_q·m·d_v, W_O 2·h_q·d_v·d               (h_q = h; MoH: h_q = k + shared heads, router 2·d·h)
    differential: + 2·h·d_v for out_1 - λ·out_2
    MLA (absorbed, as DeepSeek decodes): Q down 2·d·d_q, Q up 2·d_q·h·(d_k + d_r), KV down 2·d·(d_c + d_r),
    absorb W_UK into the query 2·h·d_k·d_c, scores 2·h·m·(d_c + d_r), softmax 5·h·m, weights @ latent 2·h·m·d_c,
    W_UV 2·h·d_c·d_v, W_O 2·h·d_v·d

KV-cache bytes per token per layer, and the tokens a layer keeps for a context of n::

    MHA h·(d_k + d_v)·b, GQA/window/differential/MoH g·(d_k + d_v)·b (MoH keeps every head: any query may pick it),
    MLA (d_c + d_r)·b;  tokens kept: n, or min(n, w + s) in a window layer.

A hybrid model (Qwen3-Next, Qwen3.5) replaces some attention layers by linear-attention layers (Gated DeltaNet). Such a
layer keeps no KV cache: it keeps a state of fixed size, whatever the context (`LinearState`)::

    state numbers  h_v·d_k·d_v (one d_k x d_v matrix per value head) + (c - 1)·(2·h_k·d_k + h_v·d_v) (the short
                   convolution's last c - 1 inputs of q, k and v; c = the kernel width)
"""

from __future__ import annotations

from dataclasses import dataclass, replace

# The families the cost model prices: a registered variant's spec gives its layer's shape as one of them
# (mha_viz.variants.spec.VariantSpec.shape).
VARIANT_NAMES = {
    "mha": "multi-head (MHA)",
    "gqa": "grouped-query (GQA; MQA at 1 KV head)",
    "mla": "multi-head latent (MLA)",
    "window": "sliding window (+ sinks)",
    "diff": "differential",
    "moh": "mixture-of-heads (MoH)",
}
VARIANTS = tuple(VARIANT_NAMES)


def _whole(name: str, value: object, lo: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise ValueError(f"{name} must be a whole number ≥ {lo}, got {value!r}")


@dataclass(frozen=True)
class VariantShape:
    """One attention layer of a variant (see the module docstring for the symbols).

    head_dim defaults to d_model // h (d_model must then be a multiple of h), v_dim to head_dim, kv_heads to h. Fields that
    belong to another variant must stay at their defaults; every refusal is a ValueError that says why.
    """

    variant: str
    d_model: int
    h: int
    head_dim: int | None = None
    v_dim: int | None = None
    kv_heads: int | None = None
    kv_latent: int = 0
    q_latent: int = 0
    rope_dim: int = 0
    window: int = 0
    sink_logits: bool = False
    sink_tokens: int = 0
    moh_k: int = 0
    moh_shared: int = 0
    bias: bool = False
    qk_norm: bool = False

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS:
            raise ValueError(f"variant must be one of {', '.join(VARIANTS)}, got {self.variant!r}")
        _whole("d_model", self.d_model, 1)
        _whole("h", self.h, 1)
        if self.head_dim is None:
            if self.d_model % self.h:
                raise ValueError(f"h = {self.h} does not divide d_model = {self.d_model}: give head_dim")
            object.__setattr__(self, "head_dim", self.d_model // self.h)
        if self.v_dim is None:
            object.__setattr__(self, "v_dim", self.head_dim)
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.h)
        for name in ("head_dim", "v_dim", "kv_heads"):
            _whole(name, getattr(self, name), 1)
        for name in ("kv_latent", "q_latent", "rope_dim", "window", "sink_tokens", "moh_k", "moh_shared"):
            _whole(name, getattr(self, name), 0)
        v, h, g = self.variant, self.h, self.kv_heads
        if g > h or h % g:
            raise ValueError(f"kv_heads = {g} must divide h = {h} (each key/value head serves h / kv_heads query heads)")
        if v in ("mha", "mla") and g != h:
            raise ValueError(f"{v} gives every head its own keys and values: kv_heads must be h = {h}, got {g}")
        if v == "gqa" and g == h:
            raise ValueError(f"gqa shares key/value heads: kv_heads must be below h = {h} (kv_heads = h is mha)")
        unused = {"mla": ("kv_latent", "q_latent", "rope_dim"), "window": ("window", "sink_tokens"),
                  "moh": ("moh_k", "moh_shared")}
        for owner, names in unused.items():
            for name in names:
                if v != owner and getattr(self, name):
                    raise ValueError(f"{name} belongs to the {owner} variant, not {v}: leave it 0")
        if self.sink_logits and v != "window":
            raise ValueError(f"sink_logits belong to the window variant, not {v}")
        if v == "mla" and self.kv_latent < 1:
            raise ValueError("mla needs kv_latent ≥ 1 (the width of the cached latent)")
        if v == "window" and self.window < 1:
            raise ValueError("window needs window ≥ 1 (the tokens a query can reach)")
        if v == "diff" and (h % 2 or g % 2):
            raise ValueError(f"diff pairs heads into differential heads: h and kv_heads must be even, got {h}, {g}")
        if v == "moh":
            if self.moh_shared >= h:
                raise ValueError(f"moh_shared = {self.moh_shared} must be below h = {h}")
            if not 1 <= self.moh_k <= h - self.moh_shared:
                raise ValueError(f"moh_k must be from 1 to h - moh_shared = {h - self.moh_shared}, got {self.moh_k}")

    @property
    def query_heads_used(self) -> int:
        """The heads whose queries, scores and outputs one token computes (MoH: its top-k plus the shared ones)."""
        return self.moh_k + self.moh_shared if self.variant == "moh" else self.h

    def keys_read(self, context: int) -> int:
        """The tokens a query reads (and a layer keeps in its cache) for a context of n tokens: n, or min(n, w + s)."""
        _whole("context", context, 1)
        return min(context, self.window + self.sink_tokens) if self.variant == "window" else context


def mha_baseline(shape: VariantShape) -> VariantShape:
    """Classic MHA beside a variant: the same d_model, h and head widths (MLA: query/key width d_k + d_r), bias and
    q/k norms; every head its own full-rank Q, K and V."""
    qk = shape.head_dim + shape.rope_dim if shape.variant == "mla" else shape.head_dim
    return VariantShape("mha", shape.d_model, shape.h, head_dim=qk, v_dim=shape.v_dim, bias=shape.bias,
                        qk_norm=shape.qk_norm)


def parameters(shape: VariantShape) -> dict[str, int]:
    """The layer's parameters by name (formulas in the module docstring)."""
    s, d, h, g = shape, shape.d_model, shape.h, shape.kv_heads
    dk, dv = s.head_dim, s.v_dim
    if s.variant == "mla":
        dr, dc, dq = s.rope_dim, s.kv_latent, s.q_latent
        out = ({"W_DQ": d * dq, "q latent norm": dq, "W_UQ": dq * h * (dk + dr)} if dq
               else {"W_Q": d * h * (dk + dr)})
        out |= {"W_DKV": d * (dc + dr), "kv latent norm": dc, "W_UKV": dc * h * (dk + dv), "W_O": h * dv * d}
        if s.bias:  # as transformers' DeepseekV3Attention: the down-projections and W_O carry the biases
            out |= {"b_DQ": dq} if dq else {}
            out |= {"b_DKV": dc + dr, "b_O": d}
        return out
    out = {"W_Q": d * h * dk, "W_K": d * g * dk, "W_V": d * g * dv, "W_O": h * dv * d}
    if s.bias:
        out |= {"b_Q": h * dk, "b_K": g * dk, "b_V": g * dv, "b_O": d}
    if s.qk_norm:
        out |= {"q/k norms": 2 * dk}
    if s.sink_logits:
        out["sink logits"] = h
    if s.variant == "diff":
        out["λ (λ_q1, λ_k1, λ_q2, λ_k2)"] = 4 * dk
    if s.variant == "moh":
        out["router"] = d * h + (2 * d if s.moh_shared else 0)
    return out


def flops_per_token(shape: VariantShape, context: int) -> dict[str, int]:
    """FLOPs of one new token attending over a context of n tokens (itself included), by step."""
    s, d, h, g = shape, shape.d_model, shape.h, shape.kv_heads
    dk, dv, m = s.head_dim, s.v_dim, s.keys_read(context)
    if s.variant == "mla":
        dr, dc, dq = s.rope_dim, s.kv_latent, s.q_latent
        out = {"Q down": 2 * d * dq, "Q up": 2 * dq * h * (dk + dr)} if dq else {"Q": 2 * d * h * (dk + dr)}
        return out | {
            "KV down (latent + rotary key)": 2 * d * (dc + dr),
            "W_UK absorbed into q": 2 * h * dk * dc,
            "scores": 2 * h * m * (dc + dr),
            "softmax": 5 * h * m,
            "weights @ latent": 2 * h * m * dc,
            "W_UV": 2 * h * dc * dv,
            "W_O": 2 * h * dv * d,
        }
    hq = s.query_heads_used
    out = {"router": 2 * d * h} if s.variant == "moh" else {}
    out |= {
        "Q": 2 * d * hq * dk,
        "K": 2 * d * g * dk,
        "V": 2 * d * g * dv,
        "scores": 2 * hq * m * dk,
        "softmax": 5 * hq * (m + 1 if s.sink_logits else m),
        "weights @ V": 2 * hq * m * dv,
        "W_O": 2 * hq * dv * d,
    }
    if s.variant == "diff":
        out["out₁ - λ·out₂"] = 2 * h * dv
    return out


def kv_bytes_per_token(shape: VariantShape, dtype_bytes: int = 2) -> int:
    """Bytes one token adds to one layer's KV cache: g·(d_k + d_v)·b, MLA (d_c + d_r)·b."""
    _whole("dtype_bytes", dtype_bytes, 1)
    if shape.variant == "mla":
        return (shape.kv_latent + shape.rope_dim) * dtype_bytes
    return shape.kv_heads * (shape.head_dim + shape.v_dim) * dtype_bytes


def kv_cache_bytes(shape: VariantShape, context: int, dtype_bytes: int = 2) -> int:
    """One layer's KV cache for a context of n tokens: the tokens it keeps (a window keeps w + s) times the bytes
    per token."""
    return shape.keys_read(context) * kv_bytes_per_token(shape, dtype_bytes)


@dataclass(frozen=True)
class VariantCost:
    """One layer's counts for a context: parameters and FLOPs by name, KV-cache bytes per token and for the context."""

    parameters: dict[str, int]
    flops: dict[str, int]
    kv_bytes_per_token: int
    kv_cache_bytes: int

    @property
    def params(self) -> int:
        return sum(self.parameters.values())

    @property
    def total_flops(self) -> int:
        return sum(self.flops.values())


def variant_cost(shape: VariantShape, context: int, dtype_bytes: int = 2) -> VariantCost:
    return VariantCost(parameters(shape), flops_per_token(shape, context), kv_bytes_per_token(shape, dtype_bytes),
                       kv_cache_bytes(shape, context, dtype_bytes))


@dataclass(frozen=True)
class LinearState:
    """A linear-attention (Gated DeltaNet) layer's recurrent state: h_k key heads of width d_k, h_v value heads of
    width d_v, a short convolution of width c over q, k and v. Its size does not depend on the context."""

    key_heads: int
    value_heads: int
    key_dim: int
    value_dim: int
    conv_width: int = 4

    def __post_init__(self) -> None:
        for name in ("key_heads", "value_heads", "key_dim", "value_dim", "conv_width"):
            _whole(name, getattr(self, name), 1)
        if self.value_heads % self.key_heads:
            raise ValueError(f"key_heads = {self.key_heads} must divide value_heads = {self.value_heads}")

    @property
    def numbers(self) -> int:
        """h_v·d_k·d_v + (c - 1)·(2·h_k·d_k + h_v·d_v): the matrix per value head and the convolution's inputs."""
        recurrent = self.value_heads * self.key_dim * self.value_dim
        conv = (self.conv_width - 1) * (2 * self.key_heads * self.key_dim + self.value_heads * self.value_dim)
        return recurrent + conv

    def bytes(self, dtype_bytes: int = 2) -> int:
        _whole("dtype_bytes", dtype_bytes, 1)
        return self.numbers * dtype_bytes


@dataclass(frozen=True)
class Preset:
    """A real model's attention from its published config.json (source): the shape of a layer, its layer count, how
    many of those layers attend within the window (the others attend over everything), and, in a hybrid, how many
    layers are linear attention instead (`linear`: each keeps that fixed state, no KV cache)."""

    name: str
    shape: VariantShape
    layers: int
    source: str
    windowed_layers: int = 0
    note: str = ""
    linear_layers: int = 0
    linear: LinearState | None = None

    def __post_init__(self) -> None:
        if (self.linear_layers > 0) != (self.linear is not None) or not 0 <= self.linear_layers < self.layers:
            raise ValueError("a hybrid gives linear_layers (fewer than layers, at least one attention layer) and "
                             f"their LinearState together, got {self.linear_layers} and {self.linear}")

    def full_layer(self) -> VariantShape:
        """A layer without the window (gpt-oss alternates windowed and full layers; sink logits stay)."""
        if self.shape.variant != "window":
            return self.shape
        variant = "gqa" if self.shape.kv_heads < self.shape.h else "mha"
        return replace(self.shape, variant=variant, window=0, sink_tokens=0, sink_logits=False)

    @property
    def attention_layers(self) -> int:
        return self.layers - self.linear_layers

    def state_bytes(self, dtype_bytes: int = 2) -> int:
        """The linear layers' state, all of them: the same for every context."""
        return 0 if self.linear is None else self.linear_layers * self.linear.bytes(dtype_bytes)

    def model_kv_cache_bytes(self, context: int, dtype_bytes: int = 2) -> int:
        """What the whole model keeps for a context: windowed layers at most the window, the other attention layers
        all n, the linear layers their fixed state."""
        full = self.attention_layers - self.windowed_layers
        return (self.windowed_layers * kv_cache_bytes(self.shape, context, dtype_bytes)
                + full * kv_cache_bytes(self.full_layer(), context, dtype_bytes) + self.state_bytes(dtype_bytes))


# Published config.json values of each model (hidden_size, num_attention_heads, num_key_value_heads, head_dim, ...),
# written out here; nothing is downloaded.
PRESETS: dict[str, Preset] = {p.name: p for p in (
    Preset("Llama-3-8B", VariantShape("gqa", 4096, 32, head_dim=128, kv_heads=8), 32,
           "meta-llama/Meta-Llama-3-8B config.json: hidden 4096, 32 layers, 32 heads, 8 KV heads, head_dim 128"),
    Preset("Qwen3-8B", VariantShape("gqa", 4096, 32, head_dim=128, kv_heads=8, qk_norm=True), 36,
           "Qwen/Qwen3-8B config.json: hidden 4096, 36 layers, 32 heads, 8 KV heads, head_dim 128, q/k RMSNorm"),
    Preset("Mistral-7B", VariantShape("window", 4096, 32, head_dim=128, kv_heads=8, window=4096), 32,
           "mistralai/Mistral-7B-v0.1 config.json: hidden 4096, 32 layers, 32 heads, 8 KV heads, head_dim 128, "
           "sliding_window 4096", windowed_layers=32),
    Preset("DeepSeek-V3", VariantShape("mla", 7168, 128, head_dim=128, v_dim=128, kv_latent=512, q_latent=1536,
                                       rope_dim=64), 61,
           "deepseek-ai/DeepSeek-V3 config.json: hidden 7168, 61 layers, 128 heads, kv_lora_rank 512, q_lora_rank 1536, "
           "qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128"),
    Preset("gpt-oss-20b", VariantShape("window", 2880, 64, head_dim=64, kv_heads=8, window=128, sink_logits=True,
                                       bias=True), 24,
           "openai/gpt-oss-20b config.json: hidden 2880, 24 layers, 64 heads, 8 KV heads, head_dim 64, "
           "sliding_window 128 on every other layer, attention sinks, attention_bias", windowed_layers=12,
           note="12 of 24 layers windowed"),
    Preset("Qwen3-Next-80B-A3B", VariantShape("gqa", 2048, 16, head_dim=256, kv_heads=2, qk_norm=True), 48,
           "Qwen/Qwen3-Next-80B-A3B-Instruct config.json (transformers' Qwen3NextConfig defaults): hidden 2048, "
           "48 layers, full_attention_interval 4 (12 attention layers: 16 heads, 2 KV heads, head_dim 256); 36 Gated "
           "DeltaNet layers: 16 key heads and 32 value heads of 128, linear_conv_kernel_dim 4",
           note="36 of 48 layers linear", linear_layers=36, linear=LinearState(16, 32, 128, 128, 4)),
)}


@dataclass(frozen=True)
class CostRow:
    """One line of the comparison: a layer, its layer count, windowed and linear layers (a model) or 1 (one layer)."""

    label: str
    shape: VariantShape
    layers: int = 1
    windowed_layers: int | None = None  # None: all layers when the shape is windowed
    linear_layers: int = 0
    linear: LinearState | None = None

    def model(self) -> Preset:
        windowed = self.layers if self.windowed_layers is None and self.shape.variant == "window" else (
            self.windowed_layers or 0)
        return Preset(self.label, self.shape, self.layers, "", windowed, linear_layers=self.linear_layers,
                      linear=self.linear)


def human_bytes(n: float) -> str:
    """Bytes in binary units: 4096 -> "4 KiB", 1.5 * 2**30 -> "1.5 GiB"."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" or n == int(n) else f"{n:.3g} {unit}"
        n /= 1024
    raise AssertionError  # the loop always returns


def comparison(rows: list[CostRow], context: int, dtype_bytes: int = 2) -> dict[str, list]:
    """A table (column -> values, one entry a row): each row's variant beside MHA of the same d_model, h and head
    widths; counts per attention layer, the cache for the context over all the row's layers (a hybrid's linear layers
    add their fixed state, also in its own column; MHA: every layer attention), and the ratio MHA / variant."""
    table: dict[str, list] = {k: [] for k in (
        "model", "variant", "layers", "parameters / layer", "MHA parameters / layer", "FLOPs / token / layer",
        "MHA FLOPs / token / layer", "KV bytes / token / layer", "MHA KV bytes / token / layer",
        "linear layers' state", "KV cache (context)", "MHA KV cache (context)", "cache bytes", "MHA cache bytes",
        "MHA / variant cache")}
    for row in rows:
        ours, mha = variant_cost(row.shape, context, dtype_bytes), variant_cost(mha_baseline(row.shape), context,
                                                                                 dtype_bytes)
        cache = row.model().model_kv_cache_bytes(context, dtype_bytes)
        state = "none" if row.linear is None else f"{row.linear_layers} × {human_bytes(row.linear.bytes(dtype_bytes))}"
        mha_cache = row.layers * mha.kv_cache_bytes
        values = (row.label, VARIANT_NAMES[row.shape.variant], row.layers, ours.params, mha.params, ours.total_flops,
                  mha.total_flops, ours.kv_bytes_per_token, mha.kv_bytes_per_token,
                  state, human_bytes(cache),
                  human_bytes(mha_cache), cache, mha_cache, mha_cache / cache)
        for key, value in zip(table, values):
            table[key].append(value)
    return table


def preset_rows() -> list[CostRow]:
    return [CostRow(p.name, p.shape, p.layers, p.windowed_layers, p.linear_layers, p.linear) for p in PRESETS.values()]
