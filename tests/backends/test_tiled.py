"""The tiled executor: fused and tiled Programs compute what the reference computes on the input graph."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, strategies as st
from strategies import graph_inputs, graphs, head_split_attention

from tilegraph.backends import reference
from tilegraph.backends.reference.tiled import run_program, split_update
from tilegraph.ir import DType, GraphBuilder
from tilegraph.ir.program import Kernel, Program
from tilegraph.ir.structured import Acc, Arg, call
from tilegraph.ir.target import Target, load_target
from tilegraph.passes import PassManager
from tilegraph.ir.domain import Misaligned
from tilegraph.passes.tiling import tile_program

TINY = Target("tiny", "accelerator", onchip_bytes=1024, double_buffer=True, line_bytes=16)
TOLERANCE = {DType.f16: 1e-2, DType.bf16: 3e-2}
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def compile_for(graph, target: Target) -> Program:
    program = PassManager("canonicalize,fuse").run(graph)
    kernels, reports = tile_program(program, target)
    return replace(program, kernels=tuple(kernels), notes={**program.notes, "tiling": reports})


def params_of(graph, program: Program) -> dict[str, np.ndarray]:
    """The input graph's parameter values (drawn as its uses ask), for the ones the program kept."""
    kept = {v.name for v in program.graph.params}
    return {v.name: a for v, a in reference.random_params(graph).items() if v.name in kept}


def assert_same(got, want, types) -> None:
    for a, b, t in zip(got, want, types):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape and a.dtype == b.dtype
        if t.dtype.is_float:
            tol = TOLERANCE.get(t.dtype, 1e-4)
            scale = float(np.nanmax(np.abs(b), initial=1.0)) if not np.all(np.isnan(b)) else 1.0
            np.testing.assert_allclose(a, b, rtol=tol, atol=tol * max(scale, 1.0), equal_nan=True)
        else:
            np.testing.assert_array_equal(a, b)


def check(graph, target: Target, inputs=None) -> Program:
    program = compile_for(graph, target)
    inputs = reference.random_inputs(graph) if inputs is None else inputs
    params = params_of(graph, program)
    want = reference.run(graph, inputs, params=params)
    assert_same(run_program(program, inputs, params=params), want, [v.type for v in graph.outputs])
    return program


# ----- properties ------------------------------------------------------------------------------
@given(st.data())
def test_fused_and_tiled_programs_compute_the_reference(data):
    graph = data.draw(graphs(max_nodes=10))
    inputs = data.draw(graph_inputs(graph))
    for target in (TINY, load_target("cpu")):
        check(graph, target, inputs)


@given(st.data())
def test_attention_convolution_and_normalisation_graphs(data):
    ops = ["attention", "softmax", "layer_norm", "matmul", "batch_matmul", "conv2d", "max_pool2d", "add", "relu",
           "mul", "transpose", "sum"]
    graph = data.draw(graphs(max_nodes=8, ops=ops))
    check(graph, TINY, data.draw(graph_inputs(graph)))


@given(head_split_attention())
def test_attention_reads_and_writes_through_the_head_split_and_merge(graph):
    for target in (TINY, load_target("cpu")):
        check(graph, target)


# ----- hand-written cases --------------------------------------------------------------------------
def test_matmul_epilogue_over_ragged_tiles_with_a_carried_reduction():
    b = GraphBuilder("mm")
    x, w, bias = b.input("x", [7, 10]), b.param("w", [10, 9]), b.param("b", [9])
    b.output(b.relu(b.add(b.matmul(x, w), bias)))
    program = PassManager("canonicalize,fuse").run(b.graph)
    (kernel,) = program.kernels
    ragged = replace(program, kernels=(replace(kernel, tiles=(("d0", 3), ("d1", 4), ("d2", 4))),))
    inputs = reference.random_inputs(b.graph)
    assert_same(run_program(ragged, inputs), reference.run(b.graph, inputs), [b.graph.outputs[0].type])


@pytest.mark.parametrize("mask", ["causal", "bool", "float", None])
def test_flash_attention_matches_the_reference(mask):
    keys = 24 if mask == "causal" else 20  # causal masks need as many keys as queries
    b = GraphBuilder("att")
    q, k, v = b.input("q", [2, 24, 8]), b.input("k", [2, keys, 8]), b.input("v", [2, keys, 6])
    extra = {"bool": lambda: [b.input("mask", [24, keys], DType.bool)],
             "float": lambda: [b.input("bias", [2, 24, keys])]}.get(mask, list)()
    b.output(b.attention(q, k, v, *extra, causal=mask == "causal"))
    graph = b.graph
    program = PassManager("canonicalize,fuse").run(graph)
    (kernel,) = program.kernels
    assert kernel.kind == "attention"
    tiles = tuple((loop.name, 5 if loop.kind != "full" else loop.extent) for loop in kernel.domain.loops)
    program = program.with_kernels([replace(kernel, tiles=tiles)])  # ragged query and key/value tiles
    inputs = reference.random_inputs(graph)
    if mask == "bool":
        inputs[-1][:, 0] = True  # every query keeps a key
    assert_same(run_program(program, inputs), reference.run(graph, inputs), [graph.outputs[0].type])


def test_split_softmax_kernels_compute_the_reference():
    b = GraphBuilder("sm")
    b.output(b.softmax(b.input("x", [3, 500]), axis=-1))
    program = check(b.graph, TINY)
    assert len(program.kernels) > 1


@pytest.mark.skipif(not (EXAMPLES / "transformer_block.tg").exists(), reason="example not written")
def test_transformer_block_on_a_small_accelerator():
    from tilegraph.frontends.dsl import parse_file

    program = check(parse_file(EXAMPLES / "transformer_block.tg"), Target("acc", "accelerator", 16384, True, 16))
    assert any(k.kind == "attention" for k in program.kernels)


def test_unfused_and_untiled_programs_run_too():
    b = GraphBuilder("g")
    x = b.input("x", [4, 6])
    b.output(b.log_softmax(b.mul(b.reshape(x, shape=[6, 4]), 2.0), axis=0))
    canonical = PassManager("canonicalize").run(b.graph)
    inputs = reference.random_inputs(b.graph)
    want = reference.run(canonical.graph, inputs)
    for program in (canonical, PassManager("fuse").run(canonical)):  # one kernel per node; fused, no tiles
        assert_same(run_program(program, inputs), want, [b.graph.outputs[0].type])


def test_a_misaligned_kernel_is_rejected():
    b = GraphBuilder("g")
    x = b.input("x", [8])
    b.output(b.slice(b.exp(x), start=[0], stop=[8], step=[2]))
    graph = b.graph
    bad = Program(graph, (Kernel("k0", tuple(graph.nodes)),))
    with pytest.raises(Misaligned, match="a tile would need data another tile computes"):
        run_program(bad, reference.random_inputs(graph))


def test_split_update_reads_reduction_bodies():
    assert split_update(call("add", Acc(), call("mul", Arg(0), Arg(1)))) == ("add", call("mul", Arg(0), Arg(1)))
    assert split_update(call("max", Arg(0), Acc())) == ("max", Arg(0))
    assert split_update(call("add", Acc(), call("mul", Acc(), Arg(0)))) is None
