"""Grouped-query attention seen from one query head: the key/value head it reads, the query heads that share it,
and how far its K and V are from theirs (0: one K and one V serve the whole group)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..trace import AttentionTrace


@dataclass(frozen=True)
class KVGroup:
    """Query head `head` reads key/value head `kv_head`, as do the query heads `sharing` (head itself left out)."""

    head: int
    kv_head: int
    sharing: tuple[int, ...]
    max_key_difference: float  # max |K_head - K_other| over the heads sharing it (0.0 when none does)
    max_value_difference: float  # likewise for V


def kv_group(trace: AttentionTrace, head: int) -> KVGroup:
    """The K/V group of query head `head` in a grouped-query (or multi-query) trace, measured on its keys and values.

    ValueError for a trace without grouped key/value heads (trace.kv_heads None) or a head it does not have."""
    if trace.kv_heads is None:
        raise ValueError("this trace has one key/value head per query head (no grouped-query attention)")
    if not 0 <= head < trace.num_heads:
        raise ValueError(f"no head {head}: this layer has heads 0..{trace.num_heads - 1}")
    kv = trace.kv_heads[head]
    sharing = tuple(h for h, g in enumerate(trace.kv_heads) if g == kv and h != head)
    keys, values = trace.require("keys"), trace.require("values")  # (H, S, d_k), (H, S, d_v)
    group = list(sharing)
    dk = float(np.abs(keys[group] - keys[head]).max()) if group else 0.0
    dv = float(np.abs(values[group] - values[head]).max()) if group else 0.0
    return KVGroup(head, kv, sharing, dk, dv)
