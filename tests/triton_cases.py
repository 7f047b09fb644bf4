"""What the Triton tests share, with no side effects: the kernel-kind cases, the tolerances, and `check`
(build, run, compare with the numpy reference). Imported by the interpreter tests (test_triton.py, which
selects the interpreter first) and by the GPU tests (test_triton_gpu.py), which must not select it.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

import tilegraph
from tilegraph.backends import reference
from tilegraph.backends import triton as tgt
from tilegraph.ir import DType
from tilegraph.ir.program import Program
from tilegraph.ir.target import Target
from tilegraph.passes import PassManager
from tilegraph.passes.tiling import tile_program

# A target with a tiny on-chip memory: every loop gets ragged tiles and reductions are carried.
TINY = Target("tiny", "accelerator", onchip_bytes=2048, double_buffer=True, line_bytes=16)
TOLERANCE = {DType.f16: 1e-2, DType.bf16: 3e-2}
# f32 products on TF32 tensor cores (10 mantissa bits, as f16): errors of ~1e-3 of the output's scale
TF32_TOLERANCE = 5e-3
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def tiny_program(graph) -> Program:
    program = PassManager("canonicalize,fuse").run(graph)
    kernels, reports = tile_program(program, TINY)
    return replace(program, kernels=tuple(kernels), notes={**program.notes, "tiling": reports})


def half_precision(graph) -> float:
    """The loosest tolerance of any value in the graph: an f32 result computed from bf16 values carries
    bf16 rounding, and the Triton interpreter rounds f32 -> bf16 by truncation (the GPU rounds to nearest)."""
    values = list(graph.inputs) + list(graph.params) + [v for n in graph.nodes for v in n.results]
    return max([TOLERANCE.get(v.type.dtype, 1e-4) for v in values], default=1e-4)


def precision_in_force(fn: tgt.TritonProgram) -> float:
    """The tolerance floor of a build's f32 products: TF32's where any tl.dot runs in TF32 (torch's flags,
    or the build's options, chose it), else none."""
    return TF32_TOLERANCE if 'input_precision="tf32"' in fn.source else 0.0


def assert_same(got, want, types, floor: float = 0.0) -> None:
    assert len(got) == len(want)
    for a, b, t in zip(got, want, types):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, a.dtype, b.shape, b.dtype)
        if t.dtype.is_float:
            tol = max(TOLERANCE.get(t.dtype, 1e-4), floor)
            scale = float(np.nanmax(np.abs(b), initial=1.0)) if not np.all(np.isnan(b)) else 1.0
            np.testing.assert_allclose(a, b, rtol=tol, atol=tol * max(scale, 1.0), equal_nan=True)
        else:
            np.testing.assert_array_equal(a, b)


def check_random(data, max_nodes: int = 6) -> None:
    """A drawn random graph and inputs, checked with the default tiles and with TINY's."""
    from strategies import graph_inputs, graphs

    graph = data.draw(graphs(max_nodes=max_nodes))
    inputs = data.draw(graph_inputs(graph))
    check(graph, inputs)
    check(graph, inputs, tiny=True)


def check(graph, inputs=None, tiny: bool = False, **options) -> tgt.TritonProgram:
    """Build for the GPU target's tiles (or TINY's), with the build `options`, and compare with the
    reference on the same params."""
    inputs = reference.random_inputs(graph) if inputs is None else inputs
    if tiny:
        program = tiny_program(graph)
        fn = tgt.build(program, reference.random_params(program.graph), **options)
    else:
        fn = tilegraph.compile(graph, target="triton", **options)
    params = {v.name: a for v, a in fn.params.items()}
    want = reference.run(graph, inputs, params={k: v for k, v in params.items()
                                                if k in {p.name for p in graph.params}})
    floor = max(half_precision(graph), precision_in_force(fn))
    assert_same(fn(*inputs), want, [v.type for v in graph.outputs], floor)
    return fn


