"""torch.compile(model, backend="tilegraph"): Dynamo graphs converted and run on the C++ backend (the CPU default)."""
import re
import warnings

import pytest

torch = pytest.importorskip("torch", reason="the PyTorch frontend needs the optional torch extra")
nn = torch.nn

import tilegraph.frontends.fx  # noqa: E402,F401  (registers the backend)
from tilegraph.frontends.fx import TilegraphFallbackWarning, TilegraphRecompileWarning  # noqa: E402
from tilegraph.frontends.fx import dynamo as tilegraph_dynamo  # noqa: E402
from tilegraph.frontends.fx.dynamo import DynamoOptions  # noqa: E402
from tilegraph.ir import TilegraphError  # noqa: E402

TOLERANCE = 1e-4


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def close(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and (a - b).abs().max().item() < TOLERANCE


def mlp():
    return nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Dropout(0.1), nn.Linear(16, 4), nn.Softmax(-1)).eval()


def test_backend_is_registered_by_name():
    assert "tilegraph" in torch._dynamo.list_backends(exclude_tags=())


def test_compiled_mlp_gives_eager_results(built):
    model = mlp()
    compiled = torch.compile(model, backend="tilegraph")
    x = torch.randn(3, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("error", TilegraphFallbackWarning)
        assert close(compiled(x), model(x))
        y = torch.randn(5, 8)  # a new shape converts again (static shapes)
        assert close(compiled(y), model(y))
    assert len(built) == 2


def test_a_shape_seen_before_reuses_its_build(built):
    model = mlp()
    compiled = torch.compile(model, backend="tilegraph", dynamic=False)
    x, y = torch.randn(3, 8), torch.randn(5, 8)
    with torch.no_grad():
        for batch in (x, y, x, y):
            assert close(compiled(batch), model(batch))
    assert [g.inputs[0].type.shape for g, _ in built] == [(3, 8), (5, 8)]


def test_strided_inputs_are_read_as_their_values(built):
    """The C++ library reads the tensors' own memory, so a strided view is first made contiguous."""
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8)).eval()
    compiled = torch.compile(model, backend="tilegraph", dynamic=False)
    with torch.no_grad():
        for _ in range(2):
            view = torch.randn(8, 4).t()
            assert close(compiled(view), model(view))
    assert [target for _, target in built] == ["cpp"]


class SeveralResults(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x, ids):
        y = self.linear(x)
        return y.argmax(-1), y > 0, y.sum(), y[:, :4], ids * 2


def test_results_of_every_dtype_come_back_without_a_warning(built):
    """Integer, boolean, 0-d and sliced results, as eager gives them, and no warning of any kind on the way
    (a deprecated torch API used per compile warned once per graph, and failed where warnings are errors)."""
    model, x, ids = SeveralResults().eval(), torch.randn(3, 8), torch.arange(6).reshape(3, 2)
    compiled = torch.compile(model, backend="tilegraph")
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("error")
        got, want = compiled(x, ids), model(x, ids)
    assert [(g.dtype, g.shape) for g in got] == [(w.dtype, w.shape) for w in want]
    assert all(torch.equal(g, w) if g.dtype != torch.float32 else close(g, w) for g, w in zip(got, want))
    assert [target for _, target in built] == ["cpp"]


class UpdatesItsInput(nn.Module):
    def forward(self, x, y):
        x.add_(1)
        x[0] = y.sum()
        torch.relu_(y)
        return x * 2


def test_inputs_updated_in_place_are_written_back(built):
    """`x.add_`, `x[i] = v`, `relu_`: after the call the caller's tensors hold what eager leaves in them."""
    x, y = torch.randn(3, 4), torch.randn(4)
    x_eager, y_eager = x.clone(), y.clone()
    compiled = torch.compile(UpdatesItsInput(), backend="tilegraph")
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("error", TilegraphFallbackWarning)
        for _ in range(2):  # the second call through the runner kept from the first
            got, want = compiled(x, y), UpdatesItsInput()(x_eager, y_eager)
            assert close(got, want) and close(x, x_eager) and close(y, y_eager)
    assert [target for _, target in built] == ["cpp"]


