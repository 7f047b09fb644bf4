"""Fused stores on the C++ backend: a reduction's register block applies the elementwise epilogue
after it (a conv's batch norm, residual add and activation; a matmul's bias and GELU) as it stores,
instead of writing the sums to scratch for a separate loop nest. Each case matches the numpy
reference with and without fusion, and the source says which one ran."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # native_checks: shared with test_sycl (importlib mode)
from native_checks import FAST_FLAGS, TINY, check_backend

from tilegraph.backends import cpp
from tilegraph.ir import GraphBuilder
from tilegraph.ir.target import load_target

CPU = load_target("cpu")
NATIVE_FLAGS = "-O1 -march=native -fopenmp"  # the AVX-512 masked loads where the host has them


def builds(fused: bool, flags: str = NATIVE_FLAGS):
    def build(program, params):
        return cpp.build(program, params, cxxflags=flags, micro=cpp.MicroKernel(fused_stores=fused))
    return build


def separate_nest(source: str, ops: str) -> bool:
    """Whether the epilogue `ops` ran as its own loop nest (the chain's `// op, op` header)."""
    return any(line.strip() == f"// {ops}" for line in source.splitlines())


def conv_block(residual_shape, x_shape=(1, 8, 12, 12), filters=20, **attrs):
    """conv2d, a folded batch norm (sub, mul, add), a residual add of an input, ReLU."""
    b = GraphBuilder("conv")
    x, w = b.input("x", list(x_shape)), b.param("w", [filters, x_shape[1], 3, 3])
    r = b.input("r", list(residual_shape))
    ch = [1, filters, 1, 1]
    y = b.add(b.mul(b.sub(b.conv2d(x, w, **attrs), b.param("mean", ch)), b.param("scale", ch)), b.param("shift", ch))
    b.output(b.relu(b.add(y, r)))
    return b.graph


@pytest.mark.parametrize("name,residual", [
    ("flat blocks, a residual of the output's layout", (1, 20, 12, 12)),
    ("flat blocks, a residual broadcast over rows (indexed by row and column)", (1, 20, 1, 12)),
])
def test_a_3x3_conv_block_stores_its_epilogue_from_registers(name, residual):
    """The ResNet basic block's pattern on flat blocks (12-wide rows, 20 filters: 8, 8 and a
    4-row block); the epilogue's operands read by flat point where their layout allows."""
    graph = conv_block(residual, padding=(1, 1))
    fused = check_backend(builds(True), graph, CPU).source
    separate = check_backend(builds(False), graph, CPU).source
    assert "tgm0" in fused, "flat blocks"
    assert not separate_nest(fused, "sub, mul, add, add, relu") and "// relu" in fused
    assert separate_nest(separate, "sub, mul, add, add, relu")


def test_a_strided_conv_block_stores_its_epilogue_from_channel_vectors():
    """Channel blocks (vectors along the output channels, conv.py) store across channels."""
    graph = conv_block((1, 20, 6, 6), stride=(2, 2), padding=(1, 1))
    fused = check_backend(builds(True), graph, CPU).source
    assert "w_packed" in fused and not separate_nest(fused, "sub, mul, add, add, relu")
    check_backend(builds(False), graph, CPU)


def test_a_matmul_stores_bias_and_gelu_from_registers():
    """Ragged rows and columns (37 x 45): full, masked and scalar blocks all store fused."""
    b = GraphBuilder("mm")
    x, w, bias = b.input("x", [37, 50]), b.param("w", [50, 45]), b.param("b", [45])
    b.output(b.gelu(b.add(b.matmul(x, w), bias)))
    fused = check_backend(builds(True), b.graph, CPU).source
    assert not separate_nest(fused, "add, gelu") and "// gelu" in fused
    assert separate_nest(check_backend(builds(False), b.graph, CPU).source, "add, gelu")
    check_backend(builds(True, FAST_FLAGS), b.graph, CPU)


def test_an_epilogue_reading_a_computed_value_keeps_its_own_nest():
    """Only kernel inputs are read by a fused store: a residual computed in the kernel (here a
    transpose) leaves the add and ReLU to their nest, the scale still fused."""
    b = GraphBuilder("t")
    x, w = b.input("x", [1, 8, 12, 12]), b.param("w", [20, 8, 3, 3])
    r = b.input("r", [1, 20, 12, 12])
    y = b.mul(b.conv2d(x, w, padding=1), b.param("s", [1, 20, 1, 1]))
    b.output(b.relu(b.add(y, b.transpose(r, perm=[0, 1, 3, 2]))))
    source = check_backend(builds(True), b.graph, CPU).source
    assert separate_nest(source, "add, relu") and "// mul" in source


def test_reductions_tiled_along_their_sums_do_not_fuse():
    """On a tiny target the reduction loops are tiled: the block holds partial sums, so the
    epilogue runs after the reduction nest."""
    graph = conv_block((1, 20, 12, 12), padding=(1, 1))
    source = check_backend(builds(True, FAST_FLAGS), graph, TINY).source
    assert separate_nest(source, "sub, mul, add, add, relu")
