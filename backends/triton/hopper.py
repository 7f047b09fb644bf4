"""Ahead-of-time compilation of the generated kernels for a GPU that need not be present.

`compile_kernels` runs every kernel of a generated module through `triton.compile` for a target such
as `GPUTarget("cuda", 90, 32)` (Hopper), which lowers it to PTX and a cubin with the bundled ptxas:
proof that the kernels are valid GPU code, not only interpretable. Resource use (shared memory from
Triton's metadata; registers and spilled bytes, the stack frame, from `cuobjdump --dump-resource-usage` when
it is bundled) and what the PTX runs on (Hopper's `wgmma`, the older `mma.sync`, or neither; `cp.async` loads,
which the software pipeliner stages) go into the returned records. `paper_gpu` goes one step further:
Triton's own JIT, as the launcher drives it, specialises and compiles for a GPU that is not there.
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .module import GeneratedModule

_POINTER = {"f32": "*fp32", "f16": "*fp16", "bf16": "*bf16", "i32": "*i32", "i64": "*i64", "bool": "*i1"}


@dataclass(frozen=True)
class CompiledKernel:
    function: str
    shared_bytes: int
    registers: int | None
    spills: int | None
    ptx_lines: int
    tensor_cores: str = "none"  # "wgmma", "mma" (mma.sync) or "none"
    cp_async: bool = False  # loads staged through shared memory by cp.async
    cp_async_bytes: int = 0  # the widest of those copies (16: whole vectors)
    narrow_loads: int = 0  # loads of one element where a vector would do: cp.async under 16 B, 1-2 B ld.global


_CP_ASYNC = re.compile(r"cp\.async\.c[ag]\.shared\.global(?:\.[\w:]+)*\s*\[[^\]]*\],\s*\[[^\]]*\],\s*(0x[0-9a-fA-F]+|\d+)")


_SCALAR_NARROW_LOAD = re.compile(r"\bld\.global(?![\w.:]*\.v\d)[\w.:]*\.[bsu](?:8|16)\b")


def ptx_features(ptx: str) -> dict:
    """What a kernel's PTX runs on: its tensor-core instruction family, its cp.async copies, and how many of its
    load instructions move single elements (static counts: a gather along a strided axis shows up here)."""
    cores = "wgmma" if "wgmma.mma_async" in ptx else "mma" if "mma.sync" in ptx else "none"
    sizes = [int(size, 0) for size in _CP_ASYNC.findall(ptx)]
    narrow = sum(size < 16 for size in sizes) + len(_SCALAR_NARROW_LOAD.findall(ptx))
    return {"tensor_cores": cores, "cp_async": "cp.async" in ptx, "cp_async_bytes": max(sizes, default=0),
            "narrow_loads": narrow}


def _aligned(signature: dict) -> dict:
    """Every pointer 16-byte aligned, as Triton's dispatch specialises them for torch's allocations and the
    arena's views (`arena.ALIGN`); without it a bf16 operand could not be loaded with cp.async."""
    return {(i,): [["tt.divisibility", 16]] for i, kind in enumerate(signature.values()) if kind.startswith("*")}


