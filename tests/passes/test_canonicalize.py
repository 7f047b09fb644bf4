"""canonicalize: each rewrite on its own, the cases it must leave alone, and properties on random graphs."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import graph_inputs, graphs

from tilegraph.backends import reference
from tilegraph.ir import DType, Graph, GraphBuilder
from tilegraph.ir.program import Kernel, Program
from tilegraph.ir.program_text import print_program
from tilegraph.ir.text import print_graph
from tilegraph.passes import PassContext, PassManager, find_program_problems
from tilegraph.passes.canonicalize import CanonicalizeOptions, canonicalize, canonicalize_graph


def run_canon(graph: Graph, **options) -> Graph:
    """canonicalize through the pass (with verification) and return the new graph."""
    program = canonicalize(Program.unfused(graph), CanonicalizeOptions(**options), PassContext())
    assert find_program_problems(program) == []
    return program.graph


def ops(graph: Graph) -> list[str]:
    return [node.op for node in graph.nodes]


def assert_same_results(before: Graph, after: Graph, seed: int = 0) -> None:
    inputs = reference.random_inputs(before, seed)
    expected = reference.run(before, inputs, seed=seed)
    got = reference.run(after, inputs, seed=seed)
    for e, g in zip(expected, got, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)


def builder(*inputs: str) -> tuple[GraphBuilder, list]:
    b = GraphBuilder("main")
    return b, [b.input(f"x{i}", t) for i, t in enumerate(inputs)]


# ----- algebraic simplification ------------------------------------------------------------------
@pytest.mark.parametrize("op, constant_first", [("mul", False), ("mul", True), ("add", False), ("add", True),
                                                ("sub", False), ("div", False)])
def test_identity_element_is_removed(op, constant_first):
    b, (x,) = builder("f32[3, 4]")
    unit = b.constant(1.0 if op in ("mul", "div") else 0.0)
    y = b.op(op, unit, x) if constant_first else b.op(op, x, unit)
    g = b.output(b.exp(y))
    after = run_canon(g)
    assert ops(after) == ["exp"]
    assert after.nodes[0].inputs[0] is after.inputs[0]


@pytest.mark.parametrize("op", ["sub", "div"])
def test_identity_on_the_left_of_sub_and_div_is_kept(op):
    b, (x,) = builder("f32[3]")
    g = b.output(b.op(op, b.constant(0.0 if op == "sub" else 1.0), x))
    assert op in ops(run_canon(g))


def test_times_one_that_broadcasts_is_kept():
    """x * ones[2, 3] has type f32[2, 3], not x's f32[3]: removing it would change the result's shape."""
    b, (x,) = builder("f32[3]")
    g = b.output(b.mul(x, b.constant(1.0, shape=(2, 3))))
    after = run_canon(g)
    assert "mul" in ops(after)
    assert after.outputs[0].type.shape == (2, 3)
    assert_same_results(g, after)


def test_times_one_with_an_integer_and_bool_operand():
    b, (i, m) = builder("i32[4]", "bool[4]")
    g = b.output(b.mul(i, b.constant(1, DType.i32)), b.add(m, b.constant(False, DType.bool)))
    after = run_canon(g)
    assert ops(after) == []
    assert after.outputs == after.inputs


def test_double_transpose_to_identity_disappears():
    b, (x,) = builder("f32[2, 3, 4]")
    g = b.output(b.exp(b.transpose(b.transpose(x, perm=(2, 0, 1)), perm=(1, 2, 0))))
    assert ops(run_canon(g)) == ["exp"]


def test_double_transpose_becomes_one():
    b, (x,) = builder("f32[2, 3, 4]")
    g = b.output(b.transpose(b.transpose(x, perm=(1, 0, 2)), perm=(0, 2, 1)))
    after = run_canon(g)
    assert ops(after) == ["transpose"]
    assert after.nodes[0].inputs[0] is after.inputs[0]
    assert_same_results(g, after)


def test_double_transpose_keeps_an_inner_transpose_used_elsewhere():
    b, (x,) = builder("f32[2, 3]")
    inner = b.transpose(x)
    g = b.output(b.transpose(inner, perm=(1, 0)), b.exp(inner))
    after = run_canon(g)
    assert sorted(ops(after)) == ["exp", "transpose"]
    assert after.outputs[0] is after.inputs[0]


def test_a_transpose_of_merged_axes_moves_before_the_merge():
    """transpose(reshape(x)) merging [b, g, r, l, d] into [b, g * r, l, d]: the transpose reads x (the merged axes
    moved together), the merge comes last; a reshape that splits an axis (a head split) stays first."""
    b, (x,) = builder("f32[2, 3, 4, 5, 6]")
    g = b.output(b.transpose(b.reshape(x, shape=(2, 12, 5, 6)), perm=(0, 2, 1, 3)))
    after = run_canon(g)
    assert ops(after) == ["transpose", "reshape"]
    assert after.nodes[0].inputs[0] is after.inputs[0] and after.nodes[0].attrs["perm"] == (0, 3, 1, 2, 4)
    assert_same_results(g, after)
    b, (x,) = builder("f32[2, 5, 24]")
    split = b.output(b.transpose(b.reshape(x, shape=(2, 5, 4, 6)), perm=(0, 2, 1, 3)))
    assert ops(run_canon(split)) == ["reshape", "transpose"]


@given(st.sampled_from([(6, 4, 5), (2, 12, 5), (2, 3, 20), (6, 20), (24, 5), (2, 60), (2, 3, 2, 10), (2, 3, 4, 5)]),
       st.data())
def test_a_transpose_after_any_reshape_keeps_its_meaning(shape, data):
    perm = tuple(data.draw(st.permutations(range(len(shape)))))
    b, (x,) = builder("f32[2, 3, 4, 5]")
    g = b.output(b.exp(b.transpose(b.reshape(x, shape=shape), perm=perm)))
    after = run_canon(g)
    assert_same_results(g, after)
    if perm != tuple(range(len(shape))) and len(shape) < 4:  # merges only: the transpose reads x itself
        assert ops(after)[0] == "transpose" and after.nodes[0].inputs[0] is after.inputs[0]


@given(st.permutations(range(3)), st.lists(st.booleans(), min_size=3, max_size=3))
def test_a_split_after_a_transpose_moves_before_it(perm, splits):
    """reshape(transpose(x)) that only splits axes: the split comes first, the transpose reads it through bare
    loops (grouped-query attention's q, split into groups after its head split), with the same meaning."""
    factors = {6: (2, 3), 4: (2, 2), 5: (5,)}
    b, (x,) = builder("f32[6, 4, 5]")
    moved = b.transpose(x, perm=tuple(perm))
    shape = tuple(f for size, split in zip(moved.type.shape, splits) for f in (factors[size] if split else (size,)))
    g = b.output(b.exp(b.reshape(moved, shape=shape)))
    after = run_canon(g)
    assert_same_results(g, after)
    if len(shape) > 3 and perm != [0, 1, 2]:
        assert ops(after) == ["reshape", "transpose", "exp"]


@pytest.mark.parametrize("cubic, flipped", [(0.044715, False), (0.044715, True), (0.05, False)])
def test_gelu_written_out_with_tanh_becomes_one_op(cubic, flipped):
    """GPT-2's gelu_new, 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x ** 3))), nine ops: one gelu
    (approximate="tanh"), whichever side of each commutative op its constant is on; another cubic term stays."""
    b, (x,) = builder("f32[4, 6]")
    half = b.mul(b.constant(0.5), x) if flipped else b.mul(x, 0.5)
    cube = b.mul(b.constant(cubic), b.pow(x, 3.0)) if flipped else b.mul(b.pow(x, 3.0), cubic)
    inner = b.mul(b.add(cube, x) if flipped else b.add(x, cube), math.sqrt(2 / math.pi))
    one_plus = b.add(b.constant(1.0), b.tanh(inner)) if flipped else b.add(b.tanh(inner), 1.0)
    g = b.output(b.mul(one_plus, half) if flipped else b.mul(half, one_plus))
    after = run_canon(g)
    if cubic == 0.044715:
        assert ops(after) == ["gelu"] and after.nodes[0].attrs["approximate"] == "tanh"
    else:
        assert "gelu" not in ops(after)
    assert_same_results(g, after)


def test_identity_transpose_disappears():
    b, (x,) = builder("f32[2, 3]")
    g = b.output(b.exp(b.transpose(x, perm=(0, 1))))
    assert ops(run_canon(g)) == ["exp"]


def test_reshape_chain_becomes_one_reshape():
    b, (x,) = builder("f32[2, 3, 4]")
    g = b.output(b.reshape(b.reshape(b.reshape(x, shape=(6, 4)), shape=(24,)), shape=(4, 6)))
    after = run_canon(g)
    assert ops(after) == ["reshape"]
    assert after.nodes[0].inputs[0] is after.inputs[0] and after.outputs[0].shape == (4, 6)
    assert_same_results(g, after)


def test_reshape_chain_back_to_the_source_shape_disappears():
    b, (x,) = builder("f32[2, 3]")
    g = b.output(b.exp(b.reshape(b.reshape(x, shape=(3, 2)), shape=(2, 3))))
    assert ops(run_canon(g)) == ["exp"]


def test_reshape_to_the_same_shape_disappears():
    b, (x,) = builder("f32[2, 3]")
    g = b.output(b.exp(b.reshape(x, shape=(2, -1))))
    assert ops(run_canon(g)) == ["exp"]


def test_cast_to_the_same_dtype_disappears_and_real_casts_stay():
    b, (x,) = builder("f32[2]")
    g = b.output(b.exp(b.cast(x, dtype="f32")), b.cast(x, dtype="i32"))
    assert ops(run_canon(g)) == ["exp", "cast"]


def test_broadcast_to_the_same_shape_disappears():
    b, (x,) = builder("f32[2, 3]")
    g = b.output(b.exp(b.broadcast_to(x, shape=(2, 3))))
    assert ops(run_canon(g)) == ["exp"]


def test_broadcast_chain_becomes_one():
    b, (x,) = builder("f32[3]")
    g = b.output(b.broadcast_to(b.broadcast_to(x, shape=(1, 3)), shape=(4, 3)))
    after = run_canon(g)
    assert ops(after) == ["broadcast_to"]
    assert_same_results(g, after)


@pytest.mark.parametrize("mask", ["all true", "all false", "mixed"])
def test_where_on_a_known_uniform_condition_picks_its_side(mask):
    """An attention mask traced as data (ViT's: all true), broadcast to the scores, selects one side
    outright; a mask that varies stays a where."""
    data = {"all true": np.ones((1, 4, 4), bool), "all false": np.zeros((1, 4, 4), bool),
            "mixed": np.tril(np.ones((4, 4), bool))[None]}[mask]
    b, (x,) = builder("f32[2, 4, 4]")
    cond = b.broadcast_to(b.param("m", [1, 4, 4], data=data, dtype="bool"), shape=(2, 4, 4))
    g = b.output(b.where(cond, x, b.constant(-1.0)))
    after = run_canon(g)
    assert ("where" in ops(after)) == (mask == "mixed")
    assert_same_results(g, after)


def test_simplify_false_leaves_identities():
    b, (x,) = builder("f32[3]")
    g = b.output(b.mul(x, 1.0))
    assert ops(run_canon(g, simplify=False)) == ["constant", "mul"]


# ----- common subexpressions ---------------------------------------------------------------------
def test_cse_merges_equal_nodes_and_chains():
    b, (x,) = builder("f32[3]")
    g = b.output(b.relu(b.exp(x)), b.relu(b.exp(x)))
    after = run_canon(g)
    assert ops(after) == ["exp", "relu"]
    assert after.outputs[0] is after.outputs[1]


def test_cse_keeps_different_attributes_operands_and_signed_zeros():
    b, (x,) = builder("f32[2, 3]")
    g = b.output(b.sum(x, axes=0), b.sum(x, axes=1), b.add(x, b.constant(0.5)), b.add(x, b.constant(-0.5)),
                 b.div(b.constant(1.0), b.constant(0.0)), b.div(b.constant(1.0), b.constant(-0.0)))
    after = run_canon(g)
    assert ops(after).count("sum") == 2 and ops(after).count("add") == 2
    assert_same_results(g, after)  # +inf and -inf stay apart


def test_cse_never_merges_inputs_or_params():
    b, (x, y) = builder("f32[3]", "f32[3]")
    p = b.param("p", "f32[3]")
    q = b.param("q", "f32[3]")
    g = b.output(b.exp(x), b.exp(y), b.exp(p), b.exp(q))
    after = run_canon(g)
    assert ops(after) == ["exp"] * 4
    assert [v.name for v in after.params] == ["p", "q"]


# ----- values of constants and indices -----------------------------------------------------------------
@given(readers=st.integers(2, 5), masked=st.booleans(), scale=st.floats(-4, 4, allow_nan=False, width=32))
def test_each_reader_gets_its_own_copy_of_a_value_of_constants_and_indices(readers, masked, scale):
    """A scale (and a causal mask, iota against iota) that CSE shares between readers is copied per reader,
    nodes feeding it included, so each fuses into its reader's kernel; results are unchanged, and with the
    switch off the readers share one."""
    b, xs = builder(*["f32[4, 4]"] * readers)
    outs = []
    for x in xs:
        y = b.mul(x, b.constant(scale))
        if masked:
            rows, cols = b.iota(shape=[4, 4], axis=0, dtype="i32"), b.iota(shape=[4, 4], axis=1, dtype="i32")
            y = b.where(b.ge(rows, cols), y, b.constant(-1.0))
        outs.append(y)
    g = b.output(*outs)
    after = run_canon(g)
    index_nodes = [n for n in after.nodes if n.op in ("constant", "iota", "ge")]
    assert index_nodes and all(len(n.result.users) <= 1 for n in index_nodes)
    assert ops(after).count("iota") == (2 * readers if masked else 0)
    assert_same_results(g, after)
    shared = run_canon(g, private_index_values=False)
    assert [n for n in shared.nodes if n.op == "constant" and len(n.result.users) > 1]


# ----- dead code -------------------------------------------------------------------------------------
def test_dead_nodes_and_dead_params_with_data_go_but_inputs_and_plain_params_stay():
    b, (x,) = builder("f32[3]")
    b.param("free", "f32[3]")
    b.param("weights", "f32[3]", np.ones(3, np.float32))
    b.exp(x)
    g = b.output(b.relu(x))
    after = run_canon(g)
    assert ops(after) == ["relu"]
    assert [v.name for v in after.params] == ["free"]
    assert [v.name for v in after.inputs] == ["x0"]


# ----- constant folding ------------------------------------------------------------------------------
def test_uniform_result_folds_to_a_constant():
    b, (x,) = builder("f32[2, 3]")
    c = b.exp(b.add(b.constant(1.0, shape=(2, 3)), b.constant(2.0)))
    g = b.output(b.mul(x, c))
    after = run_canon(g)
    assert ops(after) == ["constant", "mul"]
    const = after.nodes[0]
    assert const.attrs["shape"] == (2, 3) and const.attrs["value"] == pytest.approx(np.exp(np.float32(3.0)))
    assert_same_results(g, after)


def test_fold_to_one_then_simplify():
    b, (x,) = builder("f32[3]")
    g = b.output(b.mul(x, b.sub(b.constant(3.0), b.constant(2.0))))
    assert ops(run_canon(g)) == []


def test_non_uniform_result_folds_to_a_param_with_data():
    b, (x,) = builder("f32[3]")
    w = b.param("w", "f32[3]", np.array([1.0, 2.0, 3.0], np.float32))
    g = b.output(b.add(x, b.mul(w, 2.0)))
    after = run_canon(g)
    assert ops(after) == ["add"]
    (folded,) = after.params
    np.testing.assert_array_equal(folded.data, [2.0, 4.0, 6.0])
    assert_same_results(g, after)


def test_params_without_data_are_not_folded():
    b, (x,) = builder("f32[3]")
    w = b.param("w", "f32[3]")
    g = b.output(b.add(x, b.mul(w, 2.0)))
    assert ops(run_canon(g)) == ["constant", "mul", "add"]


def test_fold_limit_and_fold_switch():
    b, (x,) = builder("f32[8]")
    w = b.param("w", "f32[8]", np.arange(8, dtype=np.float32))
    g = b.output(b.add(x, b.exp(w)))
    assert ops(run_canon(g, fold_limit=4)) == ["exp", "add"]
    assert ops(run_canon(g, fold=False)) == ["exp", "add"]
    assert ops(run_canon(g)) == ["add"]


def test_a_parameter_read_only_transposed_is_stored_transposed_at_any_size():
    """nn.Linear's weight: matmul(x, transpose(w)) reads w as [in, out], so w is stored that way."""
    b, (x,) = builder("f32[2,4]")
    w = b.param("w", "f32[3,4]", np.arange(12, dtype=np.float32).reshape(3, 4))
    g = b.output(b.matmul(x, b.transpose(w, perm=[1, 0])))
    after = run_canon(g, fold_limit=4)
    assert ops(after) == ["matmul"]
    (stored,) = after.params
    assert stored.name == "w_t"
    np.testing.assert_array_equal(stored.data, np.arange(12).reshape(3, 4).T)
    assert_same_results(g, after)


def test_a_parameter_read_both_ways_is_not_duplicated_past_the_fold_limit():
    b, (x,) = builder("f32[4,4]")
    w = b.param("w", "f32[4,4]", np.arange(16, dtype=np.float32).reshape(4, 4))
    g = b.output(b.add(b.matmul(x, b.transpose(w, perm=[1, 0])), w))
    assert ops(run_canon(g, fold_limit=4)) == ["transpose", "matmul", "add"]


def test_folding_skips_ops_that_fail_at_compile_time():
    b = GraphBuilder("main")
    table = b.param("table", "f32[2, 3]", np.zeros((2, 3), np.float32))
    index = b.param("index", "i64[1]", np.array([5]))
    g = b.output(b.gather(table, index))
    assert ops(run_canon(g)) == ["gather"]


def test_sources_are_not_folded():
    b = GraphBuilder("main")
    g = b.output(b.iota(shape=(2, 3)))
    assert ops(run_canon(g)) == ["iota"]


# ----- decomposition ---------------------------------------------------------------------------------
@pytest.mark.parametrize("make", [
    lambda b, x: b.softmax(x), lambda b, x: b.log_softmax(x, axis=0), lambda b, x: b.layer_norm(x),
    lambda b, x: b.rms_norm(x), lambda b, x: b.attention(x, x, x, causal=True),
])
def test_composites_are_decomposed(make):
    b, (x,) = builder("f32[2, 4, 8]")
    g = b.output(make(b, x))
    program = canonicalize(Program.unfused(g), CanonicalizeOptions(), PassContext())
    assert not any(node.opdef.is_composite for node in program.graph.nodes)
    assert program.properties == {"canonical", "decomposed"}
    assert_same_results(g, program.graph)


@pytest.mark.parametrize("mask", ["none", "causal", "keep [b, 1, l, s]", "bias [h, l, s]", "bias [l, s]",
                                  "keep [b, h, l, s]"])
def test_grouped_query_attention_reads_each_group_once(mask):
    """k and v repeated per head as transformers' repeat_kv writes them (reshape(broadcast_to(reshape(x)))): the
    decomposition runs over [b, g, r, l, d], reading them through the broadcast, so no [b, h, s, d] copy is left;
    the heads are merged after. Every mask shape keeps its meaning."""
    batch, groups, repeats, length, depth = 2, 2, 3, 5, 4
    heads = groups * repeats
    b = GraphBuilder("gqa")
    q = b.input("q", [batch, heads, length, depth])
    k, v = (b.input(n, [batch, groups, length, depth]) for n in "kv")

    def repeat(x):
        wide = b.broadcast_to(b.reshape(x, shape=[batch, groups, 1, length, depth]),
                              shape=[batch, groups, repeats, length, depth])
        return b.reshape(wide, shape=[batch, heads, length, depth])

    shapes = {"keep [b, 1, l, s]": [batch, 1, length, length], "bias [h, l, s]": [heads, length, length],
              "bias [l, s]": [length, length], "keep [b, h, l, s]": [batch, heads, length, length]}
    extra = [b.input("m", shapes[mask], dtype="bool" if mask.startswith("keep") else "f32")] if mask in shapes else []
    g = b.output(b.attention(q, repeat(k), repeat(v), *extra, causal=mask == "causal"))
    after = run_canon(g)
    matmuls = [n for n in after.nodes if n.op == "matmul"]
    assert [n.result.type.shape for n in matmuls] == [(batch, groups, repeats, length, length),
                                                      (batch, groups, repeats, length, depth)]
    assert not any(n.op == "reshape" and n.inputs[0].producer is not None and n.inputs[0].producer.op == "broadcast_to"
                   for n in after.nodes), "no copy of k or v per head"
    if mask.startswith("keep"):  # (all false rows: -inf everywhere, NaN on both sides; keep one key per row)
        inputs = reference.random_inputs(g)
        inputs[-1][..., 0] = True
        want, got = reference.run(g, inputs), reference.run(after, inputs)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
    else:
        assert_same_results(g, after)


def test_decompose_false_keeps_composites():
    b, (x,) = builder("f32[2, 8]")
    g = b.output(b.softmax(b.mul(x, 1.0)))
    program = canonicalize(Program.unfused(g), CanonicalizeOptions(decompose=False), PassContext())
    assert ops(program.graph) == ["softmax"]
    assert program.properties == {"canonical"}


# ----- the pass as a whole ---------------------------------------------------------------------------
def test_input_is_not_mutated_and_statistics_are_counted():
    b, (x,) = builder("f32[2, 8]")
    g = b.output(b.softmax(b.add(b.exp(x), 0.0)), b.exp(x))
    text = print_graph(g)
    ctx = PassContext()
    PassManager("canonicalize,canonicalize").run(g, ctx)
    assert print_graph(g) == text
    stats = ctx.statistics["canonicalize"]
    assert stats["decomposed"] == 1 and stats["simplified"] == 1 and stats["merged"] == 1
    assert stats["nodes"] > 0


def test_a_fused_program_is_re_derived_unfused():
    b, (x,) = builder("f32[4]")
    g = b.output(b.relu(b.exp(x)))
    fused = replace(Program(g, (Kernel("k0", tuple(g.nodes), (("d0", 4),)),)), properties=frozenset({"fused"}))
    ctx = PassContext()
    program = canonicalize(fused, CanonicalizeOptions(), ctx)
    assert len(program.kernels) == 2 and program.properties == {"canonical", "decomposed"}
    assert ctx.diagnostics


def test_canonicalize_graph_works_in_place():
    b, (x,) = builder("f32[4]")
    g = b.output(b.add(b.exp(x), b.exp(x)))
    counts = canonicalize_graph(g)
    assert counts["merged"] == 1 and ops(g) == ["exp", "add"]


# ----- properties on random graphs -------------------------------------------------------------------
def _params_by_name(graph: Graph, seed: int) -> dict[str, np.ndarray]:
    return {v.name: a for v, a in reference.random_params(graph, seed).items() if v.data is None}


@given(graph=graphs(max_nodes=10), data=st.data())
def test_canonicalize_keeps_reference_results(graph, data):
    inputs = data.draw(graph_inputs(graph))
    params = _params_by_name(graph, seed=3)
    expected = reference.run(graph, inputs, params=params)
    program = PassManager("canonicalize").run(graph)  # verify_each is on
    names = {v.name for v in program.graph.params}
    got = reference.run(program.graph, inputs, params={k: v for k, v in params.items() if k in names})
    for e, g, value in zip(expected, got, graph.outputs, strict=True):
        assert g.shape == e.shape and g.dtype == e.dtype, value
        if value.dtype.is_float:
            scale = max(1.0, float(np.nanmax(np.abs(np.where(np.isinf(e), 0, e)), initial=0.0)))
            np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5 * scale, equal_nan=True)
        else:
            np.testing.assert_array_equal(g, e)


