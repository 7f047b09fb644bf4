"""layout: which tensors between kernels are stored channels-last (`Program.layouts`), the text form of that
decision, and the tile model counting contiguous runs in the stored order."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tilegraph.frontends.dsl import parse
from tilegraph.ir import ParseError
from tilegraph.ir.program_text import parse_program, print_program
from tilegraph.ir.tile_model import footprint
from tilegraph.passes import PassManager, verify_program
from tilegraph.passes.layout import FLOATS, NHWC, PRODUCTS

GPU = "gpu-h100"


def chain(n: int, c: int, hw: int, f: int, depthwise: bool, pool: bool, flatten: bool) -> str:
    """conv -> ReLU -> (depthwise) conv + residual -> (max pool) -> (flatten and matmul) as DSL text."""
    groups = f if depthwise else 1
    ph = hw // 2 if pool else hw
    y = "max_pool2d(y, kernel=2, stride=2)" if pool else "y"
    out = f"f32[{n}, {f}, {ph}, {ph}]"
    tail = f"  return {y}\n" if not flatten else \
        f"  return matmul(reshape({y}, shape=[{n}, {f * ph * ph}]), v)\n"
    if flatten:
        out = f"f32[{n}, 3]"
    params = f", v: f32[{f * ph * ph}, 3]" if flatten else ""
    return (f"def f(x: f32[{n}, {c}, {hw}, {hw}], w1: f32[{f}, {c}, 3, 3], w2: f32[{f}, {f // groups}, 3, 3]"
            f"{params}) -> {out} {{\n"
            f"  h = relu(conv2d(x, w1, padding=[1, 1]))\n"
            f"  y = relu(conv2d(h, w2, padding=[1, 1], groups={groups}) + h)\n{tail}}}")


def eligible(program) -> set:
    """The contract, restated: 4-D float tensors between kernels, a convolution's input or result, every kernel
    touching them a structured loop nest without a matmul."""
    users: dict = {}
    for kernel in program.kernels:
        for value in (*kernel.inputs, *kernel.outputs):
            users.setdefault(value, []).append(kernel)
    between = {v for k in program.kernels for v in k.outputs} - set(program.graph.outputs)
    return {v for v in between if v.type.rank == 4 and v.type.dtype in FLOATS
            and all(k.template is None and k.domain.structured and not any(n.op in PRODUCTS for n in k.nodes)
                    for k in users[v])
            and any(k.nodes[0].op == "conv2d" and (v is k.nodes[0].inputs[0] or v in k.outputs) for k in users[v])}


@given(n=st.integers(1, 2), c=st.sampled_from([3, 8]), hw=st.sampled_from([4, 6, 8]), f=st.sampled_from([4, 8]),
       depthwise=st.booleans(), pool=st.booleans(), flatten=st.booleans(), copy=st.booleans())
@settings(max_examples=20, deadline=None)
def test_exactly_the_eligible_tensors_are_stored_channels_last(n, c, hw, f, depthwise, pool, flatten, copy):
    """The pass stores NHWC exactly the tensors its contract names, and copies exactly the graph inputs it names
    (`copy`: whatever their size; else these small ones never), the Program stays valid through tiling, the text
    form round-trips, and without the pass (or with its option off) nothing is laid out."""
    graph = parse(chain(n, c, hw, f, depthwise, pool, flatten))
    options = "{copy_inputs_from=0}" if copy else ""
    program = PassManager(f"canonicalize,fuse,layout{options},tile{{target={GPU}}}").run(graph)
    laid = program.storage_orders()
    assert set(laid) == eligible(program) and all(order == NHWC for order in laid.values())
    assert not set(laid) & {*program.graph.inputs, *program.graph.outputs, *program.graph.params}
    copies = [k for k in program.kernels if k.nodes[0].op == "cast" and k.nodes[0].inputs[0] in program.graph.inputs]
    assert len(copies) == (copy and c * 4 % 16 == 0)  # f32: 8 channels fill two vectors, 3 leave a remainder
    for kernel in copies:
        (node,) = kernel.nodes
        source, result = node.inputs[0], node.result
        assert node.op == "cast" and node.attrs["dtype"] == source.type.dtype and source in program.graph.inputs
        assert laid[result] == NHWC and all(k.nodes[0].op == "conv2d" for k in program.kernels if result in k.inputs)
        assert not any(source in k.inputs for k in program.kernels if k is not kernel)
    verify_program(program)
    text = print_program(program)
    assert print_program(parse_program(text)) == text
    assert [(v.name, o) for v, o in parse_program(text).layouts] == [(v.name, o) for v, o in program.layouts]
    off = PassManager(f"canonicalize,fuse,layout{{channels_last=false}},tile{{target={GPU}}}").run(graph)
    assert not off.layouts and not PassManager(f"canonicalize,fuse,tile{{target={GPU}}}").run(graph).layouts


def test_fusing_again_clears_the_layouts():
    """A layout names tensors between kernels: a later fuse pass, which decides the kernels anew, drops it."""
    graph = parse(chain(1, 3, 8, 4, False, False, False))
    program = PassManager("canonicalize,fuse,layout").run(graph)
    assert program.layouts and "laid_out" in program.properties
    again = PassManager("fuse").run(program)
    assert not again.layouts and "laid_out" not in again.properties


@pytest.mark.parametrize("body, message", [
    ("%h = [0, 1, 3, 2, 4]", "no reordering of its 4 axes"),
    ("%h = [0, 1, 2, 3]", "no reordering"),
    ("%x = [0, 2, 3, 1]", "not a tensor between kernels"),
    ("%h = [0, 2, 3, 1]\n  %h = [0, 3, 1, 2]", "two layouts"),
])
def test_a_bad_layouts_section_names_its_place(body, message):
    graph = parse(chain(1, 3, 8, 4, False, False, False))
    text = print_program(PassManager("canonicalize,fuse").run(graph))
    bad = text.replace("\nproperties", f"\nlayouts {{\n  {body}\n}}\nproperties")
    with pytest.raises(ParseError, match=message) as error:
        parse_program(bad, "p.tgir")
    assert str(error.value).startswith(f"p.tgir:{bad[:bad.index('layouts {')].count(chr(10)) + 1}:")


def test_the_tile_model_counts_runs_in_the_stored_order():
    """One channel by 4 whole rows of 8 pixels: stored NCHW, one run of 32 f32 (one 128-byte line); stored NHWC,
    32 runs of one element, a line each."""
    graph = parse(chain(1, 16, 8, 16, True, False, False))
    program = PassManager("canonicalize,fuse").run(graph)
    kernel = next(k for k in program.kernels if k.nodes[0].attrs.get("groups", 1) > 1)
    domain = kernel.domain
    access = next(a for a in domain.accesses if a.role == "output")
    (row,), (column,) = ([loop for loop, _ in access.map.exprs[axis].terms] for axis in (2, 3))
    tiles = np.ones((1, len(domain.loops)))
    tiles[0, row], tiles[0, column] = 4, 8
    assert footprint(access, tiles, 128)[0] == 128
    assert footprint(access, tiles, 128, NHWC)[0] == 32 * 128


def test_depthwise_convolutions_tile_their_channels_when_stored_channels_last():
    """MobileNetV2's depthwise convolution over an NHWC tensor: the tile pass, seeing the channels contiguous,
    gives a program several channels (row-major it took one channel and whole image rows)."""
    graph = parse(chain(8, 32, 56, 32, True, False, False))
    for passes, wide in (("canonicalize,fuse", False), ("canonicalize,fuse,layout", True)):
        program = PassManager(f"{passes},tile{{target={GPU}}}").run(graph)
        kernel = next(k for k in program.kernels if k.nodes[0].attrs.get("groups", 1) > 1)
        channel = kernel.domain.loops[kernel.domain.node_loops[0][1]].name  # the result's axis 1
        assert (dict(kernel.tiles)[channel] >= 16) == wide, kernel.tiles
