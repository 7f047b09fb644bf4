"""Converting Dynamo's graphs without running the model again: nodes that read an input or a weight
take Dynamo's static example values (only shapes and dtypes are read), constants and shape-only nodes
still run, and torch.compile's conversion reads the weights' own memory; the cyclic collector rests
while a graph compiles."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the PyTorch frontend needs the optional torch extra")
import numpy as np  # noqa: E402

from tilegraph.frontends.fx import convert  # noqa: E402
from tilegraph.ir.text import print_graph  # noqa: E402

pytestmark = pytest.mark.usefixtures("fresh_dynamo")


class Block(torch.nn.Module):
    """Live ops (linear, layer norm, softmax, split), a causal mask folded from constants, a
    zeros_like that reads only its input's shape, and a view whose size torch derives."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 16)
        self.norm = torch.nn.LayerNorm(8)

    def forward(self, x):
        n = x.shape[1]
        mask = torch.triu(torch.full((n, n), float("-inf")), diagonal=1)
        a, b = self.proj(self.norm(x)).split(8, dim=-1)
        scores = torch.softmax(a @ b.transpose(-1, -2) + mask, dim=-1)
        return (scores @ b).reshape(x.shape[0], -1) + torch.zeros_like(x).sum()


def captured(model, *inputs):
    """Dynamo's graph of `model` and its example inputs."""
    graphs = []

    def grab(gm, example_inputs):
        graphs.append((gm, list(example_inputs)))
        return gm.forward

    with torch.no_grad():
        torch.compile(model, backend=grab)(*inputs)
    (graph,) = graphs
    return graph


def test_dynamo_example_values_give_the_ir_that_running_the_nodes_gives(monkeypatch):
    model, x = Block().eval(), torch.randn(2, 5, 8)
    gm, args = captured(model, x)
    propagated = convert.convert_graph_module(gm, args, name="g")
    monkeypatch.setattr(convert, "_propagated_statically", lambda gm, args: False)
    executed = convert.convert_graph_module(gm, args, name="g")
    assert print_graph(propagated.graph) == print_graph(executed.graph)


def test_only_constants_and_shape_only_nodes_run(monkeypatch):
    model, x = Block().eval(), torch.randn(2, 5, 8)
    gm, args = captured(model, x)
    ran = []
    original = convert.FxConverter._execute

    def recording(self, node, module, stand_ins=False):
        ran.append((node.name, stand_ins, bool([n for n in node.all_input_nodes if n in self.live])))
        return original(self, node, module, stand_ins)

    monkeypatch.setattr(convert.FxConverter, "_execute", recording)
    convert.convert_graph_module(gm, args, name="g")
    assert ran, "the mask is built from constants"
    assert all(stand_ins for _, stand_ins, live in ran if live), ran  # zeros_like(x) runs on zeros
    assert any(stand_ins for _, stand_ins, _ in ran)


def test_symbolic_shapes_fall_back_to_running_the_nodes():
    model, x = Block().eval(), torch.randn(2, 5, 8)
    torch._dynamo.mark_dynamic(x, 0)
    gm, args = captured(model, x)
    assert not convert._propagated_statically(gm, args)
    compiled = torch.compile(model, backend="tilegraph", options={"target": "reference"})
    with torch.no_grad():
        for batch in (2, 3):
            y = torch.randn(batch, 5, 8)
            torch.testing.assert_close(compiled(y), model(y), rtol=1e-4, atol=1e-5)


def test_shared_weights_read_the_modules_memory():
    model, x = Block().eval(), torch.randn(2, 5, 8)
    gm, args = captured(model, x)
    shared = convert.convert_graph_module(gm, args, name="g", share_weights=True)
    copied = convert.convert_graph_module(gm, args, name="g")
    weight = model.proj.weight.detach().numpy()
    by_name = {v.name: v.data for v in shared.graph.params}
    assert any(np.shares_memory(data, weight) for data in by_name.values())
    assert not any(np.shares_memory(v.data, weight) for v in copied.graph.params)


@pytest.mark.parametrize("enabled", [True, False])
def test_the_cyclic_collector_is_paused_while_compiling_and_restored(monkeypatch, enabled):
    import gc

    from tilegraph.frontends.fx import dynamo

    seen = []
    original = dynamo.compile_graph

    def recording(graph, target="cpp", **options):
        seen.append(gc.isenabled())
        return original(graph, target, **options)

    monkeypatch.setattr(dynamo, "compile_graph", recording)
    model, x = Block().eval(), torch.randn(2, 5, 8)
    (gc.enable if enabled else gc.disable)()
    try:
        with torch.no_grad():
            got = torch.compile(model, backend="tilegraph", options={"target": "reference"})(x)
        assert gc.isenabled() == enabled
    finally:
        gc.enable()
    assert seen == [False]
    with torch.no_grad():
        torch.testing.assert_close(got, model(x), rtol=1e-4, atol=1e-5)