CASES = {
    "broadcast": """def f(x: f32[7, 13], b: f32[13], c: f32[7, 1]) -> f32[7, 13] {
        return relu(x * b + c) - sigmoid(x)
    }""",
    "reductions": """def f(x: f32[5, 33, 17]) -> (f32[5], f32[33, 17], f32[5, 17]) {
        return sum(x, axes=[1, 2]), max(x, axes=[0]), mean(x, axes=[1])
    }""",
    "row_sums": """def f(x: f32[13, 300]) -> (f32[13], f32[13]) {
        return sum(x * x, axes=[1]), max(x, axes=[1])
    }""",
    "softmax": """def f(x: f32[19, 70]) -> f32[19, 70] {
        return softmax(x)
    }""",
    "layer_norm": """def f(x: f32[9, 45], s: f32[45], t: f32[45]) -> f32[9, 45] {
        return layer_norm(x, s, t, eps=1e-5)
    }""",
    "matmul_epilogue": """def f(x: f32[37, 50], w: f32[50, 45], b: f32[45]) -> f32[37, 45] {
        return gelu(x @ w + b)
    }""",
    "matmul_f16": """def f(x: f16[20, 24], w: f16[24, 33]) -> f16[20, 33] {
        return relu(x @ w)
    }""",
    "batch_matmul": """def f(a: f32[3, 20, 24], b: f32[3, 24, 18]) -> f32[3, 20, 18] {
        return a @ b
    }""",
    "attention": """def f(q: f32[2, 40, 16], k: f32[2, 40, 16], v: f32[2, 40, 16]) -> f32[2, 40, 16] {
        return attention(q, k, v)
    }""",
    "attention_bf16": """def f(q: bf16[1, 24, 16], k: bf16[1, 24, 16], v: bf16[1, 24, 16]) -> bf16[1, 24, 16] {
        return attention(q, k, v)
    }""",
    "attention_heads": """def f(q: f32[2, 40, 48], k: f32[2, 24, 48], v: f32[2, 24, 48]) -> f32[2, 40, 48] {
        let o = attention(transpose(reshape(q, shape=[2, 40, 3, 16]), perm=[0, 2, 1, 3]),
                          transpose(reshape(k, shape=[2, 24, 3, 16]), perm=[0, 2, 1, 3]),
                          transpose(reshape(v, shape=[2, 24, 3, 16]), perm=[0, 2, 1, 3]))
        return reshape(transpose(o, perm=[0, 2, 1, 3]), shape=[2, 40, 48])
    }""",
    # GPT-2's qkv split: the projection's rows reshaped to [batch, tokens] once, then sliced into heads; the
    # lone reshape between the projection and attention is a view of the projection's bytes
    "packed_qkv": """def f(x: f32[24, 16], w: f32[16, 48], b: f32[48]) -> f32[2, 12, 16] {
        let qkv = reshape(x @ w + b, shape=[2, 12, 48])
        let q = transpose(reshape(slice(qkv, start=[0, 0, 0], stop=[2, 12, 16]), shape=[2, 12, 2, 8]), perm=[0, 2, 1, 3])
        let k = transpose(reshape(slice(qkv, start=[0, 0, 16], stop=[2, 12, 32]), shape=[2, 12, 2, 8]), perm=[0, 2, 1, 3])
        let v = transpose(reshape(slice(qkv, start=[0, 0, 32], stop=[2, 12, 48]), shape=[2, 12, 2, 8]), perm=[0, 2, 1, 3])
        return reshape(transpose(attention(q, k, v), perm=[0, 2, 1, 3]), shape=[2, 12, 16])
    }""",
    # Llama's rotary embedding: q * cos + rotate_half(q) * sin, rotate_half = concat(-q2, q1); the concat
    # (a select between padded reads) is one kernel with the multiply-add after it
    "rotary": """def f(q: f32[2, 3, 5, 8], c: f32[5, 8], s: f32[5, 8]) -> f32[2, 3, 5, 8] {
        let half = concat(neg(slice(q, start=[0, 0, 0, 4], stop=[2, 3, 5, 8])), slice(q, start=[0, 0, 0, 0], stop=[2, 3, 5, 4]), axis=3)
        return q * c + half * s
    }""",
    # five operands: more than a structured concat reads (CONCAT_READS), so a copy of its own
    "concat_many": """def f(a: f32[3, 2], b: f32[3, 5], c: f32[3, 1], d: f32[3, 4], e: f32[3, 3]) -> f32[3, 15] {
        return relu(concat(a, b, c, d, e, axis=1)) * 2.0
    }""",
    "conv_relu": """def f(x: f32[2, 3, 11, 11], w: f32[16, 3, 3, 3]) -> f32[2, 16, 9, 9] {
        return relu(conv2d(x, w))
    }""",
    "conv_padded": """def f(x: f32[1, 2, 7, 6], w: f32[4, 2, 3, 3]) -> f32[1, 4, 4, 3] {
        return conv2d(x, w, stride=[2, 2], padding=[1, 1])
    }""",
    "bools": """def f(c: bool[7, 30], d: bool[7, 30]) -> (bool[7], bool[7], bool[30], bool[7, 30]) {
        return sum(c, axes=[1]), max(c, axes=[1]), min(d, axes=[0]), where(c, d, c)
    }""",
    "conv_padded_after": """def f(x: f32[2, 3, 9, 8], w: f32[5, 3, 3, 3], d: f32[3, 1, 3, 3]) -> (f32[2, 5, 4, 5], f32[2, 3, 9, 7]) {
        return conv2d(x, w, stride=[2, 2], padding=[0, 1], padding_end=[1, 2]), conv2d(x, d, padding=[2, 0], padding_end=[0, 1], groups=3)
    }""",
    "conv_padding_only_column": """def f(x: f32[1, 1, 3, 1], w: f32[1, 1, 1, 1]) -> f32[1, 1, 2, 1] {
        return conv2d(x, w, stride=[3, 3], padding=[1, 1])
    }""",
    "integers": """def f(a: i32[6, 5], b: i32[6, 5]) -> (i32[6, 5], i32[6], f32[6, 5]) {
        return a * b - a, max(a, axes=[1]), cast(a, dtype=f32) / 3.0
    }""",
}
