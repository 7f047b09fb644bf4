"""fuse: kernels from the structured-op description, every decision recorded, no cycles, no hidden recompute."""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from strategies import graphs, head_split_attention

from tilegraph.frontends.dsl import parse
from tilegraph.ir import DType, GraphBuilder
from tilegraph.ir.domain import FULL
from tilegraph.ir.program import Program
from tilegraph.ir.structured import PARALLEL, REDUCTION
from tilegraph.ir.templates import templates
from tilegraph.ir.templates.attention import ATTENTION
from tilegraph.passes import PassManager
from tilegraph.passes.fusion import RULES, FuseOptions, FusionDecision, format_fusion_decisions, fuse_graph

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def fused(graph, options: str = "") -> Program:
    return PassManager(f"canonicalize,fuse{options}").run(graph)


def kernel_of(program: Program, op: str):
    return next(k for k in program.kernels for n in k.nodes if n.op == op)


def ops(kernel) -> list[str]:
    return [n.op for n in kernel.nodes]


# ----- hand-written cases --------------------------------------------------------------------------
def test_matmul_bias_relu_is_one_kernel():
    b = GraphBuilder("mlp")
    x, w, bias = b.input("x", [8, 16]), b.param("w", [16, 32]), b.param("b", [32])
    b.output(b.relu(b.add(b.matmul(x, w), bias)))
    program = fused(b.graph)
    assert [ops(k) for k in program.kernels] == [["matmul", "add", "relu"]]
    domain = kernel_of(program, "matmul")
    loops = domain.domain.loops
    assert [loop.kind for loop in loops] == [PARALLEL, PARALLEL, REDUCTION]
    rules = {d.rule for d in program.notes["fusion"] if d.accepted}
    assert rules == {"epilogue"}


ROTARY_AFTER_TRANSPOSE = """def f(x: f32[2, 5, 3, 8], c: f32[5, 8], s: f32[5, 8]) -> f32[2, 3, 5, 8] {
    let q = transpose(relu(x), perm=[0, 2, 1, 3])
    let half = concat(neg(slice(q, start=[0, 0, 0, 4], stop=[2, 3, 5, 8])), slice(q, start=[0, 0, 0, 0], stop=[2, 3, 5, 4]), axis=3)
    return q * c + half * s
}"""


def test_a_last_elementwise_node_sinks_into_its_only_readers_kernel():
    """Llama's rotary embedding after its head split: q * cos joins the kernel making q (round 2 takes producers
    first), but the rotary kernel reads q anyway (at shifted windows, so it cannot join that kernel): the multiply
    moves there, and q * cos is neither written nor read again."""
    graph = parse(ROTARY_AFTER_TRANSPOSE)
    program = fused(graph)
    making_q = kernel_of(program, "relu")
    assert ops(making_q) == ["relu", "transpose"]
    rotary = kernel_of(program, "concat")
    assert ops(rotary).count("mul") == 3  # q * c, the concat's signs, half * s
    assert any(d.rule == "sink" and d.accepted for d in program.notes["fusion"])
    kept = fused(graph, "{sink=false}")
    assert ops(kernel_of(kept, "relu")) == ["relu", "transpose", "mul"]
    saved = sum(k.io_bytes for k in kept.kernels) - sum(k.io_bytes for k in program.kernels)
    assert saved == 2 * 2 * 3 * 5 * 8 * 4  # q * c written once and read once


def test_softmax_is_one_kernel_with_a_whole_row():
    b = GraphBuilder("sm")
    b.output(b.softmax(b.input("x", [4, 10]), axis=-1))
    program = fused(b.graph)
    assert len(program.kernels) == 1
    assert sorted(ops(program.kernels[0])) == sorted(["max", "sub", "exp", "sum", "div"])
    kinds = [loop.kind for loop in program.kernels[0].domain.loops]
    assert kinds == [PARALLEL, FULL]


