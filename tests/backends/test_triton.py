"""The Triton backend under the Triton interpreter (TRITON_INTERPRET=1, CPU tensors): every kernel kind
matches the reference backend, with non-power-of-two sizes and ragged tiles.

The interpreter is chosen here, before triton is first imported: triton reads TRITON_INTERPRET when a
function is decorated with @triton.jit, which for generated kernels happens at build time.
"""
from __future__ import annotations

import math
import os

os.environ["TRITON_INTERPRET"] = "1"

import re  # noqa: E402
from dataclasses import replace  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

pytest.importorskip("torch", reason="the Triton backend runs on torch tensors")
pytest.importorskip("triton", reason="triton is not installed (pip install 'tilegraph[triton]')")

from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

import tilegraph  # noqa: E402
from tilegraph.backends import reference  # noqa: E402
from tilegraph.backends import triton as tgt  # noqa: E402
from tilegraph.backends.triton import autotune  # noqa: E402
from tilegraph.backends.triton.kernel import MAX_NUMEL, KernelEmitter  # noqa: E402
from tilegraph.backends.triton.names import mangle  # noqa: E402
from tilegraph.frontends.dsl import parse  # noqa: E402
from tilegraph.ir import GraphBuilder, TilegraphError  # noqa: E402
from tilegraph.passes import PassManager  # noqa: E402

