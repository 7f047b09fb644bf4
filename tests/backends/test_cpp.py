"""The C++/OpenMP backend: generated code computes what the reference computes, builds cleanly, is
deterministic, keeps user names out of the source, and reports build problems clearly."""
from __future__ import annotations

import re
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

sys.path.insert(0, str(Path(__file__).parent))  # native_checks: shared with test_sycl (importlib mode)
from native_checks import FAST_FLAGS, TINY, assert_close, bound_params, check_backend, expected, schedule
from strategies import graph_inputs, graphs, head_split_attention

import tilegraph
from tilegraph.backends import cpp, reference
from tilegraph.backends.cpp.build import DEFAULT_FLAGS, BuildError, build_library, compile_flags
from tilegraph.backends.cpp.names import mangle
from tilegraph.frontends.dsl import parse, parse_file
from tilegraph.ir import DType, GraphBuilder, InputError, TilegraphError
from tilegraph.ir.target import load_target
from tilegraph.passes import PassManager

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CPU = load_target("cpu")


def fast_build(program, params, **options):
    return cpp.build(program, params, cxxflags=FAST_FLAGS, **options)


# ----- every example, with the default flags and the cpu target's tiles ------------------------------
@pytest.mark.parametrize("name", ["mlp", "transformer_block", "resnet_block", "lenet"])
def test_examples_match_the_reference(name):
    graph = parse_file(EXAMPLES / f"{name}.tg")
    compiled = check_backend(cpp.build, graph, CPU)
    assert "#pragma omp parallel" in compiled.source and "__restrict__" in compiled.source
    calls = re.findall(r"err = (kernel_\w+)\(", compiled.source)
    assert len(calls) == len(compiled.program.kernels)
    assert compiled.source.count("static int kernel_") == len(set(calls)), "one function per distinct kernel"


def test_kernels_equal_up_to_names_are_one_function_called_with_their_own_pointers():
    """A repeated layer (the same shapes, other tensors) builds its function once."""
    graph = parse("""def f(x: f32[8, 32], w1: f32[32, 32], w2: f32[32, 32], w3: f32[32, 16]) -> f32[8, 16] {
        return relu(relu(relu(x @ w1) @ w2) @ w3)
    }""")
    compiled = check_backend(cpp.build, graph, CPU)
    calls = re.findall(r"err = (kernel_\w+)\(", compiled.source)
    assert len(calls) == 3 and calls[0] == calls[1] != calls[2]
    assert compiled.source.count("static int kernel_") == 2


def test_public_compile_entry_point():
    graph = parse_file(EXAMPLES / "mlp.tg")
    params = {v.name: a for v, a in reference.random_params(graph).items()}
    fn = tilegraph.compile(graph, target="cpp", params=params, cxxflags=FAST_FLAGS)
    x = reference.random_inputs(graph)
    assert_close(fn(*x), reference.run(graph, x, params=params), [graph.outputs[0].type])
    report = fn.report()
    assert "backend cpp" in report and "arena" in report and FAST_FLAGS.split()[0] in report


_MORE_THREADS_THAN_CPUS = """
import numpy as np
import tilegraph
from tilegraph.backends import reference
from tilegraph.ir.host import usable_cpus
from tilegraph.frontends.dsl import parse_file
graph = parse_file({path!r})
params = {{v.name: a for v, a in reference.random_params(graph).items()}}
fn = tilegraph.compile(graph, target="cpp", params=params)
assert fn.generated.scratch > 0 and fn.threads == usable_cpus()
x = reference.random_inputs(graph)
want = reference.run(graph, x, params=params)
fn.threads = usable_cpus() + 6
for got, ref in zip(fn(*x), want):
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
print("ok", fn.threads)
"""


def test_more_threads_than_cpus_get_their_own_scratch_blocks():
    """Threads set above the CPUs (OpenMP allowing them: OMP_NUM_THREADS) each get a scratch block of the working
    memory; the working block was sized once, for the CPUs, so this wrote past its end."""
    import os
    import subprocess

    from tilegraph.ir.host import usable_cpus

    script = _MORE_THREADS_THAN_CPUS.format(path=str(EXAMPLES / "resnet_block.tg"))
    env = {**os.environ, "OMP_NUM_THREADS": str(usable_cpus() + 6)}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["ok", str(usable_cpus() + 6)]


def test_threads_must_be_positive():
    graph = parse_file(EXAMPLES / "mlp.tg")
    params = {v.name: a for v, a in reference.random_params(graph).items()}
    fn = tilegraph.compile(graph, target="cpp", params=params, cxxflags=FAST_FLAGS)
    with pytest.raises(TilegraphError, match="threads must be at least 1"):
        fn.threads = 0


