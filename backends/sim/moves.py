"""Move: the bytes of one tensor that one simulated step loads or stores, and how they count and time."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Move:
    """Bytes of one tensor a step loads or stores: the report's category and whether the interface times them."""

    tensor: str
    bytes: int
    compulsory: bool = False
    streamed: bool = False  # traffic of a streamed tensor beyond its compulsory bytes
    psum: bool = False  # partial sums written back per fold of K (`psum_writeback`)
    timed: bool = True  # False: a CALC refill or drain, sized by SCALE-Sim never to stall (takes no time)
