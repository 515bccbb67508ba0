"""The MHA formulas as LaTeX, with the live dimensions filled in."""

from __future__ import annotations

from .config import MHAConfig


def formulas(cfg: MHAConfig, T: int, S: int | None = None, *, causal: bool = False, cross: bool = False) -> list[str]:
    """LaTeX lines, from per-head projections to the output after W_O; heads are numbered from 0.

    X holds the query-side tokens; C the key/value side when it is another sequence (cross-attention).
    """
    S = T if S is None else S
    H, d_k, d_v, d_out = cfg.num_heads, cfg.d_k, cfg.d_v, cfg.d_out
    src = "C" if cross or S != T or cfg.d_context != cfg.d_model else "X"
    mask = r" + M" if causal else ""
    last = H - 1
    n, G = cfg.group_size, cfg.kv_heads
    kv = "h" if n == 1 else "{g(h)}"  # grouped-query attention: query head h reads K/V head g(h) = floor(h / (H / G))
    lines = [
        rf"Q_h = X W^Q_h \in \mathbb{{R}}^{{{T} \times {d_k}}}, \quad W^Q_h \in \mathbb{{R}}^{{{cfg.d_model} \times {d_k}}}, \quad h = 0, \dots, {last}",
        rf"K_{kv} = {src} W^K_{kv} \in \mathbb{{R}}^{{{S} \times {d_k}}}, \quad V_{kv} = {src} W^V_{kv} \in \mathbb{{R}}^{{{S} \times {d_v}}}",
        rf"\mathrm{{head}}_h = \mathrm{{softmax}}\!\left(\frac{{Q_h K_{kv}^\top}}{{\sqrt{{{d_k}}}}}{mask}\right) V_{kv} \in \mathbb{{R}}^{{{T} \times {d_v}}}",
        rf"\mathrm{{Concat}}(\mathrm{{head}}_0, \dots, \mathrm{{head}}_{{{last}}}) \in \mathbb{{R}}^{{{T} \times {H * d_v}}}",
        rf"\mathrm{{MultiHead}} = \mathrm{{Concat}}(\cdot)\, W_O^\top + b_O = \sum_{{h=0}}^{{{last}}} \mathrm{{head}}_h\, W_O^{{(h)\top}} + b_O \in \mathbb{{R}}^{{{T} \times {d_out}}}, \quad W_O \in \mathbb{{R}}^{{{d_out} \times {H * d_v}}}",
    ]
    if n > 1:
        values = "0" if G == 1 else "0, 1" if G == 2 else rf"0, \dots, {G - 1}"
        lines.insert(2, rf"g(h) = \lfloor h / {n} \rfloor \in \{{{values}\}} \quad \text{{(grouped-query: {G} key/value "
                        rf"head{'s' if G > 1 else ''}, each read by {n} query heads)}}")
    if causal:
        lines.append(r"M_{ij} = -\infty \text{ if } j > i \text{ else } 0 \quad \text{(causal mask: no query sees a later key)}")
    if cfg.is_standard:
        d = cfg.d_model
        lines.append(
            rf"d_k = d_v = d_{{model}} / h = {d} / {H} = {d_k}, \quad \text{{weights}} = 4\, d_{{model}}^2 "
            rf"= 4 \cdot {d}^2 = {grouped(4 * d * d)}"
        )
    return lines


def grouped(n: int) -> str:
    """n with thousands separators that LaTeX prints as commas without a space after them: 16{,}384."""
    return f"{n:,}".replace(",", "{,}")


def variant_formulas(kind: str, cfg: MHAConfig, T: int, S: int | None = None, *, causal: bool = False,
                     **params: object) -> list[str]:
    """LaTeX lines of what an attention variant (mha_viz.variants) changes, with live dimensions: its spec's formulas;
    [] for mha and gqa (formulas() covers them). params: the variant's own (LayerVariant.params()); heads from 0."""
    from .variants import spec_of  # the variants load torch: only when a variant's lines are asked for

    return spec_of(kind).formulas(cfg, T, S, causal=causal, **params)