# ----- random graphs ---------------------------------------------------------------------------------
@settings(max_examples=15)
@given(st.data())
def test_random_graphs_match_the_reference(data):
    graph = data.draw(graphs(max_nodes=8))
    inputs = data.draw(graph_inputs(graph))
    for target in (TINY, CPU):
        check_backend(fast_build, graph, target, inputs)


@settings(max_examples=10)
@given(st.data())
def test_random_attention_convolution_and_normalisation_graphs(data):
    ops = ["attention", "softmax", "layer_norm", "matmul", "batch_matmul", "conv2d", "max_pool2d", "avg_pool2d",
           "add", "relu", "mul", "transpose", "sum", "mean", "gather", "concat", "reshape"]
    graph = data.draw(graphs(max_nodes=8, ops=ops))
    check_backend(fast_build, graph, TINY, data.draw(graph_inputs(graph)))


@settings(max_examples=8, deadline=None)
@given(head_split_attention())
def test_attention_reads_and_writes_through_the_head_split_and_merge(graph):
    for target in (TINY, CPU):
        check_backend(fast_build, graph, target, reference.random_inputs(graph))


@settings(max_examples=8)
@given(st.data())
def test_random_f16_and_bf16_graphs_round_like_the_reference(data):
    half = data.draw(st.sampled_from([DType.f16, DType.bf16]))
    graph = data.draw(graphs(max_nodes=5, dtypes=(half, DType.f32), ops=["add", "mul", "matmul", "sum", "relu", "exp",
                                                                          "cast", "softmax", "tanh"]))
    check_backend(fast_build, graph, TINY, data.draw(graph_inputs(graph)))


def test_a_concat_fuses_with_what_reads_it_and_a_wide_one_is_a_copy():
    """A concat of up to CONCAT_READS operands selects between padded reads inside the kernel reading it (Llama's
    rotary embedding, ViT's class token with the position embedding); one of more operands is a copy."""
    rotary = parse("""def f(q: f32[2, 3, 5, 8], c: f32[5, 8], s: f32[5, 8]) -> f32[2, 3, 5, 8] {
        let half = concat(neg(slice(q, start=[0, 0, 0, 4], stop=[2, 3, 5, 8])), slice(q, start=[0, 0, 0, 0], stop=[2, 3, 5, 4]), axis=3)
        return q * c + half * s
    }""")
    tokens = parse("""def f(cls: f32[2, 1, 6], x: f32[2, 4, 6], pos: f32[1, 5, 6]) -> f32[2, 5, 6] {
        return concat(cls, x, axis=1) + pos
    }""")
    many = parse("""def f(a: f32[3, 2], b: f32[3, 5], c: f32[3, 1], d: f32[3, 4], e: f32[3, 3]) -> f32[3, 15] {
        return relu(concat(a, b, c, d, e, axis=1)) * 2.0
    }""")
    for graph, fused in ((rotary, True), (tokens, True), (many, False)):
        for target in (TINY, CPU):
            compiled = check_backend(fast_build, graph, target)
            (kernel,) = [k for k in compiled.program.kernels if any(n.op == "concat" for n in k.nodes)]
            assert (len(kernel.nodes) > 1) == fused


# ----- hand-written schedules: ragged tiles, carried reductions, flash attention ---------------------
def test_ragged_tiles_with_a_carried_reduction_and_an_epilogue():
    b = GraphBuilder("mm")
    x, w, bias = b.input("x", [7, 10]), b.param("w", [10, 9]), b.param("b", [9])
    b.output(b.relu(b.add(b.matmul(x, w), bias)))
    program = PassManager("canonicalize,fuse").run(b.graph)
    (kernel,) = program.kernels
    program = program.with_kernels([replace(kernel, tiles=(("d0", 3), ("d1", 4), ("d2", 4)))])
    params = bound_params(b.graph, program)
    inputs = reference.random_inputs(b.graph)
    compiled = fast_build(program, params)
    assert "rlo2" in compiled.source  # the reduction is walked tile by tile
    assert_close(compiled(*inputs), expected(b.graph, program, params, inputs), [b.graph.outputs[0].type])


