"""A word-by-word re-implementation of SCALE-Sim's CALC read buffers, the oracle for `demand` and
`readbuffer`: its operand matrices (ifmap addresses in HWC order, -1 off the edge; filter n*K + k),
its demand matrices per dataflow (folds, skew, flips, as compute/systolic_compute_*.py build them)
and its read buffer (memory/read_buffer_estimate_bw.py: an epoch closes at `capacity` distinct
words; a word counts again only in a later epoch). Slow (every word of the demand), so only for
small layers; on SCALE-Sim's own layers it reproduced SCALE-Sim's DRAM reads exactly.
"""
from __future__ import annotations

import math

import numpy as np

from tilegraph.backends.sim.demand import ImageGemm


def operand_matrices(geo: ImageGemm) -> tuple[np.ndarray, np.ndarray]:
    """(ifmap M x K, filter K x N) word addresses of one group; -1 where a window is off the edge."""
    m = np.arange(geo.m)[:, None]
    k = np.arange(geo.k)[None, :]
    b, rest = np.divmod(m, geo.out_h * geo.out_w)
    oh, ow = np.divmod(rest, geo.out_w)
    i, rest = np.divmod(k, geo.kernel[1] * geo.channels)
    j, ch = np.divmod(rest, geo.channels)
    r = oh * geo.stride[0] - geo.padding[0] + i * geo.dilation[0]
    c = ow * geo.stride[1] - geo.padding[1] + j * geo.dilation[1]
    ok = (r >= 0) & (r < geo.height) & (c >= 0) & (c < geo.width)
    ifmap = np.where(ok, ((b * geo.height + r) * geo.width + c) * geo.channels + ch, -1)
    filters = np.arange(geo.filters)[None, :] * geo.k + np.arange(geo.k)[:, None]
    return ifmap, filters


def _skew(matrix: np.ndarray) -> np.ndarray:
    rows, cols = matrix.shape
    out = np.full((rows + cols - 1, cols), -1, dtype=matrix.dtype)
    for c in range(cols):
        out[c:c + rows, c] = matrix[:, c]
    return out


def _pad(matrix: np.ndarray, rows: int, cols: int) -> np.ndarray:
    out = np.full((rows, cols), -1, dtype=matrix.dtype)
    out[:matrix.shape[0], :matrix.shape[1]] = matrix
    return out


def demand_streams(geo: ImageGemm, rows: int, cols: int, dataflow: str) -> tuple[np.ndarray, np.ndarray]:
    """The words the array asks for, in order, for (ifmap, filter) of one group."""
    ifmap, filters = operand_matrices(geo)
    m, k, n = geo.m, geo.k, geo.filters
    a, b = [], []
    if dataflow == "os":
        for fc in range(math.ceil(n / cols)):
            for fr in range(math.ceil(m / rows)):
                a.append(_skew(_pad(ifmap.T[:, fr * rows:(fr + 1) * rows], k, rows)))
                b.append(_skew(_pad(filters[:, fc * cols:(fc + 1) * cols], k, cols)))
    elif dataflow == "ws":
        for fc in range(math.ceil(n / cols)):
            for fr in range(math.ceil(k / rows)):
                a.append(_skew(_pad(ifmap[:, fr * rows:(fr + 1) * rows], m, rows)))
                b.append(_pad(filters[fr * rows:(fr + 1) * rows, fc * cols:(fc + 1) * cols], rows, cols)[::-1])
    else:
        for fc in range(math.ceil(m / cols)):
            for fr in range(math.ceil(k / rows)):
                a.append(_pad(ifmap.T[fr * rows:(fr + 1) * rows, fc * cols:(fc + 1) * cols], rows, cols)[::-1])
                b.append(_skew(_pad(filters[fr * rows:(fr + 1) * rows, :].T, n, rows)))
    flat = [np.concatenate([x.ravel() for x in parts]) for parts in (a, b)]
    return tuple(x[x >= 0] for x in flat)


def buffer_reads(stream: np.ndarray, capacity: int) -> int:
    """Words SCALE-Sim's read buffer fetches for `stream`: per epoch its distinct words, an epoch
    closing at its `capacity`-th distinct word."""
    reads, epoch = 0, set()
    for word in stream.tolist():
        if word not in epoch:
            epoch.add(word)
            if len(epoch) == capacity:
                reads += capacity
                epoch = set()
    return reads + len(epoch)


def operand_reads(geo: ImageGemm, rows: int, cols: int, dataflow: str, capacity: int) -> tuple[int, int]:
    """(ifmap, filter) words fetched for one group, word by word."""
    a, b = demand_streams(geo, rows, cols, dataflow)
    return buffer_reads(a, capacity), buffer_reads(b, capacity)