class CountsItsCalls(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls.add_(1)
        return x * self.calls


class WritesThroughAView(nn.Module):
    def forward(self, x):
        x[:, 0].mul_(2)
        return x + 1


class WritesThroughAConversion(nn.Module):
    def forward(self, x):
        x.float().add_(1)  # x is f32 already: .float() returns x itself
        return x * 3


class WritesThroughMovedAxes(nn.Module):
    def forward(self, x):
        x.moveaxis(0, 1).mul_(2)  # moveaxis and swapdims are views like movedim and transpose
        torch.swapdims(x, 0, 1).add_(1)
        return x + 1


@pytest.mark.parametrize("model,reason", [(CountsItsCalls, "updates the module's state"),
                                          (WritesThroughAView, "in place through a view or alias of it"),
                                          (WritesThroughAConversion, "in place through a view or alias of it"),
                                          (WritesThroughMovedAxes, "in place through a view or alias of it")])
def test_updates_in_place_that_cannot_be_written_back_run_eagerly_with_a_warning(built, model, reason):
    """Module state updated in place, and an input written through a view: eager PyTorch runs the graph, says
    why, and leaves what eager leaves (never a result computed from a stale tensor)."""
    x = torch.randn(3, 4)
    x_eager = x.clone()
    compiled, reference = torch.compile(model(), backend="tilegraph"), model()
    with torch.no_grad(), pytest.warns(TilegraphFallbackWarning, match=reason):
        got = compiled(x)
    with torch.no_grad():
        want = reference(x_eager)
    assert close(got, want) and close(x, x_eager)


def test_an_empty_batch_runs_eagerly_and_leaves_other_batches_compiled(built):
    """A batch of 0 rows: eager PyTorch computes the (empty) result, with no warning, and the batches after it
    still run compiled (an empty tensor is refused by the compiler: `driver._refuse_empty_tensors`)."""
    model = mlp()
    compiled = torch.compile(model, backend="tilegraph")
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("error", TilegraphFallbackWarning)
        for rows in (0, 2, 0, 3):
            x = torch.randn(rows, 8)
            got, want = compiled(x), model(x)
            assert got.shape == want.shape and (rows == 0 or close(got, want))
    assert built and all(g.inputs[0].type.shape[0] > 0 for g, _ in built)


class ReturnsItsInput(nn.Module):
    def forward(self, x):
        return x, torch.relu(x), x


def test_outputs_that_are_inputs_or_repeated_come_back_as_copies(built):
    x = torch.randn(3, 4)
    compiled = torch.compile(ReturnsItsInput(), backend="tilegraph")
    with torch.no_grad():
        same, relu, again = compiled(x)
    assert close(same, x) and close(relu, torch.relu(x)) and close(again, x)
    assert built


def test_shapes_past_the_limit_run_eagerly_and_say_so_once(built):
    """Shapes are static: each new one compiles again, up to `max_shapes` per graph (a decode loop over a growing
    KV cache would compile at every token). Past it, new shapes run eagerly, said once with the seconds spent;
    shapes compiled already stay compiled, and every call gives eager's result."""
    model = mlp()
    compiled = torch.compile(model, backend="tilegraph", dynamic=True, options={"max_shapes": 3})
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        for rows in (2, 3, 4, 5, 6, 2):
            x = torch.randn(rows, 8)
            assert close(compiled(x), model(x))
    said = [str(w.message) for w in caught if issubclass(w.category, TilegraphRecompileWarning)]
    assert len(said) == 1 and re.search(r"compiled for 3 argument shapes \(\d+\.\d s in all\): shapes are static.*"
                                        r"now run eagerly in PyTorch \(options=\{'max_shapes': N\}", said[0])
    assert [g.inputs[0].type.shape[0] for g, _ in built] == [2, 3, 4], "5 and 6 eager, 2 compiled already"


@pytest.mark.parametrize("bad", [-1, 2.5, True, "8"])
def test_max_shapes_must_be_a_whole_number(bad):
    with pytest.raises(TilegraphError, match=r"max_shapes must be a whole number >= 0 \(0: no limit\), not"):
        DynamoOptions.parse({"max_shapes": bad})


def test_max_shapes_zero_compiles_every_shape(built):
    compiled = torch.compile(mlp(), backend="tilegraph", dynamic=True, options={"max_shapes": 0})
    with torch.no_grad():
        for rows in range(2, 12):
            compiled(torch.randn(rows, 8))
    assert len(built) == 10


def test_dynamic_shape_graphs_are_converted_per_call_shape(built):
    model = mlp()
    compiled = torch.compile(model, backend="tilegraph", dynamic=True)
    for rows in (2, 7):
        x = torch.randn(rows, 8)
        with torch.no_grad():  # Dynamo's own graph (with grad mode on, AOTAutograd's: test_fx_training.py)
            assert close(compiled(x), model(x))
    assert [g.inputs[0].type.shape for g, _ in built] == [(2, 8), (7, 8)]


def test_weights_updated_after_compiling_are_used(built):
    model = mlp()
    compiled = torch.compile(model, backend="tilegraph")
    x = torch.randn(2, 8)
    compiled(x)
    with torch.no_grad():
        model[0].weight.mul_(-2)
    assert close(compiled(x), model(x))


@pytest.mark.parametrize("no_grad", [True, False], ids=["fused-fast-path", "autograd-path"])
@pytest.mark.parametrize("batch_first", [True, False])
def test_compiled_transformer_layer_gives_eager_results(built, batch_first, no_grad):
    layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, batch_first=batch_first).eval()
    x = torch.randn(2, 5, 32) if batch_first else torch.randn(5, 2, 32)
    compiled = torch.compile(layer, backend="tilegraph")
    with warnings.catch_warnings(), torch.set_grad_enabled(not no_grad):
        warnings.simplefilter("error", TilegraphFallbackWarning)
        got = compiled(x)
        expected = layer(x)
    assert close(got, expected)
    assert built and any(n.op == "attention" for n in built[-1][0].nodes)


