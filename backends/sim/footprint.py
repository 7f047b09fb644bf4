"""Which elements of each tensor the kernels read: a tensor loaded whole is loaded only where read.

A kernel reads a tensor through affine maps over its loops (`KernelDomain.accesses`). Along each
axis the map takes some indices (all of them for a plain read, every other one for a stride-2
window with a 1x1 kernel, none of a padding); the elements read are the product of those index
sets (an op never indexes two axes by one loop). Over several kernels the index sets are united
axis by axis, which can only over-count. Kernels without loops (layout copies) read everything.
"""
from __future__ import annotations

import math

import numpy as np

from tilegraph.ir.domain import Access
from tilegraph.ir.program import Program
from tilegraph.ir.stream_traffic import axis_indices


def read_bytes(program: Program) -> dict[str, int]:
    """Bytes of every tensor some kernel reads that the kernels' reads touch (at most its size)."""
    axes: dict[str, list[np.ndarray | None]] = {}
    values = {}
    for kernel in program.kernels:
        domain = kernel.domain
        extents = [loop.extent for loop in domain.loops]
        maps: dict[str, list[Access]] = {}
        if domain.structured and domain.loops:
            for access in domain.accesses:
                if access.role == "input":
                    maps.setdefault(access.value.name, []).append(access)
        for value in kernel.inputs:
            values[value.name] = value
            have = axes.setdefault(value.name, [np.zeros(0, dtype=np.int64)] * value.type.rank)
            for a in range(value.type.rank):
                for access in maps.get(value.name) or [None]:  # read without a map: all of it
                    if have[a] is None:
                        break
                    found = None if access is None else axis_indices(access, a, extents)
                    have[a] = None if found is None else np.union1d(have[a], found)
    out = {}
    for name, idx in axes.items():
        value = values[name]
        count = math.prod(value.type.shape[a] if ix is None else len(ix) for a, ix in enumerate(idx))
        out[name] = min(value.type.nbytes, count * value.type.dtype.itemsize)
    return out
