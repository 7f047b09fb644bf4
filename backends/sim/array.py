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
numbering starts at zero), and never shorter than the MAC bound `MACs / PEs`. `sram_accesses`
counts the words the folds move between the array and its SRAMs (for the energy estimate); which
words DRAM supplies is `demand`'s business.
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


def sram_accesses(gemm: Gemm, rows: int, cols: int, dataflow: str) -> tuple[int, int, int]:
    """Words the array reads from the ifmap and filter SRAMs and writes to the ofmap SRAM, as SCALE-Sim
    counts them: every fold reads its streamed operand and its stationary block once, so the
    operand indexed by the column folds alone is read once per column fold (os: the filter once per
    row fold); the outputs are written once per fold of the reduction over the rows (ws, is)."""
    m, n, k = gemm.m, gemm.n, gemm.k
    if dataflow == "os":
        words = (m * k * math.ceil(n / cols), k * n * math.ceil(m / rows), m * n)
    elif dataflow == "ws":
        words = (m * k * math.ceil(n / cols), k * n, m * n * math.ceil(k / rows))
    elif dataflow == "is":
        words = (m * k, k * n * math.ceil(m / cols), m * n * math.ceil(k / rows))
    else:
        raise ValueError(f"unknown dataflow {dataflow!r} (ws, os, is)")
    return tuple(w * gemm.repeats for w in words)