@given(graph=graphs(max_nodes=10))
def test_canonicalize_is_idempotent(graph):
    once = PassManager("canonicalize").run(graph)
    twice = PassManager("canonicalize").run(once)
    assert print_program(twice) == print_program(once)
    assert find_program_problems(once) == []


def test_canonical_and_decomposed_are_checked_properties():
    b, (x,) = builder("f32[2, 8]")
    b.exp(x)
    g = b.output(b.softmax(x))
    claimed = replace(Program.unfused(g), properties=frozenset({"canonical", "decomposed"}))
    problems = find_program_problems(claimed)
    assert any("property canonical: %0 (exp) is dead code" in p for p in problems)
    assert any("property decomposed:" in p and "softmax" in p for p in problems)


# ----- zero padding into convolutions ---------------------------------------------------------------
def _zero_padded(b: GraphBuilder, x, pads: tuple[tuple[int, int], tuple[int, int]], fill: float = 0.0):
    """`x` with constant blocks concatenated around it along W, then H (as the fx frontend converts F.pad)."""
    for axis, (before, after) in ((3, pads[1]), (2, pads[0])):
        pieces = []
        for amount in (before, after):
            shape = list(x.type.shape)
            shape[axis] = amount
            pieces.append(b.constant(fill, x.type.dtype, shape) if amount else None)
        parts = [p for p in (pieces[0], x, pieces[1]) if p is not None]
        x = parts[0] if len(parts) == 1 else b.concat(*parts, axis=axis)
    return x


