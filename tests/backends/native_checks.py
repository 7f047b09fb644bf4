"""Shared helpers of the cpp and sycl backend tests: compile for a target, compare with the reference."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from tilegraph.backends import reference
from tilegraph.ir import DType
from tilegraph.ir.program import Program
from tilegraph.ir.target import Target
from tilegraph.passes import PassManager
from tilegraph.passes.tiling import tile_program

TINY = Target("tiny", "accelerator", onchip_bytes=1024, double_buffer=True, line_bytes=16)
FAST_FLAGS = "-O1 -fopenmp"  # hypothesis-sized graphs: build quickly, same semantics
TOLERANCE = {DType.f16: 1e-2, DType.bf16: 3e-2}


def schedule(graph, target: Target) -> Program:
    """canonicalize, fuse and tile `graph` for `target` (a Target object, so tests can shrink it)."""
    program = PassManager("canonicalize,fuse").run(graph)
    kernels, reports = tile_program(program, target)
    return replace(program, kernels=tuple(kernels), notes={**program.notes, "tiling": reports})


def bound_params(graph, program: Program) -> dict:
    """Values for the program's parameters, drawn as the *input* graph's uses ask (variances > 0)."""
    by_name = {v.name: a for v, a in reference.random_params(graph).items()}
    kept = {v.name for v in program.graph.params}
    return reference.random_params(program.graph, given={k: a for k, a in by_name.items() if k in kept})


def expected(graph, program: Program, params: dict, inputs) -> list[np.ndarray]:
    by_name = {v.name: a for v, a in params.items()}
    keep = {v.name for v in graph.params}
    return reference.run(graph, inputs, params={k: a for k, a in by_name.items() if k in keep})


def assert_close(got, want, types) -> None:
    """f32: max abs error below 1e-4 relative to the magnitude; integers and bools exactly."""
    assert len(got) == len(want)
    for a, b, t in zip(got, want, types):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
        if t.dtype.is_float:
            tol = TOLERANCE.get(t.dtype, 1e-4)
            scale = float(np.nanmax(np.abs(b), initial=1.0)) if not np.all(np.isnan(b)) else 1.0
            np.testing.assert_allclose(a, b, rtol=tol, atol=tol * max(scale, 1.0), equal_nan=True)
        else:
            np.testing.assert_array_equal(a, b)


def check_backend(build, graph, target: Target, inputs=None, **options) -> object:
    """Schedule for `target`, build with `build(program, params, **options)`, compare; returns the build."""
    program = schedule(graph, target)
    params = bound_params(graph, program)
    inputs = reference.random_inputs(graph) if inputs is None else inputs
    compiled = build(program, params, **options)
    assert_close(compiled(*inputs), expected(graph, program, params, inputs), [v.type for v in graph.outputs])
    return compiled
