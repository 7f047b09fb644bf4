"""torch.compile(backend="tilegraph", options={"target": "triton"}) in CI: the Triton path under the Triton
interpreter (TRITON_INTERPRET=1, CPU tensors). The test models and transformers models from tiny configs
run as Triton kernels with torch tensors in and out: outputs on the inputs' device, equal to eager, no
fallback, no tensor through numpy in a steady-state call; f16/bf16 models and autocast regions; the
options' errors; in-place weight updates on both paths; the C++ path reads CPU inputs in place.

The interpreter is chosen at import, by tests/triton_interpreter.py (which says when and why it must be
first). Other files in the same worker are unaffected: `auto` sends only CUDA graphs to Triton.
Products run in IEEE f32 (not TF32, torch's default for convolutions on a GPU) so that CPU eager is the
exact reference.
"""
from __future__ import annotations

import importlib.util
import sys
import warnings
from pathlib import Path

import pytest
from triton_interpreter import torch  # sets TRITON_INTERPRET=1 first, or skips this file saying why

import tilegraph  # noqa: E402
import tilegraph.passes  # noqa: E402
import tilegraph.frontends.fx  # noqa: E402,F401  (registers the backend)
from tilegraph.backends.triton import launch  # noqa: E402
from tilegraph.backends.triton.runtime import TritonProgram  # noqa: E402
from tilegraph.frontends.fx import TilegraphFallbackWarning  # noqa: E402
from tilegraph.frontends.fx import dynamo  # noqa: E402
from tilegraph.ir import DType, TilegraphError  # noqa: E402

nn = torch.nn
F = torch.nn.functional

# the interpreter computes padded rows of a tile too (masked on store): all-masked attention rows divide 0 by 0
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered in divide:RuntimeWarning",
                                        "ignore:divide by zero encountered in log2:RuntimeWarning")

TOLERANCE = {torch.float32: 1e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}  # of max |eager|
IR = {torch.float32: DType.f32, torch.float16: DType.f16, torch.bfloat16: DType.bf16}
# where tilegraph's code lives (setup.py maps ir/, passes/, backends/, frontends/ to tilegraph.*)
TILEGRAPH_DIRS = frozenset(Path(p).resolve() for package in (tilegraph, tilegraph.backends, tilegraph.frontends,
                                                             tilegraph.ir, tilegraph.passes) for p in package.__path__)


@pytest.fixture(autouse=True)
def _ieee_and_fresh_dynamo(monkeypatch):
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    torch._dynamo.reset()
    torch.manual_seed(0)
    yield
    torch._dynamo.reset()


class Graphs(list):
    """The TilegraphGraphs Dynamo got, in order; `launches`: the Triton launch sequences run."""

    def __init__(self) -> None:
        super().__init__()
        self.launches: list = []


@pytest.fixture
def graphs(monkeypatch):
    made = Graphs()

    class Recorded(dynamo.TilegraphGraph):
        def __init__(self, gm, example_inputs, *args, **kwargs):
            made.append(self)
            self.example_inputs = list(example_inputs)
            super().__init__(gm, example_inputs, *args, **kwargs)

    monkeypatch.setattr(dynamo, "TilegraphGraph", Recorded)
    original = launch.Launcher.__call__

    def counted(self, *inputs):
        made.launches.append(self)
        return original(self, *inputs)

    monkeypatch.setattr(launch.Launcher, "__call__", counted)
    return made


def compiled(model, **options):
    return torch.compile(model, backend="tilegraph", options=options)


def run(fn, *inputs):
    """Call with fallbacks as errors, without autograd (inference graphs take the direct path)."""
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("error", TilegraphFallbackWarning)
        return fn(*inputs)


