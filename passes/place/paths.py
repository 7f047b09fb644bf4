"""Heads and tails: the earliest a task can start, and the least time after it ends, per device.

Both are longest-path computations over (task, device) pairs in which a device change between
a producer and a reader costs the transfer of the tensors between them. They feed the path
bound and the head-body-tail constraints of the LP.
"""
from __future__ import annotations

from .problem import PlacementProblem

BIG = 1 << 62


def heads(pb: PlacementProblem) -> list[list[int]]:
    """heads[i][p]: earliest start of task i if it runs on p (BIG where p cannot run it)."""
    m = pb.m
    finish = [[BIG] * m for _ in range(pb.n)]
    out = []
    for i in range(pb.n):
        est = [0] * m
        for k in pb.inputs[i]:
            t = pb.tensors[k]
            if t.producer < 0 and t.movable:
                continue  # a parameter can be preloaded on the reader's device
            row = pb.xfer[k]
            for q in pb.capable[i]:
                if t.producer < 0:
                    arrive = 0 if q == pb.home else row[pb.home * m + q]
                else:
                    fj = finish[t.producer]
                    arrive = min(fj[p] + (0 if p == q else row[p * m + q]) for p in pb.capable[t.producer])
                if arrive > est[q]:
                    est[q] = arrive
        for q in pb.capable[i]:
            finish[i][q] = est[q] + pb.duration[i][q]
        out.append([est[q] if q in pb.capable[i] else BIG for q in range(m)])
    return out


def tails(pb: PlacementProblem) -> list[list[int]]:
    """tails[i][p]: least time from task i's finish on p to the end of any schedule."""
    m = pb.m
    edge: dict[tuple[int, int], list[int]] = {}
    for k, t in enumerate(pb.tensors):
        if t.producer >= 0:
            for j in t.consumers:
                edge.setdefault((t.producer, j), []).append(k)
    tail = [[0] * m for _ in range(pb.n)]
    for i in range(pb.n - 1, -1, -1):
        for p in pb.capable[i]:
            worst = 0
            for j in pb.succs[i]:
                ks = edge[(i, j)]
                best = min(pb.duration[j][q] + tail[j][q] + (0 if q == p else max(pb.xfer[k][p * m + q] for k in ks))
                           for q in pb.capable[j])
                if best > worst:
                    worst = best
            tail[i][p] = worst
    return tail


