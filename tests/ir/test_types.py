"""Dtype storage: bf16 values are f32 arrays rounded to bf16 precision."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tilegraph.ir.types import DType, round_to_bf16, to_dtype


def bf16_by_the_book(array: np.ndarray) -> np.ndarray:
    """Round to nearest, ties to even, on the 16 bits bf16 drops; inf and NaN truncated."""
    bits = np.ascontiguousarray(array, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    kept = np.where(np.isfinite(array), rounded, bits & 0xFFFF0000).astype(np.uint32)
    return kept.view(np.float32).reshape(np.shape(array))


@settings(max_examples=60, deadline=None)
@given(bits=hnp.arrays(np.uint32, hnp.array_shapes(min_dims=0, max_dims=3, max_side=9)),
       view=st.sampled_from(["as is", "transposed", "strided", "bf16 already"]))
def test_rounding_to_bf16_is_round_to_nearest_even_whatever_the_layout(bits, view):
    """Every bit pattern (NaN and inf included), in any strides, rounds as the formula says; the input is left
    alone; values that are bf16 already come back unchanged."""
    array = bits.view(np.float32)
    if view == "transposed":
        array = array.T
    elif view == "strided" and array.ndim:
        array = array[::2]
    elif view == "bf16 already":
        array = bf16_by_the_book(array)
    before = array.copy()
    got = round_to_bf16(array)
    assert got.dtype == np.float32 and got.shape == array.shape
    assert np.array_equal(got.view(np.uint32), bf16_by_the_book(array).view(np.uint32))
    assert np.array_equal(array.view(np.uint32), before.view(np.uint32))


def test_large_bf16_weights_are_checked_in_blocks_and_kept():
    """A weight larger than one check block that is bf16 already comes back as the same array (no copy)."""
    weight = bf16_by_the_book(np.random.default_rng(0).standard_normal((1024, 700)).astype(np.float32))
    assert round_to_bf16(weight) is weight
    assert np.shares_memory(to_dtype(weight.T, DType.bf16), weight)  # a view of the same data, strides and all
    noisy = weight.copy()
    noisy[-1, -1] += np.float32(1e-3)  # one value off bf16, in the last block
    assert not np.array_equal(round_to_bf16(noisy), noisy)