@pytest.mark.parametrize("batch", [(), (2,)])
def test_vector_micro_kernel_with_edges_and_a_carried_reduction(batch):
    b = GraphBuilder("mm")
    x, w, bias = b.input("x", [*batch, 19, 37]), b.param("w", [*batch, 37, 70]), b.param("b", [70])
    b.output(b.tanh(b.add(b.matmul(x, w), bias)))
    program = PassManager("canonicalize,fuse").run(b.graph)
    (kernel,) = program.kernels
    domain = kernel.domain
    sizes = {19: 10, 70: 64, 37: 16, 2: 1}
    program = program.with_kernels([replace(kernel, tiles=tuple((loop.name, sizes[loop.extent])
                                                                for loop in domain.loops))])
    params = bound_params(b.graph, program)
    inputs = reference.random_inputs(b.graph)
    compiled = fast_build(program, params)
    assert "vacc[uu][q]" in compiled.source and "rlo" in compiled.source
    assert_close(compiled(*inputs), expected(b.graph, program, params, inputs), [b.graph.outputs[0].type])


@pytest.mark.parametrize("stride", [1, 2])
def test_vector_micro_kernel_on_padded_and_strided_convolutions(stride):
    b = GraphBuilder("conv")
    x, w = b.input("x", [1, 3, 9, 70]), b.param("w", [8, 3, 3, 3])
    b.output(b.relu(b.conv2d(x, w, stride=stride, padding=1)))
    compiled = check_backend(fast_build, b.graph, CPU)
    assert "vacc[uu][q]" in compiled.source
    if stride == 1:  # 70-wide rows as input rows: folded into flat blocks
        assert "tg_load_masks(a" in compiled.source
    else:  # strided rows: vectors over the 8 output channels (conv.py), 35 columns in blocks of 7;
        # only the masked channel block can run, and only it is there
        assert "// register blocks: mu in {7}, nv in {8}\n" in compiled.source and "w_packed" in compiled.source
        assert "row[vv] = vv < nv ?" in compiled.source and "nv == 16" not in compiled.source


NATIVE_FLAGS = "-O1 -march=native -fopenmp"  # the AVX-512 masked loads where the host has them


@pytest.mark.parametrize("channels,tile,widened", [(6, 2, 6), (3, 1, 3), (16, 2, 8), (9, 5, 8), (20, 4, 8)])
def test_narrow_channel_tiles_widen_to_the_register_block(channels, tile, widened):
    """A conv whose tile gives the register block fewer than `min_rows` output channels runs
    `min_rows` per tile (ragged last tile, odd widths, padding, a residual epilogue); not below
    `threads_hint` parallel tiles."""
    b = GraphBuilder("conv")
    x, w = b.input("x", [1, 5, 7, 19]), b.param("w", [channels, 5, 3, 3])
    r = b.input("r", [1, channels, 7, 19])
    b.output(b.relu(b.add(b.conv2d(x, w, padding=1), r)))
    program = PassManager("canonicalize,fuse").run(b.graph)
    (kernel,) = program.kernels
    tiles = tuple((loop.name, tile if loop.extent == channels else loop.extent)
                  for loop in kernel.domain.loops)
    program = program.with_kernels([replace(kernel, tiles=tiles)])
    params = bound_params(b.graph, program)
    inputs = reference.random_inputs(b.graph)
    for flags in (FAST_FLAGS, NATIVE_FLAGS):
        compiled = cpp.build(program, params, cxxflags=flags, micro=cpp.MicroKernel(threads_hint=1))
        assert f"d0<{channels} parallel tile {widened}>" in compiled.source
        assert_close(compiled(*inputs), expected(b.graph, program, params, inputs), [b.graph.outputs[0].type])
    if widened > tile:  # with the default hint (8 parallel tiles) these few tiles stay as chosen
        assert f"d0<{channels} parallel tile {tile}>" in cpp.generate_source(program)



@pytest.mark.parametrize("flags", [FAST_FLAGS, NATIVE_FLAGS])
@pytest.mark.parametrize("shape,weight,attrs", [
    ((1, 3, 9, 70), (8, 3, 3, 3), dict(padding=1)),
    ((2, 5, 11, 23), (7, 5, 3, 3), dict(padding=2, dilation=2)),
    ((1, 6, 13, 37), (9, 2, 3, 5), dict(padding=(1, 2), groups=3)),
    ((1, 4, 10, 19), (6, 4, 4, 4), dict(padding=3, stride=(1, 1))),
    ((1, 4, 17, 33), (5, 4, 3, 3), dict(padding=1, stride=2)),
])
def test_convolutions_with_padding_dilation_groups_and_tails(flags, shape, weight, attrs):
    """Padded rows load only their lanes inside the image (masked loads), partial rows at the edge
    too; odd widths leave tails in every register block."""
    b = GraphBuilder("conv")
    x, w, bias = b.input("x", list(shape)), b.param("w", list(weight)), b.param("b", [weight[0], 1, 1])
    b.output(b.relu(b.add(b.conv2d(x, w, **attrs), bias)))
    compiled = check_backend(cpp.build, b.graph, CPU, cxxflags=flags)
    body = compiled.source.split("}  // namespace")[-1]
    same = attrs.get("stride", 1) == 1 and compiled.program.graph.outputs[0].type.shape[-1] == shape[-1]
    if same:  # output rows as wide as input rows: flat blocks over rows and columns
        assert "tg_load_masks(a" in body and "static const uint16_t tgm" in body
    elif attrs.get("stride", 1) == 1:
        assert "tg_load_lanes(" in body


