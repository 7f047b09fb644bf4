"""tilegraph.compile: the driver's public entry point, on the always-present reference backend."""
from pathlib import Path

import numpy as np
import pytest

import tilegraph
from tilegraph.backends.reference import random_inputs, run
from tilegraph.frontends.dsl import parse, parse_file
from tilegraph.ir import InputError, TilegraphError

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.parametrize("name", ["mlp", "lenet", "transformer_block"])
def test_reference_target_matches_the_graph_reference(name):
    graph = parse_file(EXAMPLES / f"{name}.tg")
    compiled = tilegraph.compile(graph, target="reference")
    inputs = random_inputs(graph)
    for got, want in zip(compiled(*inputs), run(graph, inputs)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(want).max())))
    assert "kernels" in compiled.report() and "tiling for target" in compiled.report()


def test_params_are_bound_at_compile_time():
    graph = parse("def f(x: f32[4, 8]) -> f32[4, 3] { param w: f32[8, 3]\n return x @ w }")
    w = np.arange(24, dtype=np.float32).reshape(8, 3)
    x = np.ones((4, 8), np.float32)
    (y,) = tilegraph.compile(graph, params={"w": w})(x)
    np.testing.assert_allclose(y, x @ w, rtol=1e-6)


def test_wrong_inputs_and_unknown_backends_are_clear_errors():
    graph = parse("def f(x: f32[4, 8]) -> f32[4, 8] { return x * 2 }")
    compiled = tilegraph.compile(graph)
    with pytest.raises(InputError, match="expected f32"):
        compiled(np.ones((4, 7), np.float32))
    with pytest.raises(TilegraphError, match="unknown backend 'fortran'"):
        tilegraph.compile(graph, target="fortran")


@pytest.mark.parametrize("target", ["reference", "cpp"])
def test_a_tensor_with_a_zero_size_axis_is_refused_by_name(target):
    """Loops of extent 0 are not modelled: a kernel domain read them as extent 1, and the C++ library wrote past
    an empty output (heap corruption). Every target now refuses such a graph, naming the tensor."""
    graph = parse("def f(x: f32[4, 8], w: f32[8, 0]) -> f32[4, 0] { return relu(x @ w) }")
    with pytest.raises(TilegraphError, match=r"%w is empty \(f32\[8, 0\]\): tilegraph compiles tensors without "
                                             r"zero-size axes only"):
        tilegraph.compile(graph, target=target)
