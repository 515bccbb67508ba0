"""Window & sinks: the sliding window's band, each head's sink mass, and a token's reach through stacked layers."""

from __future__ import annotations

from ....fields import ranged
from ....limits import MAX_REACH_LAYERS
from ....parts import Part

PART = Part("Window & sinks", ("Configurable",), "mha_viz.ui.window:render", needs=("windowed",), order=100,
            arrays=("weights",), help="The sliding window's band, each head's sink mass, and what a token "
            "reaches through L stacked windowed layers.",
            fields=(ranged("reach_layers", 2, 1, MAX_REACH_LAYERS, "a number of layers from {lo} to {hi}"),))
