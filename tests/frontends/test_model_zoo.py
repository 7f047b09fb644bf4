"""The model zoo's fast subset under torch.compile(backend="tilegraph"): transformers models from small
configs (benchmarks/zoo_models.py), every captured graph converted and run by tilegraph, no eager
fallback, outputs within tolerance of eager PyTorch. The graphs run on the reference backend (no
C++ build per model); one model also runs on the default C++ backend. The full table, with Inductor
alongside, is benchmarks/model_zoo.py."""
import importlib.util
import sys
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the PyTorch frontend needs the optional torch extra")
pytest.importorskip("transformers", reason="the model zoo builds transformers models (pip install transformers)")

import tilegraph.frontends.fx  # noqa: E402,F401  (registers the backend)
from tilegraph.frontends.fx import TilegraphFallbackWarning  # noqa: E402

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
TOLERANCE = 1e-4  # max |tilegraph - eager| / max |eager|


def _zoo():
    spec = importlib.util.spec_from_file_location("tilegraph_zoo_models", BENCHMARKS / "zoo_models.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


ZOO = _zoo()
FAST = [m.name for m in ZOO.MODELS if m.fast]


def run_compiled(name: str, target: str = "auto"):
    """(output of the compiled model, eager output, eager output's std) with fallbacks as errors."""
    model, inputs = ZOO.by_name(name).build()
    with torch.no_grad():
        want = model(*inputs)
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error", TilegraphFallbackWarning)
        with torch.no_grad():
            got = torch.compile(model, backend="tilegraph", options={"target": target})(*inputs)
    torch._dynamo.reset()
    return got, want


def relative_error(got, want) -> float:
    assert got.shape == want.shape and got.dtype == want.dtype
    return float((got - want).abs().max() / want.abs().max())


def test_the_zoo_has_at_least_25_architectures_and_a_fast_subset():
    assert len(ZOO.MODELS) >= 25 and len({m.name for m in ZOO.MODELS}) == len(ZOO.MODELS)
    assert 8 <= len(FAST) <= 14
    assert {"Llama", "Qwen2", "BERT"} <= set(FAST)  # the models that used to fall back


@pytest.mark.parametrize("name", FAST)
def test_fast_zoo_model_compiles_without_fallback(name, built):
    got, want = run_compiled(name, "reference")
    assert built, "no graph reached tilegraph"
    assert 0.1 < float(want.float().std()) < 10, "activations should be O(1), or a match proves little"
    assert relative_error(got, want) < TOLERANCE


def test_llama_runs_on_the_cpp_backend(built):
    """The rotary embedding's cos/sin (the issue's fallback) through the default C++ backend."""
    got, want = run_compiled("Llama")
    assert len(built) == 1
    ops = {n.op for n in built[0][0].nodes}
    assert {"sin", "cos", "gather"} <= ops
    assert relative_error(got, want) < TOLERANCE