@given(pads=st.tuples(*[st.tuples(st.integers(0, 2), st.integers(0, 2))] * 2),
       padding=st.tuples(st.integers(0, 1), st.integers(0, 1)), stride=st.integers(1, 2),
       depthwise=st.booleans())
def test_zero_padding_moves_into_the_convolution(pads, padding, stride, depthwise):
    b = GraphBuilder("padded")
    x = b.input("x", [2, 4, 7, 6])
    w = b.input("w", [4, 1, 3, 3] if depthwise else [5, 4, 3, 3])
    y = b.conv2d(_zero_padded(b, x, pads), w, stride=(stride, stride), padding=padding,
                 groups=4 if depthwise else 1)
    b.output(b.relu(y))
    after = run_canon(b.graph)
    assert "concat" not in ops(after) and "constant" not in ops(after)
    (conv,) = [n for n in after.nodes if n.op == "conv2d"]
    assert conv.inputs[0].name == "x"
    begin = tuple(p + before for p, (before, _) in zip(padding, pads))
    end = tuple(p + later for p, (_, later) in zip(padding, pads))
    assert tuple(conv.attrs["padding"]) == begin
    assert conv.attrs["padding_end"] == (None if begin == end else end)
    assert_same_results(b.graph, after)
    assert print_graph(run_canon(after)) == print_graph(after)


