"""Ahead-of-time compilation of the generated kernels for a GPU that need not be present.

`compile_kernels` runs every kernel of a generated module through `triton.compile` for a target such
as `GPUTarget("cuda", 90, 32)` (Hopper), which lowers it to PTX and a cubin with the bundled ptxas:
proof that the kernels are valid GPU code, not only interpretable. Resource use (shared memory from
Triton's metadata; registers and spills from `cuobjdump --dump-resource-usage` when it is bundled)
and what the PTX runs on (Hopper's `wgmma`, the older `mma.sync`, or neither; `cp.async` loads,
which the software pipeliner stages) go into the returned records.
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
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


_CP_ASYNC = re.compile(r"cp\.async\.c[ag]\.shared\.global(?:\.[\w:]+)*\s*\[[^\]]*\],\s*\[[^\]]*\],\s*(0x[0-9a-fA-F]+|\d+)")


def ptx_features(ptx: str) -> dict:
    """What a kernel's PTX runs on: its tensor-core instruction family, and its cp.async copies."""
    cores = "wgmma" if "wgmma.mma_async" in ptx else "mma" if "mma.sync" in ptx else "none"
    sizes = [int(size, 0) for size in _CP_ASYNC.findall(ptx)]
    return {"tensor_cores": cores, "cp_async": "cp.async" in ptx, "cp_async_bytes": max(sizes, default=0)}


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
    regs = re.search(r"REG:(\d+)", out)
    spill = re.search(r"(\d+) bytes spill stores", out) or re.search(r"LOCAL:(\d+)", out)
    return (int(regs.group(1)) if regs else None), (int(spill.group(1)) if spill else None)


def compile_kernels(generated: GeneratedModule, arch: int = 90, warp_size: int = 32, num_warps: int = 4,
                    num_stages: int = 3, only: set[str] | None = None) -> list[CompiledKernel]:
    """triton.compile every kernel (or those named in `only`) for CUDA `arch`; raises on any failure."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    target = GPUTarget("cuda", arch, warp_size)
    records = []
    with tempfile.TemporaryDirectory() as folder:
        module = _load_compiled(generated.text, Path(folder))
        for source in generated.kernels:
            if source is None or (only is not None and source.function not in only):
                continue
            fn = getattr(module, source.function)
            signature = {name: _POINTER[v.type.dtype.name] for name, v in zip(fn.arg_names, source.args)}
            kernel = triton.compile(ASTSource(fn, signature, {}, _aligned(signature)), target=target,
                                    options={"num_warps": num_warps, "num_stages": num_stages})
            regs, spills = _resources(kernel.asm["cubin"])
            records.append(CompiledKernel(source.function, int(kernel.metadata.shared), regs, spills,
                                          kernel.asm["ptx"].count("\n"), **ptx_features(kernel.asm["ptx"])))
    return records


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
        configs = configs or [(num_warps, num_stages)] * len(generated.kernels)
        kept = [(s, c) for s, c in zip(generated.kernels, configs) if s is not None]
        request = Path(folder) / "request.json"
        request.write_text(json.dumps({"module": str(path), "functions": [s.function for s, _ in kept],
                                       "pointers": [[_POINTER[v.type.dtype.name] for v in s.args] for s, _ in kept],
                                       "configs": [list(c) for _, c in kept], "arch": arch,
                                       "warp_size": warp_size}))
        env = {**os.environ, "TRITON_INTERPRET": "0"}
        done = subprocess.run([sys.executable, "-m", "tilegraph.backends.triton.hopper", str(request)],
                              capture_output=True, text=True, env=env, timeout=timeout)
        if done.returncode != 0:
            raise TilegraphError(f"triton.compile for sm_{arch} failed:\n{done.stderr[-4000:]}")
        return [CompiledKernel(**r) for r in json.loads(done.stdout.strip().splitlines()[-1])]


def _main(request_path: str) -> None:
    import json

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    request = json.loads(Path(request_path).read_text())
    text = Path(request["module"]).read_text()
    target = GPUTarget("cuda", request["arch"], request["warp_size"])
    records = []
    with tempfile.TemporaryDirectory() as folder:
        module = _load_compiled(text, Path(folder))
        for function, pointers, (warps, stages) in zip(request["functions"], request["pointers"], request["configs"]):
            fn = getattr(module, function)
            signature = dict(zip(fn.arg_names, pointers))
            kernel = triton.compile(ASTSource(fn, signature, {}, _aligned(signature)), target=target,
                                    options={"num_warps": warps, "num_stages": stages})
            regs, spills = _resources(kernel.asm["cubin"])
            records.append(dict(function=function, shared_bytes=int(kernel.metadata.shared), registers=regs,
                                spills=spills, ptx_lines=kernel.asm["ptx"].count("\n"), **ptx_features(kernel.asm["ptx"])))
    print(json.dumps(records))


if __name__ == "__main__":
    import sys

    _main(sys.argv[1])


__all__ = ["compile_kernels", "compile_kernels_isolated", "CompiledKernel", "ptx_features"]