@pytest.mark.parametrize("flags", [FAST_FLAGS, NATIVE_FLAGS])
@pytest.mark.parametrize("shape,weight,attrs,reduce_tile", [
    ((1, 3, 7, 9), (5, 3, 3, 3), dict(padding=1), None),  # 63 points: a partial last flat block
    ((2, 4, 6, 13), (11, 4, 3, 3), dict(padding=2, dilation=2), None),  # 8 + 3 channels: scalar rows
    ((1, 6, 5, 11), (9, 2, 3, 5), dict(padding=(1, 2), groups=3), None),
    ((1, 8, 5, 7), (4, 8, 1, 1), dict(), None),  # no padding: only the range's end is masked
    ((1, 5, 9, 10), (6, 5, 3, 3), dict(padding=1), 2),  # input channels in tiles of 2 (carried)
])
def test_flat_blocks_over_rows_and_columns(flags, shape, weight, attrs, reduce_tile):
    """Stride-1 windows whose output rows are as wide as the input rows run flat blocks over
    (row, column) with padding masks from a table; odd sizes, tails, dilation, groups."""
    b = GraphBuilder("conv")
    x, w = b.input("x", list(shape)), b.param("w", list(weight))
    r = b.input("r", [shape[0], weight[0], shape[2], shape[3]])
    b.output(b.relu(b.add(b.conv2d(x, w, **attrs), r)))
    program = schedule(b.graph, CPU)
    if reduce_tile:
        (kernel,) = program.kernels
        domain = kernel.domain
        tiles = dict(kernel.tiles)
        channel = next(loop.name for loop in domain.loops if loop.kind == "reduction" and loop.extent == shape[1])
        program = program.with_kernels([replace(kernel, tiles=tuple({**tiles, channel: reduce_tile}.items()))])
    params = bound_params(b.graph, program)
    inputs = reference.random_inputs(b.graph)
    compiled = cpp.build(program, params, cxxflags=flags)
    assert "tg_load_masks(a" in compiled.source
    assert compiled.source == cpp.generate_source(program)  # deterministic
    assert_close(compiled(*inputs), expected(b.graph, program, params, inputs), [b.graph.outputs[0].type])


@pytest.mark.parametrize("flags", [FAST_FLAGS, NATIVE_FLAGS])
@pytest.mark.parametrize("m,k,n", [(1, 784, 512), (1, 37, 10), (3, 129, 77), (1, 5, 300)])
def test_linear_layers_and_matrix_vector_products(flags, m, k, n):
    """x @ w.T + b as torch's Linear gives it (the transposed weight is folded): one row (M = 1)
    takes a wide register block, odd widths a masked edge."""
    b = GraphBuilder("linear")
    x, w, bias = b.input("x", [m, k]), b.param("w", [n, k]), b.param("b", [n])
    b.output(b.add(b.matmul(x, b.transpose(w, perm=[1, 0])), bias))
    compiled = check_backend(cpp.build, b.graph, CPU, cxxflags=flags)
    assert "vacc[uu][q]" in compiled.source and compiled.generated.folding.inputs