from strategies import head_split_attention  # noqa: E402
from triton_cases import (CASES, EXAMPLES, assert_same, check, check_random, half_precision,  # noqa: E402
                          precision_in_force, tiny_program)


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("TILEGRAPH_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "tilegraph-cache"))


@pytest.mark.parametrize("name", sorted(CASES))
def test_kernel_kinds_match_the_reference(name):
    graph = parse(CASES[name])
    check(graph)


@pytest.mark.parametrize("name", ["row_sums", "softmax", "matmul_epilogue", "attention", "attention_heads",
                                  "conv_relu", "batch_matmul"])
def test_ragged_tiles_and_carried_reductions(name):
    graph = parse(CASES[name])
    fn = check(graph, tiny=True)
    tiled = [s for s in fn.generated.kernels if s is not None and any(p.count > 1 for p in s.loops)]
    assert tiled, "TINY should split some loop into several tiles"


def test_matmul_and_conv_use_tl_dot():
    for name in ("matmul_epilogue", "matmul_f16", "conv_relu"):
        fn = tilegraph.compile(parse(CASES[name]), target="triton")
        assert "tl.dot(" in fn.source, name
        assert any(s is not None and s.uses_dot for s in fn.generated.kernels)


def test_a_dot_operand_moved_in_the_kernel_loads_from_its_source():
    """A transpose (a head split's reshape and transpose) fused before a matmul only moves elements: the
    dot loads its source as a plain 2-D block, not the moved copy reshaped in registers."""
    graph = parse("""def f(a: f32[2, 24, 32], b: f32[2, 40, 32]) -> f32[2, 24, 40] {
        return relu(batch_matmul(a, transpose(b, perm=[0, 2, 1])))
    }""")
    fn = check(graph)
    (kernel,) = fn.program.kernels
    assert [n.op for n in kernel.nodes] == ["transpose", "batch_matmul", "relu"]
    operands = [line for line in fn.source.splitlines() if "_op = " in line]
    assert len(operands) == 2 and all("tl.load(" in line for line in operands)
    assert any("b_ptr" in line for line in operands) and "tl.permute" not in fn.source


def test_dot_weights_are_bound_as_their_dots_read_them_and_read_through_their_permuted_strides():
    """A 3x3 convolution's weight w[f, c, kh, kw] is bound as w[kh, kw, f, c] for tensor cores (TF32; its
    [c, f] blocks then contiguous along the reduction), and as w[kh, kw, c, f] for an IEEE f32 dot, which
    runs on FMA units whose lanes spread along N (`packing.py`). A weight also read elementwise, or by a
    torch layout step, keeps its own layout. Results equal the reference either way."""
    from tilegraph.backends.triton.packing import plan_layouts

    graph = parse("""def f(x: f32[2, 16, 10, 10]) -> (f32[2, 32, 10, 10], f32[32, 16, 3, 3], f32[2, 32, 10, 10]) {
        param w: f32[32, 16, 3, 3]
        param v: f32[32, 16, 3, 3]
        param u: f32[32, 16, 3, 3]
        return relu(conv2d(x, w, padding=[1, 1])), v * 2.0, conv2d(x, v, padding=[1, 1]) + conv2d(x, u, padding=[1, 1])
    }""")
    assert {v.name: o for v, o in check(graph).generated.layouts.items()}.get("w") == (2, 3, 1, 0)
    fn = check(graph, tf32=True)
    layouts = {v.name: order for v, order in fn.generated.layouts.items()}
    assert layouts.get("w") == (2, 3, 0, 1) and "v" not in layouts
    params = {v.name for v in fn.params}  # (activations are the layout pass's)
    assert {name: o for name, o in layouts.items() if name in params} == \
        {v.name: o for v, o in plan_layouts(fn.program, fn.options).items()}
    assert "w_ptr stored as axes [2, 3, 0, 1]" in fn.source
    bound = fn.launcher()._env[fn.launcher()._slots[fn.generated.names[next(v for v in fn.params if v.name == "w")]]]
    want = np.transpose(next(a for v, a in fn.params.items() if v.name == "w"), (2, 3, 0, 1))
    # (only TF32 dots read it: also rounded to nearest TF32 once, `packing.tf32_params`)
    tf32 = ((want.view(np.int32) + 0x1000) & -0x2000).view(np.float32)
    np.testing.assert_array_equal(bound.numpy(), tf32)


def test_dots_on_fma_units_walk_k_in_short_blocks():
    """An IEEE f32 dot runs on FMA units, whose threads hold their rows and columns for the whole K block: it
    walks K FMA_K lanes at a time, where tensor cores (TF32 here) take the tiling's wider blocks."""
    from tilegraph.backends.triton.dot import FMA_K

    graph = parse("def f(x: f32[64, 512], w: f32[512, 64]) -> f32[64, 64] { return x @ w }")
    assert _k_lanes(check(graph)) == FMA_K
    assert _k_lanes(check(graph, tf32=True)) > FMA_K


@pytest.mark.parametrize("length", [128, 80])
def test_attention_on_fma_units_walks_keys_in_short_tiles(length, tmp_path, monkeypatch):
    """IEEE f32 attention runs its two dots on FMA units, which hold the whole K block per thread: p @ v over 128
    keys at once compiled to a 12 KB stack frame on sm_90 (3 ms of HF Llama's 5.6 ms layer on an H100). Its keys
    are walked FMA_K a step (80: a ragged last step), results match, and the sm_90 build spills nothing."""
    from tilegraph.backends.triton.dot import FMA_K

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    graph = parse(f"""def f(q: f32[1, 2, {length}, 64], k: f32[1, 2, {length}, 64], v: f32[1, 2, {length}, 64])
                      -> f32[1, 2, {length}, 64] {{ return attention(q, k, v, causal=true) }}""")

    def key_lanes(fn) -> int:
        (source,) = [s for s in fn.generated.kernels if s is not None]
        return max(p.block for p in source.loops if p.kind == "reduction")

    ieee = check(graph)
    assert key_lanes(ieee) == FMA_K and "range(0, " in ieee.source
    assert key_lanes(check(graph, tf32=True)) > FMA_K
    if length == 128:
        (record,) = ieee.compile_ahead(90)
        if record.spills is None:
            pytest.skip("this Triton bundles no cuobjdump: the sm_90 build's stack frame is unknown")
        assert record.spills == 0, record


@pytest.mark.parametrize("dtype, channels, step", [("bf16", 512, 128), ("f32", 144, 32), ("f32", 96, 32),
                                                   ("f32", 24, 32), ("bf16", 384, 128)])
def test_tensor_core_dots_walk_k_in_pipelined_steps_with_little_padding(dtype, channels, step):
    """A dot on tensor cores walks K at most TENSOR_K lanes a step, so the pipeliner has steps to overlap (a
    1x1 convolution over 512 channels took them in one block), and takes the widest step that pads K by at most
    K_PADDING (144 channels: 5 steps of 32, not 256 lanes at once; 24 stay one step of 32); results match."""
    x, w, y = f"{dtype}[2, {channels}, 8, 8]", f"{dtype}[64, {channels}, 1, 1]", f"{dtype}[2, 64, 8, 8]"
    graph = parse(f"def f(x: {x}, w: {w}) -> {y} {{ return relu(conv2d(x, w)) }}")
    assert _k_lanes(check(graph, tf32=True)) == step


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_a_pointwise_convolution_takes_rows_over_several_image_rows(dtype):
    """A 1x1 convolution on 14 x 14 images takes its dot's rows over several loops (2 images x 2 x 14 pixels
    in 64 lanes, on wgmma) where one image row gave 16 lanes; the block loaded over them is reshaped for the
    dot, with a residual epilogue and padded lanes masked; results match the reference."""
    t = f"{dtype}[16, 256, 14, 14]"
    graph = parse(f"""def f(x: {t}, r: {t}, w: {dtype}[256, 256, 1, 1]) -> {t} {{
                        return relu(conv2d(x, w) + r) }}""")
    fn = check(graph, tf32=True)
    (kernel,) = [k for k in fn.program.kernels if k.domain.loops]
    tiles = dict(kernel.tiles)
    rows = [tiles[loop.name] for loop in kernel.domain.loops if loop.kind == "parallel" and loop.extent != 256]
    assert sum(tile > 1 for tile in rows) >= 2 and math.prod(rows) >= 56


def _k_lanes(fn) -> int:
    """The widest reduction block of the program's one kernel, as the emitter walks it."""
    from tilegraph.backends.triton.kernel import KernelEmitter
    from tilegraph.ir.structured import REDUCTION

    (kernel,) = [k for k in fn.program.kernels if k.domain.loops]
    loops = KernelEmitter(kernel, kernel.domain, "k", options=fn.options).loops
    return max(loop.block for loop in loops if loop.kind == REDUCTION)


def test_a_convolution_walks_its_window_and_channel_chunks_in_one_loop():
    """kh x kw x channel chunks are one `for` (what Triton pipelines whole), in the nested order, so results
    match the reference: a `for` per loop restarted the pipeline at every kh and kw."""
    graph = parse("""def f(x: f32[2, 256, 9, 9], w: f32[64, 256, 3, 3]) -> f32[2, 64, 9, 9] {
                        return relu(conv2d(x, w, padding=[1, 1])) }""")
    fn = check(graph, tf32=True)
    (source,) = [s for s in fn.generated.kernels if s is not None and s.uses_dot]
    loops = re.findall(r"^\s*for (\w+) in range\(0, (\d+)", source.text, re.M)
    assert loops == [("rt", str(3 * 3 * 256 // _channel_tile(fn)))]


def _channel_tile(fn) -> int:
    """The channel step the kernel walks (the Program's tile, or the emitter's shorter K step)."""
    from tilegraph.backends.triton.kernel import KernelEmitter

    (kernel,) = [k for k in fn.program.kernels if k.domain.loops]
    loops = KernelEmitter(kernel, kernel.domain, "k", options=fn.options).loops
    (step,) = [loop.tile for loop in loops if loop.kind == "reduction" and loop.extent == 256]
    return step


def test_repeated_layers_with_permuted_weights_share_one_function():
    graph = parse("""def f(x: f32[32, 64]) -> f32[32, 64] {
        param w1: f32[64, 64]
        param w2: f32[64, 64]
        return relu(relu(x @ w1) @ w2)
    }""")
    assert not tilegraph.compile(graph, target="triton").generated.layouts, "IEEE: [K, N] is how FMA dots read"
    fn = tilegraph.compile(graph, target="triton", tf32=True)
    assert len(fn.generated.layouts) == 2
    assert fn.source.count("def kernel_") == 1 and " = kernel_" in fn.source, "the second layer aliases the first"


@pytest.mark.parametrize("tiny", [False, True])
def test_a_concat_is_one_kernel_with_what_reads_it_and_keeps_signed_zeros(tiny):
    """Llama's rotary embedding: the concat of rotate_half reads q's halves in place (canonicalize folds the
    slices into its windows and the negation into a sign) and selects between padded reads, fused with the
    multiply-add after it (over ragged tiles too); a select, so -0.0 stays -0.0. A concat of more operands
    than CONCAT_READS is a torch copy of its own."""
    graph = parse(CASES["rotary"])
    inputs = reference.random_inputs(graph)
    inputs[0][..., ::3] = -0.0
    inputs[2][...] = 1.0
    fn = check(graph, inputs, tiny=tiny)
    (kernel,) = fn.program.kernels  # the slices and the negation read through: q's windows, times -1 over one
    assert {"concat", "mul", "add"} <= {n.op for n in kernel.nodes} and fn.generated.kernels[0] is not None
    q, c = inputs[0], inputs[1]
    half = np.concatenate([-q[..., 4:], q[..., :4]], axis=-1)
    got = np.asarray(fn(*inputs)[0])
    zeros = (q * c == 0) & (half == 0)
    assert np.array_equal(np.signbit(got[zeros]), np.signbit((q * c + half)[zeros]))

    many = check(parse(CASES["concat_many"]))
    (lone,) = [k for k in many.program.kernels if any(n.op == "concat" for n in k.nodes)]
    assert len(lone.nodes) == 1 and many.generated.kernels[many.program.kernels.index(lone)] is None


def test_a_lone_reshape_between_kernels_is_a_view_not_a_copy():
    """GPT-2's qkv split: the projection's [rows, 3 x width] result reshaped to [batch, tokens, 3 x width] is a
    kernel of its own (the attention kernel slices it), which copied 36 MiB a layer at batch 32. It is a view
    of the projection's bytes, which stay live until attention reads them; as a graph output, or under a
    memory plan that placed it, it is still written."""
    graph = parse(CASES["packed_qkv"])
    fn = check(graph)
    (lone,) = [k for k in fn.program.kernels if [n.op for n in k.nodes] == ["reshape"]]
    view, source = lone.outputs[0], lone.inputs[0]
    arena = fn.generated.arena
    assert arena.views == {view: source} and view not in arena.offsets and source in arena.offsets
    assert fn.generated.kernels[fn.program.kernels.index(lone)] is None  # no kernel launched
    assert "no copy" in fn.report()

    b = GraphBuilder("out")  # the reshape is a graph output: its own tensor
    y = b.matmul(b.input("x", [6, 4]), b.param("w", [4, 8]))
    b.output(b.reshape(y, shape=[2, 3, 8]), b.relu(y))
    fn = check(b.graph)
    assert [n.op for n in fn.program.kernels[-1].nodes] == ["reshape"] and fn.generated.arena.views == {}

    planned = PassManager("canonicalize,fuse,tile{target=gpu-h100},memplan{capacity=1MiB,time_limit=2}").run(graph)
    assert any([n.op for n in k.nodes] == ["reshape"] for k in planned.kernels)
    assert tgt.build(planned, reference.random_params(planned.graph)).generated.arena.views == {}


def test_grouped_matmul_tiles_with_ragged_edges():
    graph = parse("""def f(x: f32[300, 50], w: f32[50, 40], b: f32[40]) -> f32[300, 40] { return relu(x @ w + b) }""")
    program = PassManager("canonicalize,fuse").run(graph)
    program = program.with_kernels([replace(k, tiles=(("d0", 16), ("d1", 16), ("d2", 16))) for k in program.kernels])
    fn = tgt.build(program, reference.random_params(program.graph))
    assert "group = pid //" in fn.source and "tl.dot(" in fn.source
    inputs = reference.random_inputs(graph)
    want = reference.run(graph, inputs, params={v.name: a for v, a in fn.params.items()})
    assert_same(fn(*inputs), want, [v.type for v in graph.outputs], precision_in_force(fn))


def test_scalar_integer_division_and_cast_to_bf16():
    from tilegraph.ir.text import parse_graph

    graph = parse_graph("""func @main(%x1: i32[]) -> (bf16[], i32[], bool[2]) {
      %0 = abs(%x1) : i32[]
      %1 = constant() {value = 1, dtype = i32} : i32[]
      %2 = add(%0, %1) : i32[]
      %y = div(%x1, %2) : i32[]
      %y_1 = cast(%2) {dtype = bf16} : bf16[]
      %b = constant() {value = 1, dtype = i32, shape = [2]} : i32[2]
      %c = ge(%b, %x1) : bool[2]
      %m = max(%c) {axes = []} : bool[2]
      return %y_1, %y, %m
    }""")
    for value in (-7, 0, 3):
        check(graph, [np.array(value, dtype=np.int32)])


def test_masks_only_where_sizes_do_not_divide():
    even = parse("""def f(x: f32[64, 128], y: f32[64, 128]) -> f32[64, 128] { return x * y + x }""")
    odd = parse("""def f(x: f32[60, 100], y: f32[60, 100]) -> f32[60, 100] { return x * y + x }""")
    assert "mask=" not in tilegraph.compile(even, target="triton").source
    assert "mask=" in tilegraph.compile(odd, target="triton").source
    check(even)


@pytest.mark.parametrize("example", ["mlp", "lenet"])
def test_examples_run_under_the_interpreter(example):
    graph = tilegraph.frontends.dsl.parse_file(str(EXAMPLES / f"{example}.tg"))
    fn = check(graph)
    assert fn.source.count("@triton.jit") >= 2


@pytest.mark.parametrize("example", ["transformer_block", "resnet_block"])  # ~10 s each in the interpreter
def test_big_examples_run_under_the_interpreter(example):
    check(tilegraph.frontends.dsl.parse_file(str(EXAMPLES / f"{example}.tg")))


@given(st.data())
@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
def test_random_graphs_match_the_reference(data):
    check_random(data)


@given(head_split_attention())
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
def test_attention_reads_and_writes_through_the_head_split_and_merge(graph):
    fn = check(graph)
    if graph.inputs[0].name == "q" and graph.inputs[1].type.shape[1] > 1:  # q, k, v (not sliced from one qkv)
        (source,) = fn.generated.kernels  # read before the split and written after the merge: no copy made
        assert set(source.args) == set(fn.program.graph.inputs) | set(fn.program.graph.outputs)


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_grouped_query_attention_packs_a_groups_heads_into_the_rows(dtype):
    """Grouped-query attention (k and v repeated per head as repeat_kv writes them): one kernel reads each group's
    k and v once, through their broadcast; where it tiles several heads of a group, they are rows of one 2-D
    tl.dot with the query positions (no batched dot), and the result matches the reference."""
    batch, groups, repeats, length, depth = 2, 2, 4, 32, 16
    b = GraphBuilder("gqa")
    q = b.input("q", [batch, groups * repeats, length, depth], dtype=dtype)
    k, v = (b.input(n, [batch, groups, length, depth], dtype=dtype) for n in "kv")

    def repeat(x):
        wide = b.broadcast_to(b.reshape(x, shape=[batch, groups, 1, length, depth]),
                              shape=[batch, groups, repeats, length, depth])
        return b.reshape(wide, shape=[batch, groups * repeats, length, depth])

    graph = b.output(b.attention(q, repeat(k), repeat(v), causal=True))
    fn = check(graph)
    (kernel,) = [k for k in fn.program.kernels if k.kind == "attention"]
    assert [k.kind for k in fn.program.kernels] == ["attention"], "no copy of k or v per head"
    (heads,) = [n for n, loop in enumerate(kernel.domain.loops) if loop.extent == repeats]
    name = kernel.domain.loops[heads].name
    packed = kernel.with_tiles(tuple((n, repeats if n == name else t) for n, t in kernel.tiles))
    emitter = KernelEmitter(packed, packed.domain, "k", options=fn.options)
    plans = [emitter.dot_plan(i) for i, node in enumerate(packed.domain.nodes) if node.op == "matmul"]
    assert len(plans) == 2 and all(p is not None and not p.bs and heads in p.ms for p in plans)
    again = tgt.build(replace(fn.program, kernels=(packed,)), fn.params)
    inputs = reference.random_inputs(graph)
    assert_same(again(*inputs), reference.run(graph, inputs), [v.type for v in graph.outputs],
                half_precision(graph))


# ----- intermediates live in one arena ---------------------------------------------------------------------
CHAIN = """def f(x: f32[16, 32], w: f32[32, 32]) -> f32[16, 32] {
    a = x @ w
    b = reshape(a, shape=[32, 16])
    c = reshape(b * 2.0, shape=[16, 32])
    d = c @ w
    return reshape(relu(d @ w), shape=[16, 32])
}"""


def test_intermediates_are_views_into_a_reused_arena():
    graph = parse(CHAIN)
    fn = check(graph)
    arena = fn.generated.arena
    intermediates = [v for k in fn.program.kernels for v in k.outputs if v not in fn.program.graph.outputs]
    assert {v.name for v in arena.views} == {"b", "c"}  # reshapes of intermediates: views, not copies
    intermediates = [v for v in intermediates if v not in arena.views]
    assert set(arena.offsets) == set(intermediates) and len(intermediates) >= 3
    assert arena.source == "liveness"
    assert arena.size < sum(v.type.nbytes for v in intermediates)  # dead tensors' bytes are reused
    assert f"ARENA_BYTES = {arena.size}" in fn.source and fn.source.count("= _view(arena, ") == len(intermediates)
    assert "arena " in fn.report()


def test_arena_takes_its_offsets_from_the_memory_plan():
    graph = parse(CHAIN)
    fn = tilegraph.compile(graph, target="triton",
                           pipeline="canonicalize,fuse,tile{target=gpu-h100},memplan{capacity=1MiB,time_limit=2}")
    assert fn.program.memory_plan is not None and fn.generated.arena.source == "memory plan"
    for value, offset in fn.generated.arena.offsets.items():
        (stay,) = fn.program.memory_plan.residencies_of(value.name)
        assert stay.offset == offset
    inputs = reference.random_inputs(graph)
    params = {v.name: a for v, a in fn.params.items()}
    assert_same(fn(*inputs), reference.run(graph, inputs, params=params), [v.type for v in graph.outputs],
                precision_in_force(fn))


# ----- compile-only for Hopper: the kernels are real GPU code ---------------------------------------------
def test_kernels_compile_for_hopper_without_a_gpu(tmp_path, monkeypatch):
    from tilegraph.backends.triton.hopper import compile_kernels_isolated

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    source = """def f(x: f16[40, 48], w: f16[48, 32], b: f16[32], q: f16[1, 32, 16], k: f16[1, 32, 16],
                      v: f16[1, 32, 16]) -> (f16[40, 32], f16[1, 32, 16]) {
        return softmax(gelu(x @ w + b)), attention(q, k, v)
    }"""
    fn = tilegraph.compile(parse(source), target="triton")
    # carried reductions over bool and integer data: loop-carried accumulators must keep one type
    carried = parse("""def f(c: bool[7, 300], x: i32[7, 300]) -> (bool[7], bool[7], i32[7]) {
        return sum(c, axes=[1]), max(c, axes=[1]), sum(x * x, axes=[1])
    }""")
    carried_module = tgt.build(tiny_program(carried), {}).generated
    assert any(p.count > 1 for s in carried_module.kernels if s is not None for p in s.loops)
    checks = [(fn.generated, fn.compile_ahead(90)), (carried_module, compile_kernels_isolated(carried_module, arch=90))]
    for module, records in checks:
        assert len(records) == sum(s is not None for s in module.kernels) >= 1
        for record in records:
            assert 0 <= record.shared_bytes <= 232448 and record.ptx_lines > 0
    # tl.dot kernels (the GELU matmul, attention) run on Hopper's tensor cores; the others on none
    dots = {s.function: s.uses_dot for s in fn.generated.kernels if s is not None}
    assert sum(dots.values()) >= 2
    for record in checks[0][1]:
        assert (record.tensor_cores != "none") == dots[record.function], record
    # the report names each kernel's sm_90 resources
    report = fn.report()
    for record in checks[0][1]:
        line = next(line for line in report.splitlines() if f" {record.function} " in line)
        assert f"sm_90: shared {record.shared_bytes} B" in line


@pytest.mark.parametrize("example", ["lenet", "resnet_block"])
def test_convolutions_fit_hopper_shared_memory(example, tmp_path, monkeypatch):
    """Direct and implicit-GEMM convolutions whose tiles the tiling pass sized for on-chip data asked an
    H200 for 0.25-2 MiB of shared memory at launch (found on the GPU; the interpreter does not care):
    their reductions are walked in chunks, so every kernel fits sm_90's 227 KiB at its untuned launch
    configuration (three stages for dot kernels whose blocks fit). Built as on CUDA by default (TF32
    convolutions), each is an implicit GEMM on tensor cores with staged loads."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    fn = tilegraph.compile(tilegraph.frontends.dsl.parse_file(str(EXAMPLES / f"{example}.tg")), target="triton",
                           tf32=True)
    chunked = [s for s in fn.generated.kernels if s is not None and any(p.kind == "reduction" and p.count > 1
                                                                        for p in s.loops)]
    assert chunked, "some convolution walks its reduction in chunks"
    dots = {s.function for s in fn.generated.kernels if s is not None and s.uses_dot}
    for record in fn.compile_ahead(90):
        assert record.shared_bytes <= 232448, record
        if record.function in dots:  # every convolution an implicit GEMM on tensor cores, loads pipelined
            assert record.tensor_cores in ("wgmma", "mma") and record.cp_async and not record.spills, record
    if example == "resnet_block":  # its 3x3 weights, stored K-major (`packing.py`), staged in whole vectors
        assert fn.generated.layouts and all(r.cp_async_bytes == 16 for r in fn.gpu_resources.values()
                                            if r.function in dots)


@pytest.mark.parametrize("example", ["mlp", "transformer_block"])
def test_untuned_configurations_fit_hopper_shared_memory(example, tmp_path, monkeypatch):
    """What an untuned kernel launches with (`autotune.default_config`) fits sm_90's shared memory, and
    its dots run on tensor cores."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    fn = tilegraph.compile(tilegraph.frontends.dsl.parse_file(str(EXAMPLES / f"{example}.tg")), target="triton",
                           tf32=True)
    assert autotune.DOT_DEFAULT in fn.configs
    dots = {s.function for s in fn.generated.kernels if s is not None and s.uses_dot}
    for record in fn.compile_ahead(90):
        assert record.shared_bytes <= 232448 and not record.spills, record
        assert (record.tensor_cores != "none") == (record.function in dots), record


# ----- source: names, determinism, errors ------------------------------------------------------------
HOSTILE = ['x"; import os; os.system("echo pwned") #', "k\n@triton.jit", "a b\\c'", "\u00e9t\u00e9", "__import__"]


def test_aot_without_triton_says_what_is_missing(monkeypatch):
    import importlib.util

    from tilegraph.backends.triton import hopper

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "triton" else real(name, *a))
    fn = tilegraph.compile(parse(CASES["softmax"]), target="triton")
    with pytest.raises(TilegraphError, match=r"sm_90 needs the Python package 'triton'"):
        hopper.compile_kernels_isolated(fn.generated, arch=90)


def test_mangle_gives_safe_distinct_identifiers():
    seen = set()
    for name in HOSTILE + ["plain", "plain_", "plain_x5f_"]:
        out = mangle(name)
        assert re.fullmatch(r"[A-Za-z0-9_]+", out) and out.isidentifier()
        seen.add(out)
    assert len(seen) == len(HOSTILE) + 3


def test_hostile_names_never_reach_the_source():
    b = GraphBuilder('g"; evil()')
    x = b.input('x"""; os.system("rm")', [5, 7])
    w = b.param("w\n#", [7, 3])
    graph = b.output(b.relu(b.matmul(x, w)))
    program = PassManager("canonicalize,fuse,tile{target=gpu-h100}").run(graph)
    program = program.with_kernels([replace(k, name=HOSTILE[i % len(HOSTILE)]) for i, k in enumerate(program.kernels)])
    fn = tgt.build(program, reference.random_params(program.graph))
    compile(fn.source, "<generated>", "exec")  # valid Python
    for bad in HOSTILE:
        assert bad not in fn.source
    for kernel in program.kernels:
        assert mangle(kernel.name, prefix="") in fn.source  # it is there, spelled safely
    import io
    import tokenize

    strings = {t.string for t in tokenize.generate_tokens(io.StringIO(fn.source).readline) if t.type == tokenize.STRING}
    assert all(re.fullmatch(r"[\"']+[A-Za-z0-9 ().,'-]*[\"']+", text) for text in strings), strings
    inputs = reference.random_inputs(graph)
    params = {v.name: a for v, a in fn.params.items()}
    assert_same(fn(*inputs), reference.run(graph, inputs, params=params), [v.type for v in graph.outputs],
                precision_in_force(fn))


def test_source_is_deterministic():
    first = tilegraph.compile(parse(CASES["attention"]), target="triton").source
    second = tilegraph.compile(parse(CASES["attention"]), target="triton").source
    assert first == second
    assert tgt.generate_source(tilegraph.compile(parse(CASES["attention"]), target="triton").program) == first


def test_huge_tensors_index_in_int64():
    graph = parse("""def f(x: f16[65536, 32769]) -> f16[65536, 32769] { return relu(x) }""")  # > 2^31 elements
    source = tgt.generate_source(PassManager("canonicalize,fuse,tile{target=gpu-h100}").run(graph))
    assert ".to(tl.int64)" in source and "tl.zeros((1, 1), dtype=tl.int64)" in source
    small = tgt.generate_source(PassManager("canonicalize,fuse,tile{target=gpu-h100}").run(parse(CASES["softmax"])))
    assert "int64" not in small


def test_oversized_blocks_raise_a_clear_error():
    graph = parse("""def f(x: f32[2048, 1024]) -> f32[2048, 1024] { return relu(x) }""")
    program = PassManager("canonicalize,fuse").run(graph)
    program = program.with_kernels([replace(k, tiles=(("d0", 2048), ("d1", 1024))) for k in program.kernels])
    with pytest.raises(TilegraphError, match=r"kernel k0: node .* \(relu\) needs a block of 2097152"):
        tgt.build(program, {})
    assert MAX_NUMEL == 1 << 20


def test_unknown_kernel_kind_is_named():
    graph = parse("""def f(x: f32[4]) -> f32[4] { return relu(x) }""")
    program = PassManager("canonicalize,fuse").run(graph)
    program = program.with_kernels([replace(k, kind="mystery") for k in program.kernels])
    with pytest.raises(TilegraphError):
        tgt.build(program, {})


def test_torch_tensors_in_and_out():
    import torch

    graph = parse(CASES["softmax"])
    fn = tilegraph.compile(graph, target="triton")
    x = reference.random_inputs(graph)[0]
    (out,) = fn.run_torch(torch.from_numpy(x))
    assert isinstance(out, torch.Tensor)
    np.testing.assert_allclose(out.numpy(), reference.run(graph, [x])[0], rtol=1e-5, atol=1e-6)


# ----- autotuning ----------------------------------------------------------------------------------
def test_no_device_means_default_configs_and_no_timing():
    fn = check(parse(CASES["matmul_epilogue"]))
    assert not fn.tuned and fn.timings == {}
    assert fn.configs == [autotune.DOT_DEFAULT]  # a matmul whose three stages of blocks fit
    assert "warps 4 stages 3" in fn.backend_report()
    fn = check(parse(CASES["softmax"]))
    assert fn.configs == [autotune.DEFAULT] and "warps 4 stages 2" in fn.backend_report()


def test_dot_kernels_pipeline_three_stages_by_default_where_they_fit():
    """Untuned dot kernels (most of a whole model's in a short tuning budget) get three stages unless
    three stages of their operand blocks would take more than `autotune.STAGED_BYTES`, and 8 warps from a
    128 x 128 accumulator up (two warpgroups: at 4 warps a 128 x 256 block took 255 registers on sm_90)."""
    from tilegraph.backends.triton.runtime import untuned_config

    assert autotune.default_config(None) == autotune.DEFAULT
    assert autotune.default_config(autotune.STAGED_BYTES // 3) == autotune.DOT_DEFAULT
    assert autotune.default_config(autotune.STAGED_BYTES // 3 + 1) == autotune.DEFAULT
    assert autotune.default_config(autotune.STAGED_BYTES // 3, 128 * 256) == (8, 3)
    fn = tilegraph.compile(tilegraph.frontends.dsl.parse_file(str(EXAMPLES / "resnet_block.tg")), target="triton")
    for kernel, source, config in zip(fn.program.kernels, fn.generated.kernels, fn.configs):
        assert config == untuned_config(kernel, source, fn.options)
        assert (config == autotune.DOT_DEFAULT) == (source is not None and source.uses_dot)
    big = tilegraph.compile(parse("def f(a: f16[4096, 1024], b: f16[1024, 4096]) -> f16[4096, 4096] { return a @ b }"),
                            target="triton")
    assert "p128/128 p256/256" in big.backend_report() and big.configs == [(8, 3)]
    # attention's scores and output accumulators are live together: two of 128 x 64 or more run two warpgroups
    qkv = ", ".join(f"{n}: f16[4, 16, 2048, 64]" for n in "qkv")
    attention = tilegraph.compile(parse(f"def f({qkv}) -> f16[4, 16, 2048, 64] {{ return attention(q, k, v) }}"),
                                  target="triton")
    assert [source.uses_dot for source in attention.generated.kernels] == [True]
    assert [warps for warps, _ in attention.configs] == [8]


def test_config_cache_round_trips(tmp_path):
    cache = autotune.ConfigCache(tmp_path / "a.json")
    key = autotune.config_key("kernel text", "H100")
    assert cache.get(key) is None and key != autotune.config_key("kernel text", "A100")
    cache.put(key, (8, 3))
    assert autotune.ConfigCache(tmp_path / "a.json").get(key) == autotune.Choice(8, 3)
    assert autotune.candidates(True) != autotune.candidates(False)


def test_tune_picks_the_fastest_option(monkeypatch):
    import triton.testing

    monkeypatch.setattr(triton.testing, "do_bench", lambda fn, warmup, rep: fn())
    timings = {(4, 2): 3.0, (8, 2): 1.0, (2, 2): 2.0}
    best, times, complete = autotune.tune(lambda w, s: timings[(w, s)], tuple(timings))
    assert best == (8, 2) and times == timings and complete


# ----- models from the torch frontend ----------------------------------------------------------------
def _torch_models():
    import torch
    from torch import nn

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(24, 40), nn.Linear(40, 10)

        def forward(self, x):
            return torch.softmax(self.fc2(nn.functional.gelu(self.fc1(x))), dim=-1)

    class ConvBlock(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.bn = nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16)

        def forward(self, x):
            return nn.functional.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)

    class CausalAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv, self.out = nn.Linear(32, 96), nn.Linear(32, 32)

        def forward(self, x):
            q, k, v = self.qkv(x).reshape(1, 20, 3, 2, 16).permute(2, 0, 3, 1, 4)
            y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.out(y.transpose(1, 2).reshape(1, 20, 32))

    return {"mlp": (MLP(), (7, 24)), "conv_block": (ConvBlock(), (2, 3, 10, 10)),
            "causal_attention": (CausalAttention(), (1, 20, 32))}


@pytest.mark.parametrize("name", ["mlp", "conv_block", "causal_attention"])
def test_torch_frontend_models_match_torch_and_the_reference(name):
    import torch

    from tilegraph.frontends.fx import from_module

    torch.manual_seed(0)
    model, shape = _torch_models()[name]
    model.eval()
    x = torch.randn(*shape)
    graph = from_module(model, (x,))
    fn = check(graph, [x.numpy()])
    with torch.no_grad():
        want = model(x).numpy()
    tol = max(1e-4, precision_in_force(fn))
    np.testing.assert_allclose(fn(x.numpy())[0], want, rtol=tol, atol=tol * max(1.0, float(np.abs(want).max())))


def test_gpu_benchmark_refuses_to_run_without_a_gpu(tmp_path, capsys, monkeypatch):
    import importlib.util
    import sys

    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: the benchmark would run for real")
    spec = importlib.util.spec_from_file_location("tilegraph_gpu_benchmark", EXAMPLES.parent / "benchmarks" / "triton_gpu.py")
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, bench)
    spec.loader.exec_module(bench)
    out = tmp_path / "gpu.md"
    assert bench.main(["--out", str(out)]) == 2
    assert not out.exists()
    assert "no CUDA device" in capsys.readouterr().err


def test_kernels_that_differ_only_in_the_helper_they_call_stay_two_functions():
    """tanh(x) and expm1(x) kernels of one shape: equal up to names but for the helper (`_tg_tanh`,
    `_tg_expm1`), so the module must not bind one to the other."""
    graph = parse("""def f(a: f32[64, 32], b: f32[32, 32], c: f32[64, 32], d: f32[32, 32]) -> (f32[64, 32], f32[64, 32]) {
        return tanh(a @ b), expm1(c @ d)
    }""")
    fn = check(graph)
    assert "_tg_tanh(" in fn.source and "_tg_expm1(" in fn.source
    assert "the same kernel up to names" not in fn.source
