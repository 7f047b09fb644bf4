"""Training under torch.compile(backend="tilegraph", options={"target": "triton"}) on CPU tensors, with
the Triton interpreter: the forward and backward graphs AOTAutograd makes run as Triton kernels, and
gradients, updated weights and batch-norm statistics equal eager PyTorch's on an MLP, a small CNN and a
transformer block (the models and the check are test_fx_training.py's).

The interpreter is chosen at import, by tests/triton_interpreter.py; where an earlier file imported
triton first, this file skips.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from triton_interpreter import torch  # sets TRITON_INTERPRET=1 first, or skips this file saying why


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
