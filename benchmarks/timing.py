"""Timing several callables against each other in one process: interleaved rounds, so that the machine's load
falls on each alike."""
from __future__ import annotations

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
