"""Load balancing of device assignments, for large graphs whose makespan is set by resource load.

On a graph with thousands of kernels every device and link stays busy nearly all the time, so the
makespan is close to the largest load: the busy time of a device, or the transfer time a link
channel carries. This module moves tasks between devices to lower that load, scoring an
assignment by sum over resources of load^8 (a smooth stand-in for the maximum) and updating it
incrementally in time proportional to the task's tensors. Transfers are counted exactly as the
schedule would make them: one per tensor and reading device, from where the tensor is made.
A parameter is kept on the device where most of its readers' time is (the solver's engine
re-checks memory when it decodes the assignment into a schedule).
"""
from __future__ import annotations

import random
import time
from collections.abc import Sequence

from .problem import PlacementProblem

POWER = 8


class LoadModel:
    """Loads of devices and channels under an assignment, with O(degree) move deltas."""

    def __init__(self, pb: PlacementProblem, assign: Sequence[int], params: dict[int, int]) -> None:
        self.pb = pb
        m = pb.m
        self.assign = list(assign)
        self.origin = [0] * len(pb.tensors)
        for k, t in enumerate(pb.tensors):
            self.origin[k] = self.assign[t.producer] if t.producer >= 0 else params.get(k, pb.home)
        self.count = [[0] * m for _ in pb.tensors]  # readers of tensor k on device q
        for k, t in enumerate(pb.tensors):
            for j in t.consumers:
                self.count[k][self.assign[j]] += 1
        self.load = [0.0] * (m + len(pb.channels))
        for i, p in enumerate(self.assign):
            self.load[p] += pb.duration[i][p]
        for k in range(len(pb.tensors)):
            for q in range(m):
                if self.count[k][q] and q != self.origin[k]:
                    self.load[m + pb.route[self.origin[k]][q]] += pb.xfer[k][self.origin[k] * m + q]
        self.scale = max(self.load) or 1.0

    def score(self, load: Sequence[float] | None = None) -> float:
        s = self.scale
        return sum((x / s) ** POWER for x in (load or self.load))

    def delta(self, i: int, q: int) -> dict[int, float]:
        """Load changes (resource -> change) of moving task i to device q."""
        pb, m = self.pb, self.pb.m
        p = self.assign[i]
        change: dict[int, float] = {p: -pb.duration[i][p], q: float(pb.duration[i][q])}
        for k in pb.inputs[i]:
            o = self.origin[k]
            row = pb.xfer[k]
            if self.count[k][p] == 1 and p != o:  # the copy to p is no longer needed
                r = m + pb.route[o][p]
                change[r] = change.get(r, 0.0) - row[o * m + p]
            if self.count[k][q] == 0 and q != o:  # a copy to q becomes needed
                r = m + pb.route[o][q]
                change[r] = change.get(r, 0.0) + row[o * m + q]
        for k in pb.outputs[i]:
            row = pb.xfer[k]
            cnt = self.count[k]
            for d in range(m):
                if cnt[d] == 0:
                    continue
                if d != p:
                    r = m + pb.route[p][d]
                    change[r] = change.get(r, 0.0) - row[p * m + d]
                if d != q:
                    r = m + pb.route[q][d]
                    change[r] = change.get(r, 0.0) + row[q * m + d]
        return change

    def gain(self, change: dict[int, float]) -> float:
        s = self.scale
        return sum((self.load[r] / s) ** POWER - ((self.load[r] + c) / s) ** POWER for r, c in change.items())

    def apply(self, i: int, q: int, change: dict[int, float]) -> None:
        pb = self.pb
        p = self.assign[i]
        for r, c in change.items():
            self.load[r] += c
        for k in pb.inputs[i]:
            self.count[k][p] -= 1
            self.count[k][q] += 1
        for k in pb.outputs[i]:
            self.origin[k] = q
        self.assign[i] = q


def balance(pb: PlacementProblem, assign: Sequence[int], params: dict[int, int], *, sweeps: int = 30,
            seed: int = 0, time_limit: float = 10.0) -> list[int]:
    """Greedy moves (random order, seeded) that lower the load score, until a sweep finds none."""
    t0 = time.monotonic()
    model = LoadModel(pb, assign, params)
    rng = random.Random(seed)
    tasks = list(range(pb.n))
    for _ in range(sweeps):
        rng.shuffle(tasks)
        moved = False
        for i in tasks:
            best, best_q = 1e-12, None
            for q in pb.capable[i]:
                if q == model.assign[i]:
                    continue
                change = model.delta(i, q)
                g = model.gain(change)
                if g > best:
                    best, best_q, best_change = g, q, change
            if best_q is not None:
                model.apply(i, best_q, best_change)
                moved = True
        if not moved or time.monotonic() - t0 > time_limit:
            break
    return model.assign


def majority_params(pb: PlacementProblem, assign: Sequence[int]) -> dict[int, int]:
    """Each parameter on the device where its readers spend the most time."""
    out = {}
    for k in pb.params:
        time_on: dict[int, int] = {}
        for j in pb.tensors[k].consumers:
            time_on[assign[j]] = time_on.get(assign[j], 0) + pb.duration[j][assign[j]]
        out[k] = max(time_on, key=lambda p: (time_on[p], p == pb.home))
    return out
