"""W_O at work: each head's block of W_O followed to the readout: what it writes for the right answer.

Offered where a source has a known readout over a small vocabulary (the token_readout flag: a trained layer's relation
readouts, a small language model's unembedding), in every mode such a source appears in."""

from __future__ import annotations

from ....fields import whole
from ....parts import EVERY_MODE, Part, StateField

PART = Part("W_O at work", EVERY_MODE, "mha_viz.ui.readout:wo_at_work", needs=("token_readout",), order=120,
            help="Each head's block of W_O followed to the readout: what it writes for the right answer.",
            fields=(StateField("wo_answer", 0, lambda r: whole(r, 0, 7), "an answer number from 0 to 7"),))