def assert_matches(got, want, precision=None):
    """Same dtypes, shapes and device as eager, values within the dtype's tolerance (or `precision`'s,
    for outputs computed from values rounded to it under autocast)."""
    got, want = (got, want) if isinstance(want, (tuple, list)) else ((got,), (want,))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.device == w.device and g.dtype == w.dtype and g.shape == w.shape
        scale = max(float(w.float().abs().max()), 1e-6)
        error = float((g.float() - w.float()).abs().max()) / scale
        assert error < TOLERANCE[precision or w.dtype], f"{w.dtype}: relative error {error:.2e}"


def assert_ran_on_triton(graphs):
    assert graphs, "no graph reached tilegraph"
    for graph in graphs:
        assert not graph.eager, graph.fallback_reason
        assert graph.target == "triton"
        assert all(isinstance(r, dynamo.TritonRunner) for r in graph._cache.values())
    assert graphs.launches, "no Triton launch sequence ran"


# ----- models -------------------------------------------------------------------------------------------------
def mlp():
    return nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4), nn.Softmax(-1)).eval()


def cnn():
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(4 * 4 * 4, 5)).eval()


MODELS = {"mlp": (mlp, (3, 8)), "cnn": (cnn, (2, 3, 8, 8))}


def _zoo():
    """benchmarks/zoo_models.py: O(1) weights (init_weights), batch norms calibrated, LastHidden."""
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "zoo_models.py"
    spec = importlib.util.spec_from_file_location("tilegraph_zoo_models", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


VOCAB = 64
TEXT = dict(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
            max_position_embeddings=16, pad_token_id=0)
# tiny on purpose: the interpreter runs every program instance of every kernel in Python
TRANSFORMERS = {
    "GPT-2": ("GPT2Model", "GPT2Config", dict(vocab_size=VOCAB, n_embd=16, n_layer=1, n_head=2, n_positions=16,
                                               use_cache=False, bos_token_id=1, eos_token_id=2), "text"),
    "BERT": ("BertModel", "BertConfig", TEXT, "text"),
    "Llama": ("LlamaModel", "LlamaConfig", dict(TEXT, num_key_value_heads=1, use_cache=False, bos_token_id=1,
                                                 eos_token_id=2), "text"),
    "ViT": ("ViTModel", "ViTConfig", dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                           intermediate_size=32, image_size=16, patch_size=8), "image"),
    "ResNet": ("ResNetModel", "ResNetConfig", dict(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1],
                                                    layer_type="basic"), "image"),
}


def build_transformer(name):
    transformers = pytest.importorskip("transformers", reason="the transformers models need transformers")
    zoo = _zoo()
    model_class, config_class, config, kind = TRANSFORMERS[name]
    model = zoo.init_weights(getattr(transformers, model_class)(getattr(transformers, config_class)(**config)))
    if kind == "text":
        ids = torch.randint(3, VOCAB, (1, 6), generator=torch.Generator().manual_seed(1))
        return zoo.LastHidden(model, ("input_ids",)), (ids,)
    size = config.get("image_size", 32)
    wrapped = zoo.calibrate_batch_norms(zoo.LastHidden(model, ("pixel_values",)),
                                        zoo.image_inputs(size, batch=4, seed=5))
    return wrapped, zoo.image_inputs(size)


# ----- the Triton path ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(MODELS))
def test_test_models_run_as_triton_kernels_on_the_inputs_device(name, graphs):
    build, shape = MODELS[name]
    model, x, y = build(), torch.randn(*shape), torch.randn(*shape)
    fn = compiled(model, target="triton")
    with torch.no_grad():
        first = run(fn, x)
        kept = first.clone()
        assert_matches(first, model(x))
        assert_matches(run(fn, y), model(y))  # the steady state: the same launcher, new inputs
        assert torch.equal(first, kept), "the next call overwrote a result the caller holds"
        strided = torch.randn(*reversed(shape)).permute(*reversed(range(len(shape))))  # not contiguous
        assert_matches(run(fn, strided), model(strided))
    assert_ran_on_triton(graphs)
    assert len(graphs.launches) == 3 and len(graphs[0]._cache) == 1


