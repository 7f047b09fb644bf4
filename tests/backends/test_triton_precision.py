"""f32 products in the Triton backend follow torch's precision: TF32 exactly where torch would use it
(`torch.backends.cuda.matmul.allow_tf32` for matmuls, `torch.backends.cudnn.allow_tf32` for convolutions),
else IEEE; the choice is an option of the build (`TritonOptions`) and shows in the source."""
from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

import numpy as np  # noqa: E402
import pytest  # noqa: E402

torch = pytest.importorskip("torch", reason="the Triton backend runs on torch tensors")
pytest.importorskip("triton", reason="triton is not installed (pip install 'tilegraph[triton]')")

import tilegraph  # noqa: E402
from tilegraph.backends.triton.kernel import emit_kernel  # noqa: E402
from tilegraph.backends.triton.options import TritonOptions  # noqa: E402
from tilegraph.frontends.dsl import parse  # noqa: E402
from tilegraph.ir import TilegraphError  # noqa: E402
from tilegraph.passes import PassManager  # noqa: E402

from triton_cases import CASES, TF32_TOLERANCE, check, precision_in_force  # noqa: E402

MIXED = """def f(x: f32[2, 3, 11, 11], w: f32[16, 3, 3, 3], a: f32[40, 64],
             b: f32[64, 24]) -> (f32[2, 16, 9, 9], f32[40, 24]) {
    return relu(conv2d(x, w)), a @ b
}"""


@pytest.fixture
def flags(monkeypatch):
    """torch's two TF32 flags, set for one test and restored after it."""
    def set_flags(matmul: bool, conv: bool) -> None:
        monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", matmul)
        monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", conv)
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    yield set_flags
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def _dot_precisions(program, options) -> dict[str, str]:
    """Kernel op names -> the input_precision of its tl.dot."""
    found = {}
    for kernel in program.kernels:
        source = emit_kernel(kernel, kernel.domain, "kernel_x", options=options)
        if "tl.dot(" in source.text:
            mode = "tf32" if 'input_precision="tf32"' in source.text else \
                "ieee" if 'input_precision="ieee"' in source.text else "native"
            # the GPU source rounds a TF32 dot's operands to nearest (tensor cores fed f32 bits truncate them)
            assert ("tl.dot(_tg_tf32(" in source.text) == (mode == "tf32"), source.text
            found["conv2d" if any(n.op == "conv2d" for n in kernel.nodes) else "matmul"] = mode
    return found


@pytest.mark.parametrize("matmul,conv", [(False, False), (True, False), (False, True), (True, True)])
def test_the_options_choose_each_products_precision_in_the_source(matmul, conv):
    program = PassManager("canonicalize,fuse,tile{target=gpu-h100}").run(parse(MIXED))
    found = _dot_precisions(program, TritonOptions(matmul_tf32=matmul, conv_tf32=conv))
    assert found == {"conv2d": "tf32" if conv else "ieee", "matmul": "tf32" if matmul else "ieee"}


def test_half_precision_dots_name_no_precision():
    program = PassManager("canonicalize,fuse,tile{target=gpu-h100}").run(parse(CASES["matmul_f16"]))
    for options in (TritonOptions(True, True), TritonOptions(False, False)):
        (text,) = [emit_kernel(k, k.domain, "kernel_x", options=options).text for k in program.kernels]
        assert "tl.dot(" in text and "input_precision" not in text


@pytest.mark.parametrize("matmul,conv", [(False, True), (True, False), (True, True), (False, False)])
def test_a_build_reads_torchs_flags(flags, matmul, conv):
    flags(matmul, conv)
    assert TritonOptions.from_torch() == TritonOptions(matmul_tf32=matmul, conv_tf32=conv)
    fn = tilegraph.compile(parse(MIXED), target="triton", device="cuda")
    assert fn.source.count('input_precision="tf32"') == matmul + conv
    assert fn.source.count('input_precision="ieee"') == (not matmul) + (not conv)
    again = tilegraph.compile(parse(MIXED), target="triton", device="cuda")
    assert again.source == fn.source, "same Program and options: the same source"


def test_products_off_cuda_are_ieee_as_torch_computes_them_there(flags):
    """The interpreter runs CPU tensors, where torch never uses TF32: a tiny MobileNetV2 drifted 40%
    from eager through its TF32 convolutions."""
    flags(True, True)
    assert TritonOptions.from_torch("cpu") == TritonOptions(False, False)
    fn = tilegraph.compile(parse(MIXED), target="triton")  # no device: the interpreter's CPU
    assert 'input_precision="tf32"' not in fn.source and fn.source.count('input_precision="ieee"') == 2
    assert tilegraph.compile(parse(MIXED), target="triton", tf32=True).source.count('input_precision="tf32"') == 2


def test_torchs_defaults_without_torch_flags_changed():
    defaults = TritonOptions()
    assert (defaults.matmul_tf32, defaults.conv_tf32) == (False, True)  # torch's own defaults
    assert defaults.precision("matmul") == "ieee" and defaults.precision("conv2d") == "tf32"
    assert defaults.describe() == "f32 matmul ieee, f32 conv tf32"