@pytest.mark.parametrize("m,k,n,tiles,packed", [
    (16, 64, 64, (8, 32, 64), True),     # whole panels
    (9, 40, 40, (8, 32, 16), True),      # a partial last panel (8 of 16 columns): zero-padded, masked
    (8, 48, 64, (8, 16, 16), True),      # the reduction in tiles (carried), one panel a block
    (8, 32, 40, (8, 40, 32), True),      # the whole width as one tile, 40 columns in 3 panels
    (8, 32, 40, (8, 24, 32), False),     # tiles starting mid-panel: read row-major
])
def test_a_matmul_weight_is_read_from_panels_one_vector_wide(m, k, n, tiles, packed):
    """x @ w with w a parameter: the register block reads w from its load-time copy in panels of 16 columns
    ([N/16, K, 16]: the columns down the reduction contiguous) wherever its column tiles start on a panel."""
    b = GraphBuilder("panels")
    x, w = b.input("x", [m, k]), b.param("w", [k, n])
    b.output(b.relu(b.matmul(x, w)))
    program = schedule(b.graph, CPU)
    (kernel,) = program.kernels
    program = program.with_kernels([kernel.with_tiles(tuple(zip((loop.name for loop in kernel.domain.loops),
                                                                  tiles)))])
    params = bound_params(b.graph, program)
    compiled = cpp.build(program, params, cxxflags=NATIVE_FLAGS)
    packs = compiled.generated.folding.packs
    assert [(p.source.name, p.axis, p.block) for p in packs] == ([("w", 1, 16)] if packed else [])
    inputs = reference.random_inputs(b.graph)
    assert_close(compiled(*inputs), expected(b.graph, program, params, inputs), [b.graph.outputs[0].type])


@pytest.mark.parametrize("limit,packed", [(None, ["w1", "w2"]), (64 * 48 * 4, ["w1"]), ("0", []), ("0B", []),
                                          ("8KiB", ["w1"])])
def test_packed_weight_copies_stay_within_their_limit(limit, packed, monkeypatch):
    """Load-time panels copy a matmul's weight beside the caller's: kernels past `packed_weight_limit` (or
    $TILEGRAPH_PACKED_WEIGHTS) read theirs as stored, with the same results; the report says what is held."""
    b = GraphBuilder("limit")
    x, w1, w2 = b.input("x", [8, 32]), b.param("w1", [32, 48]), b.param("w2", [48, 64])
    b.output(b.matmul(b.relu(b.matmul(x, w1)), w2))
    program = schedule(b.graph, CPU)
    params = bound_params(b.graph, program)
    if isinstance(limit, str):
        monkeypatch.setenv("TILEGRAPH_PACKED_WEIGHTS", limit)
    compiled = cpp.build(program, params, cxxflags=NATIVE_FLAGS, packed_weight_limit=limit if isinstance(limit, int)
                         else None)
    assert [p.source.name for p in compiled.generated.folding.packs] == packed
    held = sum(p.nbytes for p in compiled.generated.folding.packs)
    assert f"packed weights: {len(packed)} load-time copies" in compiled.backend_report() and held <= 1 << 30
    inputs = reference.random_inputs(b.graph)
    assert_close(compiled(*inputs), expected(b.graph, program, params, inputs), [b.graph.outputs[0].type])


def test_an_unreadable_packed_weight_limit_is_named():
    b = GraphBuilder("limit")
    b.output(b.matmul(b.input("x", [8, 32]), b.param("w", [32, 48])))
    program = schedule(b.graph, CPU)
    with pytest.raises(TilegraphError, match=r"packed_weight_limit \(TILEGRAPH_PACKED_WEIGHTS\): cannot read 'lots'"):
        cpp.build(program, bound_params(b.graph, program), packed_weight_limit="lots")


def test_a_row_reduction_over_one_row_tiles_runs_on_scalars():
    """A layer norm tiled one row at a time: its means reduce along the row, and the register block's vector runs
    across rows, one lane used. It ran as 16-lane gathers per element (ViT's: 2.6 ms a call); now each block is
    one point, its row summed across the lanes of one vector (`_lane_loop`)."""
    b = GraphBuilder("norm")
    x, g, beta = b.input("x", [5, 48]), b.param("g", [48]), b.param("b", [48])
    b.output(b.layer_norm(x, g, beta))
    program = schedule(b.graph, CPU)
    (kernel,) = program.kernels
    rows, columns = kernel.domain.loops[0].name, kernel.domain.loops[1].name
    program = program.with_kernels([kernel.with_tiles(((rows, 1), (columns, 48)))])
    params = bound_params(b.graph, program)
    compiled = cpp.build(program, params, cxxflags=NATIVE_FLAGS)
    assert "g[vv] = (vv < nv ?" not in compiled.source and "lane0[l] = (lane0[l] + " in compiled.source
    inputs = reference.random_inputs(b.graph)
    assert_close(compiled(*inputs), expected(b.graph, program, params, inputs), [b.graph.outputs[0].type])


@settings(max_examples=12, deadline=None)
@given(op=st.sampled_from(["sum", "mean", "max", "min"]), rows=st.integers(1, 3), n=st.integers(2, 150),
       nan=st.booleans())