@pytest.mark.parametrize("name", sorted(TRANSFORMERS))
def test_transformers_models_run_as_triton_kernels(name, graphs):
    model, inputs = build_transformer(name)
    with torch.no_grad():
        want = model(*inputs)
    got = run(compiled(model, target="triton"), *inputs)
    assert 0.1 < float(want.std()) < 10, "activations should be O(1), or a match proves little"
    assert_matches(got, want)
    assert_ran_on_triton(graphs)


def _banned(what):
    def fail(*args, **kwargs):
        raise AssertionError(f"the Triton path called {what} in a steady-state call")
    return fail


def _from_tilegraph(depth=2) -> bool:
    """Whether the caller's caller is tilegraph's code or a module it generated."""
    frame = sys._getframe(depth)
    path = Path(frame.f_code.co_filename)
    return path.name.startswith("tilegraph_triton_") or not TILEGRAPH_DIRS.isdisjoint(path.resolve().parents)


def test_a_steady_state_call_moves_no_tensor_through_numpy(graphs, monkeypatch):
    model, x = mlp(), torch.randn(3, 8)
    fn = compiled(model, target="triton")
    run(fn, x)  # converts and builds: numpy is fine here (parameters, the IR)
    tensor_numpy, from_numpy = torch.Tensor.numpy, torch.from_numpy

    def numpy(self, *args, **kwargs):
        if _from_tilegraph():  # the interpreter itself moves kernels' arguments through numpy
            raise AssertionError("tilegraph turned a tensor into a numpy array in a steady-state call")
        return tensor_numpy(self, *args, **kwargs)

    def array_to_tensor(array):
        if _from_tilegraph():
            raise AssertionError("tilegraph made a tensor from a numpy array in a steady-state call")
        return from_numpy(array)

    monkeypatch.setattr(torch.Tensor, "numpy", numpy)
    monkeypatch.setattr(torch, "from_numpy", array_to_tensor)
    monkeypatch.setattr(TritonProgram, "to_numpy", staticmethod(_banned("TritonProgram.to_numpy")))
    monkeypatch.setattr(TritonProgram, "to_torch", staticmethod(_banned("TritonProgram.to_torch")))
    monkeypatch.setattr(dynamo, "_to_numpy", _banned("dynamo._to_numpy"))
    y = torch.randn(3, 8)
    got = run(fn, y)
    monkeypatch.undo()
    with torch.no_grad():
        assert_matches(got, model(y))
    assert len(graphs.launches) == 2


@pytest.mark.parametrize("target", ["triton", "cpp", "reference"])
def test_the_target_option_chooses_the_backend(target, graphs, monkeypatch):
    built = []
    original = dynamo.compile_graph

    def recording(graph, target="cpp", **options):
        built.append(target)
        return original(graph, target, **options)

    monkeypatch.setattr(dynamo, "compile_graph", recording)
    model, x = mlp(), torch.randn(3, 8)
    with torch.no_grad():
        assert_matches(run(compiled(model, target=target), x), model(x))
    assert built == [target] and [g.target for g in graphs] == [target]
    assert bool(graphs.launches) == (target == "triton")


def test_auto_runs_cpu_graphs_as_cpp_even_under_the_interpreter(graphs):
    model, x = mlp(), torch.randn(3, 8)
    with torch.no_grad():
        assert_matches(run(compiled(model), x), model(x))
    assert [g.target for g in graphs] == ["cpp"] and not graphs.launches