class TupleOut(nn.Module):
    def forward(self, x):
        return [x * 2, (x.sum(-1), x.shape[0])]


def test_outputs_keep_the_graph_module_structure(built):
    x = torch.randn(3, 4)
    got = torch.compile(TupleOut(), backend="tilegraph")(x)
    assert isinstance(got, list) and close(got[0], x * 2) and close(got[1][0], x.sum(-1)) and got[1][1] == 3
    assert built


class Unsupported(nn.Module):
    def forward(self, x):
        return torch.logcumsumexp(x, dim=1) * 2


def test_unsupported_graph_falls_back_to_eager_with_a_warning(built):
    x = torch.randn(3, 4)
    compiled = torch.compile(Unsupported(), backend="tilegraph")
    with pytest.warns(TilegraphFallbackWarning, match=r"(?s)eagerly in PyTorch.*logcumsumexp: torch.logcumsumexp: no converter"):
        got = compiled(x)
    assert close(got, Unsupported()(x))
    assert not built


def test_a_crash_inside_tilegraph_falls_back_to_eager_with_a_warning(monkeypatch):
    def broken(graph, target=None, **options):
        raise KeyError("a bug")

    monkeypatch.setattr(tilegraph_dynamo, "compile_graph", broken)
    model = mlp()
    compiled = torch.compile(model, backend="tilegraph")
    x = torch.randn(3, 8)
    with pytest.warns(TilegraphFallbackWarning, match="internal error KeyError"):
        got = compiled(x)
    assert close(got, model(x))
