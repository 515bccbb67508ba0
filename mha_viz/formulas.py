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
    lines = [
        rf"Q_h = X W^Q_h \in \mathbb{{R}}^{{{T} \times {d_k}}}, \quad W^Q_h \in \mathbb{{R}}^{{{cfg.d_model} \times {d_k}}}, \quad h = 0, \dots, {last}",
        rf"K_h = {src} W^K_h \in \mathbb{{R}}^{{{S} \times {d_k}}}, \quad V_h = {src} W^V_h \in \mathbb{{R}}^{{{S} \times {d_v}}}",
        rf"\mathrm{{head}}_h = \mathrm{{softmax}}\!\left(\frac{{Q_h K_h^\top}}{{\sqrt{{{d_k}}}}}{mask}\right) V_h \in \mathbb{{R}}^{{{T} \times {d_v}}}",
        rf"\mathrm{{Concat}}(\mathrm{{head}}_0, \dots, \mathrm{{head}}_{{{last}}}) \in \mathbb{{R}}^{{{T} \times {H * d_v}}}",
        rf"\mathrm{{MultiHead}} = \mathrm{{Concat}}(\cdot)\, W_O^\top + b_O = \sum_{{h=0}}^{{{last}}} \mathrm{{head}}_h\, W_O^{{(h)\top}} + b_O \in \mathbb{{R}}^{{{T} \times {d_out}}}, \quad W_O \in \mathbb{{R}}^{{{d_out} \times {H * d_v}}}",
    ]
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
