"""Overview: every layer's heads as thumbnails; a click opens one."""

from __future__ import annotations

from ....parts import Part
from .heads import COMPARE

PART = Part("Overview", ("Pretrained",), "mha_viz.ui.view_parts:overview", arrays=("weights",), order=50,
            help="Every layer's heads as thumbnails; a click opens one.", fields=(COMPARE,))
