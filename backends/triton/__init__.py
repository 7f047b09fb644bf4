"""The Triton backend: one `@triton.jit` kernel per fused kernel, plus a launcher.

    fn = tilegraph.compile(graph, target="triton")
    y, = fn(x)                 # numpy in, numpy out
    y, = fn.run_torch(x_cuda)  # torch tensors in and out
    print(fn.source)           # the generated module

Runs on a CUDA device, or on the CPU under `TRITON_INTERPRET=1` (set before triton is imported).
Generating source needs neither triton nor torch.

Modules: `names` (safe identifiers), `scalar` (scalar bodies as Triton expressions), `kernel` (one
kernel: the tiled executor's schedule over rank-R blocks), `dot` (tl.dot: matmul, batched matmul,
implicit-GEMM conv), `attention` (online softmax), `module` (the generated module and its launch
steps), `runtime` (TritonProgram), `autotune` (warps/stages timed on CUDA, cached per shape),
`hopper` (ahead-of-time `triton.compile` for sm_90 without a GPU).
"""
from __future__ import annotations

from collections.abc import Mapping

from tilegraph.ir.program import Program

from .kernel import KernelSource, emit_kernel
from .module import GeneratedModule, generate
from .names import mangle
from .options import TritonOptions
from .runtime import TritonProgram, _interpreting

def build(program: Program, params: Mapping, *, device: str | None = None, autotune: bool = True,
          aot_arch: int | None = None, tf32: bool | None = None, options: TritonOptions | dict | None = None
          ) -> TritonProgram:
    """Generate the module for a fused, tiled Program and bind its parameters.

    `device`: a torch device for the tensors (default: cuda, or cpu under the interpreter);
    `autotune`: time candidate launch configs on the first CUDA run (cached per shape);
    `aot_arch`: also compile every kernel for CUDA sm_<aot_arch> (no GPU needed) and report its
    shared memory, registers and spills;
    `tf32` / `options`: the precision of f32 matmuls and convolutions (`TritonOptions`; default:
    what torch would do on the device when the program is built: its flags on CUDA, IEEE elsewhere).
    """
    runs_on = device or ("cpu" if _interpreting() else "cuda")  # torch uses TF32 on CUDA devices only
    compiled = TritonProgram(program, params, device=device, autotune_=autotune,
                             options=TritonOptions.resolve(tf32, options, runs_on))
    if aot_arch is not None:
        compiled.compile_ahead(aot_arch)
    return compiled


def generate_source(program: Program, *, tf32: bool | None = None,
                    options: TritonOptions | dict | None = None) -> str:
    """The generated Python module of a Program, without loading triton."""
    return generate(program, options=TritonOptions.resolve(tf32, options)).text


__all__ = ["build", "generate_source", "TritonOptions", "TritonProgram", "GeneratedModule", "KernelSource",
           "emit_kernel", "mangle"]
