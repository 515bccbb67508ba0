"""Direct logit attribution: which heads wrote a token's logit, term by term (pre-norm decoder-only models).

At position p the residual stream that enters the final norm is a sum of parts,
    x = embeddings + sum_l (attention_l + mlp_l),   attention_l = sum_h c_lh W_O^(l,h)T + b_O^(l)
with c_lh head h's block of layer l's concat (the output projection's input, captured by a pre-hook)
and mlp_l whatever else block l added: mlp_l = block output - block input - attention_l (also where attention
and MLP run in parallel: GPT-NeoX, Phi, Falcon; embeddings are whatever enters block 0, Gemma's scaled ones too).
The final norm is linear in x once its scale s is frozen at the value measured on the real x:
    LayerNorm  norm(x) = gamma * (x - mean(x)) / s + beta,   s = sqrt(var(x) + eps)
    RMSNorm    norm(x) = gamma * x / s,                      s = sqrt(mean(x^2) + eps)   (Gemma: gamma = 1 + weight)
so with u = W_U[token] the model's logit splits exactly into one term per part:
    logit = sum_parts u . (gamma * centre(part) / s) + u . beta + b_U[token]
centre(part) = part - mean(part) for LayerNorm (the mean of a sum is the sum of the means), part for RMSNorm.
The terms are computed in float64 from the model's tensors. Models whose attention outputs pass through
another norm before the residual stream (Gemma2) or whose norms follow each block (OPT-350m) are refused.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self

import numpy as np
import torch
from torch import Tensor, nn

from ..token_labels import id_label, token_labels, vocab_token
from .adapter import Adapter, loaded
from .encoded import Encoded
from .long_hooked import EAGER_MAX_BYTES, eager_bytes
from .norms import NormAffine, norm_affine

if TYPE_CHECKING:
    from .interface import TextModel


@dataclass(frozen=True, eq=False)
class LogitAttribution:
    """One token's logit at one position, split into each head's direct contribution and the rest."""

    tokens: tuple[str, ...]  # the input as the model read it
    position: int  # the position whose next-token logit is explained, 0-based
    token_id: int  # the token whose logit is explained
    token: str
    heads: np.ndarray  # (layers, heads) float64: each head's direct contribution to the logit (NaN: a head the layer
    # does not have, in a hybrid whose layers differ in heads)
    terms: dict[str, float]  # everything else, by name, in the order it enters the residual stream
    logit: float  # the model's own logit for token at position
    probability: float  # the model's softmax probability of token at position
    norm: str  # "LayerNorm" or "RMSNorm": the final norm, frozen at norm_scale
    norm_scale: float  # s, measured on the real residual stream at position
    residual_error: float  # max abs difference between the sum of the parts and the final norm's real input

    @property
    def total(self) -> float:
        """The sum of every head and every term: the logit again, up to float32 rounding in the model."""
        return float(np.nansum(self.heads) + sum(self.terms.values()))

    @property
    def check(self) -> dict[str, float]:
        """Max abs errors: the terms against the model's logit, the parts against the model's residual stream."""
        return {"sum of terms vs logit": abs(self.total - self.logit), "sum of parts vs residual": self.residual_error}


class Capture:
    """Hooks for one forward pass: block 0's input, every block's output, each attention's concat and output,
    and the final norm's input (where a norm is given); every tensor kept as float64 at one position (an int: (n,)),
    or at every one (slice(None): (T, n))."""

    def __init__(self, blocks: Sequence[nn.Module], outs: Sequence[nn.Module], norm: nn.Module | None,
                 position: int | slice) -> None:
        self.position = position
        self.embeddings: Tensor | None = None  # (d,)
        self.block_in: dict[int, Tensor] = {}  # layer -> (d,) its block's input
        self.block_out: dict[int, Tensor] = {}  # layer -> (d,)
        self.concat: dict[int, Tensor] = {}  # layer -> (H*d_v,)
        self.attention: dict[int, Tensor] = {}  # layer -> (d,)
        self.final: Tensor | None = None  # (d,) the final norm's input
        self._hooks: list[tuple[nn.Module, str, Callable[..., None]]] = [
            (blocks[0], "pre", self._on_embeddings),
            *((b, "pre", self._keep_input(self.block_in, layer)) for layer, b in enumerate(blocks)),
            *((b, "post", self._keep(self.block_out, layer)) for layer, b in enumerate(blocks)),
            *((o, "pre", self._keep_input(self.concat, layer)) for layer, o in enumerate(outs)),
            *((o, "post", self._keep(self.attention, layer)) for layer, o in enumerate(outs)),
            *(((norm, "pre", self._on_final),) if norm is not None else ()),
        ]
        self._handles: list[torch.utils.hooks.RemovableHandle] = []

    def __enter__(self) -> Self:
        for module, when, hook in self._hooks:
            if when == "pre":
                self._handles.append(module.register_forward_pre_hook(hook, with_kwargs=True))
            else:
                self._handles.append(module.register_forward_hook(hook))
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _at(self, x: Tensor) -> Tensor:
        return x.detach()[0, self.position].double().cpu()  # (1, T, n) -> (n,) or (T, n)

    @staticmethod
    def _first(args: tuple, kwargs: dict) -> Tensor:
        return args[0] if args else kwargs["hidden_states"]

    def _on_embeddings(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        self.embeddings = self._at(self._first(args, kwargs))

    def _on_final(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        self.final = self._at(self._first(args, kwargs))

    def _keep(self, store: dict[int, Tensor], layer: int) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple, output: Any) -> None:
            store[layer] = self._at(output if isinstance(output, Tensor) else output[0])

        return hook

    def _keep_input(self, store: dict[int, Tensor], layer: int) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple, kwargs: dict) -> None:
            store[layer] = self._at(self._first(args, kwargs))

        return hook


def frozen(affine: NormAffine, x: Tensor) -> tuple[str, Tensor, Callable[[Tensor], Tensor], Tensor, Tensor | None]:
    """(kind, s, centre, gamma, beta) of a norm whose scale s is measured on x (..., d), one per vector (...), and
    then frozen: linear."""
    kind, gamma, beta, eps = affine
    if kind == "LayerNorm":
        s = torch.sqrt(x.var(-1, unbiased=False) + eps)  # sqrt(var(x) + eps)
        return kind, s, lambda part: part - part.mean(-1, keepdim=True), gamma, beta
    s = torch.sqrt(x.pow(2).mean(-1) + eps)  # sqrt(mean(x^2) + eps)
    return kind, s, lambda part: part, gamma, None


def split_logit(enc: Encoded, position: int, token_id: int, token: str, logits: Tensor, parts: dict[str, Tensor],
                heads: Tensor, x: Tensor, norm: NormAffine, u: Tensor, b_U: float | None) -> LogitAttribution:
    """The LogitAttribution of logits[token_id] (logits (V,) at position) from the residual stream's parts at
    position (each (d,), in order), every head's part heads (L, H, d), their sum's real value x (d,), the final norm
    (frozen at its scale on x), the unembedding row u = W_U[token] (d,) and its bias b_U[token]; all float64."""
    residual_error = float((sum(parts.values()) + heads.sum((0, 1)) - x).abs().max())
    kind, s, centre, gamma, beta = frozen(norm, x)
    direction = u * gamma / s  # (d,): term = direction . centre(part)
    terms = {name: float(direction @ centre(part)) for name, part in parts.items()}
    if beta is not None:
        terms["final norm bias"] = float(u @ beta)  # u . beta
    if b_U is not None:
        terms["unembedding bias"] = float(b_U)  # b_U[token]
    return LogitAttribution(
        tokens=enc.tokens,
        position=position,
        token_id=token_id,
        token=token,
        heads=(centre(heads) @ direction).numpy(),  # (L, H)
        terms=terms,
        logit=float(logits[token_id]),
        probability=float(logits.softmax(-1)[token_id]),
        norm=kind,
        norm_scale=float(s),
        residual_error=residual_error,
    )


def checked_request(model: TextModel, text: str | None, ids: Sequence[int] | None, position: int) -> tuple[Encoded, int]:
    """The input as the model reads it (text, or ids exactly as given) and position as an index 0 ... T-1."""
    if (text is None) == (ids is None):
        raise ValueError("give either text or ids")
    if ids is not None:
        ids = [int(i) for i in ids]
        if not ids:
            raise ValueError("ids is empty")
        enc = Encoded(tuple(ids), token_labels(model.tokenizer, ids), 0)
    else:
        enc = model.encode(text)
    T = len(enc.ids)
    if isinstance(position, bool) or not isinstance(position, (int, np.integer)) or not -T <= position < T:
        raise ValueError(f"position must be an integer in {-T} ... {T - 1} for {T} tokens, got {position!r}")
    return enc, int(position) % T


def supported_architectures() -> list[str]:
    """The model types whose adapter knows the residual stream (decoder-only models)."""
    from .architectures import ADAPTERS

    return sorted(t for t, cls in ADAPTERS.items() if cls.residual_stream is not Adapter.residual_stream)


def vocab_id(model: TextModel, token: int | str, vocab_size: int) -> int:
    if isinstance(token, str):
        vocab = model.tokenizer.get_vocab()
        spelled = token if token in vocab else vocab_token(model.tokenizer, token)  # a label as shown: " fox"
        if spelled not in vocab:
            raise ValueError(f"{token!r} is not a token of {model.name}'s vocabulary")
        token = vocab[spelled]
    if isinstance(token, bool) or not isinstance(token, (int, np.integer)) or not 0 <= token < vocab_size:
        raise ValueError(f"token must be a token string or an id in 0 ... {vocab_size - 1}, got {token!r}")
    return int(token)


@torch.no_grad()
def logit_attribution(
    model: TextModel,
    text: str | None = None,
    *,
    ids: Sequence[int] | None = None,
    position: int = -1,
    token: int | str | None = None,
) -> LogitAttribution:
    """Split the logit of token (None: the model's top prediction there) after position of text into each head's
    direct contribution and named terms (embeddings, attention biases, MLPs, final norm bias, unembedding bias);
    see the module docstring. ids: token ids to read instead of text, exactly as given (e.g. a prompt and the
    tokens generated after it). ValueError for models whose residual stream mha-viz does not know (see
    supported_architectures()), or whose logits do not split into per-head terms (Gemma2)."""
    reason = model.next_token_unavailable or model.adapter.attribution_unavailable
    layout = model.adapter.residual_stream()
    if reason is None and layout is None:
        reason = (f"{model.name} is a '{model.architecture}' model; it needs a decoder whose residual stream "
                  f"mha-viz knows: {', '.join(supported_architectures())}")
    if reason is not None:
        raise ValueError(f"logit attribution is unavailable: {reason}")
    blocks, norm = layout
    enc, position = checked_request(model, text, ids, position)
    sites = [model.adapter.site("decoder", layer) for layer in range(len(blocks))]
    widest, T = max(site.num_heads for site in sites), len(enc.ids)
    if eager_bytes(widest, T) > EAGER_MAX_BYTES:  # ids past the views' window (a long prompt's generation)
        most = int((EAGER_MAX_BYTES / eager_bytes(widest, 1)) ** 0.5)
        raise ValueError(f"at {T:,} tokens the model's eager forward pass would make {eager_bytes(widest, T) / 2**20:,.0f} "
                         f"MiB of [heads, tokens, tokens] attention work a layer, more than the "
                         f"{EAGER_MAX_BYTES / 2**20:,.0f} MiB allowed: it splits the logit after at most {most:,} tokens")
    with Capture(list(blocks), [site.out for site in sites], norm, position) as capture:
        ids = torch.tensor([list(enc.ids)], device=model.adapter.device())  # (1, T)
        logits = model.model(input_ids=ids, use_cache=False).logits[0, position]  # (V,)
    token_id = int(logits.argmax()) if token is None else vocab_id(model, token, len(logits))

    logits = logits.double().cpu()  # (V,)
    unembedding = model.model.get_output_embeddings()
    scale = model.adapter.logit_scale()  # 1 but in Cohere, Granite 4 and Falcon-H1
    shared = len(set(blocks)) < len(blocks)  # a block traced as two layers (Falcon-H1): its MLP named by the block
    with loaded(*(site.out for site in sites), norm, unembedding):  # real weights even where accelerate offloads
        # the parts of the residual stream x at position (each (d,)), in the order they are added
        parts: dict[str, Tensor] = {"embeddings": capture.embeddings}
        head_parts = []  # per layer: (H, d)
        previous = capture.embeddings  # (d,) the input of the layer's block
        added = torch.zeros_like(previous)  # (d,) what the block's traced layers add: sum of r_l attention_l
        for layer, site in enumerate(sites):
            r = model.adapter.residual_scale(layer)  # 1 but in Granite 4 and Falcon-H1
            W_O, b_O = model.adapter.out_weights(site)  # (d, H*d_v), (d,)
            H = site.num_heads
            concat_blocks = capture.concat[layer].view(H, -1)  # (H, d_v): c_lh
            W_h = W_O.detach().double().cpu().view(W_O.shape[0], H, -1).permute(1, 2, 0)  # (H, d_v, d): W_O^(l,h)T
            head_parts.append(r * torch.einsum("hv,hvd->hd", concat_blocks, W_h))  # (H, d): r c_lh W_O^(l,h)T
            if b_O is not None:
                parts[f"layer {layer} attention bias"] = r * b_O.detach().double().cpu()  # (d,)
            added = added + r * capture.attention[layer]
            if layer + 1 < len(blocks) and blocks[layer + 1] is blocks[layer]:
                continue  # the block's next traced layer adds to the same stream
            mlp = f"block {sum(1 for i in range(layer) if blocks[i] is not blocks[i + 1])} MLP" if shared else (
                f"layer {layer} MLP")
            # up to the next traced block's input: the block's MLP, and any MLP blocks of their own after it (Nemotron-H)
            following = capture.block_in[layer + 1] if layer + 1 < len(blocks) else capture.final
            parts[mlp] = following - previous - added  # (d,)
            previous, added = following, torch.zeros_like(previous)
        try:
            affine = norm_affine(norm, capture.final.shape[-1], model.adapter.norm_weight_offset)
        except ValueError:
            raise ValueError(f"logit attribution does not know the final norm {type(norm).__name__}") from None
        u = scale * unembedding.weight[token_id].detach().double().cpu()  # (d,) W_U[token], times the logit scale
        b_U = None if getattr(unembedding, "bias", None) is None else scale * float(unembedding.bias[token_id])
        H = max(len(p) for p in head_parts)  # a hybrid's layers can differ in heads: 0 in the heads a layer lacks
        heads = torch.stack([torch.cat([p, p.new_zeros(H - len(p), p.shape[-1])]) for p in head_parts])  # (L, H, d)
        dla = split_logit(enc, position, token_id, id_label(model.tokenizer, token_id), logits, parts, heads,
                          capture.final, affine, u, b_U)
        for layer, p in enumerate(head_parts):
            dla.heads[layer, len(p):] = np.nan  # not heads of that layer
        return dla