def test_a_reduction_along_a_row_split_across_lanes_matches_the_reference(op, rows, n, nan):
    """One output point per register block (one-row tiles), its reduction along the row split across the lanes
    of a vector where the row is two vectors or longer, the remainder one by one: the reference's result, a NaN
    anywhere in the row included."""
    b = GraphBuilder("lanes")
    x = b.input("x", [rows, n])
    b.output(getattr(b, op)(x, axes=[1]))
    program = schedule(b.graph, CPU)
    (kernel,) = program.kernels
    tiles = tuple((loop.name, 1 if loop.kind == "parallel" else loop.extent) for loop in kernel.domain.loops)
    compiled = cpp.build(program.with_kernels([kernel.with_tiles(tiles)]), {}, cxxflags=NATIVE_FLAGS)
    assert ("lane0[l]" in compiled.source) == (n >= 32)
    inputs = reference.random_inputs(b.graph)
    if nan:
        inputs[0][rows - 1, n // 2] = np.nan
    assert_close(compiled(*inputs), expected(b.graph, program, {}, inputs), [b.graph.outputs[0].type])


def test_folded_constants_are_literals_in_elementwise_code_and_micro_kernels():
    """pow(x, 3) with a literal exponent (the prelude turns it into products), and a constant
    matrix as a matmul operand, read as a broadcast literal in the vector register block."""
    b = GraphBuilder("consts")
    x = b.input("x", [5, 24])
    cube = b.pow(x, b.constant(3.0, DType.f32))
    half = b.constant(0.5, DType.f32, shape=[24, 37])
    b.output(b.add(b.matmul(cube, half), b.mul(b.constant(2.0, DType.f32), b.constant(1.5, DType.f32))))
    compiled = check_backend(cpp.build, b.graph, CPU)
    code = compiled.source.split("}  // namespace")[-1]
    assert "((float)3.0)" in code and "((float)0.5)" in code and "vacc[uu][q]" in code


def test_calls_with_converted_strided_or_wrong_inputs():
    """Exact arrays take the direct path; others are converted (or rejected) as the reference does,
    and outputs that repeat a value or return an input are separate arrays."""
    b = GraphBuilder("calls")
    x, w = b.input("x", [6, 5]), b.param("w", [5, 4])
    y = b.matmul(x, w)
    b.output(y, y, x)
    program = schedule(b.graph, CPU)
    params = bound_params(b.graph, program)
    compiled = fast_build(program, params)
    (a,) = reference.random_inputs(b.graph)
    want = expected(b.graph, program, params, [a])
    for argument in (a, np.asfortranarray(a), a.astype(np.float64), a.tolist()):
        got = compiled(argument)
        assert_close(got, want, [v.type for v in b.graph.outputs])
        assert got[0] is not got[1] and got[2] is not argument
    with pytest.raises(InputError):
        compiled(a[:, :4])


def test_parameter_only_nodes_are_folded_at_load_time():
    """A transposed weight and batch-norm's scale from its parameters run once, at load time: the
    generated code reads the folded tensors instead."""
    b = GraphBuilder("fold")
    x, w = b.input("x", [5, 12]), b.param("w", [9, 12])
    var, gamma = b.param("var", [9]), b.param("gamma", [9])
    wt = b.transpose(w, perm=[1, 0])
    scale = b.mul(b.rsqrt(b.add(b.mul(var, var), b.constant(1e-5, DType.f32))), gamma)  # var**2: no NaN
    b.output(b.relu(b.mul(b.matmul(x, wt), scale)))
    graph = b.graph
    program = schedule(graph, CPU)
    compiled = check_backend(fast_build, graph, CPU)
    folding = compiled.generated.folding
    assert {n.op for n in folding.nodes} >= {"transpose", "rsqrt", "mul", "add"}
    assert "// transpose" not in compiled.source and "tg_rsqrt(" not in compiled.source.split("}  // namespace")[-1]
    assert len(folding.inputs) == 2  # w transposed, the scale
    unfolded = cpp.source.generate(program, cpp.Dialect(), fold=False)
    assert "// transpose" in unfolded.source and not unfolded.folding.inputs


@pytest.mark.parametrize("mask", ["causal", "bool", None])
def test_flash_attention_with_ragged_key_tiles(mask):
    keys = 12 if mask == "causal" else 10
    b = GraphBuilder("att")
    q, k, v = b.input("q", [2, 12, 8]), b.input("k", [2, keys, 8]), b.input("v", [2, keys, 6])
    extra = [b.input("mask", [12, keys], DType.bool)] if mask == "bool" else []
    b.output(b.attention(q, k, v, *extra, causal=mask == "causal"))
    program = PassManager("canonicalize,fuse").run(b.graph)
    (kernel,) = program.kernels
    assert kernel.kind == "attention"
    tiles = tuple((loop.name, 5 if loop.kind != "full" else loop.extent) for loop in kernel.domain.loops)
    program = program.with_kernels([replace(kernel, tiles=tiles)])
    inputs = reference.random_inputs(b.graph)
    if mask == "bool":
        inputs[-1][:, 0] = True
    compiled = fast_build(program, {})
    assert "m_[r]" in compiled.source  # online softmax state, no score matrix
    assert_close(compiled(*inputs), reference.run(b.graph, inputs), [b.graph.outputs[0].type])


def test_flash_attention_with_long_key_tiles_and_tails():
    """Key tiles of 19 then 18: the softmax sum takes one 16-lane chunk plus a tail, p @ v four rows
    per pass plus a tail."""
    b = GraphBuilder("att")
    q, k, v = b.input("q", [1, 9, 8]), b.input("k", [1, 37, 8]), b.input("v", [1, 37, 20])
    b.output(b.attention(q, k, v))
    program = PassManager("canonicalize,fuse").run(b.graph)
    (kernel,) = program.kernels
    sizes = {9: 4, 37: 19}
    tiles = tuple((loop.name, sizes.get(loop.extent, 1) if loop.kind != "full" else loop.extent)
                  for loop in kernel.domain.loops)
    program = program.with_kernels([replace(kernel, tiles=tiles)])
    inputs = reference.random_inputs(b.graph)
    compiled = fast_build(program, {})
    assert "part[q]" in compiled.source and "w3 * " in compiled.source
    assert_close(compiled(*inputs), reference.run(b.graph, inputs), [b.graph.outputs[0].type])


# ----- torch models ----------------------------------------------------------------------------------
try:
    import torch
except ImportError:  # torch is optional: only the tests marked needs_torch skip without it
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="the torch-model tests need torch")


