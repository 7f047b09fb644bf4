"""torch.compile(backend="tilegraph") reuses the scheduled Program of a graph it compiled before (after
torch._dynamo.reset(), or in a new process): the recompile skips the passes, builds the same source and
gives the same outputs; weights updated in place miss; options={"program_cache": False} turns it off."""
from __future__ import annotations

import shutil

import pytest

torch = pytest.importorskip("torch", reason="the PyTorch frontend needs the optional torch extra")

import tilegraph.frontends.fx  # noqa: E402,F401  (registers the backend)
from tilegraph import program_cache  # noqa: E402
from tilegraph.frontends.fx import dynamo  # noqa: E402

pytestmark = [pytest.mark.usefixtures("fresh_dynamo"),
              pytest.mark.skipif(shutil.which("g++") is None, reason="the C++ backend needs g++")]


@pytest.fixture
def compiled_graphs(tmp_path, monkeypatch) -> list:
    """Every CompiledProgram tilegraph built, in order, with a private cache root."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv(program_cache.ENV, raising=False)
    programs = []
    original = dynamo.compile_graph

    def recording(graph, target="cpp", **options):
        programs.append(original(graph, target, **options))
        return programs[-1]

    monkeypatch.setattr(dynamo, "compile_graph", recording)
    return programs


def model():
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.GELU(),
                               torch.nn.Linear(16, 4)).eval()


def first_call(module, x, **options):
    torch._dynamo.reset()
    with torch.no_grad():
        return torch.compile(module, backend="tilegraph", options={"target": "cpp", **options})(x)


def cached(compiled) -> bool:
    return "passes (cached)" in compiled.compile_seconds


def test_a_recompile_after_reset_hits_with_the_same_source_and_outputs(compiled_graphs):
    module, x = model(), torch.randn(3, 8)
    cold = first_call(module, x)
    warm = first_call(module, x)
    first, second = compiled_graphs
    assert not cached(first) and cached(second)
    assert second.source == first.source
    torch.testing.assert_close(warm, cold, rtol=0, atol=0)
    with torch.no_grad():
        torch.testing.assert_close(warm, module(x), rtol=1e-4, atol=1e-5)


def test_weights_updated_in_place_miss(compiled_graphs):
    module, x = model(), torch.randn(3, 8)
    first_call(module, x)
    with torch.no_grad():
        module[0].weight.mul_(2)
    got = first_call(module, x)
    assert not cached(compiled_graphs[-1])
    with torch.no_grad():
        torch.testing.assert_close(got, module(x), rtol=1e-4, atol=1e-5)


def test_the_option_turns_it_off(compiled_graphs):
    module, x = model(), torch.randn(3, 8)
    first_call(module, x, program_cache=False)
    first_call(module, x, program_cache=False)
    assert not any(map(cached, compiled_graphs))
