"""The structured-op descriptions against the numpy references: the test every code generator trusts.

For every op with an iteration space, on small random shapes and attributes, the naive loop
interpreter (`run_loops`) run over the op's loops, maps and body must give the op's reference
result; and the maps themselves must be sane (ranks match, reads stay in bounds unless padded, every
output element is written, reductions only along reduction loops).
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from strategies import GENERATORS, case_inputs, single_op_cases

from tilegraph.ir import AffineExpr, AffineMap, DType, IterationSpace, TensorType, all_ops, get_op, run_loops
from tilegraph.ir.ops.layout import CONCAT_READS
from tilegraph.ir.structured import PARALLEL, REDUCTION, Acc, Arg, Call, Cast, Index, call

OPS = all_ops()
STRUCTURED = sorted(name for name, op in OPS.items() if op.space_fn is not None)
LAYOUT_ONLY = {"reshape", "gather"}  # not affine: handled as data movement (so is a concat of many)


def test_every_op_is_structured_composite_or_layout():
    unclassified = sorted(name for name, op in OPS.items()
                          if op.space_fn is None and op.decompose_fn is None and name not in LAYOUT_ONLY)
    assert not unclassified, f"ops with neither an iteration space nor a decomposition: {unclassified}"
    both = sorted(name for name, op in OPS.items() if op.space_fn is not None and op.decompose_fn is not None)
    assert not both, f"ops both structured and composite: {both}"
    for name in LAYOUT_ONLY:
        assert OPS[name].space_fn is None and OPS[name].decompose_fn is None, name


def test_every_op_has_a_case_generator():
    assert set(OPS) <= set(GENERATORS), f"tests/strategies.py has no generator for {sorted(set(OPS) - set(GENERATORS))}"


def test_the_structured_set_is_what_the_architecture_describes():
    for name in ("add", "exp", "cast", "where", "sum", "mean", "matmul", "batch_matmul", "conv2d", "max_pool2d",
                 "avg_pool2d", "transpose", "broadcast_to", "slice", "concat", "iota", "constant"):
        assert name in STRUCTURED, name
    for name in ("softmax", "log_softmax", "layer_norm", "rms_norm", "batch_norm", "attention"):
        assert OPS[name].decompose_fn is not None, name


# ----- the sanity checker for one iteration space ---------------------------------------------------
def _grid(extents: tuple[int, ...]) -> np.ndarray:
    """All loop points as a [rank, points] array (one point for a rank-0 nest)."""
    if not extents:
        return np.zeros((0, 1), dtype=np.int64)
    return np.indices(extents).reshape(len(extents), -1)


def _indices(amap: AffineMap, grid: np.ndarray) -> list[np.ndarray]:
    points = grid.shape[1]
    return [np.broadcast_to(np.asarray(e.evaluate(grid), dtype=np.int64), (points,)) for e in amap.exprs]


def _dims(expr: AffineExpr) -> set[int]:
    return {d for d, c in expr.terms if c}


def _body_refs(expr, args: set, indices: set, accs: list) -> None:
    if isinstance(expr, Arg):
        args.add(expr.index)
    elif isinstance(expr, Index):
        indices.add(expr.dim)
    elif isinstance(expr, Acc):
        accs.append(expr)
    elif isinstance(expr, Cast):
        _body_refs(expr.arg, args, indices, accs)
    elif isinstance(expr, Call):
        for a in expr.args:
            _body_refs(a, args, indices, accs)


def space_problems(space: IterationSpace, in_types, out_types) -> list[str]:
    """Everything wrong with `space` as a description of an op from in_types to out_types."""
    problems = []
    if len(space.inputs) != len(in_types):
        problems.append(f"{len(space.inputs)} input maps for {len(in_types)} operands")
    if len(space.outputs) != len(out_types):
        problems.append(f"{len(space.outputs)} output maps for {len(out_types)} results")
    if any(e < 1 for e in space.extents):
        problems.append(f"empty loop in extents {space.extents}")
    if problems:
        return problems
    grid = _grid(space.extents)
    reduction = set(space.reduction_dims)
    for role, maps, types in (("in", space.inputs, in_types), ("out", space.outputs, out_types)):
        for i, (amap, t) in enumerate(zip(maps, types)):
            name = f"{role}{i} {amap} of {t}"
            if len(amap.exprs) != t.rank:
                problems.append(f"{name}: map has {len(amap.exprs)} results for a rank-{t.rank} tensor")
                continue
            if any(d >= space.rank or d < 0 for e in amap.exprs for d in _dims(e)):
                problems.append(f"{name}: uses a loop the nest does not have ({space.rank} loops)")
                continue
            index = _indices(amap, grid)
            for axis, (expr, size, values) in enumerate(zip(amap.exprs, t.shape, index)):
                lo, hi = expr.range(space.extents)
                if (int(values.min()), int(values.max())) != (lo, hi):
                    problems.append(f"{name}: AffineExpr.range says [{lo}, {hi}] on axis {axis}, "
                                    f"the loops reach [{values.min()}, {values.max()}]")
                if amap.pad is None and (lo < 0 or hi >= size):
                    problems.append(f"{name}: axis {axis} reaches [{lo}, {hi}] outside 0..{size - 1} without padding")
            if role == "in":
                continue
            if amap.pad is not None:
                problems.append(f"{name}: an output map cannot be padded")
            used = set().union(*(_dims(e) for e in amap.exprs)) if amap.exprs else set()
            if used & reduction:
                problems.append(f"{name}: the output index depends on reduction loops {sorted(used & reduction)}")
            if any(problems):
                continue
            flat = np.ravel_multi_index(tuple(index), t.shape) if t.rank else np.zeros(grid.shape[1], dtype=np.int64)
            writes = np.bincount(flat, minlength=t.numel)
            per_element = math.prod(space.extents[d] for d in reduction)
            if not np.all(writes == per_element):
                missing = int(np.sum(writes == 0))
                problems.append(f"{name}: elements written {sorted(set(writes.tolist()))} times "
                                f"(expected {per_element} each; {missing} never written)")
    for i, (body, init) in enumerate(zip(space.body, space.init)):
        args, indices, accs = set(), set(), []
        _body_refs(body, args, indices, accs)
        if any(a >= len(space.inputs) or a < 0 for a in args):
            problems.append(f"out{i}: body reads operand(s) {sorted(args)} of {len(space.inputs)}")
        if any(d >= space.rank or d < 0 for d in indices):
            problems.append(f"out{i}: body reads loop index {sorted(indices)} of {space.rank} loops")
        if init is None and accs:
            problems.append(f"out{i}: body reads the accumulator but the result has no init")
        if init is None and reduction:
            problems.append(f"out{i}: reduction loops {sorted(reduction)} but no init value")
        if init is not None and not accs:
            problems.append(f"out{i}: an init value but the body never reads the accumulator")
    return problems


def _case(op: str, data) -> tuple:
    types, attrs = data.draw(single_op_cases(op), label="case")
    opdef = get_op(op)
    attrs = opdef.normalize_attrs(types, attrs)
    results = opdef.infer(types, attrs)
    space = opdef.space(types, attrs, results)
    if op == "concat" and len(types) > CONCAT_READS:  # a copy, as documented: no space to check
        assert space is None
        assume(False)
    assert space is not None
    return opdef, list(types), attrs, list(results), space


EPS = {DType.f32: 1e-6, DType.f16: 2e-3, DType.bf16: 8e-3}


def assert_matches(got: np.ndarray, expected: np.ndarray, t: TensorType, reduction: int, what: str) -> None:
    assert got.shape == t.shape, f"{what}: loop result shape {got.shape} != {t.shape}"
    assert got.dtype == t.dtype.numpy, f"{what}: loop result dtype {got.dtype} != {t.dtype.numpy}"
    if not t.dtype.is_float:
        np.testing.assert_array_equal(got, expected, err_msg=what)
        return
    tol = EPS[t.dtype] * (4 + reduction)
    scale = max(1.0, float(np.max(np.abs(expected.astype(np.float64)), initial=0.0)))
    np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64), rtol=tol, atol=tol * scale,
                               err_msg=what)


# ----- the main property ---------------------------------------------------------------------------
@pytest.mark.parametrize("op", STRUCTURED)
@given(data=st.data())
def test_loops_match_reference(op, data):
    opdef, types, attrs, results, space = _case(op, data)
    arrays = data.draw(case_inputs(op, types, attrs), label="inputs")
    expected = opdef.reference(arrays, attrs, results)
    got = run_loops(space, arrays, [r.shape for r in results], [r.dtype for r in results])
    reduction = math.prod(space.extents[d] for d in space.reduction_dims)
    what = f"{op}({', '.join(map(str, types))}) {attrs}\n{space}"
    assert len(got) == len(expected) == len(results)
    for g, e, r in zip(got, expected, results):
        assert_matches(g, e, r, reduction, what)


@pytest.mark.parametrize("op", STRUCTURED)
@given(data=st.data())
def test_maps_are_sane(op, data):
    opdef, types, attrs, results, space = _case(op, data)
    problems = space_problems(space, types, results)
    assert not problems, f"{op}({', '.join(map(str, types))}) {attrs}\n{space}\n" + "\n".join(problems)
    # the cost model agrees with the loops
    assert opdef.flops(types, attrs, results) == space.flops()


# ----- the checker and the interpreter can fail --------------------------------------------------------
D = AffineExpr.dim


def _matmul_parts(m=2, n=3, k=4):
    a, b = TensorType((m, k)), TensorType((k, n))
    c = TensorType((m, n))
    opdef = get_op("matmul")
    return opdef, [a, b], [c], opdef.space([a, b], {}, [c])


def test_checker_accepts_matmul_and_flags_swapped_map():
    opdef, ins, outs, space = _matmul_parts()
    assert space_problems(space, ins, outs) == []
    swapped = IterationSpace(space.extents, space.kinds, (AffineMap((D(2), D(0))), space.inputs[1]), space.outputs,
                             space.body, space.init)
    problems = space_problems(swapped, ins, outs)
    assert any("outside" in p for p in problems), problems
    with pytest.raises(IndexError, match="outside shape"):
        run_loops(swapped, [np.ones(t.shape, np.float32) for t in ins], [outs[0].shape], [outs[0].dtype])


def test_checker_flags_unwritten_elements_and_rank_mismatch():
    t = TensorType((3, 4))
    body = call("neg", Arg(0))
    dropped = IterationSpace((3, 4), (PARALLEL, PARALLEL), (AffineMap.identity(2),),
                             (AffineMap((D(0), AffineExpr.constant(0))),), (body,), (None,))
    assert any("never written" in p for p in space_problems(dropped, [t], [t]))
    short = IterationSpace((3, 4), (PARALLEL, PARALLEL), (AffineMap((D(0),)),), (AffineMap.identity(2),),
                           (body,), (None,))
    assert any("rank-2 tensor" in p for p in space_problems(short, [t], [t]))


def test_checker_flags_reduction_in_output_and_missing_init():
    _, ins, outs, space = _matmul_parts()
    leaks = IterationSpace(space.extents, space.kinds, space.inputs, (AffineMap((D(0), D(2))),), space.body,
                           space.init)
    assert any("reduction loops" in p for p in space_problems(leaks, ins, [TensorType((2, 4))]))
    no_init = IterationSpace(space.extents, space.kinds, space.inputs, space.outputs, space.body, (None,))
    assert any("no init" in p for p in space_problems(no_init, ins, outs))


def test_checker_flags_wrong_extent():
    """A map that is in bounds for a smaller tensor but skips part of the real one."""
    t = TensorType((4,))
    short = IterationSpace((3,), (PARALLEL,), (AffineMap.identity(1),), (AffineMap.identity(1),), (Arg(0),), (None,))
    assert any("never written" in p for p in space_problems(short, [t], [t]))


def test_interpreter_disagrees_with_reference_on_a_wrong_map():
    """The comparison has teeth: transpose with the identity map instead of the permutation."""
    opdef = get_op("transpose")
    x = TensorType((3, 3))
    attrs = opdef.normalize_attrs([x], {})
    (r,) = opdef.infer([x], attrs)
    wrong = IterationSpace((3, 3), (PARALLEL, PARALLEL), (AffineMap.identity(2),), (AffineMap.identity(2),),
                           (Arg(0),), (None,))
    array = np.arange(9, dtype=np.float32).reshape(3, 3)
    (expected,) = opdef.reference([array], attrs, [r])
    (got,) = run_loops(wrong, [array], [r.shape], [r.dtype])
    assert not np.array_equal(got, expected)
    (right,) = run_loops(opdef.space([x], attrs, [r]), [array], [r.shape], [r.dtype])
    np.testing.assert_array_equal(right, expected)


# ----- the shapes of a few spaces, as the architecture describes them -------------------------------
def test_matmul_space_is_ijk_with_k_reduced():
    _, _, _, space = _matmul_parts(2, 3, 4)
    assert space.extents == (2, 3, 4)
    assert space.kinds == (PARALLEL, PARALLEL, REDUCTION)
    assert [str(m) for m in space.inputs] == ["[d0, d2]", "[d2, d1]"]
    assert [str(m) for m in space.outputs] == ["[d0, d1]"]
    assert space.init == (0.0,)
    assert space.flops() == 2 * 2 * 3 * 4


def test_batched_matmul_broadcasts_batch_with_constant_index():
    opdef = get_op("matmul")
    a, b = TensorType((5, 1, 2, 4)), TensorType((3, 4, 6))
    (c,) = opdef.infer([a, b], {})
    assert c.shape == (5, 3, 2, 6)
    space = opdef.space([a, b], {}, [c])
    assert space.kinds == (PARALLEL,) * 4 + (REDUCTION,)
    assert [str(m) for m in space.inputs] == ["[d0, 0, d2, d4]", "[d1, d4, d3]"]


def test_conv2d_space_is_an_eight_loop_nest_with_groups_affine():
    opdef = get_op("conv2d")
    x, w = TensorType((1, 4, 5, 5)), TensorType((6, 2, 3, 3))
    attrs = opdef.normalize_attrs([x, w], {"stride": 2, "padding": 1, "groups": 2})
    (y,) = opdef.infer([x, w], attrs)
    space = opdef.space([x, w], attrs, [y])
    assert space.extents == (1, 2, 3, 3, 3, 2, 3, 3)
    assert space.kinds == (PARALLEL,) * 5 + (REDUCTION,) * 3
    assert space.inputs[0].pad == 0.0 and space.inputs[1].pad is None
    assert str(space.inputs[0]).startswith("[d0, 2*d1 + d5, 2*d3 + d6 - 1, 2*d4 + d7 - 1]")


def test_reduction_space_drops_or_keeps_the_axis():
    opdef = get_op("sum")
    x = TensorType((2, 3, 4))
    for keepdims, out_map in ((False, "[d0, d2]"), (True, "[d0, 0, d2]")):
        attrs = opdef.normalize_attrs([x], {"axes": -2, "keepdims": keepdims})
        (r,) = opdef.infer([x], attrs)
        space = opdef.space([x], attrs, [r])
        assert space.kinds == (PARALLEL, REDUCTION, PARALLEL)
        assert str(space.outputs[0]) == out_map


def test_elementwise_space_broadcasts_size_one_and_missing_dims():
    opdef = get_op("add")
    a, b = TensorType((2, 1, 4)), TensorType((3, 1))
    (r,) = opdef.infer([a, b], {})
    space = opdef.space([a, b], {}, [r])
    assert r.shape == (2, 3, 4)
    assert [str(m) for m in space.inputs] == ["[d0, 0, d2]", "[d1, 0]"]
    assert space.kinds == (PARALLEL,) * 3 and space.init == (None,)


def test_rank_zero_elementwise_is_one_point():
    opdef = get_op("mul")
    s = TensorType(())
    space = opdef.space([s, s], {}, [s])
    assert space.extents == () and space.points == 1
    (out,) = run_loops(space, [np.float32(3.0) * np.ones(()), np.float32(2.0) * np.ones(())], [()], [DType.f32])
    assert out.shape == () and float(out) == 6.0


def test_padded_int_max_pool_reads_the_type_minimum():
    """Padding in an integer max pool must never win (it reads as the smallest integer, not an error)."""
    opdef = get_op("max_pool2d")
    x = TensorType((1, 1, 2, 2), DType.i32)
    attrs = opdef.normalize_attrs([x], {"kernel": 3, "padding": 1, "stride": 1})
    (r,) = opdef.infer([x], attrs)
    array = np.array([[[[-5, -7], [-9, -6]]]], dtype=np.int32)
    (got,) = run_loops(opdef.space([x], attrs, [r]), [array], [r.shape], [r.dtype])
    (expected,) = opdef.reference([array], attrs, [r])
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(got, np.full((1, 1, 2, 2), -5, dtype=np.int32))
