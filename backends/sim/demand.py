"""The order in which SCALE-Sim's array asks for its operands, and the DRAM words that order fetches.

SCALE-Sim lays a layer out as an image in HWC order: output pixel m reads, for window term
k = (kernel row, kernel column, channel), one input word (none where the window hangs over the
edge); filter column n holds K words. Each dataflow walks its folds in a fixed order
(`array.spatio_temporal`: column folds outer, row folds inner):

- os: per fold, `rows` output pixels read their whole windows, term by term; the filter's column
  slice is read again for every row fold;
- is: per fold, `cols` output pixels (stationary) read their windows in slices of `rows` terms;
  the whole filter is read again for every column fold;
- ws: per column fold and per slice of `rows` terms, every output pixel reads the slice; each
  filter block is read once.

`operand_reads` runs those orders through SCALE-Sim's read buffer (`readbuffer`): windows that
overlap share words, and a word read again is fetched again only when the buffer's epoch that
held it has closed. Operands without shared words (GEMMs, 1x1 convs, windows that do not
overlap) are sweeps over disjoint sets, counted in closed form.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tilegraph.ir.graph import Node

from .readbuffer import repeated_reads, sweep_reads
from .workload import node_gemm


@dataclass(frozen=True)
class ImageGemm:
    """An array node as SCALE-Sim lays it out: one group's image (batch x height x width x
    channels), its window, and its filters; `groups` such GEMMs run one after another."""

    batch: int
    height: int
    width: int
    channels: int
    out_h: int
    out_w: int
    kernel: tuple[int, int] = (1, 1)
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int] = (0, 0)
    dilation: tuple[int, int] = (1, 1)
    filters: int = 1
    groups: int = 1

    @property
    def m(self) -> int:
        return self.batch * self.out_h * self.out_w

    @property
    def k(self) -> int:
        return self.channels * self.kernel[0] * self.kernel[1]

    @property
    def overlapping(self) -> bool:
        """Whether two window terms read the same input word (else every word is read once per sweep)."""
        def axis(a: int) -> bool:
            size, step, gap = self.kernel[a], self.stride[a], self.dilation[a]
            outs = (self.out_h, self.out_w)[a]
            return outs > 1 and any((d * gap) % step == 0 for d in range(1, size))
        return axis(0) or axis(1)


def image_gemm(node: Node) -> ImageGemm:
    """The SCALE-Sim layout of an array node: a conv2d's own geometry, else its GEMM as a 1 x M image."""
    if node.op == "conv2d":
        n, c, h, w = node.inputs[0].type.shape
        f, cg, kh, kw = node.inputs[1].type.shape
        oh, ow = node.results[0].type.shape[2:]
        groups = node.attrs.get("groups", 1)
        return ImageGemm(n, h, w, cg, oh, ow, (kh, kw), tuple(node.attrs["stride"]), tuple(node.attrs["padding"]),
                         tuple(node.attrs["dilation"]), f // groups, groups)
    gemm = node_gemm(node)
    return ImageGemm(1, 1, gemm.m, gemm.k, 1, gemm.m, filters=gemm.n, groups=gemm.repeats)


def valid_words(geo: ImageGemm) -> int:
    """Window terms that read a word (the rest hang over the edge), per group."""
    def along(a: int) -> int:
        size, outs = (geo.height, geo.width)[a], (geo.out_h, geo.out_w)[a]
        pos = (np.arange(outs)[:, None] * geo.stride[a] - geo.padding[a]
               + np.arange(geo.kernel[a])[None, :] * geo.dilation[a])
        return int(((pos >= 0) & (pos < size)).sum())
    return geo.batch * along(0) * along(1) * geo.channels


def _pixels(geo: ImageGemm, m: np.ndarray, i: np.ndarray, j: np.ndarray) -> np.ndarray:
    """Input pixel ids (batch, row, col) output pixels `m` read at kernel offset (i, j); -1 off the edge."""
    b, rest = np.divmod(m, geo.out_h * geo.out_w)
    oh, ow = np.divmod(rest, geo.out_w)
    r = oh * geo.stride[0] - geo.padding[0] + i * geo.dilation[0]
    c = ow * geo.stride[1] - geo.padding[1] + j * geo.dilation[1]
    ok = (r >= 0) & (r < geo.height) & (c >= 0) & (c < geo.width) & (m < geo.m)
    return np.where(ok, (b * geo.height + r) * geo.width + c, -1)


def _pixel_major(geo: ImageGemm, lanes: int, fine: bool, slice_terms: int = 0) -> np.ndarray:
    """os / is: per fold of `lanes` output pixels, kernel offsets in order, each read by every lane:
    units are input pixels (all channels). is reads a fold's window in slices of `slice_terms`
    terms, each slice last term first: offsets in that order. Unless `fine`, a kernel row's
    offsets are merged (the pixels they read, once each, in column order): exact enough when a
    fold's kernel row is a small part of an epoch, and far fewer units when channels are few."""
    folds = math.ceil(geo.m / lanes)
    kh, kw = geo.kernel
    offsets = np.arange(kh * kw)
    if slice_terms:
        first = offsets * geo.channels // slice_terms  # the slice holding an offset's first term
        offsets = offsets[np.lexsort((-offsets, first))]
    m = np.arange(folds)[:, None, None] * lanes + np.arange(lanes)[None, None, :]
    if fine:
        units = _pixels(geo, m, (offsets // kw)[None, :, None], (offsets % kw)[None, :, None])
        return units[units >= 0]
    i = np.arange(kh)[None, :, None, None]
    j = np.arange(kw)[None, None, :, None]
    units = _pixels(geo, m[:, :, None, :], i, j).reshape(folds * kh, kw * lanes)
    units = np.where(units >= 0, units, np.iinfo(np.int64).max)
    units.sort(axis=1)
    keep = (units < np.iinfo(np.int64).max) & np.concatenate(
        [np.ones((len(units), 1), dtype=bool), units[:, 1:] != units[:, :-1]], axis=1)
    return units[keep]


def _term_major(geo: ImageGemm, rows: int) -> tuple[np.ndarray, int]:
    """ws: per slice of `rows` window terms, every output pixel reads the slice (units: input pixel
    and channel block of gcd(channels, rows) channels). Returns the units and the channels per unit.

    With fewer channels than `rows` a slice holds several kernel offsets: it is taken to hold whole
    offsets (each in the slice that has most of its channels), units are input pixels, and an output
    row's reads of one kernel row are merged (the input row's pixels once each, in column order):
    an output row reads a small part of an epoch when its channels are few."""
    if geo.channels >= rows:
        block = math.gcd(geo.channels, rows)
        per_pixel, blocks, per_slice = geo.channels // block, geo.k // block, rows // block
        slices = math.ceil(geo.k / rows)
        q = np.arange(slices)[:, None, None] * per_slice + np.arange(per_slice)[None, None, :]  # slice, 1, block
        offset, channel_block = np.divmod(np.minimum(q, blocks - 1), per_pixel)
        pixel = _pixels(geo, np.arange(geo.m)[None, :, None], offset // geo.kernel[1], offset % geo.kernel[1])
        units = np.where((pixel >= 0) & (q < blocks), pixel * per_pixel + channel_block, -1).ravel()
        return units[units >= 0], block
    kh, kw = geo.kernel
    offsets = np.arange(kh * kw)
    owner = (offsets * geo.channels + geo.channels // 2) // rows
    lines = np.arange(geo.batch * geo.out_h)
    b, oh = np.divmod(lines, geo.out_h)
    out = []
    for s in range(int(owner[-1]) + 1):
        mine = offsets[owner == s]
        parts = []
        for i in np.unique(mine // kw):
            js = mine[mine // kw == i] % kw
            cols = np.unique(np.arange(geo.out_w)[:, None] * geo.stride[1] - geo.padding[1]
                             + js[None, :] * geo.dilation[1])
            cols = cols[(cols >= 0) & (cols < geo.width)]
            r = oh * geo.stride[0] - geo.padding[0] + i * geo.dilation[0]
            units = ((b * geo.height + r) * geo.width)[:, None] + cols[None, :]
            parts.append(np.where(((r >= 0) & (r < geo.height))[:, None], units, -1))
        units = np.concatenate(parts, axis=1).ravel()  # output row by output row, its kernel rows in turn
        out.append(units[units >= 0])
    return np.concatenate(out), geo.channels


def ifmap_reads(geo: ImageGemm, rows: int, cols: int, dataflow: str, capacity: int) -> int:
    """DRAM words SCALE-Sim's ifmap buffer fetches for one group (module docstring)."""
    col_folds = math.ceil(geo.filters / cols)
    if not geo.overlapping:
        sweeps = 1 if dataflow == "is" else col_folds
        return sweep_reads([(valid_words(geo), sweeps)], capacity)
    pixels = geo.batch * geo.height * geo.width
    if dataflow == "ws":
        units, block = _term_major(geo, rows)
        return repeated_reads(units, np.full(pixels * (geo.channels // block), block), capacity, col_folds)
    lanes = rows if dataflow == "os" else cols
    units = _pixel_major(geo, lanes, fine=lanes * geo.channels * geo.kernel[1] * 16 > capacity,
                         slice_terms=rows if dataflow == "is" else 0)
    return repeated_reads(units, np.full(pixels, geo.channels), capacity, col_folds if dataflow == "os" else 1)


def filter_reads(geo: ImageGemm, rows: int, cols: int, dataflow: str, capacity: int) -> int:
    """DRAM words SCALE-Sim's filter buffer fetches for one group: sweeps over disjoint filter words."""
    k, n = geo.k, geo.filters
    if dataflow == "os":
        row_folds = math.ceil(geo.m / rows)
        return sweep_reads([(k * min(cols, n - c), row_folds) for c in range(0, n, cols)], capacity)
    if dataflow == "is":
        return sweep_reads([(k * n, math.ceil(geo.m / cols))], capacity)
    return sweep_reads([(k * n, 1)], capacity)


def operand_reads(node: Node, rows: int, cols: int, dataflow: str, capacity: int) -> tuple[int, int]:
    """DRAM words (ifmap, filter) an array node's operands fetch through SCALE-Sim's operand buffers
    of `capacity` words (an active half): per group, groups one after another."""
    geo = image_gemm(node)
    return (geo.groups * ifmap_reads(geo, rows, cols, dataflow, capacity),
            geo.groups * filter_reads(geo, rows, cols, dataflow, capacity))
