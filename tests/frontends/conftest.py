"""Fixtures shared by the torch.compile tests (each skips where torch is absent)."""
from __future__ import annotations

import pytest


@pytest.fixture
def fresh_dynamo():
    """Dynamo's caches emptied before and after the test, and torch's seed fixed."""
    torch = pytest.importorskip("torch")
    torch._dynamo.reset()
    torch.manual_seed(0)
    yield
    torch._dynamo.reset()


@pytest.fixture
def built(monkeypatch) -> list:
    """(IR graph, target) for every graph tilegraph built, in order (not those left to eager PyTorch)."""
    pytest.importorskip("torch")
    from tilegraph.frontends.fx import dynamo

    calls = []
    original = dynamo.compile_graph

    def recording(graph, target="cpp", **options):
        calls.append((graph, target))
        return original(graph, target, **options)

    monkeypatch.setattr(dynamo, "compile_graph", recording)
    return calls