def test_layer_norm_is_one_kernel():
    b = GraphBuilder("ln")
    x = b.input("x", [6, 32])
    b.output(b.layer_norm(x, b.param("scale", [32]), b.param("shift", [32])))
    program = fused(b.graph)
    assert len(program.kernels) == 1
    assert ops(program.kernels[0]).count("mean") == 2


HEADS = """def f(q: f32[2, 16, 24], k: f32[2, 16, 24], v: f32[2, 16, 24]) -> f32[2, 16, 24] {
    let o = attention(transpose(reshape(q, shape=[2, 16, 3, 8]), perm=[0, 2, 1, 3]),
                      transpose(reshape(k, shape=[2, 16, 3, 8]), perm=[0, 2, 1, 3]),
                      transpose(reshape(v, shape=[2, 16, 3, 8]), perm=[0, 2, 1, 3]), causal=true)
    return reshape(transpose(o, perm=[0, 2, 1, 3]), shape=[2, 16, 24])
}"""


def _attention_graph(length=16, causal=True, mask=False, batch=2, width=8):
    b = GraphBuilder("att")
    q, k, v = (b.input(n, [batch, length, width]) for n in "qkv")
    extra = [b.input("mask", [length, length], DType.bool)] if mask else []
    b.output(b.attention(q, k, v, *extra, causal=causal))
    return b.graph


@pytest.mark.parametrize("causal, mask", [(True, False), (False, True), (False, False)])
def test_attention_is_one_flash_kernel(causal, mask):
    program = fused(_attention_graph(causal=causal, mask=mask))
    (kernel,) = program.kernels
    assert kernel.kind == "attention"
    match = ATTENTION.match_kernel(kernel.nodes)
    domain = kernel.domain
    kv = domain.loops_of_kind(REDUCTION)
    assert len(kv) == 1 and domain.node_loops[domain.index(match.max)][-1] == kv[0]
    assert len(domain.loops_of_kind(FULL)) == 2  # head widths d and e stay whole
    if causal:
        assert {"iota", "le"} <= set(ops(kernel))


@given(head_split_attention())
@settings(max_examples=40, deadline=None)
def test_attention_takes_in_the_head_split_and_merge(graph):
    """The copies that split q, k, v into heads and merge the heads of o join the attention kernel: it reads
    and writes the tensors on either side. A packed qkv keeps one copy: its split into [.., 3 * heads,
    depth], which q, k and v each read a third of (a kernel's loops cover what they read whole)."""
    keys = next(v for v in graph.inputs if v.name in ("k", "qkv")).type.shape[1]
    assume(keys > 1)  # one key position: nothing to stream, no attention kernel
    program = fused(graph)
    graph = program.graph
    attention = [k for k in program.kernels if k.kind == "attention"]
    others = [k for k in program.kernels if k.kind != "attention"]
    assert len(attention) == 1 and list(attention[0].outputs) == list(graph.outputs)
    assert ATTENTION.match_kernel(attention[0].nodes).output is graph.outputs[0]
    if graph.inputs[0].name == "q":  # not sliced from one qkv (grouped k and v read through their broadcast)
        assert not others and set(attention[0].inputs) == set(graph.inputs)
    else:
        assert [ops(k) for k in others] in ([], [["reshape"]])
        assert {n.op for n in attention[0].nodes if n.op in ("slice", "reshape", "transpose")} >= {"slice", "transpose"}


