"""Plotly figures: numpy/AttentionTrace in, plotly.graph_objects.Figure out (notebook or app)."""

from .heads import heads_figure, long_heads_figure
from .lines import lines_figure
from .output_path import contributions_figure, output_path_figure
from .overview import overview_figure
from .steps import head_steps_figure, projections_figure, score_terms_figure

__all__ = ["contributions_figure", "head_steps_figure", "heads_figure", "lines_figure", "long_heads_figure", "output_path_figure", "overview_figure", "projections_figure", "score_terms_figure"]