@pytest.mark.parametrize("options, message", [
    ({"tagret": "triton"}, r"unknown option\(s\) 'tagret'; valid options: target, cudagraphs"),
    ({"target": "cuda"}, r"target 'cuda' is not one of 'auto', 'cpp', 'triton', 'reference'"),
    ({"cudagraphs": "yes"}, r"cudagraphs must be True or False, not 'yes'"),
])
def test_invalid_options_raise_an_error_naming_the_valid_ones(options, message):
    with pytest.raises(TilegraphError, match=message):
        dynamo.DynamoOptions.parse(options)
    with pytest.raises(Exception, match=message) as raised:  # Dynamo wraps it: BackendCompilerFailed
        run(torch.compile(mlp(), backend="tilegraph", options=options), torch.randn(3, 8))
    assert isinstance(getattr(raised.value, "inner_exception", raised.value), TilegraphError)


@pytest.mark.parametrize("mode, expected", [
    ("default", dynamo.DynamoOptions()),
    ("reduce-overhead", dynamo.DynamoOptions(cudagraphs=True)),
    ("max-autotune", dynamo.DynamoOptions(autotune=True)),
    ("max-autotune-no-cudagraphs", dynamo.DynamoOptions(autotune=True, cudagraphs=False)),
])
def test_inductors_mode_names_are_read_as_options(mode, expected, graphs):
    """`torch.compile(..., mode=...)` as a user of Inductor writes it: its names map to DynamoOptions; the model
    runs (it raised a TypeError from the backend before)."""
    assert dynamo.DynamoOptions.parse(None, mode) == expected
    model, x = mlp(), torch.randn(3, 8)
    with torch.no_grad():
        assert_matches(run(torch.compile(model, backend="tilegraph", mode=mode), x), model(x))


def test_an_unknown_mode_is_named_with_the_valid_ones():
    with pytest.raises(TilegraphError, match=r"mode 'fast' is not one of 'default', 'reduce-overhead', "
                                             r"'max-autotune', 'max-autotune-no-cudagraphs'"):
        dynamo.DynamoOptions.parse(None, "fast")


@pytest.mark.parametrize("target", ["cpp", "triton"])
def test_in_place_weight_updates_are_seen_by_the_next_call(target, graphs):
    model, x = mlp(), torch.randn(3, 8)
    fn = compiled(model, target=target)
    before = run(fn, x)
    with torch.no_grad():
        model[0].weight.add_(1)
        model[2].bias.mul_(-2)
        want = model(x)
    got = run(fn, x)
    assert_matches(got, want)
    assert float((got - before).abs().max()) > 1e-3, "the update changes the output"
    assert all(g.target == target for g in graphs)


@pytest.mark.parametrize("target", ["cpp", "triton"])
def test_weights_given_new_storage_are_seen_by_the_next_call(target, graphs):
    """`.data = ...` bumps no version counter (the old storage stays alive in what was bound): the
    storage itself is compared, so folded copies (transposed weights) are rebuilt too."""
    model, x = mlp(), torch.randn(3, 8)
    fn = compiled(model, target=target)
    before = run(fn, x)
    with torch.no_grad():
        model[0].weight.data = torch.randn_like(model[0].weight)
        model[2].bias.data = model[2].bias * -2
        want = model(x)
    got = run(fn, x)
    assert_matches(got, want)
    assert float((got - before).abs().max()) > 1e-3, "the update changes the output"


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.scale = nn.Linear(8, 4), 0.5

    def forward(self, x):
        return self.fc(x) * self.scale


def test_a_python_number_passed_as_a_cpu_scalar_does_not_decide_the_device(graphs):
    model, x = Scaled().eval(), torch.randn(3, 8)
    fn = compiled(model, target="triton")
    run(fn, x)
    model.scale = 0.75  # Dynamo now passes the number as a 0-d CPU tensor, whatever the model's device
    with torch.no_grad():
        assert_matches(run(fn, x), model(x))
    assert_ran_on_triton(graphs)
    graph = graphs[-1]
    (runner,) = graph._cache.values()
    (position,) = runner.conversion.scalar_positions
    # the same graph with its tensors elsewhere than the number (as on a GPU): their device decides
    args = list(graph.example_inputs)
    args[position] = torch.tensor(0.75, device="meta")
    assert dynamo.TritonRunner(runner.conversion, runner.program, args, graph.options)._launcher.device.type == "cpu"


