"""Router (MoH): which heads the router gives each token, each head's load, the gated concat."""

from __future__ import annotations

from ....parts import Part

PART = Part("Router (MoH)", ("Configurable",), "mha_viz.ui.mixture:render", needs=("routed",), order=120,
            arrays=("gates", "concat"),
            help="Mixture-of-heads: which heads the router gives each token, each head's load, the gated concat.")
