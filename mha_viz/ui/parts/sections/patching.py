"""Patching: which heads and positions carry a behaviour, by activation patching between two prompts."""

from __future__ import annotations

from ....fields import choice, short_text, whole
from ....limits import MAX_CLICKED_HEADS, MAX_LAYERS
from ....names import PATCH_CHOICES, PATCH_DIRECTIONS, PATCH_METRICS, PATCH_THROUGH
from ....parts import EVERY_MODE, Part, StateField

MAX_RECEIVERS = 64  # receiver heads of path patching a link may name


def _layer_heads(raw: str) -> tuple[str, ...]:
    """"1.0,1.3" -> ("1.0", "1.3"): heads as layer.head (a layer below MAX_LAYERS, a head below MAX_CLICKED_HEADS)."""
    heads = []
    for part in (p.strip() for p in raw.split(",")):
        if part:
            layer, dot, head = part.partition(".")
            if not dot:
                raise ValueError
            heads.append(f"{whole(layer, 0, MAX_LAYERS - 1)}.{whole(head, 0, MAX_CLICKED_HEADS - 1)}")
    if len(heads) > MAX_RECEIVERS:
        raise ValueError
    return tuple(dict.fromkeys(heads))


PART = Part(
    "Patching", EVERY_MODE, "mha_viz.ui.patching:render", needs=("causal_lm",), order=130,
    help="Which heads and positions carry a behaviour: activation patching between a clean and a corrupted prompt.",
    fields=(StateField("patch_pair", "", short_text(100), "a ready-made pair's name, at most 100 characters", 100),
            StateField("patch_clean", "", short_text(2000), "at most 2000 characters", 2000),
            StateField("patch_corrupted", "", short_text(2000), "at most 2000 characters", 2000),
            StateField("patch_answer", "", short_text(100), "a token, at most 100 characters", 100),
            StateField("patch_wrong", "", short_text(100), "a token, at most 100 characters", 100),
            choice("patch_metric", "logit_diff", PATCH_METRICS),
            choice("patch_site", "head", PATCH_CHOICES),
            choice("patch_direction", "denoise", PATCH_DIRECTIONS),
            # path patching: the receiver heads ("layer.head"; none: the model's default receivers) and their input
            StateField("patch_receivers", (), _layer_heads,
                       f"heads as layer.head, comma-separated, e.g. 1.0,1.3, at most {MAX_RECEIVERS}"),
            choice("patch_through", "k", PATCH_THROUGH)))
