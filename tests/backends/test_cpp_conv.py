"""Convolutions on the C++ backend: every kind (tails, strides, padding, dilation, groups, depthwise,
fused epilogues with a residual add) against the numpy reference, on the cpu target's tiles and on
a tiny target's, and the channel blocks of strided convolutions (conv.py) with their weight packs."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

sys.path.insert(0, str(Path(__file__).parent))  # native_checks: shared with test_sycl (importlib mode)
from native_checks import FAST_FLAGS, TINY, check_backend

from tilegraph.backends import cpp
from tilegraph.backends.cpp.conv import WeightPack, row_blocks
from tilegraph.ir import GraphBuilder
from tilegraph.ir.structured import AffineExpr, AffineMap
from tilegraph.ir.target import load_target

CPU = load_target("cpu")


def fast_build(program, params, **options):
    return cpp.build(program, params, cxxflags=FAST_FLAGS, **options)


def native_build(program, params, **options):
    """-march=native: the AVX-512 masked loads where the host has them."""
    return cpp.build(program, params, cxxflags="-O1 -march=native -fopenmp", **options)


def conv_graph(x_shape, w_shape, epilogue: str = "relu", **attrs):
    """conv2d, a folded batch norm (sub, mul, add of per-channel parameters), then `epilogue`."""
    b = GraphBuilder("conv")
    x, w = b.input("x", list(x_shape)), b.param("w", list(w_shape))
    y = b.conv2d(x, w, **attrs)
    channels = [1, w_shape[0], 1, 1]
    mean, scale, shift = b.param("mean", channels), b.param("scale", channels), b.param("shift", channels)
    y = b.add(b.mul(b.sub(y, mean), scale), shift)
    if epilogue == "relu":
        y = b.relu(y)
    elif epilogue == "relu6":
        y = b.relu6(y)
    elif epilogue == "gelu":
        y = b.gelu(y)
    b.output(y)
    return b.graph


# (input NCHW, weight FCKK, attrs): tails (channels and rows not multiples of 16 or of the block)
CASES = {
    "1x1 stride 2": ((1, 24, 13, 13), (40, 24, 1, 1), dict(stride=(2, 2))),
    "3x3 stride 2 pad 1": ((1, 16, 15, 14), (20, 16, 3, 3), dict(stride=(2, 2), padding=(1, 1))),
    "7x7 stride 2 pad 3 (stem)": ((1, 3, 30, 30), (16, 3, 7, 7), dict(stride=(2, 2), padding=(3, 3))),
    "3x3 stride 3 dilation 2": ((1, 8, 20, 23), (33, 8, 3, 3), dict(stride=(3, 3), padding=(2, 2), dilation=(2, 2))),
    "3x3 stride (1, 2)": ((1, 8, 9, 17), (17, 8, 3, 3), dict(stride=(1, 2), padding=(1, 1))),
    "3x3 stride 1 pad 1": ((1, 8, 12, 12), (24, 8, 3, 3), dict(padding=(1, 1))),
    "3x3 dilation 2": ((1, 8, 12, 11), (12, 8, 3, 3), dict(padding=(2, 2), dilation=(2, 2))),
    "grouped stride 2": ((1, 16, 10, 10), (64, 4, 3, 3), dict(stride=(2, 2), padding=(1, 1), groups=4)),
    "grouped stride 2, 12 filters a group": ((1, 32, 10, 9), (48, 8, 3, 3), dict(stride=(2, 2), padding=(1, 1),
                                                                               groups=4)),
    "depthwise stride 2": ((1, 24, 14, 14), (24, 1, 3, 3), dict(stride=(2, 2), padding=(1, 1), groups=24)),
    "depthwise stride 1": ((1, 20, 9, 9), (20, 1, 3, 3), dict(padding=(1, 1), groups=20)),
    # TF "same" padding (MobileNetV2's F.pad folded into the convolution): zeros after, not before
    "3x3 stride 2 pad (0, 1)": ((1, 16, 15, 14), (20, 16, 3, 3), dict(stride=(2, 2), padding_end=(1, 1))),
    "depthwise stride 2 pad (0, 1)": ((1, 24, 14, 14), (24, 1, 3, 3), dict(stride=(2, 2), padding_end=(1, 1),
                                                                         groups=24)),
    "3x3 pad (2, 0) x (0, 1)": ((1, 8, 12, 12), (24, 8, 3, 3), dict(padding=(2, 0), padding_end=(0, 1))),
    # output rows narrower than a vector, filters in whole vectors (ResNet-50's 7 x 7 stage): channel blocks
    "3x3 pad 1, 7-wide rows, 32 filters": ((1, 8, 7, 7), (32, 8, 3, 3), dict(padding=(1, 1))),
    "1x1, 5-wide rows, 16 filters": ((2, 24, 5, 5), (16, 24, 1, 1), dict()),
}
PACKED = {"1x1 stride 2", "3x3 stride 2 pad 1", "7x7 stride 2 pad 3 (stem)", "3x3 stride 3 dilation 2",
          "3x3 stride (1, 2)", "grouped stride 2", "3x3 stride 2 pad (0, 1)", "3x3 pad 1, 7-wide rows, 32 filters",
          "1x1, 5-wide rows, 16 filters"}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("epilogue", ["relu", "relu6"])
def test_convolution_kinds_match_the_reference(name, epilogue):
    x_shape, w_shape, attrs = CASES[name]
    graph = conv_graph(x_shape, w_shape, epilogue, **attrs)
    compiled = check_backend(native_build, graph, CPU)
    assert ("w_packed" in compiled.source) == (name in PACKED), \
        "channel blocks exactly for strided dense convs and narrow rows of whole filter vectors"
    check_backend(fast_build, graph, TINY)


def test_gelu_epilogue_on_a_channel_block():
    graph = conv_graph((1, 16, 11, 11), (32, 16, 3, 3), "gelu", stride=(2, 2), padding=(1, 1))
    assert "w_packed" in check_backend(native_build, graph, CPU).source


def test_downsampling_block_with_residual_add():
    """A ResNet bottleneck's downsampling tail: 3x3 stride 2 and a 1x1 stride-2 projection, each
    with its batch norm, added and rectified (the residual epilogue of a channel block)."""
    b = GraphBuilder("down")
    x = b.input("x", [1, 16, 14, 14])
    w1, w2 = b.param("w1", [32, 16, 3, 3]), b.param("w2", [32, 16, 1, 1])
    ch = [1, 32, 1, 1]
    main = b.mul(b.conv2d(x, w1, stride=(2, 2), padding=(1, 1)), b.param("s1", ch))
    short = b.add(b.conv2d(x, w2, stride=(2, 2)), b.param("t2", ch))
    b.output(b.relu(b.add(main, short)))
    compiled = check_backend(native_build, b.graph, CPU)
    assert compiled.source.count("_packed") >= 2
    check_backend(fast_build, b.graph, TINY)


def test_max_pool_after_a_strided_stem():
    b = GraphBuilder("stem")
    x, w = b.input("x", [1, 3, 32, 32]), b.param("w", [16, 3, 7, 7])
    y = b.relu(b.conv2d(x, w, stride=(2, 2), padding=(3, 3)))
    b.output(b.max_pool2d(y, kernel=(3, 3), stride=(2, 2), padding=(1, 1)))
    check_backend(native_build, b.graph, CPU)


@pytest.mark.parametrize("shape,kernel,stride,padding", [
    ((1, 5, 23, 37), (3, 3), (2, 2), (1, 1)),  # stride 2: even lanes, padded borders
    ((1, 3, 20, 70), (3, 3), (2, 2), (1, 1)),  # a row of 35: a full and a masked block
    ((1, 4, 17, 19), (3, 3), (1, 1), (1, 1)),
    ((1, 2, 15, 31), (2, 3), (3, 3), (1, 1)),
])
def test_max_pool_matches_the_reference(shape, kernel, stride, padding):
    """Running-max register blocks: padded reads are -inf, never the zeros of a masked load."""
    b = GraphBuilder("pool")
    x = b.input("x", list(shape))
    b.output(b.max_pool2d(b.sub(x, b.constant(5.0)), kernel=kernel, stride=stride, padding=padding))
    assert "vacc" in check_backend(native_build, b.graph, CPU).source
    check_backend(fast_build, b.graph, TINY)


def test_weight_pack_layout():
    """O/16 I H W 16o: every weight where `index` says, zeros in the padded channels."""
    b = GraphBuilder("pack")
    w = b.param("w", [20, 3, 2, 2])
    pack = WeightPack(w, 0, 16)
    assert pack.shape == (2, 3, 2, 2, 16)
    source = np.random.default_rng(0).standard_normal((20, 3, 2, 2)).astype(np.float32)
    packed = pack.apply(source)
    assert packed.shape == pack.shape and packed.dtype == np.float32
    flat = packed.reshape(-1)
    amap = AffineMap(tuple(AffineExpr.dim(d) for d in range(4)))
    for index in np.ndindex(source.shape):
        text = pack.index(amap, lambda d: str(index[d]))
        assert flat[eval(text.replace("/", "//"))] == source[index]
    assert not packed[1, ..., 4:].any()
    steps = pack.steps(amap)
    assert steps[0] == 1 and steps[3] == 16 and steps[1] == 2 * 2 * 16


def test_row_blocks_avoid_partial_blocks():
    assert [row_blocks(n, 8) for n in (7, 14, 28, 56, 112, 35, 3, 13)] == [7, 7, 7, 8, 8, 7, 3, 8]


@settings(max_examples=12, deadline=None)
@given(st.data())
def test_random_convolutions_match_the_reference(data):
    groups = data.draw(st.sampled_from([1, 1, 2, "depthwise"]))
    cg = data.draw(st.integers(1, 5))
    channels = cg * (2 if groups == 2 else 1) if groups != "depthwise" else data.draw(st.integers(1, 20))
    groups = channels if groups == "depthwise" else groups
    filters = channels if groups == channels and groups > 1 else groups * data.draw(st.integers(1, 20))
    kh, kw = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3))
    stride = (data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3)))
    dilation = (data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2)))
    padding = (data.draw(st.integers(0, kh - 1)), data.draw(st.integers(0, kw - 1)))
    h = data.draw(st.integers(dilation[0] * (kh - 1) + 1, 12))
    w = data.draw(st.integers(dilation[1] * (kw - 1) + 1, 12))
    graph = conv_graph((1, channels, h, w), (filters, channels // groups, kh, kw),
                       data.draw(st.sampled_from(["relu", "none"])),
                       stride=stride, padding=padding, dilation=dilation, groups=groups)
    check_backend(fast_build, graph, CPU)
    check_backend(fast_build, graph, TINY)
