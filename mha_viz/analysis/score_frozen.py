"""Score attribution's frozen norms. A norm whose scale s is frozen at what it measured on each vector is affine:
    norm(v) = gamma * centre(v) / s + beta      (LayerNorm: centre(v) = v - mean(v); RMSNorm: centre(v) = v)
so each source of what it reads goes through it alone (Frozen). The same for a norm on each query or key head before
the rotation (head_normed: QK-norm, per head or across every head), and for the norms inside an attention module,
frozen by forward hooks (inner_norms keeps what each received, frozen_norm replaces its output).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn


def head_normed(norm: Callable[[Tensor], Tensor] | None, parts: Tensor, offset: float, positions: Sequence[int],
                 whole: Tensor, index: int) -> Tensor:
    """parts (S + 1, P, d_k) of head `index` at positions, the constant part last, through what the layer does to
    each query or key head before the rotation: a norm over d_k (QK-norm) frozen at its scale on their sum, one per
    position, as the pre-attention norm is (gamma * centre(part) / s, beta on the constant part); OLMo's RMSNorm
    across every head of the projection at once, frozen at its scale on the whole projection (whole: (heads, T,
    d_k), the real one), head index's slice of gamma; Cohere's LayerNorm per head with head index's own weight; or
    Llama 4's temperature (a scale per position: linear). ValueError for anything else."""
    from ..pretrained.attribution import frozen
    from ..pretrained.cohere import HeadLayerNorm
    from ..pretrained.llama4 import Temperature
    from ..pretrained.norms import NormAffine
    from ..pretrained.olmo import AcrossHeads

    if norm is None:
        return parts
    if isinstance(norm, Temperature):
        return parts * norm.scales.double()[list(positions), None]
    if isinstance(norm, HeadLayerNorm):  # Cohere: a LayerNorm over d_k with the head's own weight, in the trace's order
        gamma = norm.norm.weight.detach().double().cpu()[index, list(norm.order)]  # (d_k,)
        head_norm = Frozen(*frozen(NormAffine("LayerNorm", gamma, None, norm.norm.variance_epsilon), parts.sum(0)))
        return head_norm.linear(parts)
    if isinstance(norm, AcrossHeads):  # s_p = sqrt(mean over every head's dims of q_p^2 + eps)
        d = parts.shape[-1]
        joined = whole[:, list(positions)].transpose(0, 1).flatten(1).double()  # (P, heads * d_k)
        across = Frozen.of(norm.norm, joined, offset)
        if across.kind != "RMSNorm":
            raise ValueError(f"score attribution is unavailable: its QK-norm across heads is a {across.kind}")
        return across.gamma[index * d:(index + 1) * d] * parts / across.scales[:, None]
    try:  # a step that is not a norm module (a callable of an adapter's own) is refused as an unknown norm
        head_norm = Frozen.of(norm, parts.sum(0), offset)  # scales (P,)
    except ValueError as error:
        raise ValueError(f"score attribution is unavailable: its QK-norm: {error}") from None
    normed = head_norm.linear(parts)
    if head_norm.beta is not None:
        normed[-1] += head_norm.beta
    return normed


@dataclass(frozen=True)
class Frozen:
    """A pre-attention norm frozen at its scales on the real stream (pretrained.attribution.frozen): affine per
    position."""

    kind: str
    scales: Tensor  # (T,), or one per vector of what it was measured on
    centre: Callable[[Tensor], Tensor]  # v - mean(v) for a LayerNorm, v for an RMSNorm
    gamma: Tensor  # (d,)
    beta: Tensor | None  # (d,)

    @classmethod
    def of(cls, norm: nn.Module, received: Tensor, offset: float = 0.0) -> Frozen:
        """norm (a LayerNorm or RMSNorm module) frozen at its scale on each vector of received (..., d), what it
        received in the real forward pass. ValueError for a module that is not a known norm."""
        from ..pretrained.attribution import frozen
        from ..pretrained.norms import norm_affine

        return cls(*frozen(norm_affine(norm, received.shape[-1], offset), received))

    @classmethod
    def identity(cls, T: int, d: int) -> Frozen:
        """No norm between the stream and the attention (post-norm encoders, OLMo 2 and 3), as a frozen norm."""
        return cls("no norm", torch.ones(T, dtype=torch.float64), lambda v: v, torch.ones(d, dtype=torch.float64), None)

    def linear(self, part: Tensor) -> Tensor:
        """gamma * centre(part) / s: a part (..., d), shaped like what the scales were measured on, through the
        frozen norm, without its shift beta (which belongs to the constant part)."""
        return self.gamma * self.centre(part) / self.scales[..., None]

    def projected(self, sources: Sequence[Tensor], positions: Sequence[int], W: Tensor, b: Tensor | None = None
                  ) -> Tensor:
        """(S + 1, P, n): each source (T, d) at positions through the frozen norm, gamma * centre(src) / s, times W
        (d, n); last, the constant part beta W + b. 16 sources at a time, in float64."""
        scales = self.scales[list(positions), None]  # (P, 1)
        parts = []
        for i in range(0, len(sources), 16):
            chunk = torch.stack([src[list(positions)] for src in sources[i:i + 16]]).double()  # (c, P, d)
            parts.append((self.gamma * self.centre(chunk) / scales) @ W)  # (c, P, n)
        constant = 0 * W[0] if self.beta is None else self.beta @ W  # (n,)
        parts.append((constant + (0 if b is None else b)).expand(1, len(positions), -1))  # (1, P, n)
        return torch.cat(parts)


class Times(nn.Module):
    """x -> factor * x: the factor on the normed stream where a layer reads it scaled (Falcon-H1's a_in)."""

    def __init__(self, factor: float) -> None:
        super().__init__()
        self.factor = factor

    def forward(self, x: Tensor) -> Tensor:
        return self.factor * x


@contextlib.contextmanager
def inner_norms(attention: nn.Module, store: dict[nn.Module, Tensor]) -> Iterator[None]:
    """While open, what each norm inside the attention module (a latent's, a QK-norm) receives first goes to store."""
    from ..pretrained.norms import norm_affine

    handles = []
    for module in attention.modules():
        if module is attention or getattr(module, "weight", None) is None:
            continue
        try:
            norm_affine(module, module.weight.shape[-1])
        except ValueError:
            continue  # not a norm

        def keep(mod: nn.Module, args: tuple, module: nn.Module = module) -> None:
            store.setdefault(module, args[0].detach().double().cpu())

        handles.append(module.register_forward_pre_hook(keep))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def frozen_norm(norm: nn.Module, received: Tensor, offset: float) -> Callable:
    """A forward hook that makes norm affine: its output gamma * centre(x) / s (+ beta), s measured on received (its
    input in the real forward pass, one scale per vector)."""
    affine = Frozen.of(norm, received, offset)

    def hook(module: nn.Module, args: tuple, output: Tensor) -> Tensor:
        shift = 0 if affine.beta is None else affine.beta
        return (affine.linear(args[0].double().cpu()) + shift).to(output)

    return hook
