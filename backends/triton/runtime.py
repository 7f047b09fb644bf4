"""The compiled program: loads the generated module and runs its steps on torch tensors."""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import time
from collections.abc import Mapping, Sequence

import numpy as np

from tilegraph.backends.base import CompiledProgram
from tilegraph.ir import TilegraphError
from tilegraph.ir.program import Program
from tilegraph.ir.types import DType, to_dtype

from . import autotune, hopper
from .library import LibraryCall
from .tuner import installed
from .module import TORCH_DTYPE, generate
from .options import TritonOptions


def _torch():
    import torch

    return torch


def torch_dtype(dtype: DType):
    """The torch dtype holding a tilegraph dtype (bf16 as torch.bfloat16, bool as torch.bool)."""
    return getattr(_torch(), TORCH_DTYPE[dtype].split(".", 1)[1])


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def load_module(text: str):
    """Import generated source from a file (triton.jit reads its functions' source back)."""
    digest = hashlib.sha256(text.encode()).hexdigest()[:20]
    name = f"tilegraph_triton_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    folder = autotune.cache_dir() / "triton" / "modules"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.py"
    if not path.exists() or path.read_text() != text:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text)
        tmp.replace(path)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def untuned_config(kernel, source, options: TritonOptions) -> tuple[int, int]:
    """(warps, stages) a kernel launches with before tuning (`autotune.default_config`), from its tl.dot
    blocks: one pipeline stage of operands ([M, K] and [K, N] of each dot) and their accumulators."""
    from .variants import dot_shape

    shape = dot_shape(kernel, options) if source is not None and source.uses_dot else None
    if shape is None:
        return autotune.default_config(None)
    return autotune.default_config(sum(shape.stage_bytes), shape.accumulator)


