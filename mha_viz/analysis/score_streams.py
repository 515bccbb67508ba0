"""What score attribution's encoder streams add: hooks call by call, and DeBERTa's position terms as a source.

A module shared by several layers (ALBERT runs one layer's modules once per layer) is called once per layer: layer l's
tensors are those of its site.call-th call (Calls).

DeBERTa's disentangled attention adds to scale * q_i . k_j two terms linear in one side (pretrained.deberta):
    c2p_ij = scale * q_i . k_r[delta(i, j)]    linear in the query: sum_a scale * q_a,i . k_r[delta(i, j)]
    p2c_ij = scale * k_j . q_r[delta'(i, j)]   linear in the key:   sum_b scale * k_b,j . q_r[delta'(i, j)]
They are one more source of the table, "relative position" (0 in the stream: it enters the score, not x), put
before "bias": its column holds c2p by query source (query source a x relative position), its row p2c by key source
(relative position x key source b), its own cell 0; so the table sums to the whole score and other holds neither.
Its removed row is the query's softmax row without c2p and p2c (the content score alone). A stream source's removed
row recomputes c2p and p2c from the query and keys without that source, as the model would.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Self

import torch
from torch import Tensor, nn

if TYPE_CHECKING:
    from ..pretrained.adapter import LinearTerm


class Calls:
    """Forward hooks for one forward pass: each module's first input and its output at every call, kept as float64
    (T, n), batch dropped."""

    def __init__(self, modules: Sequence[nn.Module]) -> None:
        self.modules = list(dict.fromkeys(modules))  # each distinct module hooked once
        self.inputs: dict[nn.Module, list[Tensor]] = {m: [] for m in self.modules}
        self.outputs: dict[nn.Module, list[Tensor]] = {m: [] for m in self.modules}
        self._handles: list[torch.utils.hooks.RemovableHandle] = []

    def __enter__(self) -> Self:
        for module in self.modules:
            self._handles += [module.register_forward_pre_hook(self._on_call, with_kwargs=True),
                              module.register_forward_hook(self._on_return)]
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def input(self, module: nn.Module, call: int) -> Tensor:
        """(T, n) what module received first on its call-th call."""
        return self.inputs[module][call]

    def output(self, module: nn.Module, call: int) -> Tensor:
        """(T, n) what module returned (its first output) on its call-th call."""
        return self.outputs[module][call]

    @staticmethod
    def _kept(x: Tensor) -> Tensor:
        return x.detach()[0].double().cpu()  # (1, T, n) -> (T, n)

    def _on_call(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        self.inputs[module].append(self._kept(args[0] if args else kwargs["hidden_states"]))

    def _on_return(self, module: nn.Module, args: tuple, output: Any) -> None:
        self.outputs[module].append(self._kept(output if isinstance(output, Tensor) else output[0]))


RELATIVE = "relative position"  # DeBERTa's c2p and p2c, as a source of the table


def with_linear_terms(linear: dict[str, LinearTerm], scale: float, q: Tensor, k: Tensor, head: int, query: int,
                      visible: Sequence[int], terms: Tensor) -> Tensor:
    """terms (keys, n, n) of the n sources ("bias" last) with the score terms linear in the query or the key (DeBERTa's
    c2p and p2c) as one more source, RELATIVE, put before "bias": (keys, n + 1, n + 1). Its column holds each query
    source a's part of the terms linear in the query, scale * q_a,i . v[index[i, j]]; its row each key source b's
    part of those linear in the key, scale * k_b,j . v[index[i, j]]; its own cell is 0. q (n, 1, d_k) and k
    (n, keys, d_k) are the sources' parts of the query and the keys."""
    keys, n = terms.shape[:2]
    full = torch.zeros(keys, n + 1, n + 1, dtype=torch.float64)
    full[:, :n, :n] = terms
    for term in linear.values():
        v = term.vectors[head].double()[term.index[query, list(visible)]]  # (keys, d_k)
        if term.side == "query":
            full[:, :n, n] += scale * torch.einsum("ad,kd->ka", q[:, 0], v)  # c2p: [key, query source a]
        else:
            full[:, n, :n] += scale * torch.einsum("bkd,kd->kb", k, v)  # p2c: [key, key source b]
    order = [*range(n - 1), n, n - 1]  # RELATIVE before "bias"
    return full[:, order][:, :, order]


def linear_bias(linear: dict[str, LinearTerm], scale: float, q: Tensor, k: Tensor, head: int) -> dict[str, Tensor]:
    """Each linear term of one query head times the scale, on other queries and keys: q (c, T, d_k), k (c, S, d_k)
    -> (c, T, S) each (a stream without a source: the terms move with q and k)."""
    return {name: scale * replace(t, vectors=t.vectors[[head]].to(q)).scores(q, k) for name, t in linear.items()}
