"""SCALE-Sim's operand read buffer in CALC mode: how many words a stream of operand reads fetches from DRAM.

SCALE-Sim (memory/read_buffer_estimate_bw.py) groups the distinct addresses an operand's demand
stream asks for into sets of 1% of the SRAM. The active half holds `capacity` words (50 sets):
once that many distinct words have been asked for since the half was started, the half is
complete, fetched from DRAM, and a new empty half starts; a word asked for again counts again
only when it was last fetched with an earlier half. So the DRAM reads are the sum, over these
epochs, of the distinct words each asks for.

Streams are given in units: a unit is a set of words always asked for together (an input pixel's
channels, a filter column), `weights[u]` words. A unit that closes an epoch part-way is split:
its first words close the old epoch, the rest start the new one, and the part left behind is
fetched again when the new epoch asks for the unit again. `sweep_reads` is the closed form for
sweeps over disjoint sets (filters, GEMM operands, windows that do not overlap).
"""
from __future__ import annotations

import numpy as np


def previous_occurrence(units: np.ndarray) -> np.ndarray:
    """For each position, the last earlier position asking for the same unit (-1: none)."""
    keys = units.astype(np.int32) if len(units) and units.max() < 2 ** 31 else units
    order = np.argsort(keys, kind="stable")
    ordered = units[order]
    prev = np.full(len(units), -1, dtype=np.int64)
    same = ordered[1:] == ordered[:-1]
    prev[order[1:][same]] = order[:-1][same]
    return prev


def next_occurrence(prev: np.ndarray) -> np.ndarray:
    """For each position, the next later position asking for the same unit (len: none)."""
    nxt = np.full(len(prev), len(prev), dtype=np.int64)
    has = prev >= 0
    nxt[prev[has]] = np.nonzero(has)[0]
    return nxt


def epoch_reads(units: np.ndarray, weights: np.ndarray, capacity: int, prev: np.ndarray | None = None,
                checkpoint: int | None = None) -> int | tuple[int, int]:
    """DRAM words fetched for the unit stream `units` (unit ids in demand order; `weights[u]` words
    each) through a read buffer whose epochs close at `capacity` distinct words (module docstring).

    `prev` gives `previous_occurrence(units)` when the caller has it. With `checkpoint`, also the
    words fetched had the stream ended there: returns (at the checkpoint, at the end).
    """
    n = len(units)
    if n == 0:
        return (0, 0) if checkpoint is not None else 0
    capacity = max(1, int(capacity))
    w = np.asarray(weights, dtype=np.int64)[units]
    prev = previous_occurrence(units) if prev is None else prev
    nxt = next_occurrence(prev)
    reads = count = 0
    at_checkpoint = None
    epoch_start, scan = 0, 0  # entries at or after `scan` are new iff prev < epoch_start
    carry_at, carry = n, 0  # the split unit's next request adds the words it left behind
    chunk = 4096
    while scan < n:
        end = min(n, scan + chunk)
        new = np.where(prev[scan:end] < epoch_start, w[scan:end], 0)
        if scan <= carry_at < end:
            new[carry_at - scan] += carry
        total = count + np.cumsum(new)
        k = int(np.searchsorted(total, capacity))
        if checkpoint is not None and at_checkpoint is None and scan < checkpoint <= min(end, scan + k):
            at_checkpoint = reads + int(total[checkpoint - scan - 1])
        if k == len(total):
            count = int(total[-1])
            scan, chunk = end, min(chunk * 2, 1 << 20)
            continue
        t = scan + k
        left = int(total[k]) - capacity  # words of the closing unit that start the next epoch
        if t == carry_at:  # its re-read head closed the epoch: the tail it kept is asked for anew too
            left += int(w[t]) - carry
        reads += capacity
        while left >= capacity:  # a unit bigger than an epoch closes more of them
            reads += capacity
            left -= capacity
        if checkpoint is not None and at_checkpoint is None and checkpoint == t + 1:
            at_checkpoint = reads + left
        epoch_start, scan, count = t, t + 1, left
        carry_at, carry = int(nxt[t]), int(w[t]) - left
    if checkpoint is not None:
        return (reads + count if at_checkpoint is None else at_checkpoint), reads + count
    return reads + count


def repeated_reads(units: np.ndarray, weights: np.ndarray, capacity: int, sweeps: int) -> int:
    """Words fetched for `sweeps` identical sweeps of `units`: the first two run, each later one
    costs what the second did (its start finds the buffer as the second's did: the end of the
    sweep before)."""
    n = len(units)
    if n == 0 or sweeps <= 0:
        return 0
    if sweeps == 1:
        return epoch_reads(units, weights, capacity)
    prev = previous_occurrence(units)
    last = np.full(int(units.max()) + 1, -1, dtype=np.int64)
    last[units] = np.arange(n)  # the last position of every unit in one sweep
    twice = np.concatenate([prev, np.where(prev >= 0, prev + n, last[units])])
    one, two = epoch_reads(np.tile(units, 2), weights, capacity, prev=twice, checkpoint=n)
    return two + (sweeps - 2) * (two - one)


def sweep_reads(sweeps: list[tuple[int, int]], capacity: int) -> int:
    """DRAM words fetched for sweeps over disjoint sets, each `(words, repeats)`: a set's words are
    asked for once per sweep, in the same order every time, and never again after its sweeps.

    A set of at least `capacity` words misses on every word (a word's previous request is a whole
    set, at least an epoch, back); a smaller one is fetched once, plus the part of it read before an
    epoch that closed during its first sweep, when it is swept again.
    """
    capacity = max(1, int(capacity))
    reads = count = 0
    for size, repeats in sweeps:
        if size <= 0 or repeats <= 0:
            continue
        if size >= capacity:
            reads += size * repeats
            count = (count + size * repeats) % capacity
            continue
        room = capacity - count
        reads += size
        if size < room:
            count += size
        else:
            count = size - room
            if repeats > 1:
                reads += room
                count = size
    return reads
