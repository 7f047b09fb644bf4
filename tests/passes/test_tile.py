"""tile: targets, tile sizes that fit the on-chip budget, traffic against the I/O lower bound, splitting."""
from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import graphs

from tilegraph.ir import GraphBuilder
from tilegraph.ir.program import Program
from tilegraph.ir.target import Target, TargetError, load_target, presets
from tilegraph.passes import PassManager
from tilegraph.passes.tiling import (TileReport, TilingError, cost_of, format_tiling, search, tile_kernel,
                                     tile_program)

TINY = Target("tiny", "accelerator", onchip_bytes=1024, double_buffer=True, line_bytes=16)


def fused(graph) -> Program:
    return PassManager("canonicalize,fuse").run(graph)


def tiled(graph, target: str | Target) -> Program:
    if isinstance(target, str):
        return PassManager(f"canonicalize,fuse,tile{{target={target}}}").run(graph)
    program = fused(graph)
    kernels, reports = tile_program(program, target)
    return replace(program, kernels=tuple(kernels), notes={**program.notes, "tiling": reports})


def matmul_graph(m: int, n: int, k: int):
    b = GraphBuilder("mm")
    b.output(b.matmul(b.input("a", [m, k]), b.param("b", [k, n])))
    return b.graph


# ----- targets ----------------------------------------------------------------------------------
def test_presets_load_by_name_and_path(tmp_path):
    assert {"cpu", "accel-small", "accel-large", "gpu-h100"} <= set(presets())
    small = load_target("accel-small")
    assert small.onchip_bytes == 256 * 1024 and small.double_buffer and small.buffers == 2
    assert load_target("cpu").l2_bytes == load_target("cpu").onchip_bytes
    assert load_target("gpu-h100").shared_memory_per_block == load_target("gpu-h100").onchip_bytes
    path = tmp_path / "mine.toml"
    path.write_text('kind = "accelerator"\n[memory]\nonchip_bytes = 4096\ndouble_buffer = true\n')
    mine = load_target(str(path))
    assert (mine.name, mine.onchip_bytes, mine.double_buffer) == ("mine", 4096, True)
    assert load_target(mine) is mine


def test_target_errors_are_clear(tmp_path):
    with pytest.raises(TargetError, match="unknown target 'tpu'; presets: accel-large, accel-small, cpu, edge-npu, gpu-h100, "):
        load_target("tpu")
    bad = tmp_path / "bad.toml"
    bad.write_text('kind = "cpu"\nonchip_bytes = 1024\nscratch = 3\n')
    with pytest.raises(TargetError, match="unknown field.*scratch"):
        load_target(str(bad))
    bad.write_text('kind = "cpu"\nonchip_bytes = "big"\n')
    with pytest.raises(TargetError, match="onchip_bytes must be int"):
        load_target(str(bad))
    with pytest.raises(TargetError, match="kind"):
        Target("x", "fpga", 1024)
    with pytest.raises(Exception, match="unknown target"):
        PassManager("canonicalize,fuse,tile{target=nope}").run(matmul_graph(4, 4, 4))


# ----- matmul against Hong-Kung ----------------------------------------------------------------------
@pytest.mark.parametrize("target", ["accel-small", "gpu-h100", "cpu"])
def test_matmul_tiling_fits_and_is_near_the_hong_kung_bound(target):
    program = tiled(matmul_graph(1024, 1024, 1024), target)
    (report,) = program.notes["tiling"]
    budget = load_target(target).onchip_bytes
    assert isinstance(report, TileReport) and report.working_set <= budget
    words = budget / 4
    assert report.bound == "hong-kung"
    assert report.lower_bound == int(2 * 1024 ** 3 / math.sqrt(words) * 4)
    if load_target(target).kind == "gpu":  # parallelism first: 256 tiles of 64x64 for 132 SMs, not 64 of 128x128
        assert report.parallel_tiles >= load_target(target).parallel_units
        assert report.lower_bound <= report.traffic <= 4 * report.lower_bound
    else:
        assert report.lower_bound <= report.traffic <= 3.5 * report.lower_bound
    (kernel,) = program.kernels
    assert {name for name, _ in kernel.tiles} == {loop.name for loop in kernel.domain.loops}


