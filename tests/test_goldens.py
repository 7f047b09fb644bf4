"""Process replay: the generated C++, SYCL and Triton source and the simulated timeline of every
example equal the goldens in tests/goldens/ (written by `python tests/goldens/update.py`).

A failure shows the start of a unified diff. If the change is intended, run the update script and
explain the change in the commit message; the goldens' diff then shows reviewers what changed in
the generated code.
"""
from __future__ import annotations

import difflib
import importlib.util
import re
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("tilegraph_goldens_update", HERE / "goldens" / "update.py")
update = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(update)

DIFF_LINES = 60
INSTRUCTION = "run python tests/goldens/update.py and explain the change in the commit message"


def _cases():
    for example in update.EXAMPLES:
        for kind, (_, _, needs_triton) in update.KINDS.items():
            marks = [pytest.mark.skipif(not update.triton_available(), reason="triton is not importable")] \
                if needs_triton else []
            yield pytest.param(example, kind, id=f"{example.stem}-{kind}", marks=marks)


@pytest.mark.parametrize("example,kind", list(_cases()))
def test_generated_code_matches_the_golden(example, kind):
    path = update.golden_path(example, kind)
    got = update.generate(example, kind)
    if not path.exists():
        pytest.fail(f"{path.relative_to(update.ROOT)} is missing: {INSTRUCTION}")
    want = path.read_text(encoding="utf-8")
    if got != want:
        diff = list(difflib.unified_diff(want.splitlines(), got.splitlines(), f"golden {path.name}",
                                         "generated now", lineterm=""))
        shown = "\n".join(diff[:DIFF_LINES]) + (f"\n... ({len(diff) - DIFF_LINES} more diff lines)"
                                                 if len(diff) > DIFF_LINES else "")
        pytest.fail(f"{path.relative_to(update.ROOT)} differs from the generated {kind} output:\n{shown}\n"
                    f"If the change is intended: {INSTRUCTION}.", pytrace=False)


def test_every_golden_belongs_to_an_example():
    known = {update.golden_path(e, k) for e in update.EXAMPLES for k in update.KINDS}
    orphans = [p.name for p in (HERE / "goldens").iterdir() if p.is_file() and p.name != "update.py"
               and p not in known]
    assert not orphans, f"goldens of no example: {orphans}; {INSTRUCTION}"


# ----- what the goldens show: code a person can debug -----------------------------------------------
def test_generated_cpp_is_named_after_the_ir_and_emits_only_what_runs():
    """Tensors and kernels carry their IR names; a matmul whose static tiles divide into whole
    register blocks has only the full block (still behind its test), no edge variants; only the
    helpers it calls."""
    from tilegraph.backends import cpp

    program = update.scheduled(update.ROOT / "examples" / "mlp.tg", "cpp")
    source = cpp.generate_source(program)
    assert "static int kernel_k0(const float* __restrict__ x, const float* __restrict__ w1_," in source
    assert "// tile: d0=128 (parallel), d1=64 (parallel), d2=256 (reduction)" in source
    assert "// register blocks: mu in {8}, nv in {32}\n" in source and "if (mu == 8 && nv == 32) {" in source
    assert "else" not in source.split("}  // namespace")[-1] and "acc0[" not in source
    assert "tg_erf" in source and "tg_tanh" not in source and "tg_load_lanes" not in source
    # the weights are read from their load-time panels (microkernel.plan_weight_panels), named after them
    assert "if (!err) err = kernel_k0(x, w1_packed, b1_, h_);" in source


def test_generated_triton_is_named_after_the_ir():
    from tilegraph.backends import triton

    program = update.scheduled(update.ROOT / "examples" / "mlp.tg", "triton")
    source = triton.generate_source(program)
    assert "def kernel_k0(x_ptr, w1_ptr, b1_ptr, h_ptr):" in source and "# tile: d0=" in source
    assert "def step_k0(dev, warps, stages, arena, x, w1, b1):" in source
    assert "t[" not in source and "tg_k0" not in source
    assert "_tg_tanh" not in source  # helpers only where called


@pytest.mark.parametrize("example", ["transformer_block", "lenet"])
def test_tensors_named_like_the_generated_codes_own_identifiers_still_run(example):
    """Every identifier of an example's generated C++ and SYCL (loop indices such as `b1`, locals
    such as `q` or `err`, helpers, types, keywords), given to its tensors as IR names, still builds
    in both dialects, and the C++ build matches the reference."""
    import numpy as np

    from tilegraph.backends import cpp, reference, sycl
    from tilegraph.frontends.dsl import parse_file

    path = update.ROOT / "examples" / f"{example}.tg"

    def renamed(names=()):
        graph = parse_file(path)
        for value, name in zip([*graph.inputs, *graph.params, *(v for n in graph.nodes for v in n.results)], names):
            value.name = name
        return graph, update.scheduled(graph, "cpp")

    graph, program = renamed()
    source = cpp.generate_source(program) + sycl.generate_source(program)
    tokens = sorted(set(re.findall(r"\b[A-Za-z_]\w*\b", source)))
    count = len(graph.inputs) + len(graph.params) + sum(len(n.results) for n in graph.nodes)
    for start in range(0, len(tokens), count):
        graph, program = renamed(tokens[start:start + count])
        params = reference.random_params(program.graph)  # the passes may rename parameters (`l_` is `l`)
        inputs = reference.random_inputs(graph)
        got = cpp.build(program, params, cxxflags="-O0 -fopenmp")(*inputs)
        want = reference.run(program.graph, inputs, params={v.name: a for v, a in params.items()})
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(b).max())))
        sycl.build(program, params, host_include=HERE / "sycl_host", cxxflags="-O0")
