"""Timing several callables against each other in one process: interleaved rounds, so that the machine's load
falls on each alike."""
from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Mapping


def interleaved(calls: Mapping[str, Callable[[], object]], rounds: int, per_round: int,
                sync: Callable[[], object] | None = None) -> dict[str, float]:
    """Median seconds per call of each callable: `rounds` rounds, each timing `per_round` calls of every callable in
    turn (`sync`, if given, after each one's calls: a device's queue drained)."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            start = time.perf_counter()
            for _ in range(per_round):
                call()
            if sync is not None:
                sync()
            times[name].append((time.perf_counter() - start) / per_round)
    return {name: statistics.median(t) for name, t in times.items()}


# as libgomp read it when torch loaded it, before this process imported us: tilegraph's C++ runtime sets a default
# in os.environ when it loads its first library, which a runtime loaded already never reads
_POLICY_AT_START = os.environ.get("OMP_WAIT_POLICY")


def wait_policy() -> str:
    """The OpenMP wait policy in force, for a table's header. The benchmarks leave it as torch leaves it (unset:
    libgomp's workers spin a while, then sleep), the peers' default: `passive` wakes sleeping workers at every
    parallel region, which cost Inductor, one region per kernel, up to 4x at 2 threads here and tilegraph little."""
    policy = _POLICY_AT_START
    return f"OMP_WAIT_POLICY={policy} (set by the caller)" if policy else \
        "OMP_WAIT_POLICY unset (libgomp's default: spin a while, then sleep)"
