"""The systolic array model: a GEMM folded onto a `rows x cols` PE array under one dataflow.

A layer is a GEMM of M output rows (output pixels), N output columns (filters) and K reduction
terms (the conv window), repeated `repeats` times (conv groups, unshared batch). Following
SCALE-Sim, each dataflow maps two GEMM dimensions onto the array (S_r rows, S_c columns) and
streams the third over time (T):

    os: S_r = M, S_c = N, T = K        (outputs stay in the PEs)
    ws: S_r = K, S_c = N, T = M        (weights stay in the PEs)
    is: S_r = K, S_c = M, T = N        (inputs stay in the PEs)

The array runs ceil(S_r / rows) * ceil(S_c / cols) folds back to back. A fold costs
`T + rows + cols - 2` cycles in os (skewed operands flow in from two edges while the outputs
drain) and `2 * rows + cols + T - 2` cycles in ws and is (the stationary operand is first shifted
in over `rows` cycles). The whole layer is one cycle shorter, as SCALE-Sim counts it (its cycle
numbering starts at zero), and never shorter than the MAC bound `MACs / PEs`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Gemm:
    """An (M x K) @ (K x N) product, `repeats` times over independent operands."""

    m: int
    n: int
    k: int
    repeats: int = 1

    @property
    def macs(self) -> int:
        return self.m * self.n * self.k * self.repeats


def spatio_temporal(gemm: Gemm, dataflow: str) -> tuple[int, int, int]:
    """(S_r, S_c, T): the GEMM dimensions on array rows, array columns, and time."""
    if dataflow == "os":
        return gemm.m, gemm.n, gemm.k
    if dataflow == "ws":
        return gemm.k, gemm.n, gemm.m
    if dataflow == "is":
        return gemm.k, gemm.m, gemm.n
    raise ValueError(f"unknown dataflow {dataflow!r} (ws, os, is)")


def folds(gemm: Gemm, rows: int, cols: int, dataflow: str) -> int:
    """Array folds of one repeat of the GEMM."""
    s_r, s_c, _ = spatio_temporal(gemm, dataflow)
    return math.ceil(s_r / rows) * math.ceil(s_c / cols)


def fold_cycles(gemm: Gemm, rows: int, cols: int, dataflow: str) -> int:
    """Cycles of one fold: fill, stream T, drain."""
    _, _, t = spatio_temporal(gemm, dataflow)
    if dataflow == "os":
        return t + rows + cols - 2
    return 2 * rows + cols + t - 2


def array_cycles(gemm: Gemm, rows: int, cols: int, dataflow: str) -> int:
    """Stall-free compute cycles of the whole GEMM on the array (SCALE-Sim's count, per repeat)."""
    if gemm.macs == 0:
        return 0
    per_repeat = folds(gemm, rows, cols, dataflow) * fold_cycles(gemm, rows, cols, dataflow) - 1
    bound = math.ceil(gemm.m * gemm.n * gemm.k / (rows * cols))
    return gemm.repeats * max(per_repeat, bound)


def mapping_efficiency(gemm: Gemm, rows: int, cols: int, dataflow: str) -> float:
    """Fraction of the PEs mapped to useful work, averaged over folds."""
    s_r, s_c, _ = spatio_temporal(gemm, dataflow)
    if s_r * s_c == 0:
        return 0.0
    return s_r * s_c / (folds(gemm, rows, cols, dataflow) * rows * cols)


def operand_reads(gemm: Gemm, rows: int, cols: int, dataflow: str, ifmap_bytes: int, filter_bytes: int,
                  capacity: int, word_bytes: int = 4, halo_bytes: int = 0) -> tuple[int, int]:
    """DRAM bytes of (ifmap, filter) when each streams through a buffer of `capacity` bytes in
    SCALE-Sim's fold order: column folds outer, row folds inner.

    The operand indexed by the inner folds alone (os and ws: the ifmap; is: the filter) is swept
    whole once per column fold, so it is re-read per column fold when it exceeds the buffer. An os
    sweep reads the ifmap's words once, plus `halo_bytes` (what a row fold's conv windows share
    with the previous fold's) each time the double buffer swaps halves within the sweep, as the
    swap leaves the halo behind; a ws sweep reads the whole im2col matrix, M x K words, because a K fold of a conv
    revisits an input word only after a whole window position's channels (about the ifmap) have
    streamed. The os filter's column slice is reused across the row folds unless the slice exceeds
    the buffer; an operand indexed by both (ws filter, is ifmap) is read once. Per GEMM repeat.
    """
    spatial_rows, spatial_cols, _ = spatio_temporal(gemm, dataflow)
    r_folds, c_folds = math.ceil(spatial_rows / rows), math.ceil(spatial_cols / cols)
    a, b = ifmap_bytes // gemm.repeats, filter_bytes // gemm.repeats
    if dataflow == "os":
        sweep = a + (math.ceil(a / capacity) - 1) * (halo_bytes // gemm.repeats)
        a_reads, b_reads = (c_folds * sweep if a > capacity else a), b * (r_folds if b / c_folds > capacity else 1)
    elif dataflow == "ws":
        a_reads, b_reads = (c_folds * max(a, gemm.m * gemm.k * word_bytes) if a > capacity else a), b
    else:  # is (spatio_temporal refused any other dataflow)
        a_reads, b_reads = a, b * (c_folds if b > capacity else 1)
    return a_reads * gemm.repeats, b_reads * gemm.repeats
