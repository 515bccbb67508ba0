"""Head knockout: switch heads off (their block of the concat zeroed before W_O), measure the change.

Through a whole pretrained model a head can be ablated three ways (ABLATIONS):
    zero      its block of the concat before W_O set to 0
    mean      set to its mean over the positions of reference texts (default: the text itself), at every position
    resample  set to its block, position by position, from a reference text of the same token length

In one layer no model is needed: the output splits into one term per head,
    output = sum_h head_h W_O^(h)T + b_O,   so   knocked(K) = sum_{h not in K} head_h W_O^(h)T + b_O
    effect(K) = ||output - knocked(K)|| / ||output|| = ||sum_{h in K} head_h W_O^(h)T|| / ||output||
Ranking every head by its single-head effect follows Michel et al. 2019 ("Are sixteen heads
really better than one?"). Through a whole pretrained model the change is measured on the final
hidden state (and, for a causal language model, on the next-token distribution).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..names import ABLATION_KINDS
from ..trace import AttentionTrace

if TYPE_CHECKING:
    from ..pretrained import PretrainedModel


ABLATIONS = ABLATION_KINDS


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
    ablation: str = "zero"  # how the heads were switched off: zero, mean or resample (ABLATIONS)

    @property
    def effect(self) -> float:
        return relative_change(self.hidden, self.knocked)

    @property
    def per_token(self) -> np.ndarray:
        return relative_change(self.hidden, self.knocked, axis=-1)  # (T,)


def _final_tokens(model: PretrainedModel, text: str, part: str, decoder_text: str | None) -> tuple[str, ...]:
    decoder = model.kind == "encoder-decoder" and part != "encoder"
    return tuple(model.tokens(text if decoder_text is None or not decoder else decoder_text, decoder=decoder))


def ablation_values(
    model: PretrainedModel,
    text: str,
    layer: int,
    ablation: str,
    reference: str | Sequence[str] | None = None,
    *,
    part: str | None = None,
    decoder_text: str | None = None,
) -> np.ndarray | None:
    """What an ablated head of (part, layer) is set to, for every head: [H, d_v] (mean) or [H, T, d_v] (resample),
    None for zero ablation. reference: the text(s) it is taken from (mean: default text; resample: required, one
    text of text's token length, read by the encoder and the decoder alike in an encoder-decoder)."""
    if ablation not in ABLATIONS:
        raise ValueError(f"ablation must be one of {ABLATIONS}, got {ablation!r}")
    if ablation == "zero":
        return None
    part = part or model.parts[0]
    references = [text] if reference is None and ablation == "mean" else (
        [reference] if isinstance(reference, str) else list(reference or []))
    if not references or (ablation == "resample" and len(references) != 1):
        raise ValueError(f"{ablation} ablation needs {'one reference text' if ablation == 'resample' else 'reference texts'}")
    H = model.layer_heads[part][layer]
    blocks = []
    for ref in references:
        ref_decoder = None if model.kind != "encoder-decoder" or part == "encoder" else ref
        concat = model.trace(ref, layer, part=part, decoder_text=ref_decoder).require("concat")  # (T_ref, H*d_v)
        blocks.append(concat.reshape(len(concat), H, -1).transpose(1, 0, 2))  # (H, T_ref, d_v)
    if ablation == "mean":
        return np.concatenate(blocks, axis=1).mean(axis=1)  # (H, d_v): mean over every position of every reference
    T = len(_final_tokens(model, text, part, decoder_text))
    if blocks[0].shape[1] != T:
        raise ValueError(f"resample ablation needs a reference text of the same token length: {blocks[0].shape[1]} "
                         f"tokens instead of {T}")
    return blocks[0]  # (H, T, d_v)


def _knocked_hidden(model: PretrainedModel, text: str, layer: int, off: Collection[int], values: np.ndarray | None,
                    part: str, decoder_text: str | None) -> np.ndarray:
    if values is None:
        return model.final_hidden(text, part=part, decoder_text=decoder_text,
                                  head_masks={layer: head_mask(model.layer_heads[part][layer], off)})
    return model.final_hidden(text, part=part, decoder_text=decoder_text,
                              head_values={layer: {h: values[h] for h in off}})


def model_knockout(
    model: PretrainedModel,
    text: str,
    layer: int,
    off: Collection[int],
    *,
    part: str | None = None,
    decoder_text: str | None = None,
    ablation: str = "zero",
    reference: str | Sequence[str] | None = None,
) -> ModelKnockout:
    """Final hidden states with and without heads `off` of (part, layer), through the real model; ablation and
    reference as in ablation_values."""
    part = part or model.parts[0]
    values = ablation_values(model, text, layer, ablation, reference, part=part, decoder_text=decoder_text)
    return ModelKnockout(
        tokens=_final_tokens(model, text, part, decoder_text),
        hidden=model.final_hidden(text, part=part, decoder_text=decoder_text),
        knocked=_knocked_hidden(model, text, layer, off, values, part, decoder_text),
        ablation=ablation,
    )


def model_knockout_ranking(
    model: PretrainedModel,
    text: str,
    layer: int,
    *,
    part: str | None = None,
    decoder_text: str | None = None,
    on_pass: Callable[[int, int], None] | None = None,
    ablation: str = "zero",
    reference: str | Sequence[str] | None = None,
) -> np.ndarray:
    """[H]: relative change of the final hidden state when each head of (part, layer) alone is ablated (ablation
    and reference as in ablation_values).

    One forward pass per head, plus one without knockout; on_pass(done, total) after each.
    """
    part = part or model.parts[0]
    H = model.layer_heads[part][layer]
    values = ablation_values(model, text, layer, ablation, reference, part=part, decoder_text=decoder_text)
    hidden = model.final_hidden(text, part=part, decoder_text=decoder_text)
    changes = []
    for h in range(H):
        knocked = _knocked_hidden(model, text, layer, [h], values, part, decoder_text)
        changes.append(relative_change(hidden, knocked))
        if on_pass is not None:
            on_pass(h + 1, H)
    return np.array(changes)


def next_token_knockout(
    model: PretrainedModel,
    text: str,
    layer: int,
    off: Collection[int],
    *,
    ablation: str = "zero",
    reference: str | Sequence[str] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Next-token probabilities [vocab] after text, all heads on and with heads `off` of decoder layer
    `layer` ablated (ablation and reference as in ablation_values). Needs a causal language model with its LM
    head (see PretrainedModel.next_token_unavailable)."""
    values = ablation_values(model, text, layer, ablation, reference, part="decoder")
    if values is None:
        knocked = model.next_token_probs(text, head_masks={layer: head_mask(model.layer_heads["decoder"][layer], off)})
    else:
        knocked = model.next_token_probs(text, head_values={layer: {h: values[h] for h in off}})
    return model.next_token_probs(text), knocked
