"""Hooks score attribution's encoder streams read: what modules received and returned, call by call.

A module shared by several layers (ALBERT runs one layer's modules once per layer) is called once per layer: layer l's
tensors are those of its site.call-th call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Self

import torch
from torch import Tensor, nn


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