def test_resolve_takes_an_override_or_a_dict(flags):
    flags(False, True)
    assert TritonOptions.resolve() == TritonOptions(False, True)
    assert TritonOptions.resolve(tf32=True) == TritonOptions(True, True)
    assert TritonOptions.resolve(options={"tf32": False}) == TritonOptions(False, False)
    assert TritonOptions.resolve(options={"matmul_tf32": True}) == TritonOptions(True, True)
    assert TritonOptions.resolve(options=TritonOptions(True, False)) == TritonOptions(True, False)
    with pytest.raises(TilegraphError, match="unknown Triton build option"):
        TritonOptions.resolve(options={"tf64": True})
    with pytest.raises(TilegraphError, match="takes True or False"):
        TritonOptions.resolve(tf32="yes")


LONG_K = """def f(a: f32[32, 1024], b: f32[1024, 32]) -> f32[32, 32] { return a @ b }"""


@pytest.mark.parametrize("tf32", [False, True])
def test_interpreter_numerics_follow_the_precision(tf32):
    """TF32 keeps 10 mantissa bits of each operand: errors near 1e-3 of the scale, where IEEE f32 gives
    ~1e-6; the tolerance a test uses follows (TF32_TOLERANCE only where the source multiplies in TF32).
    Asked for explicitly: off CUDA, torch's flags never choose TF32."""
    graph = parse(LONG_K)
    fn = check(graph, tf32=tf32)  # the tolerance in force
    assert precision_in_force(fn) == (TF32_TOLERANCE if tf32 else 0.0)
    a, b = (np.random.default_rng(i).standard_normal(s).astype(np.float32) for i, s in ((0, (32, 1024)),
                                                                                       (1, (1024, 32))))
    exact = a.astype(np.float64) @ b.astype(np.float64)
    error = float(np.abs(fn(a, b)[0] - exact).max() / np.abs(exact).max())
    if tf32:
        assert 1e-5 < error < TF32_TOLERANCE, error
    else:
        assert error < 1e-5, error
    # in TF32 the result equals IEEE products of the operands rounded to 10 mantissa bits
    if tf32:
        def to_tf32(x):
            bits = x.view(np.int32)
            return ((bits + 0x1000) & -8192).view(np.float32)
        rounded = to_tf32(a).astype(np.float64) @ to_tf32(b).astype(np.float64)
        np.testing.assert_allclose(fn(a, b)[0], rounded, rtol=1e-5, atol=1e-4)



def test_an_explicit_build_option_overrides_torchs_flags(flags):
    """`tilegraph.compile(..., target="triton", tf32=...)` / `options=`: the source follows the option,
    whatever torch's flags say, and the program keeps it (the tuner's variants use it too)."""
    flags(True, True)
    ieee = tilegraph.compile(parse(MIXED), target="triton", tf32=False)
    assert ieee.options == TritonOptions(False, False) and '"tf32"' not in ieee.source
    flags(False, False)
    conv_only = tilegraph.compile(parse(MIXED), target="triton", options={"conv_tf32": True})
    assert conv_only.options == TritonOptions(False, True)
    assert conv_only.source.count('input_precision="tf32"') == 1
    with pytest.raises(TilegraphError, match="known are tf32"):
        tilegraph.compile(parse(MIXED), target="triton", options={"tf33": True})


SHARED_WEIGHT = """def f(x: f32[64, 64]) -> (f32[64, 48], f32[64, 48]) {
    param w: f32[64, 64]
    param v: f32[64, 48]
    return (x @ w) @ v, relu(v)
}"""


@pytest.mark.parametrize("tf32", [False, True])
def test_weights_only_tf32_dots_read_are_bound_rounded(tf32):
    """A weight that only TF32 dots read is bound rounded to nearest TF32 once, and its dot reads it as it is;
    one also read elementwise keeps its f32 values and is rounded in the kernel. Results match the reference
    at the precision in force, IEEE builds round nothing."""
    from tilegraph.backends.triton.packing import permuted, to_tf32

    graph = parse(SHARED_WEIGHT)
    fn = check(graph, tf32=tf32)
    names = {fn.generated.names[v] for v in fn.generated.rounded}
    assert names == ({"w"} if tf32 else set())
    dots = [line for line in fn.source.splitlines() if "tl.dot(" in line]
    assert any("w_op" in line for line in dots) and not any("_tg_tf32(w_op)" in line for line in dots)
    assert any("_tg_tf32(v_op)" in line for line in dots) == tf32
    launcher = fn.launcher()
    w = next(v for v in fn.params if v.name == "w")
    bound = launcher._env[launcher._slots[fn.generated.names[w]]]
    original = torch.from_numpy(fn.params[w])
    want = to_tf32(original) if tf32 else original
    if w in fn.generated.layouts:  # (bound as the dot reads it, `packing.plan_layouts`)
        want = permuted(want, fn.generated.layouts[w])
    assert torch.equal(bound, want)


def test_to_tf32_rounds_to_nearest_ties_away_and_keeps_nan():
    from tilegraph.backends.triton.packing import to_tf32

    one_ulp = 2.0 ** -10  # TF32's spacing at 1
    x = torch.tensor([1 + one_ulp / 2, 1 + one_ulp / 2 - 2.0 ** -23, -(1 + one_ulp / 2), 3.0, float("inf"),
                      float("nan")])
    got = to_tf32(x)
    assert got[:5].tolist() == [1 + one_ulp, 1.0, -(1 + one_ulp), 3.0, float("inf")] and torch.isnan(got[5])
