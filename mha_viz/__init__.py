"""mha_viz: multi-head attention computed head by head, with every intermediate kept.

    >>> import mha_viz
    >>> mha = mha_viz.MultiHeadAttention(d_model=64, num_heads=8, seed=0)
    >>> tokens, x = mha_viz.embed_text("The animal didn't cross the street because it was tired", 64)
    >>> trace = mha(x, query_tokens=tokens)          # an AttentionTrace
    >>> trace.weights.shape                          # (H, T, T)
    (8, 12, 12)
"""

from .attention import AttentionTensors, MultiHeadAttention
from .checks import TraceCheckError, TraceCheckWarning
from .config import MHAConfig, nearest_valid_heads, valid_head_counts
from .cost import LayerCost, full_width_head, layer_cost
from .long import LongTrace, long_trace
from .text import embed_text, embed_tokens, positional_encoding, tokenize
from .trace import AttentionTrace

__all__ = [
    "HYBRID_MODEL",
    "INDUCTION_MODEL",
    "RECALL_MODEL",
    "AttentionTensors",
    "AttentionTrace",
    "LayerCost",
    "LongTrace",
    "MHAConfig",
    "MultiHeadAttention",
    "PretrainedModel",
    "TraceCheckError",
    "TraceCheckWarning",
    "embed_text",
    "embed_tokens",
    "full_width_head",
    "layer_cost",
    "load_model",
    "long_trace",
    "nearest_valid_heads",
    "positional_encoding",
    "save_figure",
    "show",
    "tokenize",
    "valid_head_counts",
]


def __getattr__(name: str):
    """load_model, PretrainedModel and the bundled models' names (INDUCTION_MODEL, RECALL_MODEL, HYBRID_MODEL) come
    from mha_viz.pretrained (torch): loaded on first use."""
    if name in ("load_model", "PretrainedModel", "INDUCTION_MODEL", "RECALL_MODEL", "HYBRID_MODEL"):
        from . import pretrained

        return getattr(pretrained, name)
    if name == "show":  # the notebook widget: imports anywidget (the "notebook" extra) on first use
        from .widget import show

        return show
    if name == "save_figure":  # mha_viz.paper (Plotly; kaleido when called): loaded on first use
        from .paper import save_figure

        return save_figure
    raise AttributeError(f"module 'mha_viz' has no attribute {name!r}")