def _load_compiled(text: str, folder: Path):
    """The generated module with @triton.jit compiling for real (TRITON_INTERPRET off while it loads)."""
    path = folder / "tilegraph_aot_module.py"
    path.write_text(text)
    saved = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "0"
    try:
        spec = importlib.util.spec_from_file_location(f"tilegraph_aot_{abs(hash(text))}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        if saved is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = saved
    return module


def _resources(cubin: bytes) -> tuple[int | None, int | None]:
    tool = Path(__import__("triton").__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    tool = str(tool) if tool.exists() else shutil.which("cuobjdump")
    if not tool:
        return None, None
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        try:
            out = subprocess.run([tool, "--dump-resource-usage", f.name], capture_output=True, text=True,
                                 timeout=60).stdout
        except (OSError, subprocess.SubprocessError):
            return None, None
    # spills go to the thread's stack frame (STACK); LOCAL counts only arrays the PTX declares, which Triton's
    # kernels do not. Reading LOCAL alone reported 0 B for an attention kernel with a 12 KB frame (32 registers)
    regs = re.search(r"REG:(\d+)", out)
    stack = re.search(r"STACK:(\d+)", out)
    local = re.search(r"LOCAL:(\d+)", out)
    spills = None if stack is None and local is None else sum(int(m.group(1)) for m in (stack, local) if m)
    return (int(regs.group(1)) if regs else None), spills


class _PaperDriver:
    """Triton's driver for a CUDA GPU that is not present: device 0, stream 0, target sm_<arch>."""

    def __init__(self, arch: int, warp_size: int) -> None:
        from triton.backends.compiler import GPUTarget

        self.target = GPUTarget("cuda", arch, warp_size)

    def is_active(self) -> bool:
        return True

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def get_current_target(self):
        return self.target

    def get_active_torch_device(self):
        import torch

        return torch.device("cpu")


@dataclass(frozen=True)
class PaperLaunch:
    """What `CompiledKernel[grid]` gives on a paper GPU: the binary and its grid, which cannot be launched."""

    kernel: object  # triton's CompiledKernel
    grid: tuple

    def __call__(self, *args):
        from tilegraph.ir import TilegraphError

        raise TilegraphError(f"{self.kernel.name} was compiled for sm_{self.kernel.metadata.target.arch} on paper: "
                             "there is no GPU to launch it on")


@contextmanager
def paper_gpu(arch: int = 90, warp_size: int = 32) -> Iterator[None]:
    """Inside, `JITFunction.warmup` on CPU tensors compiles for CUDA sm_<arch> exactly as the launcher's first
    call does on the device (argument specialisation, Triton's kernel cache and async compile mode included),
    and binding a binary to its grid gives a `PaperLaunch`. For tests and benchmarks of the compile path on a
    machine without a GPU; the process must not be running the interpreter (`compile_kernels_isolated`)."""
    from triton.compiler import CompiledKernel
    from triton.runtime.driver import driver

    saved_driver, saved_bind = driver._active, CompiledKernel.__getitem__
    driver.set_active(_PaperDriver(arch, warp_size))
    CompiledKernel.__getitem__ = lambda kernel, grid: PaperLaunch(kernel, grid)  # loading it: the step left out
    try:
        yield
    finally:
        driver._active, CompiledKernel.__getitem__ = saved_driver, saved_bind


def _compile_all(module, requests: list[tuple[str, list[str], tuple[int, int]]], target) -> list[dict]:
    """triton.compile each (function, pointer types, (warps, stages)) of `module` for `target`, side by side on
    threads (`launch.compile_threads`; most of a compile runs without the GIL); a record per request."""
    import triton
    from triton.compiler import ASTSource

    from .launch import compile_threads

    def one(request) -> dict:
        function, pointers, (warps, stages) = request
        fn = getattr(module, function)
        signature = dict(zip(fn.arg_names, pointers))
        kernel = triton.compile(ASTSource(fn, signature, {}, _aligned(signature)), target=target,
                                options={"num_warps": warps, "num_stages": stages})
        regs, spills = _resources(kernel.asm["cubin"])
        return dict(function=function, shared_bytes=int(kernel.metadata.shared), registers=regs, spills=spills,
                    ptx_lines=kernel.asm["ptx"].count("\n"), **ptx_features(kernel.asm["ptx"]))

    with ThreadPoolExecutor(compile_threads(), thread_name_prefix="tilegraph-compile") as pool:
        return list(pool.map(one, requests))


def _requests(generated: GeneratedModule, configs: list[tuple[int, int]] | None, num_warps: int,
              num_stages: int) -> list[tuple[str, list[str], tuple]]:
    """(function, pointer types, (warps, stages)) per kernel: `configs`, else `num_warps`/`num_stages` for all."""
    configs = configs or [(num_warps, num_stages)] * len(generated.kernels)
    return [(s.function, [_POINTER[v.type.dtype.name] for v in s.args], tuple(c))
            for s, c in zip(generated.kernels, configs) if s is not None]


def compile_kernels(generated: GeneratedModule, arch: int = 90, warp_size: int = 32, num_warps: int = 4,
                    num_stages: int = 3, configs: list[tuple[int, int]] | None = None) -> list[CompiledKernel]:
    """triton.compile every kernel for CUDA `arch` in this process; raises on any failure. `configs`: (warps,
    stages) per kernel of the module, in place of `num_warps`/`num_stages`."""
    from triton.backends.compiler import GPUTarget

    with tempfile.TemporaryDirectory() as folder:
        module = _load_compiled(generated.text, Path(folder))
        records = _compile_all(module, _requests(generated, configs, num_warps, num_stages),
                               GPUTarget("cuda", arch, warp_size))
    return [CompiledKernel(**r) for r in records]


def compile_kernels_isolated(generated: GeneratedModule, arch: int = 90, warp_size: int = 32, num_warps: int = 4,
                             num_stages: int = 3, timeout: float = 900,
                             configs: list[tuple[int, int]] | None = None) -> list[CompiledKernel]:
    """`compile_kernels` in a fresh Python process: a process that has run kernels in the Triton
    interpreter has the interpreter's patches on triton.language, which break real compilation.
    `configs`: (warps, stages) per kernel of the module, in place of `num_warps`/`num_stages`."""
    import json
    import sys

    from tilegraph.ir import TilegraphError

    if importlib.util.find_spec("triton") is None:
        raise TilegraphError(f"compiling for sm_{arch} needs the Python package 'triton' "
                             "(pip install 'tilegraph[triton]'); generating source does not")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "generated.py"
        path.write_text(generated.text)
        request = Path(folder) / "request.json"
        request.write_text(json.dumps({"module": str(path), "requests": _requests(generated, configs, num_warps,
                                                                                  num_stages), "arch": arch,
                                       "warp_size": warp_size}))
        env = {**os.environ, "TRITON_INTERPRET": "0"}
        done = subprocess.run([sys.executable, "-m", "tilegraph.backends.triton.hopper", str(request)],
                              capture_output=True, text=True, env=env, timeout=timeout)
        if done.returncode != 0:
            raise TilegraphError(f"triton.compile for sm_{arch} failed:\n{done.stderr[-4000:]}")
        return [CompiledKernel(**r) for r in json.loads(done.stdout.strip().splitlines()[-1])]


def _main(request_path: str) -> None:
    import json

    from triton.backends.compiler import GPUTarget

    request = json.loads(Path(request_path).read_text())
    with tempfile.TemporaryDirectory() as folder:
        module = _load_compiled(Path(request["module"]).read_text(), Path(folder))
        records = _compile_all(module, request["requests"], GPUTarget("cuda", request["arch"], request["warp_size"]))
    print(json.dumps(records))


if __name__ == "__main__":
    import sys

    _main(sys.argv[1])


__all__ = ["compile_kernels", "compile_kernels_isolated", "CompiledKernel", "PaperLaunch", "paper_gpu", "ptx_features"]
