"""Latent (MLA): the latent each token caches, one head's keys and values rebuilt from it."""

from __future__ import annotations

from ....parts import Part

PART = Part("Latent (MLA)", ("Configurable", "Pretrained"), "mha_viz.ui.latent:render", needs=("latent",),
            order=110, arrays=("queries", "keys", "values", "scores"),
            help="Multi-head latent attention: the latent each token caches, one head's keys and values rebuilt "
                 "from it, the cache beside MHA's, and why the rotary part is kept apart.")