def test_template_moves_off_keeps_attentions_head_split_and_merge_apart():
    """`fuse{template_moves=false}`: the head split and merge stay kernels of their own; the kernel is found
    again from its nodes either way. (A CPU target's default pipeline runs attention as generic kernels.)"""
    from tilegraph.driver import default_pipeline

    assert "fuse{attention=false}" in default_pipeline("cpu") and "fuse," in default_pipeline("gpu-h100")
    graph = parse(HEADS)
    apart = PassManager("canonicalize,fuse{template_moves=false}").run(graph)
    (attention,) = [k for k in apart.kernels if k.kind == "attention"]
    assert {n.op for n in attention.nodes} & {"reshape", "slice"} == set() and len(apart.kernels) > 1
    assert ATTENTION.match_kernel(attention.nodes).epilogue == ()
    (together,) = PassManager("canonicalize,fuse").run(graph).kernels
    assert len(ATTENTION.match_kernel(together.nodes).epilogue) == 2


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("private", [True, False])
def test_layers_sharing_a_mask_and_constants_each_get_a_flash_kernel(causal, private):
    """CSE shares the scale, the -inf fill and a causal mask between a model's layers. canonicalize gives each
    layer its own copies (`private_index_values`), so the two attention kernels are all there is; with that
    off, each attention reads the shared ones as inputs rather than refusing the pattern (it did, for every
    model with two layers or more)."""
    b = GraphBuilder("layers")
    x = b.input("x", [2, 16, 8])
    for _ in range(2):
        x = b.attention(x, x, x, causal=causal)
    b.output(x)
    program = PassManager(f"canonicalize{{private_index_values={str(private).lower()}}},fuse").run(b.graph)
    assert [k.kind for k in program.kernels].count("attention") == 2
    assert not [d for d in program.notes["fusion"] if d.rule == "attention" and not d.accepted]
    assert (len(program.kernels) == 2) == private


def test_attention_weights_used_outside_are_not_flash():
    b = GraphBuilder("att")
    q, k, v = (b.input(n, [8, 4]) for n in "qkv")
    weights = b.softmax(b.matmul(q, b.transpose(k)), axis=-1)
    b.output(b.matmul(weights, v), weights)
    program = fused(b.graph)
    assert all(k.kind == "generic" for k in program.kernels)
    refused = [d for d in program.notes["fusion"] if d.rule == "attention" and not d.accepted]
    assert refused and "outside the pattern" in refused[0].reason


def test_conv_bias_relu_epilogue():
    b = GraphBuilder("conv")
    x, w, bias = b.input("x", [1, 3, 8, 8]), b.param("w", [4, 3, 3, 3]), b.param("b", [4])
    y = b.add(b.conv2d(x, w, padding=1), b.reshape(bias, shape=[4, 1, 1]))
    b.output(b.relu(y))
    program = fused(b.graph)
    assert ops(kernel_of(program, "conv2d")) == ["conv2d", "reshape", "add", "relu"]  # the bias view joins too


def test_reshapes_that_split_or_merge_axes_are_affine():
    from tilegraph.ir.structured import run_loops
    from tilegraph.ir.domain import reshape_space

    for source, target in (((64, 128), (64, 4, 32)), ((4, 2, 3), (8, 3)), ((1, 6, 1), (2, 1, 3)), ((), (1, 1)),
                           ((2, 6), (4, 3))):
        space = reshape_space(source, target)
        x = np.arange(math.prod(source), dtype=np.float32).reshape(source)
        (y,) = run_loops(space, [x], [target], [DType.f32])
        assert np.array_equal(y, x.reshape(target))
    assert reshape_space((4, 6), (6, 4)) is None  # axes straddle: needs div/mod
    b = GraphBuilder("heads")
    x = b.input("x", [8, 16])
    b.output(b.transpose(b.reshape(x, shape=[8, 4, 4]), perm=[1, 0, 2]))
    assert len(fused(b.graph).kernels) == 1


def test_window_reads_refuse_a_fused_producer():
    b = GraphBuilder("pool")
    b.output(b.max_pool2d(b.relu(b.input("x", [1, 2, 8, 8])), kernel=2))
    program = fused(b.graph)
    assert len(program.kernels) == 2
    refused = [d for d in program.notes["fusion"] if not d.accepted]
    assert any("a tile would need data another tile computes" in d.reason for d in refused)


def test_siblings_share_their_input():
    b = GraphBuilder("sib")
    x = b.input("x", [16, 16])
    b.output(b.relu(x), b.sigmoid(x))
    program = fused(b.graph)
    assert len(program.kernels) == 1 and len(program.kernels[0].outputs) == 2
    assert any(d.rule == "sibling" and d.accepted for d in program.notes["fusion"])
    assert len(fused(b.graph, "{siblings=false}").kernels) == 2