def test_gpu_contractions_feed_the_tensor_cores():
    """A tile narrower than the matrix unit (16 on gpu-h100) would run a contraction on scalar cores:
    the ResNet block's convolutions got 4 output channels per tile and ran 28x slower than torch."""
    from tilegraph.frontends.dsl import parse
    from tilegraph.passes.tiling.search import matrix_groups

    graph = parse("""def f(x: f32[32, 64, 56, 56], w: f32[64, 64, 3, 3], v: f32[256, 784], u: f32[784, 512])
                     -> (f32[32, 64, 56, 56], f32[256, 512]) { return relu(conv2d(x, w, padding=[1, 1])), v @ u }""")
    gpu = load_target("gpu-h100")
    for target, unit in ((gpu, 16), (replace(gpu, matrix_unit=0), 0)):
        program = tiled(graph, target)
        narrow = 0
        for kernel in program.kernels:
            domain, tiles = kernel.domain, dict(kernel.tiles)
            for group in matrix_groups(domain):
                for loops in group:
                    size = math.prod(tiles.get(domain.loops[d].name, domain.loops[d].extent) for d in loops)
                    whole = math.prod(domain.loops[d].extent for d in loops)
                    narrow += size < min(16, whole)
        assert (narrow == 0) if unit else (narrow > 0)


def _candidate_grid(domain):
    import numpy as np

    from tilegraph.ir.tile_model import candidates, thin

    cands = thin([candidates(loop.extent, loop.kind) for loop in domain.loops], 200_000)
    return np.stack(np.meshgrid(*[np.array(c, dtype=np.float64) for c in cands], indexing="ij"), -1) \
        .reshape(-1, len(domain.loops))


@settings(max_examples=25, deadline=None)
@given(n=st.sampled_from([1, 2, 8]), c=st.sampled_from([3, 16, 64, 96]), f=st.sampled_from([16, 64, 256]),
       hw=st.sampled_from([7, 14, 28, 56]), k=st.sampled_from([1, 3]), depthwise=st.booleans())