class UpdatesItsInput(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        x.mul_(2)
        return self.fc(x)


def test_an_input_updated_in_place_is_written_back_on_the_triton_path(graphs):
    model, x = UpdatesItsInput().eval(), torch.randn(3, 8)
    x_eager = x.clone()
    got = run(compiled(model, target="triton"), x)
    with torch.no_grad():
        want = model(x_eager)
    assert_matches(got, want)
    assert torch.equal(x, x_eager), "the caller's tensor holds what eager leaves in it"
    assert_ran_on_triton(graphs)


# ----- the C++ path: inputs in place, outputs own their memory --------------------------------------------
class _PointerRecorder:
    """A compiled program that records where its inputs and results live (arrays, or raw addresses)."""

    def __init__(self, program, seen):
        self._program, self._seen = program, seen

    def __getattr__(self, name):
        return getattr(self._program, name)

    def __call__(self, *arrays):
        results = self._program(*arrays)
        self._seen.append(([a.ctypes.data for a in arrays], [r.ctypes.data for r in results]))
        return results

    def run_addresses(self, inputs, outputs):
        self._seen.append((list(inputs), list(outputs)))
        self._program.run_addresses(inputs, outputs)


def test_the_cpp_path_reads_cpu_inputs_in_place_and_its_outputs_own_their_memory(graphs, monkeypatch):
    seen = []
    original = dynamo.compile_graph
    monkeypatch.setattr(dynamo, "compile_graph", lambda graph, target="cpp", **options: _PointerRecorder(
        original(graph, target, **options), seen))
    model = mlp()
    fn = compiled(model, target="cpp")
    x, y = torch.randn(3, 8), torch.randn(3, 8)
    first = run(fn, x)
    kept = first.clone()
    second = run(fn, y)
    assert [g.target for g in graphs] == ["cpp"]
    (inputs_x, results_x), (inputs_y, results_y) = seen
    assert inputs_x == [x.data_ptr()] and inputs_y == [y.data_ptr()], "the library read a copy of the input"
    assert first.data_ptr() == results_x[0] and second.data_ptr() == results_y[0], "the result was copied"
    assert first.data_ptr() != second.data_ptr()
    assert torch.equal(first, kept), "the next call overwrote a result the caller holds"
    with torch.no_grad():
        assert_matches(second, model(y))


# ----- dtypes and autocast on the Triton path -------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_models_in_each_dtype_run_on_triton(name, dtype, graphs):
    build, shape = MODELS[name]
    model = build().to(dtype)
    x = torch.randn(*shape).to(dtype)
    got = run(compiled(model, target="triton"), x)
    with torch.no_grad():
        assert_matches(got, model(x))
    assert_ran_on_triton(graphs)
    (runner,) = graphs[0]._cache.values()
    assert runner.conversion.graph.inputs[0].dtype is IR[dtype]


class AutocastMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = mlp()

    def forward(self, x, y):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = self.net(x)
            return out, F.mse_loss(out, y)


def test_an_autocast_region_runs_on_triton_in_torchs_dtypes(graphs):
    model, x, y = AutocastMLP().eval(), torch.randn(3, 8), torch.rand(3, 4)
    got = run(compiled(model, target="triton"), x, y)
    with torch.no_grad():
        want = model(x, y)
    assert [t.dtype for t in want] == [torch.bfloat16, torch.float32]
    assert_matches(got, want, torch.bfloat16)
    assert_ran_on_triton(graphs)
    (runner,) = graphs[0]._cache.values()
    matmuls = [n for n in runner.conversion.graph.nodes if n.op == "matmul"]
    assert len(matmuls) == 2 and all(v.dtype is DType.bf16 for n in matmuls for v in n.inputs)
