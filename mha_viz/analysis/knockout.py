"""Head knockout: switch heads off (their block of the concat zeroed before W_O), measure the change.

In one layer no model is needed: the output splits into one term per head,
    output = sum_h head_h W_O^(h)T + b_O,   so   knocked(K) = sum_{h not in K} head_h W_O^(h)T + b_O
    effect(K) = ||output - knocked(K)|| / ||output|| = ||sum_{h in K} head_h W_O^(h)T|| / ||output||
Ranking every head by its single-head effect follows Michel et al. 2019 ("Are sixteen heads
really better than one?"). Through a whole pretrained model the change is measured on the final
hidden state (and, for a causal language model, on the next-token distribution).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..trace import AttentionTrace

if TYPE_CHECKING:
    from ..pretrained import PretrainedModel


def head_mask(num_heads: int, off: Collection[int]) -> np.ndarray:
    """[H] float32: 1 keeps a head, 0 switches it off."""
    mask = np.ones(num_heads, dtype=np.float32)
    mask[list(off)] = 0.0
    return mask


def _norm_ratio(part: np.ndarray, whole: np.ndarray, axis: int | None) -> np.ndarray | float:
    """||part|| / ||whole|| (Frobenius, or vector norms along axis); 0/0 counts as no change."""
    num, den = np.linalg.norm(part, axis=axis), np.linalg.norm(whole, axis=axis)
    with np.errstate(divide="ignore", invalid="ignore"):
        result = np.where(den > 0, num / den, np.where(num > 0, np.inf, 0.0))
    return float(result) if axis is None else result


def relative_change(reference: np.ndarray, changed: np.ndarray, axis: int | None = None) -> np.ndarray | float:
    """||reference - changed|| / ||reference|| (Frobenius norm, or vector norms along axis)."""
    return _norm_ratio(np.asarray(reference) - changed, reference, axis)


def knocked_output(trace: AttentionTrace, off: Collection[int]) -> np.ndarray:
    """[T, d_out]: the layer output with heads `off` switched off, sum of the kept contributions + b_O."""
    keep = head_mask(trace.num_heads, off).astype(np.float64)  # (H,)
    bias = 0.0 if trace.b_O is None else trace.b_O
    return np.einsum("h,hto->to", keep, trace.head_contributions()) + bias  # (T, d_out)


def knockout_effect(trace: AttentionTrace, off: Collection[int], axis: int | None = None) -> np.ndarray | float:
    """||output - knocked|| / ||output|| of the layer output; axis=-1 gives one value per token [T].

    output - knocked = sum_{h in off} head_h W_O^(h)T exactly, so that is what is measured.
    """
    removed = trace.head_contributions()[list(off)].sum(0)  # (T, d_out)
    return _norm_ratio(removed, trace.require("output"), axis)


def knockout_ranking(trace: AttentionTrace) -> np.ndarray:
    """[H]: the layer output's relative change when each head alone is switched off."""
    return np.array([knockout_effect(trace, [h]) for h in range(trace.num_heads)])


@dataclass(frozen=True)
class ModelKnockout:
    """Heads switched off in one layer of a pretrained model, seen at the end of the model."""

    tokens: tuple[str, ...]  # the positions of the final hidden state
    hidden: np.ndarray  # (T, d_model) final hidden state, all heads on
    knocked: np.ndarray  # (T, d_model) final hidden state, heads off

    @property
    def effect(self) -> float:
        return relative_change(self.hidden, self.knocked)

    @property
    def per_token(self) -> np.ndarray:
        return relative_change(self.hidden, self.knocked, axis=-1)  # (T,)


def _final_tokens(model: PretrainedModel, text: str, part: str, decoder_text: str | None) -> tuple[str, ...]:
    decoder = model.kind == "encoder-decoder" and part != "encoder"
    return tuple(model.tokens(text if decoder_text is None or not decoder else decoder_text, decoder=decoder))


def model_knockout(
    model: PretrainedModel,
    text: str,
    layer: int,
    off: Collection[int],
    *,
    part: str | None = None,
    decoder_text: str | None = None,
) -> ModelKnockout:
    """Final hidden states with and without heads `off` of (part, layer), through the real model."""
    part = part or model.parts[0]
    mask = head_mask(model.num_heads[part], off)
    return ModelKnockout(
        tokens=_final_tokens(model, text, part, decoder_text),
        hidden=model.final_hidden(text, part=part, decoder_text=decoder_text),
        knocked=model.final_hidden(text, part=part, decoder_text=decoder_text, head_masks={layer: mask}),
    )


def model_knockout_ranking(
    model: PretrainedModel,
    text: str,
    layer: int,
    *,
    part: str | None = None,
    decoder_text: str | None = None,
    on_pass: Callable[[int, int], None] | None = None,
) -> np.ndarray:
    """[H]: relative change of the final hidden state when each head of (part, layer) alone is off.

    One forward pass per head, plus one without knockout; on_pass(done, total) after each.
    """
    part = part or model.parts[0]
    H = model.num_heads[part]
    hidden = model.final_hidden(text, part=part, decoder_text=decoder_text)
    changes = []
    for h in range(H):
        knocked = model.final_hidden(text, part=part, decoder_text=decoder_text, head_masks={layer: head_mask(H, [h])})
        changes.append(relative_change(hidden, knocked))
        if on_pass is not None:
            on_pass(h + 1, H)
    return np.array(changes)


def next_token_knockout(model: PretrainedModel, text: str, layer: int, off: Collection[int]) -> tuple[np.ndarray, np.ndarray]:
    """Next-token probabilities [vocab] after text, all heads on and with heads `off` of decoder layer
    `layer` switched off. Needs a causal language model with its LM head (see
    PretrainedModel.next_token_unavailable)."""
    mask = head_mask(model.num_heads["decoder"], off)
    return model.next_token_probs(text), model.next_token_probs(text, head_masks={layer: mask})
