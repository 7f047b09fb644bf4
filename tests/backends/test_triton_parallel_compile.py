"""The launcher's first CUDA call compiles every kernel of a program at once, on threads (`launch.parallel_compiles`),
and the tuner compiles each kernel's candidates side by side before timing them.

Without a GPU this runs Triton's real JIT for sm_90 on a paper device (`hopper.paper_gpu`): the launcher's own
binding (`bind_direct` with `compiled_runner`) specialises each kernel on its real arguments, Triton's async
compile mode hands the compiles to the pool, and the bound binaries are what a later launch of the same
kernel finds in Triton's cache. Only loading a binary onto a device is left out (`hopper.PaperLaunch`). It runs in a fresh process
with the interpreter off: a process that has run interpreted kernels cannot compile for real.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

# this process only starts the real compiles' processes (TRITON_INTERPRET=0 there); it imports Triton interpreted
# like the other CPU test files, since a Triton first imported without it breaks the interpreted kernels of the
# files collected after this one (test_triton_tuning.py's variants failed to run)
os.environ["TRITON_INTERPRET"] = "1"

import pytest  # noqa: E402

pytest.importorskip("torch", reason="the Triton backend runs on torch tensors")
pytest.importorskip("triton", reason="triton is not installed (pip install 'tilegraph[triton]')")

from tilegraph.backends.triton import launch  # noqa: E402
from tilegraph.ir import TilegraphError  # noqa: E402

FIRST_CALL = r"""
import json, sys, threading
import torch, triton.compiler
import tilegraph
from tilegraph.backends import reference
from tilegraph.backends.triton import hopper, launch
from tilegraph.frontends.dsl import parse

graph = parse(sys.argv[1])
fn = tilegraph.compile(graph, target="triton", device="cpu")
launcher = fn.launcher()
inputs = launcher.check([torch.from_numpy(a) for a in reference.random_inputs(graph, seed=0)])
compiled_on = []
real_compile = triton.compiler.compile

def compile(*args, **kwargs):  # what the JIT calls (looked up when a function first meets a device)
    compiled_on.append(threading.current_thread().name)
    return real_compile(*args, **kwargs)

triton.compiler.compile = compile
requests = []

def runner(*request):  # the launcher's own runner, its requests kept to launch them again
    requests.append(request)
    return launch.compiled_runner(*request)

with hopper.paper_gpu(90):
    launcher.bind_direct(inputs, runner)
    kernels = [s for s in launcher.direct.steps if s.run is not None]
    before = len(compiled_on)
    for function, grid, args, warps, stages in requests:  # the same launches again: Triton's cache, no compile
        function.warmup(*args, grid=(grid,), num_warps=warps, num_stages=stages)
print(json.dumps({"compiled_on": compiled_on, "recompiled": len(compiled_on) - before,
                  "kernels": len(kernels), "runs": [[type(s.run).__name__, s.run.kernel.metadata.target.arch,
                                                   list(s.run.grid)] for s in kernels],
                  "distinct": len({s.function for s in fn.generated.kernels if s is not None})}))
"""

TUNING = r"""
import json, sys, threading
import torch, triton.compiler, triton.testing
import tilegraph
from tilegraph.backends import reference
from tilegraph.backends.triton import hopper
from tilegraph.frontends.dsl import parse

graph = parse(sys.argv[1])
fn = tilegraph.compile(graph, target="triton", device="cpu")
launcher = fn.launcher()
inputs = launcher.check([torch.from_numpy(a) for a in reference.random_inputs(graph, seed=0)])
compiled_on, timed_on = [], []
real_compile = triton.compiler.compile

def compile(*args, **kwargs):
    compiled_on.append(threading.current_thread().name)
    return real_compile(*args, **kwargs)

def do_bench(run, warmup, rep):  # the launch finds its binary compiled, or compiles it here; then fails on paper
    timed_on.append(len(compiled_on))
    try:
        run()
    except Exception:
        pass
    return 1.0

triton.compiler.compile = compile
triton.testing.do_bench = do_bench
torch.cuda.get_device_name = lambda device=None: "Paper H100"
with hopper.paper_gpu(90):
    launcher.tune(inputs)
print(json.dumps({"compiled_on": compiled_on, "timed_on": timed_on, "tuned": list(fn.timings),
                  "kernels": [[n.op for n in k.nodes] for k in fn.program.kernels],
                  "timings": {str(k): {part: len(t) for part, t in v.items()} for k, v in fn.timings.items()}}))
"""

PROGRAM = """def f(x: f32[32, 48], w: f32[48, 64], v: f32[64, 16], u: f32[48, 16]) -> (f32[32, 16], f32[32, 16]) {
    let h = relu(x @ w)
    return h @ v, x @ u
}"""


# in program order a small product, the biggest, and one between (their roofline times: 1, 3, 2)
UNEVEN = """def f(x: f32[32, 48], u: f32[48, 16], w: f32[48, 256], v: f32[256, 16]) -> (f32[32, 16], f32[32, 16]) {
    let small = x @ u
    return small, relu(x @ w) @ v
}"""


def first_call(threads: int, tmp_path, script: str = FIRST_CALL, program: str = PROGRAM) -> dict:
    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_CACHE_DIR": str(tmp_path / f"triton-{threads}"),
           "TILEGRAPH_CACHE_DIR": str(tmp_path / "tilegraph"), launch.COMPILE_THREADS: str(threads),
           "TILEGRAPH_TUNE_SECONDS": "600"}
    done = subprocess.run([sys.executable, "-c", script, program], capture_output=True, text=True, env=env,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_first_call_compiles_every_kernel_on_the_pool_and_binds_it(tmp_path):
    result = first_call(4, tmp_path)
    assert result["kernels"] >= 2 and result["distinct"] == result["kernels"]
    assert len(result["compiled_on"]) == result["distinct"], "one compile per distinct kernel"
    assert all(name.startswith("tilegraph-compile") for name in result["compiled_on"]), result["compiled_on"]
    assert result["recompiled"] == 0, "the bound binaries are the ones Triton's cache holds for these arguments"
    assert all(run[0] == "PaperLaunch" and run[1] == 90 and run[2][1:] == [1, 1] for run in result["runs"])


def test_one_compile_thread_compiles_in_the_caller(tmp_path):
    result = first_call(1, tmp_path)
    assert result["compiled_on"] == ["MainThread"] * result["distinct"]
    assert result["recompiled"] == 0


def test_compile_threads_come_from_the_environment(monkeypatch):
    monkeypatch.setenv(launch.COMPILE_THREADS, "3")
    assert launch.compile_threads() == 3
    monkeypatch.setenv(launch.COMPILE_THREADS, "many")
    with pytest.raises(TilegraphError, match="TILEGRAPH_COMPILE_THREADS='many': expected a whole number"):
        launch.compile_threads()
    monkeypatch.delenv(launch.COMPILE_THREADS)
    assert 1 <= launch.compile_threads() <= 32


def test_tuning_takes_the_longest_kernel_first_and_compiles_each_set_of_candidates_before_timing_it(tmp_path):
    result = first_call(4, tmp_path, TUNING, UNEVEN)
    assert result["tuned"] == [1, 2, 0], "relu(x @ w) (32x48x256) first, then its product with v, x @ u last"
    timed = sum(sum(parts.values()) for parts in result["timings"].values())
    assert len(result["timed_on"]) == timed > 3
    assert result["compiled_on"] and all(name.startswith("tilegraph-compile") for name in result["compiled_on"]), \
        "every candidate timed was compiled ahead, on the pool: none when it was launched"