def _block():
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(4, 8, 3, padding=1)
            self.bn = torch.nn.BatchNorm2d(8)
            self.fc = torch.nn.Linear(8, 5)

        def forward(self, x):
            y = torch.relu(self.bn(self.conv(x)))
            return torch.log_softmax(self.fc(y.mean(dim=(2, 3))), dim=-1)

    return Block()


def _torch_check(model, *inputs):
    from tilegraph.frontends.fx import from_module

    model.eval()
    graph = from_module(model, inputs)
    fn = tilegraph.compile(graph, target="cpp", cxxflags=FAST_FLAGS)
    with torch.no_grad():
        want = model(*inputs)
    got = fn(*[t.numpy() for t in inputs])
    error = np.abs(got[0].astype(np.float64) - want.numpy()).max()
    assert error < 1e-4 * max(1.0, float(np.abs(want.numpy()).max())), error
    return fn


@needs_torch
@pytest.mark.parametrize("model, shape", [
    (_block, (2, 4, 6, 6)),
    (lambda: torch.nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, batch_first=True), (2, 5, 16)),
])
def test_torch_models_match_eager(model, shape):
    torch.manual_seed(0)
    _torch_check(model(), torch.randn(*shape))


HOSTILE = ['x"); system("rm -rf /"); //', "a\nb", "*/ #include <evil_h> /*", "#include <cstdio>", '")', "\\"]


@needs_torch
def test_hostile_torch_module_names_never_reach_the_source():
    torch.manual_seed(0)
    model = torch.nn.Sequential()
    for n, name in enumerate(HOSTILE):
        model.add_module(name, torch.nn.Linear(6, 6) if n % 2 == 0 else torch.nn.Tanh())
    fn = _torch_check(model, torch.randn(3, 6))
    for name in HOSTILE:  # tensors are named after the modules, through [A-Za-z0-9_] only
        for fragment in (name, "<evil", "system(", "<cstdio>", "rm -rf"):
            assert fragment not in fn.source


# ----- generated source: determinism, names, errors, cache ------------------------------------------
def test_same_program_gives_byte_identical_source():
    text = (EXAMPLES / "transformer_block.tg").read_text()
    program = schedule(parse(text), CPU)
    sources = {cpp.generate_source(program), cpp.generate_source(program)}
    sources.add(cpp.generate_source(schedule(parse(text), CPU)))  # a fresh parse of the same model
    assert len(sources) == 1


