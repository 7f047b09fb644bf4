"""A graph captured by TorchDynamo and converted, for tests that compare captures of one model."""
import torch

from tilegraph.frontends.fx.convert import convert_graph_module


def dynamo_graph(model, inputs):
    """The IR graph of `model` as Dynamo captures it (one graph: fullgraph)."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(convert_graph_module(gm, example_inputs).graph)
        return gm

    torch._dynamo.reset()
    torch.compile(model, backend=backend, fullgraph=True)(*inputs)
    torch._dynamo.reset()
    (graph,) = graphs
    return graph