def test_gpu_convolutions_prefer_straight_operands(n, c, f, hw, k, depthwise):
    """Contract of the GPU choice: a contraction's K runs over one loop, the result's contiguous loop is
    tiled, and a depthwise convolution walks its window, whenever such a tiling fits and feeds the tensor
    cores; M and N run over one loop each too, unless rows over several loops (a convolution's 4 x 14
    pixels) keep more SMs busy or make dots `matrix_block` wide; and the
    chosen tiling's elements fit shared memory (a staged tile holds elements, not lines)."""
    import numpy as np

    from tilegraph.passes.tiling.search import evaluate, feeds_matrix_unit, straight_operands

    b = GraphBuilder("conv")
    f, groups = (c, c) if depthwise else (f, 1)
    x, w = b.input("x", [n, c, hw, hw]), b.param("w", [f, c // groups, k, k])
    b.output(b.relu(b.conv2d(x, w, padding=[k // 2, k // 2], groups=groups)))
    gpu = load_target("gpu-h100")
    (kernel,) = [kn for kn in tiled(b.graph, gpu).kernels if kn.domain.loops]
    domain, tiles = kernel.domain, dict(kernel.tiles)
    chosen = np.array([[tiles[loop.name] for loop in domain.loops]], dtype=np.float64)
    elements = replace(gpu, line_bytes=1)
    assert evaluate(domain, elements, chosen).working_set[0] <= gpu.onchip_bytes
    if depthwise:  # no contraction: the window is walked (its kh, kw loops one at a time)
        assert all(tiles[loop.name] == 1 for loop in domain.loops if loop.kind == "reduction")
    grid = _candidate_grid(domain)
    costs = evaluate(domain, gpu, grid)
    pool = (costs.working_set <= gpu.onchip_bytes) & feeds_matrix_unit(domain, gpu, grid)
    if not straight_operands(domain, gpu, chosen, rows_too=False)[0]:
        assert not (pool & straight_operands(domain, gpu, grid, rows_too=False)).any()
    elif not straight_operands(domain, gpu, chosen)[0]:  # rows over several loops: they beat every straight one

        def rank(tiles, parallel):
            narrow = not feeds_matrix_unit(domain, gpu, tiles[None], gpu.matrix_block)[0]
            return -min(parallel, gpu.parallel_units), narrow

        mine = rank(chosen[0], evaluate(domain, gpu, chosen).parallel[0])
        for j in np.flatnonzero(pool & straight_operands(domain, gpu, grid)):
            assert mine < rank(grid[j], costs.parallel[j])


@settings(max_examples=20, deadline=None)
@given(n=st.sampled_from([1, 8, 32]), c=st.sampled_from([16, 96, 384]), hw=st.sampled_from([7, 14, 56, 112]),
       rows=st.sampled_from([64, 4096]), cols=st.sampled_from([512, 2048, 8192]),
       dtype=st.sampled_from(["f32", "bf16"]))
def test_gpu_kernels_without_dots_keep_tiles_registers_hold(n, c, hw, rows, cols, dtype):
    """Contract: on a GPU, a kernel without tl.dot (a depthwise convolution with its epilogue, a softmax) takes a
    tiling whose working set is within REGISTER_TILE whenever one fits: such a tile lives in registers, and
    the shared-memory budget gave MobileNetV2's depthwise convolutions 255 registers a thread."""
    import numpy as np

    from tilegraph.passes.tiling.search import REGISTER_TILE, evaluate

    gpu = load_target("gpu-h100")
    b = GraphBuilder("no_dots")
    x = b.input("x", [n, c, hw, hw], dtype)
    w = b.param("w", [c, 1, 3, 3], dtype=dtype)
    b.output(b.relu(b.conv2d(x, w, padding=[1, 1], groups=c)))
    b.output(b.softmax(b.input("y", [rows, cols], dtype), axis=-1))
    for kernel in tiled(b.graph, gpu).kernels:
        domain, tiles = kernel.domain, dict(kernel.tiles)
        chosen = np.array([[tiles[loop.name] for loop in domain.loops]], dtype=np.float64)
        if evaluate(domain, gpu, chosen).working_set[0] > REGISTER_TILE:
            grid = _candidate_grid(domain)
            assert not (evaluate(domain, gpu, grid).working_set <= REGISTER_TILE).any()


def test_a_split_kernel_keeps_its_constants_with_their_readers():
    """A matmul + residual + layer norm kept whole does not fit, so it splits after the matmul; the norm's eps
    constant goes with the norm, not with the first piece (which wrote it out for the second to read)."""
    from tilegraph.frontends.dsl import parse

    graph = parse("""def f(x: f32[512, 768], r: f32[512, 768], s: f32[768], t: f32[768]) -> f32[512, 768] {
        param w: f32[768, 768]
        return layer_norm(x @ w + r, s, t, eps=1e-5) }""")
    first, second = tiled(graph, "gpu-h100").kernels
    assert [n.op for n in first.nodes] == ["matmul"] and "constant" in [n.op for n in second.nodes]
    assert [v.producer.op for v in first.outputs] == ["matmul"]


def test_a_patch_embedding_takes_wide_rows_over_short_k_steps():
    """ViT's patch embedding (16 x 16 kernel = stride, 3 channels) walks K 16 a step (one kernel row), which
    wgmma takes whatever its M: its rows still reach `matrix_block`. Asking K for 64 too made every wide
    tiling narrow, and the patch rows ran 16 at a time on mma.sync."""
    import math

    from tilegraph.ir.tile_model import matrix_groups

    b = GraphBuilder("patches")
    x, w = b.input("x", [32, 3, 224, 224], "bf16"), b.param("w", [768, 3, 16, 16], dtype="bf16")
    b.output(b.conv2d(x, w, stride=[16, 16]))
    gpu = load_target("gpu-h100")
    (kernel,) = tiled(b.graph, gpu).kernels
    tiles = dict(kernel.tiles)
    (m, n, k), = matrix_groups(kernel.domain)
    lanes = lambda group: math.prod(1 << (tiles[kernel.domain.loops[d].name] - 1).bit_length() for d in group)  # noqa: E731
    assert lanes(m) >= gpu.matrix_block and lanes(n) >= gpu.matrix_block and lanes(k) < gpu.matrix_block


def _attention_tiles(b: int, h: int, length: int, d: int, target: Target) -> tuple[int, int]:
    """(query tile, key/value tile) of the attention kernel the GPU tiling gives (B, H, L, D) inputs."""
    from tilegraph.frontends.dsl import parse

    t = f"f16[{b}, {h}, {length}, {d}]"
    graph = parse(f"def f(q: {t}, k: {t}, v: {t}) -> {t} {{ return attention(q, k, v) }}")
    (kernel,) = tiled(graph, target).kernels
    loops, tiles = kernel.domain.loops, dict(kernel.tiles)
    (kv,) = [loop.name for loop in loops if loop.kind == "reduction" and loop.extent == length]
    (q,) = [loop.name for loop in loops if loop.kind == "parallel" and loop.extent == length]
    return tiles[q], tiles[kv]


@settings(max_examples=12, deadline=None)
@given(heads=st.sampled_from([(1, 32), (4, 16), (8, 12)]), length=st.sampled_from([512, 1024, 2048, 4096]),
       d=st.sampled_from([64, 128]))
def test_gpu_attention_blocks_are_as_wide_as_the_tensor_cores_run_best(heads, length, d):
    """With work for every SM at either width, a GPU dot's blocks are `matrix_block` (64) wide a side: least
    traffic alone gave ViT's attention 16 query rows a program, too few for wgmma."""
    gpu = load_target("gpu-h100")
    q, kv = _attention_tiles(*heads, length, d, gpu)
    assert q >= gpu.matrix_block and kv >= gpu.matrix_block
    assert heads[0] * heads[1] * length // q >= gpu.parallel_units  # no SM left idle for it


@settings(max_examples=30, deadline=None)
@given(m=st.sampled_from([256, 4096, 6304]), n=st.sampled_from([768, 4096, 11008]),
       k=st.sampled_from([768, 4096, 11008]), epilogue=st.sampled_from(["none", "bias", "gate"]),
       dtype=st.sampled_from(["f32", "bf16"]), heads=st.sampled_from([0, 16]))
def test_gpu_accumulators_fit_the_registers(m, n, k, epilogue, dtype, heads):
    """Every GPU tiling's contraction results, live together (attention's scores and output), fit
    `accumulator_limit`; the shared-memory budget alone let a 256 x 128 score block beside its 256 x 64 output
    (a spill) once a dot's result no longer counted twice in it."""
    import numpy as np

    from tilegraph.frontends.dsl import parse
    from tilegraph.ir.tile_model import accumulator_limit, accumulators_fit, contractions

    gpu = load_target("gpu-h100")
    assert accumulator_limit(gpu) == 128 * 256  # 8 warps: 128 registers a thread
    if heads:  # attention over (1, heads, m, 64)
        t = f"{dtype}[1, {heads}, {m}, 64]"
        source = f"def f(q: {t}, k: {t}, v: {t}) -> {t} {{ return attention(q, k, v) }}"
    else:
        out = {"none": "x @ w", "bias": "x @ w + b", "gate": "silu(x @ w) * u"}[epilogue]
        source = (f"def f(x: {dtype}[{m}, {k}], w: {dtype}[{k}, {n}], b: {dtype}[{n}], u: {dtype}[{m}, {n}]) "
                  f"-> {dtype}[{m}, {n}] {{ return {out} }}")
    for kernel in tiled(parse(source), "gpu-h100").kernels:
        sizes = kernel.tile_sizes()
        row = np.array([[sizes[loop.name] for loop in kernel.domain.loops]], dtype=np.float64)
        assert not any(contractions(kernel.domain)) or accumulators_fit(kernel.domain, gpu, row)[0]


def test_a_gpu_holds_a_dot_result_and_its_epilogue_operands_once():
    """On a GPU only what a reduction step streams is double-buffered (a dot's operands); its result and
    its epilogue's operands move once per tile. Counted twice, Llama's gated MLP product (silu(x @ w) * u,
    4096 x 11008 x 4096 in bf16) fitted only 64 x 128 blocks, where its up projection took 128 x 256."""
    import numpy as np

    from tilegraph.frontends.dsl import parse
    from tilegraph.ir.tile_model import footprint

    t = "bf16[4096, 11008]"
    graph = parse(f"def f(x: bf16[4096, 4096], w: {t}, u: {t}) -> {t} {{ return silu(x @ w) * u }}")
    program = tiled(graph, "gpu-h100")
    (kernel,), (report,) = program.kernels, program.notes["tiling"]
    domain, sizes = kernel.domain, kernel.tile_sizes()
    assert sizes["d0"] >= 128 and sizes["d1"] >= 128
    row = np.array([[sizes[loop.name] for loop in domain.loops]], dtype=np.float64)
    reductions = {i for i, loop in enumerate(domain.loops) if loop.kind == "reduction"}
    held = {"internal": 1, "once": 1, "streamed": 2}
    kinds = {a: "internal" if a.role == "internal" else "streamed" if a.loops & reductions else "once"
             for a in domain.accesses}
    assert sorted(a.value.name for a, kind in kinds.items() if kind == "once") == \
        sorted(["u", graph.outputs[0].name])
    assert report.working_set == sum(held[kind] * footprint(a, row)[0] for a, kind in kinds.items())


@pytest.mark.parametrize("m, k, n", [(6304, 3072, 768), (6304, 768, 768), (4096, 768, 768), (4096, 768, 2304)])
def test_wide_gpu_dot_tiles_fill_their_waves(m, k, n):
    """A dot tile that keeps its SM to itself runs in waves of one program an SM; the search prefers tilings
    whose last wave is at least WAVE_FILL full. ViT's MLP-down matmul (6304 x 3072 x 768) took 128 x 256, 150
    programs on 132 SMs, two waves 57% full; BERT's projections 128 x 128, 192 programs, 73%."""
    from tilegraph.frontends.dsl import parse
    from tilegraph.ir.tile_model import ragged

    gpu = load_target("gpu-h100")
    graph = parse(f"def f(x: bf16[{m}, {k}], w: bf16[{k}, {n}], b: bf16[{n}]) -> bf16[{m}, {n}] "
                  "{ return x @ w + b }")
    program = tiled(graph, gpu)
    (kernel,), (report,) = program.kernels, program.notes["tiling"]
    sizes = kernel.tile_sizes()
    assert min(sizes["d0"], sizes["d1"]) >= gpu.matrix_block
    assert report.parallel_tiles > gpu.parallel_units and not ragged(report.parallel_tiles, gpu.parallel_units)
    unranked = tiled(graph, replace(gpu, parallel_units=1)).notes["tiling"][0]  # one SM: waves always full
    assert ragged(unranked.parallel_tiles, gpu.parallel_units)


def test_without_a_matrix_block_attention_takes_narrow_query_tiles():
    """The rule above is what moves the tiles: without it, ViT's 197-token attention took 16 query rows a
    program (a dot too narrow for wgmma), all 197 keys at once."""
    gpu = load_target("gpu-h100")
    assert _attention_tiles(32, 12, 197, 64, gpu)[0] >= gpu.matrix_block
    assert _attention_tiles(32, 12, 197, 64, replace(gpu, matrix_block=0)) == (16, 197)


def test_a_gpu_counts_the_values_of_a_reduction_step_once_per_block():
    """An attention's scores, scaled, masked and exponentiated at each key/value step live in registers one
    at a time: counted each, a causal attention with 128-wide heads fitted only 16 keys a step (and Llama's
    only 16 query rows a program); counted once per block, both tiles are 64."""
    from tilegraph.frontends.dsl import parse

    t = "bf16[32, 32, 128, 128]"
    graph = parse(f"def f(q: {t}, k: {t}, v: {t}) -> {t} {{ return attention(q, k, v, causal=true) }}")
    (kernel,) = tiled(graph, "gpu-h100").kernels
    tiles = dict(kernel.tiles)
    (q, kv) = [tiles[loop.name] for loop in kernel.domain.loops if loop.extent == 128 and loop.kind != "full"]
    assert min(q, kv) >= load_target("gpu-h100").matrix_block


def test_a_larger_budget_moves_fewer_bytes():
    small = tiled(matmul_graph(512, 512, 512), "accel-small").notes["tiling"][0]
    large = tiled(matmul_graph(512, 512, 512), "accel-large").notes["tiling"][0]
    assert large.traffic < small.traffic
    assert large.traffic == 3 * 512 * 512 * 4  # 3 MiB fits in 8 MiB double-buffered: compulsory only


def test_search_prefers_least_traffic_then_parallelism():
    program = fused(matmul_graph(256, 256, 256))
    domain = program.kernels[0].domain
    target = load_target("accel-small")
    best = search(domain, target)
    for tiles in ({"d0": 64, "d1": 64, "d2": 64}, {"d0": 32, "d1": 128, "d2": 16}, {"d0": 16, "d1": 16, "d2": 256}):
        other = cost_of(domain, target, tiles)
        if other.working_set <= target.onchip_bytes:
            assert best.traffic <= other.traffic


# ----- attention -------------------------------------------------------------------------------
def _attention(length: int, width: int = 32):
    b = GraphBuilder("att")
    q, k, v = (b.input(n, [2, length, width]) for n in "qkv")
    b.output(b.attention(q, k, v, causal=True))
    return b.graph


def test_attention_working_set_does_not_grow_with_sequence_length():
    target = load_target("accel-small")
    sets = []
    for length in (128, 1024):
        program = tiled(_attention(length), "accel-small")
        ((kernel, report),) = [(k, r) for k, r in zip(program.kernels, program.notes["tiling"])]
        assert kernel.kind == "attention" and report.working_set <= target.onchip_bytes
        domain = kernel.domain
        (kv,) = [loop.name for loop in domain.loops if loop.kind == "reduction"]
        query = domain.loops[domain.node_loops[-1][-3]].name  # the P @ V matmul's row loop
        fixed = cost_of(domain, target, {query: 32, kv: 32, "d0": 1})
        sets.append(fixed.working_set)
        assert report.traffic >= report.lower_bound
    assert sets[0] == sets[1]
    assert 1024 * 1024 * 4 > target.onchip_bytes  # one head's score matrix would not fit


# ----- budgets, splitting, errors --------------------------------------------------------------
@given(graphs(max_nodes=10))
def test_every_tile_fits_the_budget(graph):
    program = fused(graph)
    for target in (TINY, load_target("accel-small"), load_target("cpu")):
        kernels, reports = tile_program(program, target)
        assert len(kernels) == len(reports) >= len(program.kernels)
        assert sorted(map(id, (n for k in kernels for n in k.nodes))) == sorted(map(id, program.graph.nodes))
        for kernel, report in zip(kernels, reports):
            assert report.working_set <= target.onchip_bytes
            assert report.traffic >= report.lower_bound > 0 or kernel.io_bytes == 0
            domain = kernel.domain
            sizes = kernel.tile_sizes()
            for loop in domain.loops:
                assert 1 <= sizes[loop.name] <= loop.extent
                if loop.kind == "full":
                    assert sizes[loop.name] == loop.extent


def _softmax(rows: int, cols: int):
    b = GraphBuilder("sm")
    b.output(b.softmax(b.input("x", [rows, cols]), axis=-1))
    return b.graph


def test_rows_too_long_for_the_budget_are_split_into_streaming_kernels():
    program = fused(_softmax(2, 512))  # a whole row and its temporaries need ~8 KiB double-buffered
    (kernel,) = program.kernels
    pieces = tile_kernel(kernel, TINY)
    assert len(pieces) > 1
    for piece, report in pieces:
        assert report.working_set <= TINY.onchip_bytes and report.note.startswith("split from k0")
    assert tile_kernel(kernel, load_target("cpu"))[0][0].nodes == kernel.nodes  # fits: kept whole


def test_a_budget_below_any_tile_is_an_error():
    program = fused(matmul_graph(8, 8, 8))
    with pytest.raises(TilingError, match="budget of target crumb"):
        tile_program(program, Target("crumb", "accelerator", 64, double_buffer=True, line_bytes=16))


def test_tile_pass_reports_and_formats():
    b = GraphBuilder("mlp")
    x = b.input("x", [64, 128])
    h = b.relu(b.add(b.matmul(x, b.param("w", [128, 256])), b.param("b", [256])))
    b.output(b.softmax(h, axis=-1))
    program = PassManager("canonicalize,fuse,tile{target=gpu-h100}").run(b.graph)
    assert {"fused", "tiled"} <= program.properties and program.target.name == "gpu-h100"
    text = format_tiling(program)
    assert text.startswith("tiling for target gpu-h100") and "bound" in text
    assert all(r.working_set <= r.budget for r in program.notes["tiling"])


def test_kernels_equal_up_to_names_search_once_and_get_the_same_tiles(monkeypatch):
    """A repeated layer: one search per structure, and each copy tiled as the first."""
    import importlib

    from tilegraph.frontends.dsl import parse

    tile_module = importlib.import_module("tilegraph.passes.tiling.tile")  # the package exports the pass as `tile`

    graph = parse("""def f(x: f32[64, 96], w1: f32[96, 96], w2: f32[96, 96], w3: f32[96, 96],
                           w4: f32[96, 32]) -> f32[64, 32] {
        return relu(relu(relu(relu(x @ w1) @ w2) @ w3) @ w4)
    }""")
    calls = []
    original = tile_module.search
    monkeypatch.setattr(tile_module, "search", lambda *args, **kwargs: calls.append(1) or original(*args, **kwargs))
    program = PassManager("canonicalize,fuse,tile{target=cpu}").run(graph)
    assert len(program.kernels) == 4 and len(calls) == 3  # the second and third layers are one structure
    _, second, third, _ = program.kernels
    assert second.tiles == third.tiles and tile_module.structure(second) == tile_module.structure(third)


@pytest.mark.parametrize("m, k, n", [(197, 3072, 768), (128, 2816, 1024)])
def test_a_kernel_with_work_for_every_core_is_tiled_to_keep_them_busy(m, k, n):
    """On a CPU, least traffic alone put ViT's MLP down (197 x 3072 x 768) in one tile, run on one core; a
    kernel with BUSY_SECONDS of compute on one unit takes a tiling with a tile for every unit."""
    from tilegraph.passes.tiling.search import BUSY_SECONDS

    cpu = load_target("cpu")
    assert 2 * m * k * n * cpu.parallel_units / cpu.peak_flops >= BUSY_SECONDS
    (kernel,) = tiled(matmul_graph(m, n, k), "cpu").kernels
    tiles = dict(kernel.tiles)
    parallel = math.ceil(m / tiles["d0"]) * math.ceil(n / tiles["d1"])
    assert parallel >= cpu.parallel_units

