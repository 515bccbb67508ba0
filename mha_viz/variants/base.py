"""The variants' common ground: views of the registry (mha_viz.variants.spec, which also holds LayerVariant) by
kind, describe() and variant_layer(). The variant modules import this module, and the package
imports them (so they register)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch import nn

from ..config import MHAConfig
from .spec import VARIANTS, LayerVariant

SINK_TOKENS = 4  # StreamingLLM keeps the first four tokens of the context visible to every query


class _Live(Mapping):
    """A read-only view of the registry, computed at each use (a variant registered later is in it)."""

    def __init__(self, read: Callable[[Any], Any]) -> None:
        self._read = read

    def __getitem__(self, kind: str) -> Any:
        return self._read(VARIANTS[kind])

    def __iter__(self) -> Iterator[str]:
        return iter(tuple(VARIANTS))

    def __len__(self) -> int:
        return len(VARIANTS)


KINDS: Mapping[str, Any] = _Live(lambda spec: spec)  # the registered kinds, in menu order
NAMES: Mapping[str, str] = _Live(lambda spec: spec.name)  # kind -> its short name ("MLA")
PARAMETERS: Mapping[str, tuple[str, ...]] = _Live(lambda spec: tuple(f.name for f in spec.fields))
LAYERS: Mapping[str, Callable[..., nn.Module]] = _Live(lambda spec: spec.build)  # kind -> its layer builder
COLOURS: Mapping[str, str] = _Live(lambda spec: spec.training.colour)  # kind -> its colour in the training charts
LEGENDS: Mapping[str, str] = _Live(lambda spec: spec.training.legend or spec.name)  # kind -> its legend entry


def describe(cfg: MHAConfig, variant: LayerVariant) -> str:
    """What the layer of this variant computes, in words, for these dimensions."""
    return variant.spec.describe(variant.config(cfg), variant)


def variant_layer(cfg: MHAConfig, variant: LayerVariant | None = None, *, seed: int | None = None,
                  dtype: torch.dtype = torch.float32) -> nn.Module:
    """The layer of this variant (None: plain MHA) with these dimensions, seeded weights; ValueError when they do not
    fit."""
    variant = LayerVariant() if variant is None else variant
    return variant.spec.build(variant.config(cfg), variant, seed=seed, dtype=dtype)