def test_padding_that_is_not_zeros_along_h_or_w_stays_a_concat():
    b = GraphBuilder("kept")
    x, w = b.input("x", [1, 4, 6, 6]), b.input("w", [5, 4, 3, 3])
    ones = b.conv2d(_zero_padded(b, x, ((1, 1), (0, 0)), fill=1.0), w)
    channels = b.conv2d(b.concat(x, b.constant(0.0, DType.f32, [1, 1, 6, 6]), axis=1), b.input("v", [5, 5, 3, 3]))
    b.output(ones, channels)
    after = run_canon(b.graph)
    assert ops(after).count("concat") == 2
    assert_same_results(b.graph, after)


@given(st.integers(1, 3), st.integers(1, 4), st.integers(1, 3), st.integers(1, 3), st.integers(0, 2),
       st.integers(1, 3), st.sampled_from([(2,), (1, 2), (2, 1)]))
def test_a_split_of_whole_rows_of_a_slice_becomes_a_slice_of_the_split(rows, width, pieces, heads, first, count,
                                                                        lead):
    """reshape(slice(x)) splitting the sliced axis into [heads, width] where the slice takes whole rows of
    `width` (a packed qkv's q, k, v split into heads) becomes slice(reshape(x)): the slice then sits on the
    outer part, so both read x through affine maps. A slice that cuts a row stays as it is."""
    count = min(count, pieces + 2 - first)
    b = GraphBuilder("packed")
    x = b.input("x", [*lead, rows, (pieces + 2) * heads * width])
    start, stop = first * heads * width, (first + count) * heads * width
    sliced = b.slice(x, start=[0] * len(lead) + [0, start], stop=[*lead, rows, stop])
    b.output(b.reshape(sliced, shape=[*lead, rows, count * heads, width]))
    after = run_canon(b.graph)
    assert [n.op for n in after.nodes] == ["reshape", "slice"]
    assert_same_results(b.graph, after)
    assert print_graph(run_canon(after)) == print_graph(after)


