"""Values computed from nothing but constants and loop indices: a scale, a -inf fill, a causal mask.

They cost no memory traffic when computed where they are read, so canonicalize gives each reader its
own copy (`passes/canonicalize.py`) and the attention template takes them into its kernel.
"""
from __future__ import annotations

from .graph import Value
from .ops.registry import ELEMENTWISE, SOURCE


def index_only(value: Value, memo: dict[Value, bool]) -> bool:
    """Whether `value` is computed from constants and loop indices alone (`memo`: answers so far)."""
    if value in memo:
        return memo[value]
    node = value.producer
    ok = node is not None and node.opdef.category in (SOURCE, ELEMENTWISE) and node.iteration_space() is not None \
        and all(index_only(v, memo) for v in node.inputs)
    memo[value] = ok
    return ok


__all__ = ["index_only"]
