"""Row flattening in canonicalize: matmuls over [batch, tokens, K] rows and the row-wise ops between them run
over one row axis; results are unchanged, and no kernel is added."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tilegraph.backends import reference
from tilegraph.ir import GraphBuilder
from tilegraph.passes import PassManager

STEPS = ("bias", "scale", "gelu", "center", "residual", "position", "matmul")


def layer_graph(batch: int, tokens: int, width: int, steps: list[str]):
    """x [batch, tokens, width] -> centred (as an embedding's layer norm: a kernel that writes rows) -> linear ->
    `steps` (row-wise ops and more linears) -> linear -> output."""
    b = GraphBuilder("rows")
    x = b.input("x", [batch, tokens, width])
    x = b.sub(x, b.mean(x, axes=[2], keepdims=True))
    h = b.matmul(x, b.param("w0", [width, width]))
    for i, step in enumerate(steps):
        if step == "bias":
            h = b.add(h, b.param(f"b{i}", [width]))
        elif step == "scale":
            h = b.mul(h, b.constant(0.5))
        elif step == "gelu":
            h = b.gelu(h)
        elif step == "center":  # a layer norm's first half: a reduction over the row, then a broadcast
            h = b.sub(h, b.mean(h, axes=[2], keepdims=True))
        elif step == "residual":
            h = b.add(h, x)
        elif step == "position":  # broadcast over the batch but not the tokens: stays split
            h = b.add(h, b.param(f"p{i}", [1, tokens, width]))
        else:
            h = b.matmul(h, b.param(f"w{i + 1}", [width, width]))
    return b.output(b.matmul(h, b.param("wout", [width, width])))


def canonical(graph, flatten: bool = True):
    return PassManager(f"canonicalize{{flatten_rows={str(flatten).lower()}}}").run(graph)


@settings(max_examples=30, deadline=None)
@given(batch=st.sampled_from([1, 2, 3]), tokens=st.sampled_from([1, 5, 7]),
       steps=st.lists(st.sampled_from(STEPS), max_size=6))
def test_rows_between_matmuls_run_flat_and_results_are_unchanged(batch, tokens, steps):
    """Contract: with batch and tokens both wider than 1, every matmul but the last reads a 2-D [rows, K]
    operand, unless a reader of its result stays split (a position embedding), and the output is not a
    reshape (no copy of it); with either of them 1, the graph is as it was without the rewrite; fusion
    makes no more kernels of it; the reference results are the same."""
    graph = layer_graph(batch, tokens, 8, steps)
    flat, plain = canonical(graph).graph, canonical(graph, flatten=False).graph
    fused = [len(PassManager(f"canonicalize{{flatten_rows={f}}},fuse").run(graph).kernels) for f in ("true", "false")]
    assert fused[0] <= fused[1]
    matmuls = [n for n in flat.nodes if n.op == "matmul"]
    if batch > 1 and tokens > 1:  # a matmul whose result gets a position embedding stays split (its epilogue)
        split = ["position" in segment for segment in " ".join(steps).split("matmul")]
        assert [n.inputs[0].type.rank for n in matmuls[:-1]] == [3 if s else 2 for s in split]
        assert matmuls[-1].inputs[0].type.rank == 3
    else:
        assert [n.op for n in flat.nodes] == [n.op for n in plain.nodes]
    assert all(v.producer.op != "reshape" for v in flat.outputs)
    inputs = reference.random_inputs(graph, 0)
    for got, want in zip(reference.run(flat, inputs, seed=0), reference.run(graph, inputs, seed=0), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_vit_sized_mlp_tiles_all_its_rows_as_one_loop_on_a_gpu():
    """32 images of 197 tokens: the first linear's dot runs over 6304 rows (128-row tiles pad 1.5%), where
    per image its 197 rows took two 128-row tiles (23% padding); the kernels are as many as before."""
    from tilegraph.frontends.dsl import parse

    source = """def f(x: bf16[32, 197, 768], g: bf16[768], b: bf16[768], w1: bf16[768, 3072], b1: bf16[3072],
                w2: bf16[3072, 768], w3: bf16[768, 768]) -> bf16[32, 197, 768] {
                return (gelu(layer_norm(x, g, b) @ w1 + b1) @ w2) @ w3 }"""
    passes = "canonicalize{{flatten_rows={}}},fuse,tile{{target=gpu-h100}}"
    flat, plain = (PassManager(passes.format(f)).run(parse(source)) for f in ("true", "false"))
    assert len(flat.kernels) == len(plain.kernels)
    for kernel in flat.kernels[1:-1]:  # after the layer norm; the last linear's rows go to the output as they are
        assert any(loop.extent == 32 * 197 for loop in kernel.domain.loops)
        assert not any(loop.extent == 197 for loop in kernel.domain.loops)