def test_a_slice_cutting_rows_stays_before_the_split():
    b = GraphBuilder("cut")
    x = b.input("x", [3, 12])
    b.output(b.reshape(b.slice(x, start=[0, 2], stop=[3, 10]), shape=[3, 2, 4]))
    after = run_canon(b.graph)
    assert [n.op for n in after.nodes] == ["slice", "reshape"]
    assert_same_results(b.graph, after)


def test_a_concat_reads_its_operands_slices_and_negations_in_place():
    """rotate_half(q) = concat(-q[..., h:], q[..., :h]): one concat of q's two windows times a sign that is -1
    over the first (an index value), so no kernel makes the halves; the values are unchanged, signed zeros
    included. A slice across another axis stays."""


    b = GraphBuilder("rope")
    q = b.input("q", [2, 3, 8])
    half = b.concat(b.neg(b.slice(q, start=[0, 0, 4], stop=[2, 3, 8])), b.slice(q, start=[0, 0, 0], stop=[2, 3, 4]),
                    axis=2)
    other = b.concat(b.slice(q, start=[0, 0, 0], stop=[2, 3, 4]), b.slice(q, start=[0, 0, 4], stop=[2, 3, 8]), axis=1)
    graph = b.output(half, other)
    inputs = [reference.random_inputs(graph)[0]]
    inputs[0][..., ::3] = -0.0
    want = reference.run(graph, inputs)
    after = run_canon(graph)
    concats = [n for n in after.nodes if n.op == "concat"]
    assert [(n.inputs[0].name, n.inputs[1].name, n.attrs["starts"], n.attrs["sizes"]) for n in concats] == \
        [("q", "q", (4, 0), (4, 4)), (concats[1].inputs[0].name, concats[1].inputs[1].name, None, None)]
    assert "neg" not in ops(after) and ops(after).count("slice") == 2
    got = reference.run(after, inputs)
    for g, w in zip(got, want):
        assert np.array_equal(g, w) and np.array_equal(np.signbit(g), np.signbit(w))
