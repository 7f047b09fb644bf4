"""Training under torch.compile(backend="tilegraph", options={"target": "triton"}) on CPU tensors, with
the Triton interpreter: the forward and backward graphs AOTAutograd makes run as Triton kernels, and
gradients, updated weights and batch-norm statistics equal eager PyTorch's on an MLP, a small CNN and a
transformer block (the models and the check are test_fx_training.py's).

The interpreter is chosen here, before triton is first imported (see tests/backends/test_triton.py and
tests/frontends/test_dynamo_triton.py); where an earlier file imported it first, this file skips.
"""
from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

import importlib.util  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

torch = pytest.importorskip("torch", reason="the PyTorch frontend needs the optional torch extra")
pytest.importorskip("triton", reason="triton is not installed (pip install 'tilegraph[triton]')")
import triton.language as tl  # noqa: E402
from triton.runtime.interpreter import InterpretedFunction  # noqa: E402

if not isinstance(tl.zeros, InterpretedFunction):
    # triton.language decorates its own helpers (tl.zeros) when first imported: a process that imported it
    # without the interpreter (torch._dynamo does) cannot run interpreted kernels calling them
    pytest.skip("triton.language was imported in this process before TRITON_INTERPRET=1 was set (by an earlier "
                "test file importing torch._dynamo): run this file on its own, or after tests/backends/"
                "test_triton.py, which sets it first (as every `pytest -n 2` worker does)", allow_module_level=True)


def _cases():
    spec = importlib.util.spec_from_file_location("tilegraph_training_cases", Path(__file__).with_name(
        "test_fx_training.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


CASES = _cases()
# f32 convolutions run in TF32 on the Triton path by default, as cuDNN's do (the interpreter rounds the
# same way); matmuls stay IEEE f32
TF32_TOLERANCE = 5e-3

pytestmark = pytest.mark.usefixtures("fresh_dynamo")


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("TILEGRAPH_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "tilegraph-cache"))


@pytest.mark.parametrize("name", sorted(CASES.MODELS))
def test_training_gives_eager_gradients_on_the_triton_path(name, built, monkeypatch):
    from tilegraph.frontends.fx import dynamo

    runners = []
    original = dynamo.TritonRunner.run

    def counting(self, inputs):
        runners.append(self)
        return original(self, inputs)

    monkeypatch.setattr(dynamo.TritonRunner, "run", counting)
    tolerance = TF32_TOLERANCE if name == "cnn" and torch.backends.cudnn.allow_tf32 else 1e-4
    shape = (2, 3, 8, 8) if name == "cnn" else None  # the interpreter's time grows with the image
    CASES.train_like_eager(name, {"target": "triton"}, steps=1, tolerance=tolerance, shape=shape)
    assert len(built) == 2 and {target for _, target in built} == {"triton"}
    assert len(runners) == 2 and all(r.target == "triton" for r in runners)  # forward, backward