def test_siblings_that_would_write_a_result_once_per_tile_of_the_other_stay_apart():
    """Llama's rotary embedding: q [2, 8 heads, 16, 32] and k [2, 2 heads, 16, 32] both multiply one cos
    table. Merged, their loops share only tokens and features, so every tile of k's heads would write q again
    (and of q's heads, k): the merge is refused, and each kernel's results run over all its loops."""
    b = GraphBuilder("rope")
    q, k, cos = b.input("q", [2, 8, 16, 32]), b.input("k", [2, 2, 16, 32]), b.input("cos", [1, 1, 16, 32])
    b.output(b.mul(b.exp(q), cos), b.mul(b.exp(k), cos))
    program = fused(b.graph)
    assert len(program.kernels) == 2
    assert any("every tile of them would write it again" in d.reason for d in program.notes["fusion"]
               if not d.accepted)
    for kernel in program.kernels:
        for value in kernel.outputs:
            assert not kernel.domain.missing_parallel(kernel.domain.index(value.producer))


def test_prologue_recompute_follows_the_cost_model():
    b = GraphBuilder("pro")
    x, w = b.input("x", [64, 32]), b.param("w", [32, 512])
    b.output(b.matmul(b.exp(x), w))
    program = fused(b.graph)
    (kernel,) = program.kernels
    (taken,) = [d for d in program.notes["fusion"] if d.accepted]
    assert taken.rule == "prologue" and taken.recomputed == (kernel.nodes[0].name,)
    assert 0 < taken.recompute_flops / FuseOptions().flops_per_byte < taken.saved_bytes
    cheap_memory = fused(b.graph, "{flops_per_byte=0.001}")
    assert len(cheap_memory.kernels) == 2
    assert any("recomputing" in d.reason for d in cheap_memory.notes["fusion"] if not d.accepted)


def test_two_contractions_stay_apart():
    b = GraphBuilder("mm2")
    x = b.input("x", [8, 8])
    b.output(b.matmul(b.relu(b.matmul(x, b.param("w1", [8, 8]))), b.param("w2", [8, 8])))
    program = fused(b.graph)
    assert [ops(k) for k in program.kernels] == [["matmul", "relu"], ["matmul"]]
    assert any("two contractions" in d.reason for d in program.notes["fusion"])


def test_a_merge_that_would_create_a_cycle_is_refused():
    b = GraphBuilder("cyc")
    x, idx = b.input("x", [4, 4]), b.input("idx", [4], DType.i64)
    p = b.exp(x)
    b.output(b.add(p, b.gather(p, idx, axis=0)))  # p -> gather (a layout kernel) -> add, and p -> add
    kernels, decisions = fuse_graph(fused(b.graph).graph)
    assert len(kernels) == 3
    assert any("cycle" in d.reason for d in decisions)


def test_decisions_are_frozen_records_and_format():
    b = GraphBuilder("mlp")
    x = b.input("x", [8, 16])
    h = b.relu(b.add(b.matmul(x, b.param("w", [16, 32])), b.param("b", [32])))
    b.output(b.matmul(h, b.param("w2", [32, 4])))
    program = fused(b.graph)
    decisions = program.notes["fusion"]
    assert all(isinstance(d, FusionDecision) and d.rule in RULES + tuple(t.name for t in templates())
               for d in decisions)
    with pytest.raises(dataclasses.FrozenInstanceError):
        decisions[0].accepted = False
    text = format_fusion_decisions(program)
    assert "2 kernels" in text and "+ epilogue" in text and "- prologue" in text


def test_kernel_kinds_and_tiles_survive_the_text_form():
    from tilegraph.ir.program_text import parse_program, print_program

    program = PassManager("canonicalize,fuse,tile{target=accel-small}").run(_attention_graph())
    text = print_program(program)
    assert "kind attention" in text
    again = parse_program(text)
    assert [(k.kind, k.tiles) for k in again.kernels] == [(k.kind, k.tiles) for k in program.kernels]
    assert print_program(again) == text


