"""torch.compile(backend="tilegraph") on a real CUDA device: Triton kernels on the tensors' own device,
CUDA-graph replay, no host round trip.

Skipped without a CUDA device, and when TRITON_INTERPRET is set in this process (the interpreter
tests set it): on a GPU machine run it on its own, `python -m pytest tests/frontends/test_dynamo_gpu.py`.
"""
from __future__ import annotations

import os
import warnings

import pytest

torch = pytest.importorskip("torch", reason="the Dynamo backend needs torch")
pytest.importorskip("triton", reason="the GPU path runs Triton kernels (pip install 'tilegraph[triton]')")

if os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes"):
    pytest.skip("TRITON_INTERPRET is set in this process: run this file on its own", allow_module_level=True)
if not torch.cuda.is_available():
    pytest.skip("no CUDA device: the interpreter tests cover the Triton path on the CPU", allow_module_level=True)

from tilegraph.frontends.fx import dynamo  # noqa: E402
from tilegraph.frontends.fx.errors import TilegraphFallbackWarning  # noqa: E402

TOLERANCE = {torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 5e-2}


@pytest.fixture
def graphs(monkeypatch):
    """The TilegraphGraph objects Dynamo received, with fallbacks turned into errors."""
    made = []
    original = dynamo.tilegraph_backend

    def recording(gm, example_inputs, options=None):
        compiled = original(gm, example_inputs, options)
        made.append(compiled)
        return compiled

    monkeypatch.setattr(dynamo, "tilegraph_backend", recording)
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error", TilegraphFallbackWarning)
        yield made
    torch._dynamo.reset()


def compiled(model, graphs, **options):
    return torch.compile(model, backend=dynamo.tilegraph_backend, options=options)


def mlp(dtype=torch.float32):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 32),
                               torch.nn.Softmax(-1)).to("cuda", dtype).eval()


def close(got, want):
    scale = max(float(want.float().abs().max()), 1.0)
    return float((got.float() - want.float()).abs().max()) <= TOLERANCE[want.dtype] * scale


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_cuda_graphs_run_as_triton_on_the_device_in_their_dtype(graphs, dtype):
    model = mlp(dtype)
    x = torch.randn(16, 64, device="cuda", dtype=dtype)
    with torch.no_grad():
        want, got = model(x), compiled(model, graphs)(x)
    assert got.device == x.device and got.dtype == want.dtype
    assert close(got, want)
    assert [g.target for g in graphs] == ["triton"]


def test_cuda_graph_replay_gives_the_first_calls_results_and_follows_new_inputs(graphs):
    model = mlp()
    fn = compiled(model, graphs)
    xs = [torch.randn(16, 64, device="cuda") for _ in range(4)]
    with torch.no_grad():
        first = fn(xs[0])
        for _ in range(3):  # warm-up, capture, replays
            again = fn(xs[0])
            assert torch.equal(again, first), "a replay must give the eager launch's result bit for bit"
        held = fn(xs[1])
        for x in xs[2:]:
            assert close(fn(x), model(x))
        assert close(held, model(xs[1])), "a replay must not overwrite outputs the caller holds"
    (runner,) = graphs[0]._cache.values()
    assert runner._graphed is not None and runner._graphed.graph is not None, "the launches were captured"


def test_cudagraphs_can_be_turned_off(graphs):
    model = mlp()
    fn = compiled(model, graphs, cudagraphs=False)
    x = torch.randn(16, 64, device="cuda")
    with torch.no_grad():
        for _ in range(3):
            assert close(fn(x), model(x))
    (runner,) = graphs[0]._cache.values()
    assert runner._graphed is None


def test_a_steady_state_call_copies_nothing_to_the_host(graphs):
    from torch.profiler import ProfilerActivity, profile

    model = mlp()
    fn = compiled(model, graphs)
    x = torch.randn(16, 64, device="cuda")
    with torch.no_grad():
        for _ in range(3):
            fn(x)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            fn(x)
            torch.cuda.synchronize()
    copies = [e.key for e in prof.key_averages() if "DtoH" in e.key or "Device -> Pageable" in e.key]
    assert not copies, copies


