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
    """LaTeX lines of what an attention variant (mha_viz.variants) changes, with live dimensions; [] for mha and gqa
    (formulas() covers them). params: the variant's own (LayerVariant.params()); heads numbered from 0."""
    S = T if S is None else S
    H, d_k, d_v, d = cfg.num_heads, cfg.d_k, cfg.d_v, cfg.d_model
    if kind == "mla":
        c, r, q = params["kv_latent"], params["rope_dim"], params["q_latent"]
        rotary = r"\mathrm{RoPE}(q^R_h)\,\mathrm{RoPE}(k^R)^\top + " if r else ""  # rope_dim 0: no positions in the scores
        query = (rf"[\,q^R_h \,|\, q^C_h\,] = \mathrm{{RMSNorm}}(X W^{{DQ}})\, W^{{UQ}}_h, \quad W^{{DQ}} \in "
                 rf"\mathbb{{R}}^{{{d} \times {q}}}" if q else
                 rf"[\,q^R_h \,|\, q^C_h\,] = X W^Q_h, \quad W^Q_h \in \mathbb{{R}}^{{{d} \times {r + d_k}}}")
        return [
            (rf"[\,c \,|\, k^R\,] = X W^{{DKV}}, \quad c^{{KV}} = \mathrm{{RMSNorm}}(c) \in \mathbb{{R}}^{{{S} \times {c}}}"
            rf", \quad k^R \in \mathbb{{R}}^{{{S} \times {r}}} \quad \text{{(all the cache holds: {c} + {r} numbers a token)}}"),
            (rf"K^C_h = c^{{KV}} W^{{UK}}_h \in \mathbb{{R}}^{{{S} \times {d_k}}}, \quad V_h = c^{{KV}} W^{{UV}}_h \in "
            rf"\mathbb{{R}}^{{{S} \times {d_v}}} \quad \text{{(rebuilt per head from the latent)}}"),
            query,
            (rf"\mathrm{{head}}_h = \mathrm{{softmax}}\!\left(\frac{{{rotary}q^C_h K^{{C\top}}_h}}{{\sqrt{{{r + d_k}}}}}"
            rf"{' + M' if causal else ''}\right) V_h"),
            (r"q^C_h K^{C\top}_h = (q^C_h W^{UK\top}_h)\, c^{KV\top} \quad \text{(absorbed: scores against the latent "
            r"itself; a rotation between q and k could not be absorbed, so positions live in } k^R\text{)}"),
        ]
    if kind == "window":
        w, sinks = params["window"], params["sinks"]
        near = rf"i - {w} < j \le i" if causal else rf"|i - j| < {w}"
        lines = [(rf"M_{{ij}} = 0 \text{{ if }} {near} \text{{ else }} -\infty \quad \text{{(each query sees at most "
                 rf"{w if causal else 2 * w - 1} keys)}}")]
        if sinks == "logit":
            lines.append(r"A_{h,ij} = \frac{e^{s_{h,ij}}}{e^{z_h} + \sum_{j'} e^{s_{h,ij'}}}, \quad \sum_j A_{h,ij} = "
                         r"1 - \frac{e^{z_h}}{e^{z_h} + \sum_{j'} e^{s_{h,ij'}}} \quad \text{(a learned sink logit }"
                         r"z_h\text{ per head)}")
        elif sinks == "tokens":
            lines.append(r"M_{ij} = 0 \text{ also for } j < 4" + (r" \text{ with } j \le i" if causal else "")
                         + r" \quad \text{(the first 4 tokens stay visible: attention sinks, StreamingLLM)}")
        return lines
    if kind == "diff":
        half = H // 2
        heads = "0" if half == 1 else rf"0, \dots, {half - 1}"
        return [
            (rf"A^{{(1)}}_i = \mathrm{{softmax}}\!\left(\frac{{Q_i K_i^\top}}{{\sqrt{{{d_k}}}}}\right), \quad "
            rf"A^{{(2)}}_i = \mathrm{{softmax}}\!\left(\frac{{Q_{{i+{half}}} K_{{i+{half}}}^\top}}{{\sqrt{{{d_k}}}}}"
            rf"\right), \quad i = {heads}"),
            (rf"\mathrm{{head}}_i = (1 - \lambda_{{init}})\, \mathrm{{RMSNorm}}\!\left((A^{{(1)}}_i - \lambda A^{{(2)}}_i)"
            rf"\,[\,V_i \,|\, V_{{i+{half}}}\,]\right) \in \mathbb{{R}}^{{{T} \times {2 * d_v}}}"),
            (r"\lambda = e^{\lambda_{q1} \cdot \lambda_{k1}} - e^{\lambda_{q2} \cdot \lambda_{k2}} + \lambda_{init}, "
            r"\quad \lambda_{init} = 0.8 - 0.6\, e^{-0.3 \cdot 0} = 0.2"),
        ]
    if kind == "moh":
        k, shared = params["moh_k"], params["moh_shared"]
        routed = rf"h \ge {shared}" if shared else "h"
        alpha = r"\alpha_{t,2}\," if shared else ""
        lines = [(rf"g_{{t,h}} = {alpha}\mathrm{{softmax}}(x_t W_r)_h \text{{ if }} h "
                 rf"\in \mathrm{{top}}\text{{-}}{k}(x_t W_r) \text{{ else }} 0 \quad ({routed}\text{{: routed}})")]
        if shared:
            lines += [(rf"g_{{t,h}} = \alpha_{{t,1}}\, \mathrm{{softmax}}(x_t W_s)_h \quad (h < {shared}\text{{: shared, "
                      rf"every token}}), \quad [\alpha_{{t,1}}, \alpha_{{t,2}}] = \mathrm{{softmax}}(x_t W_\alpha)")]
        lines.append(r"\mathrm{MoH}(x_t) = \sum_h g_{t,h}\, \mathrm{head}_{t,h}\, W_O^{(h)\top} + b_O \quad "
                     r"\text{(the gated concat: a head a token does not use is 0 in its row)}")
        return lines
    return []
