"""Analyses of AttentionTraces (numpy in, numpy out)."""

from .tokens import without_tokens

__all__ = ["without_tokens"]