def test_fuse_needs_canonical_and_leaves_its_input_alone():
    b = GraphBuilder("g")
    b.output(b.relu(b.exp(b.input("x", [4]))))
    with pytest.raises(Exception, match="canonical"):
        PassManager("fuse").run(b.graph)
    program = PassManager("canonicalize").run(b.graph)
    before = [k.nodes for k in program.kernels]
    after = PassManager("fuse").run(program)
    assert [k.nodes for k in program.kernels] == before and len(after.kernels) == 1
    assert "fused" in after.properties and "fused" not in program.properties


# ----- the examples ----------------------------------------------------------------------------
def _layer_norm_groups(graph):
    """The nodes of each decomposed layer norm, found from its rsqrt."""
    groups = []
    for rsqrt in (n for n in graph.nodes if n.op == "rsqrt"):
        var = rsqrt.inputs[0].producer  # add(variance, eps)
        mean2 = var.inputs[0].producer
        square = mean2.inputs[0].producer
        centered = square.inputs[0].producer
        mean1 = centered.inputs[1].producer
        groups.append([rsqrt, var, mean2, square, centered, mean1] + rsqrt.users)
    return groups


@pytest.mark.skipif(not (EXAMPLES / "transformer_block.tg").exists(), reason="example not written")
def test_transformer_block_attention_softmax_and_layer_norms():
    from tilegraph.frontends.dsl import parse_file

    program = fused(parse_file(EXAMPLES / "transformer_block.tg"))
    owner = program.kernel_of()
    attention = [k for k in program.kernels if k.kind == "attention"]
    assert len(attention) == 1
    for op in ("max", "exp", "sum", "div"):  # the softmax is inside the flash kernel
        assert all(owner[n] is attention[0] for n in program.graph.nodes if n.op == op)
    groups = _layer_norm_groups(program.graph)
    assert len(groups) == 2
    for group in groups:
        assert len({owner[n].name for n in group}) == 1


# ----- properties ------------------------------------------------------------------------------
def _kernel_graph_is_acyclic_and_convex(program: Program) -> None:
    owner = {n: k.name for k in program.kernels for n in k.nodes}
    position = {k.name: i for i, k in enumerate(program.kernels)}
    for kernel in program.kernels:
        for node in kernel.nodes:
            for value in node.inputs:
                if value.producer is not None:  # every kernel reads only earlier kernels' values
                    assert position[owner[value.producer]] <= position[kernel.name]
        inside = set(kernel.nodes)
        frontier = [u for n in kernel.nodes for u in n.users if u not in inside]
        seen = set(frontier)
        while frontier:  # convex: no path leaves the kernel and comes back
            node = frontier.pop()
            assert node not in inside, f"kernel {kernel.name} is not convex"
            for user in node.users:
                if user not in seen:
                    seen.add(user)
                    frontier.append(user)


@given(graphs(max_nodes=10))
def test_fusion_partitions_without_cycles_or_hidden_recompute(graph):
    program = fused(graph)  # the pass manager verifies: each node in exactly one kernel, valid order
    nodes = [n for k in program.kernels for n in k.nodes]
    assert sorted(map(id, nodes)) == sorted(map(id, program.graph.nodes))
    _kernel_graph_is_acyclic_and_convex(program)
    decisions = program.notes["fusion"]
    options = FuseOptions()
    allowed = {name for d in decisions if d.accepted for name in d.recomputed}
    for d in decisions:
        if d.accepted and d.recompute_flops:
            assert d.recompute_flops / options.flops_per_byte < d.saved_bytes
    for kernel in program.kernels:
        domain = kernel.domain
        for i, node in enumerate(domain.nodes):
            if domain.spaces[i] is not None and domain.missing_parallel(i):
                assert node.name in allowed, f"%{node.name} is recomputed per tile without a decision"
        for value in kernel.outputs:  # written once: its producer runs over every parallel loop
            i = domain.index(value.producer)
            assert value.type.numel == 1 or domain.spaces[i] is None or not domain.missing_parallel(i), \
                f"%{value.name} would be written by every tile of loops it does not run over"
    assert len(program.kernels) == len({k.name for k in program.kernels})
