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

    def sized(self, size: int, timed: bool | None = None) -> Move:
        """This move with `size` bytes (and `timed` when given): the simulator splits and merges
        moves thousands of times per layer, faster than dataclasses.replace."""
        return Move(self.tensor, size, self.compulsory, self.streamed, self.psum,
                    self.timed if timed is None else timed)
