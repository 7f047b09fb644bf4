"""Lower bounds on the makespan, reported with every placement.

- `path_bound`: the critical path with each task at its best device, by dynamic programming over
  (task, device) (`paths.heads`/`paths.tails`): a task on device p starts no earlier than, for
  each predecessor, the best over the predecessor's devices of its finish plus the transfer to p
  when the devices differ. With transfers removed this is the classic "each kernel at its
  fastest device" bound; it is never below it.
- the LP bound of `lp.solve_lp`: load per device with heads and tails, memory, links, path cuts.
The reported bound is the larger of the two.
"""
from __future__ import annotations

from dataclasses import dataclass

from .lp import LPResult, lp_bound, solve_lp
from .paths import heads, tails
from .problem import PlacementProblem


def fastest_path_bound(pb: PlacementProblem) -> int:
    """Longest chain of tasks, each at its fastest device, transfers ignored."""
    best = [0] * pb.n
    for i in range(pb.n):
        best[i] = max((best[j] for j in pb.preds[i]), default=0) + pb.fastest[i]
    return max(best, default=0)


def path_bound(pb: PlacementProblem) -> int:
    """Longest head + duration + tail of any task at its best device (transfers included)."""
    h, t = heads(pb), tails(pb)
    return max((min(h[i][p] + pb.duration[i][p] + t[i][p] for p in pb.capable[i]) for i in range(pb.n)), default=0)


@dataclass(frozen=True)
class Bounds:
    path: int
    lp: int
    lp_result: LPResult | None

    @property
    def best(self) -> int:
        return max(self.path, self.lp)


def lower_bounds(pb: PlacementProblem, time_limit: float = 10.0) -> Bounds:
    """Both bounds; the LP's solution comes along for rounding heuristics."""
    result = solve_lp(pb, time_limit=time_limit)
    return Bounds(max(path_bound(pb), fastest_path_bound(pb)), lp_bound(result), result)
