"""The numpy reference backend: input checking, parameters, return_all, and runs of random graphs."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import ALL_DTYPES, graph_inputs, graphs, value_bounds

from tilegraph.backends.reference import bind_inputs, random_inputs, random_params, run
from tilegraph.ir import DType, GraphBuilder, InputError, TilegraphError


def small_graph():
    """%y = relu(matmul(x, w) + b) with an int input `ids` for a gather."""
    b = GraphBuilder("net")
    x = b.input("x", "f32[2, 3]")
    ids = b.input("ids", "i64[4]")
    w = b.param("w", "f32[3, 5]")
    bias = b.param("bias", "f32[5]", data=np.arange(5, dtype=np.float32))
    h = b.add(b.matmul(x, w), bias, name="h")
    y = b.relu(h, name="y")
    rows = b.gather(y, ids, axis=1, name="rows")
    return b.output(y, rows)


X = np.arange(6, dtype=np.float32).reshape(2, 3) / 6
IDS = np.array([0, 4, -1, 2], np.int64)


# ----- random graphs ---------------------------------------------------------------------------------
@given(data=st.data())
def test_runs_random_graphs_with_typed_finite_outputs(data):
    graph = data.draw(graphs(dtypes=ALL_DTYPES, max_nodes=10))
    inputs = data.draw(graph_inputs(graph))
    outs = run(graph, inputs, seed=1)
    assert len(outs) == len(graph.outputs)
    for array, value in zip(outs, graph.outputs):
        assert array.shape == value.shape and array.dtype == value.dtype.numpy, value
    everything = run(graph, inputs, seed=1, return_all=True)
    bounds = value_bounds(graph)
    for value in graph.values():
        array = everything[value.name].astype(np.float64)
        assert np.all(np.isfinite(array)), f"%{value.name} is not finite"
        if array.size:  # the strategy's interval bookkeeping holds (and so its guards work)
            lo, hi = bounds[value]
            slack = 1e-2 * (1 + max(abs(lo), abs(hi)))
            assert lo - slack <= array.min() and array.max() <= hi + slack, (value, lo, hi)
    again = run(graph, inputs, seed=1)
    for a, b in zip(outs, again):
        np.testing.assert_array_equal(a, b)


@given(data=st.data())
def test_random_inputs_are_valid_inputs(data):
    graph = data.draw(graphs(ops=[op for op in ("gather", "batch_norm", "add", "matmul", "exp", "relu")]))
    inputs = random_inputs(graph, seed=data.draw(st.integers(0, 100)))
    assert [a.shape for a in inputs] == [v.shape for v in graph.inputs]
    outs = run(graph, inputs)
    assert all(np.all(np.isfinite(o.astype(np.float64))) for o in outs)


# ----- binding inputs ----------------------------------------------------------------------------------
def test_inputs_by_position_and_by_name_agree():
    graph = small_graph()
    by_position = run(graph, [X, IDS])
    by_name = run(graph, {"ids": IDS, "x": X})
    for a, b in zip(by_position, by_name):
        np.testing.assert_array_equal(a, b)
    y, rows = by_position
    np.testing.assert_array_equal(rows, y[:, IDS])
    assert rows.dtype == np.float32 and rows.shape == (2, 4)


def test_missing_extra_and_miscounted_inputs_are_named():
    graph = small_graph()
    with pytest.raises(InputError, match="missing input\\(s\\): ids"):
        run(graph, {"x": X})
    with pytest.raises(InputError, match="unknown input\\(s\\) bogus; graph inputs: x, ids"):
        run(graph, {"x": X, "ids": IDS, "bogus": X})
    with pytest.raises(InputError, match="@net takes 2 input\\(s\\) \\(x, ids\\), got 1"):
        run(graph, [X])
    with pytest.raises(InputError, match="got 3"):
        run(graph, [X, IDS, IDS])


def test_wrong_shapes_and_dtypes_are_named():
    graph = small_graph()
    with pytest.raises(InputError, match=r"input x: expected f32\[2, 3\], got shape \[3, 2\]"):
        run(graph, [X.T, IDS])
    with pytest.raises(InputError, match=r"input x: expected f32\[2, 3\], got dtype int64"):
        run(graph, [np.zeros((2, 3), np.int64), IDS])
    with pytest.raises(InputError, match=r"input ids: expected i64\[4\], got dtype float32"):
        run(graph, [X, IDS.astype(np.float32)])
    with pytest.raises(InputError, match=r"input x: expected f32\[2, 3\], got dtype bool"):
        run(graph, [np.zeros((2, 3), bool), IDS])
    with pytest.raises(InputError, match=r"input ids: expected i64\[4\], got shape \[\]"):
        run(graph, [X, 3])


def test_compatible_arrays_are_converted():
    graph = small_graph()
    env = bind_inputs(graph, [X.astype(np.float64).tolist(), IDS.astype(np.int32)])
    x, ids = graph.inputs
    assert env[x].dtype == np.float32 and env[ids].dtype == np.int64
    np.testing.assert_array_equal(env[x], X)


def test_bf16_inputs_are_rounded():
    b = GraphBuilder()
    x = b.input("x", "bf16[2]")
    graph = b.output(b.neg(x))
    (out,) = run(graph, [np.array([1 + 2 ** -9, 3.0], np.float32)])
    np.testing.assert_array_equal(out, [-1.0, -3.0])


def test_input_errors_are_user_errors():
    graph = small_graph()
    with pytest.raises(TilegraphError) as info:
        run(graph, [X])
    assert isinstance(info.value, InputError) and info.value.exit_code == 2


# ----- parameters ----------------------------------------------------------------------------------------
def test_params_from_seed_are_deterministic_and_seed_dependent():
    graph = small_graph()
    first, again, other = (random_params(graph, seed) for seed in (7, 7, 8))
    w, bias = graph.params
    np.testing.assert_array_equal(first[w], again[w])
    assert not np.array_equal(first[w], other[w])
    assert first[w].dtype == np.float32 and first[w].shape == (3, 5)
    assert np.all(np.abs(first[w]) <= 1)
    np.testing.assert_array_equal(first[bias], np.arange(5))  # carried data wins over the seed
    a, b = run(graph, [X, IDS], seed=7), run(graph, [X, IDS], seed=7)
    np.testing.assert_array_equal(a[0], b[0])
    assert not np.array_equal(a[0], run(graph, [X, IDS], seed=8)[0])


def test_given_params_override_the_seed_and_are_checked():
    graph = small_graph()
    w = np.ones((3, 5), np.float32)
    (y, _) = run(graph, [X, IDS], params={"w": w})
    np.testing.assert_allclose(y, np.maximum(X @ w + np.arange(5), 0), rtol=1e-6)
    with pytest.raises(InputError, match="unknown parameter\\(s\\) nope"):
        run(graph, [X, IDS], params={"nope": w})
    with pytest.raises(InputError, match=r"parameter w: expected f32\[3, 5\], got shape \[5, 3\]"):
        run(graph, [X, IDS], params={"w": w.T})


def test_random_inputs_respect_gather_ranges_and_variances():
    b = GraphBuilder()
    table, ids = b.input("table", "f32[3, 2]"), b.input("ids", "i32[50]")
    x, mean, var = b.input("x", "f32[2, 4]"), b.input("mean", "f32[4]"), b.input("var", "f32[4]")
    graph = b.output(b.gather(table, ids), b.batch_norm(x, mean, var))
    arrays = random_inputs(graph, seed=5)
    assert arrays[1].dtype == np.int32 and arrays[1].min() >= 0 and arrays[1].max() < 3
    assert arrays[4].min() >= 0.5
    np.testing.assert_array_equal(random_inputs(graph, seed=5)[0], arrays[0])
    assert all(np.all(np.isfinite(o)) for o in run(graph, arrays))


# ----- return_all -------------------------------------------------------------------------------------------
def test_return_all_gives_every_value():
    graph = small_graph()
    values = run(graph, [X, IDS], seed=2, return_all=True)
    assert set(values) == {v.name for v in graph.values()}
    w = values["w"]
    np.testing.assert_allclose(values["h"], X @ w + np.arange(5), rtol=1e-6)
    np.testing.assert_array_equal(values["y"], np.maximum(values["h"], 0))
    np.testing.assert_array_equal(values["x"], X)
    y, rows = run(graph, [X, IDS], seed=2)
    np.testing.assert_array_equal(values["y"], y)
    np.testing.assert_array_equal(values["rows"], rows)


def test_a_graph_without_inputs_runs():
    b = GraphBuilder()
    graph = b.output(b.add(b.iota(shape=(3,), dtype=DType.f32), 1.0))
    (out,) = run(graph)
    np.testing.assert_array_equal(out, [1.0, 2.0, 3.0])