def test_weights_updated_in_place_are_seen(graphs):
    model = mlp()
    fn = compiled(model, graphs)
    x = torch.randn(16, 64, device="cuda")
    with torch.no_grad():
        fn(x), fn(x), fn(x)
        model[0].weight.mul_(-2.0)
        assert close(fn(x), model(x))


def test_weights_given_new_storage_are_seen_after_cuda_graph_capture(graphs):
    """`.data = ...` bumps no version: the replayed CUDA graph would read the old storage."""
    model = mlp()
    fn = compiled(model, graphs)
    x = torch.randn(16, 64, device="cuda")
    with torch.no_grad():
        fn(x), fn(x), fn(x)
        model[0].weight.data = torch.randn_like(model[0].weight)
        assert close(fn(x), model(x))


def test_a_small_transformer_runs_on_the_gpu(graphs):
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(vocab_size=128, n_embd=64, n_layer=2, n_head=4, n_positions=64, use_cache=False)
    torch.manual_seed(0)
    model = transformers.GPT2Model(config).to("cuda").eval()
    ids = torch.randint(0, 128, (2, 32), device="cuda")
    with torch.no_grad():
        want = model(ids).last_hidden_state
        fn = compiled(model, graphs)
        for _ in range(3):
            got = fn(ids).last_hidden_state
    assert got.is_cuda and close(got, want)
    assert {g.target for g in graphs} == {"triton"}


def test_an_autocast_region_runs_on_the_gpu_in_torchs_dtypes(graphs):
    """CUDA's autocast policy (matmuls in bf16, softmax in f32) as eager applies it."""
    model = mlp()
    x = torch.randn(16, 64, device="cuda")
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        want = model(x)
        got = compiled(model, graphs)(x)
    assert got.device == x.device and got.dtype == want.dtype
    assert float((got.float() - want.float()).abs().max()) <= 5e-2 * max(float(want.float().abs().max()), 1.0)
    assert {g.target for g in graphs} == {"triton"}


class AttentionBlock(torch.nn.Module):
    """A pre-norm causal transformer block with torch's fused attention (flash for f16/bf16 on CUDA,
    memory-efficient for f32), so AOTAutograd's graphs hold CUDA's attention ops and their backwards."""

    def __init__(self, dim=64, heads=4):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
        self.qkv, self.proj = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(), torch.nn.Linear(4 * dim, dim))

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, n, d))
        return x + self.mlp(self.norm2(x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_training_with_fused_attention_gives_eagers_gradients(graphs, monkeypatch, dtype):
    """Training (AOTAutograd) with CUDA's fused attention: both graphs compile (no eager fallback), hold
    the attention op and its backward, and give eager's loss and gradients."""
    import copy

    from tilegraph.frontends.fx import training

    aten_graphs = []
    original = training.TilegraphGraph

    def recording(gm, example_inputs, options=None):
        aten_graphs.append(gm)
        return original(gm, example_inputs, options)

    monkeypatch.setattr(training, "TilegraphGraph", recording)
    torch.manual_seed(0)
    model = AttentionBlock().to("cuda", dtype)
    reference = copy.deepcopy(model)
    x = torch.randn(2, 16, 64, device="cuda", dtype=dtype)
    loss = compiled(model, graphs)(x).float().square().mean()
    loss.backward()
    want = reference(x).float().square().mean()
    want.backward()
    assert len(aten_graphs) == 2
    # the backward op runs through training's wrapper, which makes its random state (its first argument)
    assert all(any("scaled_dot_product" in str(n.target) + str(n.args[:1]) for n in gm.graph.nodes)
               for gm in aten_graphs)
    tolerance = {torch.float32: 1e-3, torch.bfloat16: 5e-2}[dtype]
    assert abs(float(loss) - float(want)) <= tolerance * max(abs(float(want)), 1.0)
    for (path, p), q in zip(model.named_parameters(), reference.parameters()):
        scale = max(float(q.grad.float().abs().max()), 1e-3)
        error = float((p.grad.float() - q.grad.float()).abs().max())
        assert error <= tolerance * scale, f"gradient of {path}: {error} (scale {scale})"
