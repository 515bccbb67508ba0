"""Analyses of AttentionTraces (numpy in, numpy out): which heads do what, and which heads matter."""

from ..divergence import head_divergence, js_divergence
from .circuits import (
    CopyingScores,
    HeadSingularValues,
    PeakOffset,
    TokenCircuit,
    copying_scores,
    ov_circuit,
    qk_circuit,
    singular_values,
)
from .compare import Comparison, compare_traces
from .composition import CompositionScores, composition, composition_scores
from .concat_sum import ConcatVsSum, concat_vs_sum
from .contribution import contribution_norms, norm_attention, transformed_value_norms
from .head_detectors import KINDS, DetectorScores, detect_heads, detector_scores, head_scores, repeated_tokens
from .head_stats import HeadStats, head_stats, special_positions, trace_head_stats, visible_keys
from .knockout import (
    ABLATIONS,
    ModelKnockout,
    ablation_values,
    head_mask,
    knocked_output,
    knockout_effect,
    knockout_ranking,
    model_knockout,
    model_knockout_ranking,
    next_token_knockout,
    relative_change,
)
from .mixer_stats import MixerStats, mixer_stats
from .patching import (
    PAIRS,
    PatchingPair,
    PatchingResult,
    PathPatching,
    activation_patching,
    pairs_for,
    patch_heads,
    patching_unavailable,
    path_patching,
    path_patching_scan,
)
from .readout import DirectLogits, Readout, direct_logits, model_readout, trained_readout
from .redundancy import Redundancy, cluster_order, near_duplicates, redundancy
from .rollout import attention_rollout
from .score_attribution import (
    ScoreAttribution,
    input_score_attribution,
    score_attribution,
    score_attribution_unavailable,
)
from .score_terms import ScoreTerms, score_terms
from .tokens import without_tokens
from .visibility import LayerReach, Visibility, probe_kernels, visibility

__all__ = [
    "ABLATIONS",
    "KINDS",
    "PAIRS",
    "Comparison",
    "CompositionScores",
    "ConcatVsSum",
    "CopyingScores",
    "DetectorScores",
    "DirectLogits",
    "HeadSingularValues",
    "HeadStats",
    "LayerReach",
    "MixerStats",
    "ModelKnockout",
    "PatchingPair",
    "PatchingResult",
    "PathPatching",
    "PeakOffset",
    "Readout",
    "Redundancy",
    "ScoreAttribution",
    "ScoreTerms",
    "TokenCircuit",
    "Visibility",
    "ablation_values",
    "activation_patching",
    "attention_rollout",
    "cluster_order",
    "compare_traces",
    "composition",
    "composition_scores",
    "concat_vs_sum",
    "contribution_norms",
    "copying_scores",
    "detect_heads",
    "detector_scores",
    "direct_logits",
    "head_divergence",
    "head_mask",
    "head_scores",
    "head_stats",
    "input_score_attribution",
    "js_divergence",
    "knocked_output",
    "knockout_effect",
    "knockout_ranking",
    "mixer_stats",
    "model_knockout",
    "model_knockout_ranking",
    "model_readout",
    "near_duplicates",
    "next_token_knockout",
    "norm_attention",
    "ov_circuit",
    "pairs_for",
    "patch_heads",
    "patching_unavailable",
    "path_patching",
    "path_patching_scan",
    "probe_kernels",
    "qk_circuit",
    "redundancy",
    "relative_change",
    "repeated_tokens",
    "score_attribution",
    "score_attribution_unavailable",
    "score_terms",
    "singular_values",
    "special_positions",
    "trace_head_stats",
    "trained_readout",
    "transformed_value_norms",
    "visibility",
    "visible_keys",
    "without_tokens",
]