def test_hostile_dsl_and_builder_names_never_reach_the_source():
    source = """
def tg_run(int: f32[4, 8]) -> f32[4, 8] {
    param kernel_0: f32[8, 8]
    param p0.arena: f32[8]
    float = int @ kernel_0 + p0.arena
    return relu(float)
}
"""
    graph = parse(source)
    compiled = check_backend(fast_build, graph, CPU)
    assert "float* __restrict__" in compiled.source  # our own identifiers only
    assert compiled.source.count('extern "C" int tg_run(') == 1
    assert "p0.arena" not in compiled.source and "p0_2earena" not in compiled.source.split("//")[0]
    b = GraphBuilder('g"); #include <x> /*')
    x = b.input(HOSTILE[0], [3])
    b.output(b.exp(b.add(x, b.param(HOSTILE[2], [3]))))
    compiled = check_backend(fast_build, b.graph, CPU)
    for name in HOSTILE:
        assert name not in compiled.source
    assert "#include <x>" not in compiled.source and "<evil" not in compiled.source
    assert "include_evil_h" in compiled.source  # the parameter's name, spelled as an identifier


def test_mangled_names_use_a_safe_alphabet_and_stay_distinct():
    names = HOSTILE + ["a_b", "a.b", "a b", "ä"]
    mangled = [mangle(n) for n in names]
    assert len(set(mangled)) == len(names)
    for m in mangled:
        assert set(m) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


def test_build_errors_show_the_compiler_message_and_the_generated_line():
    source = "int ok() { return 0; }\nint broken() { return undefined_thing; }\n"
    with pytest.raises(BuildError) as info:
        build_library(source, "g++", compile_flags("-O0"))
    message = str(info.value)
    assert "generated source line 2" in message and "undefined_thing" in message
    assert "int broken() { return undefined_thing; }" in message


def test_a_missing_compiler_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    graph = parse_file(EXAMPLES / "mlp.tg")
    with pytest.raises(TilegraphError, match="no C\\+\\+ compiler"):
        cpp.build(schedule(graph, CPU), {})


def test_cxxflags_from_the_environment_and_the_disk_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("TILEGRAPH_CXXFLAGS", "-O0")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    b = GraphBuilder("small")
    b.output(b.relu(b.input("x", [5])))
    program = schedule(b.graph, CPU)
    first, second = cpp.build(program, {}), cpp.build(program, {})
    assert first.build_info["flags"].split()[0] == "-O0"
    assert (first.build_info["cached"], second.build_info["cached"]) == (False, True)
    assert Path(first.build_info["library"]).parent.is_relative_to(tmp_path / "tilegraph")
    assert (tmp_path / "tilegraph").stat().st_mode & 0o077 == 0  # private to the user
    x = np.array([-1, 2, -3, 4, 0], dtype=np.float32)
    np.testing.assert_array_equal(second(x)[0], np.maximum(x, 0))


def test_a_toolchains_generic_cxxflags_leave_the_kernels_flags_alone(monkeypatch):
    """conda's compiler activation sets CXXFLAGS for other builds (no OpenMP, an old -march): not ours."""
    monkeypatch.delenv("TILEGRAPH_CXXFLAGS", raising=False)
    monkeypatch.setenv("CXXFLAGS", "-march=nocona -mtune=haswell -O2 -pipe")
    assert compile_flags() == [*DEFAULT_FLAGS, "-std=c++17", "-shared", "-fPIC"]


def test_gather_index_out_of_range_raises():
    b = GraphBuilder("emb")
    table, ids = b.param("table", [5, 3]), b.input("ids", [4], DType.i64)
    b.output(b.gather(table, ids, axis=0))
    program = schedule(b.graph, CPU)
    compiled = fast_build(program, bound_params(b.graph, program))
    ok = np.array([0, -1, 4, 2], dtype=np.int64)
    assert_close(compiled(ok), expected(b.graph, program, compiled.params, [ok]), [b.graph.outputs[0].type])
    with pytest.raises(IndexError):
        compiled(np.array([0, 5, 1, 1], dtype=np.int64))


def test_write_build_writes_source_and_library(tmp_path):
    graph = parse_file(EXAMPLES / "mlp.tg")
    program = schedule(graph, CPU)
    compiled = fast_build(program, bound_params(graph, program))
    paths = cpp.write_build(compiled, tmp_path / "out")
    assert [p.suffix for p in paths] == [".cpp", ".so"]
    assert paths[0].read_text() == compiled.source and paths[1].stat().st_size > 0


