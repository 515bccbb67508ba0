"""Every head's weights of a pretrained model's stack, norms folded (mha_viz.weights.HeadWeights).

Per layer, from the adapter: W_Q, W_K, W_V (projection_weights, grouped-query K/V heads repeated per query head),
W_O (out_weights, split into head blocks), and the norm the attention reads the stream through (pre_norm), folded
in. Embeddings: the input embedding table and, where the model has learned absolute positions in a plain table
(GPT-2's wpe, BERT's position_embeddings), that table. Unembedding: the LM head with the final norm folded, where
the model has one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from ..token_labels import vocab_labels
from ..weights import HeadWeights, centre_writer, fold_reader, per_head_out
from .adapter import loaded, to_numpy
from .norms import norm_affine

if TYPE_CHECKING:
    from .interface import TextModel


def _position_table(base: nn.Module) -> nn.Embedding | None:
    """A plain table of learned absolute positions (GPT-2's wpe, BERT's embeddings.position_embeddings), or None."""
    for table in (getattr(base, "wpe", None), getattr(getattr(base, "embeddings", None), "position_embeddings", None)):
        if type(table) is nn.Embedding:
            return table
    return None


@torch.no_grad()
def model_weights(model: TextModel, part: str) -> HeadWeights:
    """HeadWeights of part ("encoder" or "decoder") of an opened-up model. ValueError for cross-attention (it reads
    two streams), a model whose attention is not opened up or has no weights per head (multi-head latent
    attention), or layers of different shapes."""
    adapter = model.adapter
    if adapter.unavailable is not None:
        raise ValueError(f"the heads' weights are unknown: {adapter.unavailable}")
    if adapter.weights_unavailable:  # traced in full, but no W_Q, W_K, W_V per head (MLA)
        raise ValueError(f"the heads' weights are not matrices per head: {adapter.weights_unavailable}")
    if part == "cross":
        raise ValueError("cross-attention reads the decoder for its queries and the encoder for its keys and values; "
                         "circuits and composition are computed for self-attention stacks")
    layers, kinds, notes = [], set(), []
    for layer in range(model.num_layers[part]):
        site = adapter.site(part, layer)
        with loaded(*(m for m in (site.q, site.k, site.v, site.out) if m is not None)):
            w = {name: None if W is None else W.detach().double().cpu() for name, W in adapter.projection_weights(site).items()}
            W_O, b_O = adapter.out_weights(site)  # (d_out, H*d_v), (d_out,)
            W_O, b_O = W_O.detach().double().cpu().numpy(), None if b_O is None else b_O.detach().double().cpu().numpy()
        kv = list(site.kv_heads)
        arrays = {"W_Q": w["W_Q"], "b_Q": w["b_Q"]}
        for name in ("W_K", "b_K", "W_V", "b_V"):
            arrays[name] = None if w[name] is None else w[name][kv]  # query head h's own K/V head
        arrays = {name: None if a is None else a.numpy() for name, a in arrays.items()}
        norm = adapter.pre_norm(part, layer)
        if norm is not None:
            kind, gamma, beta, _ = norm_affine(norm, arrays["W_Q"].shape[1], adapter.norm_weight_offset)
            kinds.add(kind)
            for x in "QKV":
                arrays[f"W_{x}"], arrays[f"b_{x}"] = fold_reader(arrays[f"W_{x}"], arrays[f"b_{x}"], gamma.numpy(),
                                                                 None if beta is None else beta.numpy(),
                                                                 kind == "LayerNorm")
        layers.append({**arrays, "W_O": per_head_out(W_O, site.num_heads), "b_O": b_O})
    if len({tuple(a.shape for a in layer.values() if a is not None) for layer in layers}) > 1:
        raise ValueError(f"the layers of {model.name} have heads of different shapes")
    if len(kinds) > 1:
        raise ValueError(f"{model.name} mixes norms ({sorted(kinds)})")
    norm = kinds.pop() if kinds else None

    def stack(name: str) -> np.ndarray | None:
        if layers[0][name] is None:
            return None
        return np.stack([layer[name] for layer in layers]).astype(np.float32)

    W_O, b_O = stack("W_O"), stack("b_O")
    embedding = model.model.get_input_embeddings()
    W_E = to_numpy(embedding.weight)  # (V, d_model)
    table = _position_table(adapter.base)
    W_pos = None if table is None else to_numpy(table.weight)
    d_model = layers[0]["W_Q"].shape[1]
    if W_E.shape[1] != d_model:  # ELECTRA, ALBERT: small embeddings projected up to d_model
        notes.append(f"the embeddings ({W_E.shape[1]} wide) are projected into the {d_model}-wide stream: W_E and "
                     "W_pos are left out")
        W_E = W_pos = None
    W_U, b_U = _unembedding(model) if part == "decoder" and model.kind == "decoder" else (None, None)
    if norm == "LayerNorm":  # a direction of all ones is invisible to every reader: writers centred
        W_O, b_O, W_E, W_pos = (centre_writer(W) for W in (W_O, b_O, W_E, W_pos))
    if getattr(adapter, "attribution_unavailable", None) and model.kind == "decoder":
        notes.append(adapter.attribution_unavailable)
    if adapter.norm_weight_offset:
        notes.append("the token embeddings are scaled by sqrt(d_model) before the first layer (Gemma); W_E is the "
                     "table as stored")
    vocab = vocabulary(model.tokenizer, embedding.weight.shape[0])
    return HeadWeights(
        W_Q=stack("W_Q"), W_K=stack("W_K"), W_V=stack("W_V"), W_O=W_O,
        b_Q=stack("b_Q"), b_K=stack("b_K"), b_V=stack("b_V"), b_O=b_O,
        W_E=W_E, W_pos=W_pos, W_U=W_U, b_U=b_U, vocab=vocab, norm=norm,
        folded=_folded(norm, W_U is not None),
        notes=tuple(notes),
        name=model.name,
    )


def vocabulary(tokenizer: object, size: int) -> tuple[str, ...]:
    """Token i's label for every row of the embedding table (mha_viz.token_labels.vocab_labels: a byte-level token as
    the characters it spells); "<id i>" for rows the tokenizer has no token for (tables padded past the vocabulary)."""
    known = min(size, len(tokenizer))
    return vocab_labels(tokenizer, range(known)) + tuple(f"<id {i}>" for i in range(known, size))


def _unembedding(model: TextModel) -> tuple[np.ndarray | None, np.ndarray | None]:
    """W_U [d_model, V] and b_U [V] of the LM head, the final norm folded in; (None, None) without an LM head."""
    if model.next_token_unavailable is not None:
        return None, None
    head = model.model.get_output_embeddings()
    scale = model.adapter.logit_scale()  # Cohere's, Granite 4's: the logits are the unembedding's times it
    W_U = to_numpy(head.weight).T  # (d_model, V), float32 (a view where the model is float32 on the CPU)
    W_U = W_U if scale == 1.0 else W_U * np.float32(scale)
    b_U = None if getattr(head, "bias", None) is None else scale * head.bias.detach().double().cpu().numpy()
    layout = model.adapter.residual_stream()
    if layout is None:
        return W_U, None if b_U is None else b_U.astype(np.float32)
    kind, gamma, beta, _ = norm_affine(layout[1], W_U.shape[0], model.adapter.norm_weight_offset)
    return fold_reader(W_U, b_U, gamma.numpy(), None if beta is None else beta.numpy(), kind == "LayerNorm")


def _folded(norm: str | None, unembedding: bool) -> str:
    if norm is None:
        return "nothing folded: the attention reads the residual stream as it is (a post-norm model)"
    centred = " and centred (the mean over d_model removed)" if norm == "LayerNorm" else ""
    final = "; the final norm folded into W_U" if unembedding else ""
    writers = "; W_O, b_O, W_E and W_pos centred, as a LayerNorm reads them" if norm == "LayerNorm" else ""
    return (f"each layer's {norm} folded into W_Q, W_K and W_V (its weight multiplied in{centred}, its bias moved "
            f"into the biases){writers}{final}; the input-dependent 1/s of the norm is left out")
