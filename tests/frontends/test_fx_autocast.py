"""dtypes under torch.compile(backend="tilegraph") on the C++ path: f32, f16 and bf16 models, and
`torch.autocast` regions captured by Dynamo, whose ops run in the dtypes torch's autocast policy gives
them (matmul, linear and conv in the autocast dtype, CPU losses in f32), compared with eager in dtype
and value. The Triton path's twins are in test_dynamo_triton.py."""
import warnings

import pytest

torch = pytest.importorskip("torch", reason="the PyTorch frontend needs the optional torch extra")
nn = torch.nn
F = torch.nn.functional

import tilegraph.frontends.fx  # noqa: E402,F401  (registers the backend)
from tilegraph.frontends.fx import TilegraphFallbackWarning  # noqa: E402
from tilegraph.frontends.fx.convert import convert_graph_module  # noqa: E402
from tilegraph.ir import DType, TilegraphError  # noqa: E402

# max |tilegraph - eager| / max |eager|: a few units in the last place of each dtype's mantissa
TOLERANCE = {torch.float32: 1e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}
IR = {torch.float32: DType.f32, torch.float16: DType.f16, torch.bfloat16: DType.bf16}


@pytest.fixture(autouse=True)
def _autocast_left_off(fresh_dynamo):
    yield
    assert not torch.is_autocast_enabled("cpu"), "a test left autocast on"


def mlp():
    return nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4), nn.Softmax(-1)).eval()


def cnn():
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(4 * 4 * 4, 5)).eval()


MODELS = {"mlp": (mlp, (3, 8)), "cnn": (cnn, (2, 3, 8, 8))}


def compiled_call(model, *inputs, target="cpp"):
    """The compiled model's outputs, every graph run by tilegraph (a fallback is an error)."""
    compiled = torch.compile(model, backend="tilegraph", options={"target": target})
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("error", TilegraphFallbackWarning)
        return compiled(*inputs)


def assert_matches(got, want, precision=None):
    """Same structure, dtypes and shapes as eager, values within the tolerance of each output's dtype, or
    of `precision` where the outputs were computed from values rounded to it (autocast)."""
    got, want = (got, want) if isinstance(want, (tuple, list)) else ((got,), (want,))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape and g.device == w.device
        scale = max(float(w.float().abs().max()), 1e-6)
        error = float((g.float() - w.float()).abs().max()) / scale
        assert error < TOLERANCE[precision or w.dtype], f"{w.dtype}: relative error {error:.2e}"


def matmul_dtypes(graph):
    """The operand dtypes of every matmul and conv in a converted graph, in order."""
    return [tuple(v.dtype for v in node.inputs[:2]) for node in graph.nodes if node.op in ("matmul", "conv2d")]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_models_in_each_dtype_match_eager(name, dtype, built):
    build, shape = MODELS[name]
    model = build().to(dtype)
    x = torch.randn(*shape).to(dtype)
    got = compiled_call(model, x)
    with torch.no_grad():
        assert_matches(got, model(x))
    ((graph, target),) = built
    assert target == "cpp" and graph.inputs[0].dtype is IR[dtype]
    assert matmul_dtypes(graph) and all(d == (IR[dtype], IR[dtype]) for d in matmul_dtypes(graph))


class AutocastMLP(nn.Module):
    """The usual mixed-precision step: the model under autocast, its loss too."""

    def __init__(self, dtype=torch.bfloat16):
        super().__init__()
        self.net = mlp()
        self.dtype = dtype

    def forward(self, x, y):
        with torch.autocast("cpu", dtype=self.dtype):
            out = self.net(x)
            return out, F.mse_loss(out, y), F.l1_loss(out, y, reduction="sum")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_autocast_region_casts_as_torch_does(dtype, built):
    model = AutocastMLP(dtype).eval()
    x, y = torch.randn(3, 8), torch.rand(3, 4)
    got = compiled_call(model, x, y)
    with torch.no_grad():
        want = model(x, y)
    assert [t.dtype for t in want] == [dtype, torch.float32, torch.float32]  # torch's policy on the CPU
    assert_matches(got, want, dtype)
    ((graph, _),) = built
    assert matmul_dtypes(graph) == [(IR[dtype], IR[dtype])] * 2, "linear runs in the autocast dtype"
    means = [n for n in graph.nodes if n.op in ("mean", "sum")]
    assert means and all(n.inputs[0].dtype is DType.f32 for n in means), "the losses reduce in f32"


class PartlyAutocast(nn.Module):
    """Autocast around the first layer only, and a region inside it that turns autocast off again."""

    def __init__(self):
        super().__init__()
        self.first, self.second, self.third = nn.Linear(8, 16), nn.Linear(16, 16), nn.Linear(16, 4)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = torch.relu(self.first(x))
            with torch.autocast("cpu", enabled=False):
                h = self.second(h.float())
            h = self.third(h)
        return h.float().softmax(-1) + x[:, :4]


def test_ops_outside_the_region_and_in_a_disabled_region_stay_in_f32(built):
    model = PartlyAutocast().eval()
    x = torch.randn(5, 8)
    got = compiled_call(model, x)
    with torch.no_grad():
        assert_matches(got, model(x), torch.bfloat16)
    ((graph, _),) = built
    bf16, f32 = (DType.bf16, DType.bf16), (DType.f32, DType.f32)
    assert matmul_dtypes(graph) == [bf16, f32, bf16]


class AutocastCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = cnn()

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return self.net(x)


def test_autocast_conv_and_batch_norm_match_eager(built):
    model = AutocastCNN().eval()
    x = torch.randn(2, 3, 8, 8)
    got = compiled_call(model, x)
    with torch.no_grad():
        want = model(x)
    assert want.dtype is torch.bfloat16
    assert_matches(got, want)
    ((graph, _),) = built
    assert matmul_dtypes(graph)[0] == (DType.bf16, DType.bf16), "conv runs in bf16"


def test_a_failed_conversion_inside_a_region_leaves_autocast_off():
    captured = []

    def capture(gm, example_inputs):
        captured.append((gm, list(example_inputs)))
        return gm

    model = AutocastMLP().eval()
    with torch.no_grad():
        torch.compile(model, backend=capture)(torch.randn(3, 8), torch.rand(3, 4))
    ((gm, args),) = captured
    wrong = [torch.randn(3, 5) if a.shape == (3, 8) else a for a in args]  # the first linear fails to run
    with pytest.raises(TilegraphError, match="running the traced graph"):
        convert_graph_module(gm, wrong)
    assert not torch.is_autocast_enabled("cpu")
    assert convert_graph_module(gm, args).graph.outputs[0].dtype is DType.bf16  # and converting still works


def test_a_mixed_precision_training_step_gives_eager_gradients(built):
    """The usual use of autocast: forward and loss under autocast, backward outside (AOTAutograd)."""
    net = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))

    def loss_of(x, y):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return F.mse_loss(net(x), y)

    x, y = torch.randn(3, 8), torch.randn(3, 4)
    loss_of(x, y).backward()
    want = [p.grad.clone() for p in net.parameters()]
    net.zero_grad()
    with warnings.catch_warnings():
        warnings.simplefilter("error", TilegraphFallbackWarning)
        loss = torch.compile(loss_of, backend="tilegraph")(x, y)
        loss.backward()
    assert loss.dtype is torch.float32 and len(built) == 2, "forward and backward graphs both compiled"
    assert_matches([p.grad for p in net.parameters()], want, torch.bfloat16)
