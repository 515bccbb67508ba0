"""Head statistics: entropy, confidence and where each head looks, one row a head."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ....parts import EVERY_MODE, Part

if TYPE_CHECKING:
    from ...analysis import SectionContext

PART = Part("Head statistics", EVERY_MODE, f"{__name__}:render", order=10,
            help="Entropy, confidence and where each head looks, one row a head.")

STAT_HELP = {
    "entropy": "Entropy of each row / log(number of keys the row may see): 1 = uniform, 0 = one key. "
    "Rows that see a single key (the first row under a causal mask) are skipped.",
    "confidence": "Mean of each row's largest weight.",
    "first": "Mean weight on the first token. Often large: an attention sink. Softmax must put a row's mass "
    "somewhere, so a head with nothing to read parks it on the first token (which every query can see); "
    "StreamingLLM keeps the first tokens in its cache for this reason.",
    "special": "Mean total weight on special tokens.",
    "previous": "Mean weight on the previous token (rows that have one).",
    "same": "Mean weight on the token itself.",
    "next": "Mean weight on the next token (rows that have one).",
    "distance": "Mean attended distance Σ_j w_ij |i − j|, in tokens.",
    "sink": "Mean sink mass 1 − Σ_j w_ij: the share of each row's softmax taken by the head's learned sink logit "
    "(gpt-oss), which joins the softmax and is then dropped, so the head can attend to nothing instead of the "
    "first token.",
    "dropped": "Mean mass dense attention would have given the keys this sparse layer's indexer dropped (DeepSeek-V3.2: "
    "each query reads only its top-k keys): 0 = the indexer kept all that mattered to this head.",
}
MIXER_HELP = {
    "reach": "How far back the head reads, in tokens: Σ_s |M_ts| (t − s) / Σ_s |M_ts|, averaged over the rows.",
    "half_life": "Tokens until the head's state has halved: ln(1/2) / mean ln(decay).",
    "decay": "Mean per-token factor on the head's state (1 = it never forgets).",
    "diagonal": "Share of the matrix's size |M| on the token itself.",
    "negative": "Share of the matrix's size that is negative: what the head subtracts (softmax: 0).",
    "row_sum": "Mean row sum Σ_s M_ts: what a constant value comes out as (softmax: 1).",
}


def render(c: SectionContext) -> None:
    import streamlit as st

    from ....analysis import trace_head_stats
    from ....figures import heads_figure
    from ....figures.analysis import head_stats_figure
    from ....limits import client_int
    from ...analysis import clamp_heads
    from ...state import put
    from ...state import value as field_value
    from ...style import column_width, is_narrow, page_width
    from ...views import chart

    trace = c.trace
    clamp_heads(trace.num_heads)
    if trace.mixes:
        _mixer_table(c)
        return
    stats = trace_head_stats(trace, c.special)
    st.caption(
        "One row per head; click a column header to sort, a row to open that head. Shares are mean weights "
        "over the query rows." + (" This model learns a sink logit per head: the sink column is the share of "
                                  "each row it takes (rows of weights sum to 1 − sink)." if trace.sinks is not None
                                  else "") + (" Cross-attention: previous/same/next/distance compare positions of two "
                                  "different sentences and are left empty." if trace.cross else "")
    )
    config = {column: st.column_config.NumberColumn(column, help=text, format="%.3f")
              for column, text in STAT_HELP.items()}
    config["head"] = st.column_config.NumberColumn("head", width=48)  # room for the others at 1024 px
    # The table across the page: beside a chart its last columns would be cut off.
    event = st.dataframe(stats.columns(), key="analysis_stats", on_select="rerun", selection_mode="single-row",
                         hide_index=True, column_config=config, width="stretch")
    rows = event.selection.rows
    picked = client_int(rows[0], 0, trace.num_heads - 1) if isinstance(rows, list) and rows else None
    if picked is not None:  # a picked row opens its head (and a shared link remembers it as `head`)
        put("head", picked)
    head = field_value("head")
    narrow = is_narrow()
    left, right = (st.container(), st.container()) if narrow else st.columns([2, 3])
    with left:
        chart(heads_figure(trace, [head], cols=1, cell_px=22, title=f"head {head}",
                           width=page_width() if narrow else column_width(0.4)), "analysis_stats_head",
              f"{c.name}-head{head}")
    with right:
        chart(head_stats_figure(stats, width=page_width() if narrow else column_width(0.6)), "analysis_stats_chart",
              f"{c.name}-head-stats")


def _mixer_table(c: SectionContext) -> None:
    """A mixer layer's statistics (mha_viz.analysis.mixer_stats), one row a head, and the picked head's matrix."""
    import streamlit as st

    from ....analysis import mixer_stats
    from ....figures import heads_figure
    from ...state import value as field_value
    from ...style import page_width
    from ...views import chart

    trace = c.trace
    st.caption(f"A {trace.meta.get('mixer', trace.kind)} layer: each head's matrix is signed and its rows are not "
               "distributions, so entropy and shares of attention do not apply. One row per head: how far back it "
               "reads, how fast it forgets, and how much of its matrix subtracts.")
    config = {column: st.column_config.NumberColumn(column, help=text, format="%.3f")
              for column, text in MIXER_HELP.items()}
    config["head"] = st.column_config.NumberColumn("head", width=48)
    st.dataframe(mixer_stats(trace).columns(), key="analysis_mixer_stats", hide_index=True, column_config=config,
                 width="stretch")
    head = field_value("head")
    chart(heads_figure(trace, [head], cols=1, cell_px=22, title=f"head {head}", width=page_width()),
          "analysis_stats_head", f"{c.name}-head{head}")