class TritonProgram(CompiledProgram):
    """A Program as Triton kernels: callable with numpy arrays (`__call__`) or torch tensors (`run_torch`)."""

    backend = "triton"

    def __init__(self, program: Program, params: Mapping, device: str | None = None, autotune_: bool = True,
                 options: TritonOptions | None = None) -> None:
        self.options = options if options is not None else TritonOptions.from_torch()
        start = time.perf_counter()
        generated = generate(program, interpreter=_interpreting(), options=self.options)
        super().__init__(program, params, generated.text)
        self.compile_seconds = {"codegen": time.perf_counter() - start}  # Triton compiles at the first launch
        self.generated = generated
        self.device = device
        self.autotune = autotune_
        self.configs: list[tuple[int, int]] = [untuned_config(kernel, source, self.options)
                                               for kernel, source in zip(program.kernels, generated.kernels)]
        self.tuned = False
        self.timings: dict[int, dict] = {}
        self.gpu_arch: int | None = None
        self.gpu_resources: dict[str, hopper.CompiledKernel] = {}  # function -> ahead-of-time compile record
        self._module = None
        self._launchers: dict = {}  # device -> its Launcher (parameters copied there once)

    # ----- devices and tensors ---------------------------------------------------------------------
    def _device(self):
        try:
            import torch
            import triton  # noqa: F401
        except ModuleNotFoundError as error:
            raise TilegraphError(f"running the Triton backend needs the Python package {error.name!r} "
                                 "(pip install 'tilegraph[triton]'); generating source does not") from None

        if self.device is not None:
            return torch.device(self.device)
        if torch.cuda.is_available() and not _interpreting():
            return torch.device("cuda")
        if _interpreting():
            return torch.device("cpu")
        raise TilegraphError("the Triton backend needs a CUDA device, or TRITON_INTERPRET=1 (set before triton is "
                             "imported) to run on the CPU through the Triton interpreter")

    @staticmethod
    def to_torch(array: np.ndarray, dtype: DType, device):
        tensor = _torch().from_numpy(np.array(array, order="C", copy=True))
        return tensor.to(device=device, dtype=torch_dtype(dtype))

    @staticmethod
    def to_numpy(tensor, dtype: DType) -> np.ndarray:
        import torch

        host = tensor.detach().to("cpu")
        if host.dtype == torch.bfloat16:
            return to_dtype(host.to(torch.float32).numpy(), dtype)
        return host.numpy().astype(dtype.numpy, copy=False)

    def module(self):
        if self._module is None:
            self._module = load_module(self.source)
        return self._module

    # ----- running ---------------------------------------------------------------------------------
    def launcher(self, device=None, params: Mapping | None = None):
        """The prepared launch sequence on `device` (default: the program's), parameters bound once;
        `params` (Value -> tensor on that device) replaces their copies by the caller's own tensors."""
        from .launch import Launcher

        torch = _torch()
        device = self._device() if device is None else torch.device(device)
        if params:
            return Launcher(self, device, params)
        key = str(device)
        if key not in self._launchers:
            self._launchers[key] = Launcher(self, device)
        return self._launchers[key]

    def run_torch(self, *inputs):
        """Run on torch tensors (graph-input order, on the program's device); returns torch tensors.
        The first CUDA run times each kernel's launch configurations (`autotune`)."""
        launcher = self.launcher()
        inputs = launcher.check(inputs)
        if self.autotune and launcher.device.type == "cuda" and not self.tuned:
            launcher.tune(inputs)
        return launcher(*inputs)

    def _tune(self, position, launch, source, device, cache, warm=None, args=None) -> tuple[int, int]:
        """(warps, stages) for kernel `position`, its block-size variant installed (`tuner.tune_kernel`)."""
        from .tuner import tune_kernel

        return tune_kernel(self, position, launch, source, device, cache, warm, args)

    def execute(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        device = self._device()
        graph = self.program.graph
        tensors = [self.to_torch(a, v.type.dtype, device) for v, a in zip(graph.inputs, inputs)]
        outs = self.run_torch(*tensors)
        return [self.to_numpy(t, v.type.dtype) for t, v in zip(outs, graph.outputs)]

    def compile_ahead(self, arch: int = 90) -> list[hopper.CompiledKernel]:
        """triton.compile every kernel for CUDA sm_<arch> (no GPU needed); the report then shows
        each kernel's shared memory, registers and spills. Raises TilegraphError if one fails."""
        records = hopper.compile_kernels_isolated(self.generated, arch=arch, configs=self.configs)
        self.gpu_arch = arch
        self.gpu_resources = {record.function: record for record in records}
        return records

    def backend_report(self) -> str:
        arena = self.generated.arena
        stored = [self.generated.names[v] for v, _ in self.program.layouts]  # (the layout pass's)
        lines = [f"  {self.options.describe()}" + (f", channels-last activations ({', '.join(stored)})" if stored
                                                  else ""),
                 f"  arena {arena.size} B for {len(arena.offsets)} intermediates (offsets from {arena.source})"]
        for position, (kernel, source) in enumerate(zip(self.program.kernels, self.generated.kernels)):
            if source is None:
                view = arena.views.get(kernel.outputs[0])
                lines.append(f"  {kernel.name}: " + (f"view of %{view.name} (reshape, no copy)" if view is not None
                                                     else "layout step (torch)"))
                continue
            call = installed(self, source)[0] if self._module is not None else None
            if isinstance(call, LibraryCall):
                lines.append(f"  {kernel.name}: library call ({call.library}, chosen by tuning)")
                continue
            blocks = " ".join(f"{p.kind[0]}{p.tile}/{p.block}" for p in source.loops)
            warps, stages = self.configs[position]
            lines.append(f"  {kernel.name}: {source.function} grid {source.grid} blocks(tile/lanes) {blocks}"
                         f"{' tl.dot' if source.uses_dot else ''} warps {warps} stages {stages}"
                         f"{self._resource_note(source.function)}")
        return "\n".join(lines)

    def _resource_note(self, function: str) -> str:
        record = self.gpu_resources.get(function)
        if record is None:
            return ""
        registers = "registers ?" if record.registers is None else f"{record.registers} registers"
        spills = "" if record.spills is None else f", {record.spills} B spilled"
        cores = "" if record.tensor_cores == "none" else f", {record.tensor_cores}"
        return f"; sm_{self.gpu_arch}: shared {record.shared_bytes} B, {registers}{spills}{cores}"


__all__ = ["TritonProgram", "load_module"]
