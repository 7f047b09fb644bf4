"""Running a generated module on torch tensors with as little Python per call as possible.

`Launcher` prepares the launch sequence of one program on one device once: the parameters are
bound (the caller's own tensors where it gives them, else one device copy), every step's argument
slots are resolved from names to list positions, and the arena is allocated once. A call then
only walks a list. `GraphedLauncher` captures that walk into a CUDA graph after a warm-up call
and replays it, as torch.compile's `mode="reduce-overhead"` does: inputs are copied into static
buffers, the graph is replayed, and the outputs are cloned out of the graph's memory so that the
next replay cannot overwrite what the caller holds.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tilegraph.ir import TilegraphError
from tilegraph.ir.graph import Value


@dataclass(frozen=True, slots=True)
class Step:
    """One generated step with its argument and result slots in the launcher's environment list."""

    function: Callable
    reads: tuple[int, ...]
    writes: tuple[int, ...]
    position: int  # in Program order: the index of its launch configuration


class Launcher:
    """One program's launches on one device, prepared once (see the module docstring).

    `params`: tensors to use for parameters (by Value), already on `device` with the IR's dtype and
    shape; the other parameters are copied to the device once, here.
    """

    def __init__(self, program, device, params: Mapping[Value, Any] | None = None) -> None:
        import torch

        from .runtime import torch_dtype

        self.program = program  # a TritonProgram
        self.device = device
        module = program.module()
        names = program.generated.names
        graph = program.program.graph
        slots: dict[str, int] = {}

        def slot(value: Value) -> int:
            return slots.setdefault(names[value], len(slots))

        self._inputs = [slot(v) for v in graph.inputs]
        self._input_types = [(v.type.shape, torch_dtype(v.type.dtype)) for v in graph.inputs]
        given = dict(params or {})
        bound = []
        for value, array in program.params.items():
            if value in names:
                tensor = given.get(value)
                bound.append((slot(value), tensor if tensor is not None else program.to_torch(array, value.type.dtype,
                                                                                               device)))
        self.steps = [Step(function, tuple(slot(v) for v in reads), tuple(slot(v) for v in writes), position)
                      for position, (function, (reads, writes)) in enumerate(zip(module.STEPS, program.generated.steps))]
        self._outputs = [slot(v) for v in graph.outputs]
        self._env = [None] * len(slots)
        for index, tensor in bound:
            self._env[index] = tensor
        self.arena = torch.empty(max(module.ARENA_BYTES, 1), dtype=torch.uint8, device=device)
        self._lock = threading.Lock()

    def check(self, inputs: Sequence[Any]) -> list[Any]:
        """Inputs as the kernels read them: on the device, of the IR's dtype, contiguous (converted only if not)."""
        if len(inputs) != len(self._inputs):
            raise TilegraphError(f"expected {len(self._inputs)} inputs, got {len(inputs)}")
        ready = []
        for value, tensor, (shape, dtype) in zip(self.program.program.graph.inputs, inputs, self._input_types):
            if tuple(tensor.shape) != shape:
                raise TilegraphError(f"input %{value.name}: shape {tuple(tensor.shape)}, expected {shape}")
            if tensor.dtype != dtype or tensor.device != self.device or not tensor.is_contiguous():
                tensor = tensor.to(device=self.device, dtype=dtype).contiguous()
            ready.append(tensor)
        return ready

    def __call__(self, *inputs) -> list[Any]:
        """Run on checked inputs (`check`); returns the graph's outputs as tensors on the device."""
        configs = self.program.configs
        with self._lock:
            return self._walk(inputs, lambda step, args: self._launch(step, args, *configs[step.position]))

    def tune(self, inputs: Sequence[Any]) -> None:
        """Time each kernel's launch configurations on these inputs (CUDA only; cached on disk)."""
        from . import autotune

        program = self.program
        cache = autotune.ConfigCache()

        def tuned(step: Step, args: list[Any]):
            source = program.generated.kernels[step.position]
            launch = lambda warps, stages: self._launch(step, args, warps, stages)  # noqa: E731
            if source is not None:
                program.configs[step.position] = program._tune(step.position, launch, source, self.device, cache)
            return launch(*program.configs[step.position])

        self._walk(inputs, tuned)
        program.tuned = True

    def _launch(self, step: Step, args: list[Any], warps: int, stages: int):
        return step.function(self.device, warps, stages, self.arena, *args)

    def _walk(self, inputs: Sequence[Any], run: Callable[[Step, list[Any]], Sequence[Any]]) -> list[Any]:
        """The steps in order, each given the tensors it reads by `run`; the graph's outputs."""
        env = self._env.copy()
        for index, tensor in zip(self._inputs, inputs):
            env[index] = tensor
        for step in self.steps:
            for index, tensor in zip(step.writes, run(step, [env[i] for i in step.reads])):
                env[index] = tensor
        return [env[i] for i in self._outputs]


class GraphedLauncher:
    """A Launcher replayed through a CUDA graph after one eager warm-up call (static shapes only)."""

    def __init__(self, launcher: Launcher) -> None:
        self.launcher = launcher
        self.graph = None
        self._static_inputs: list[Any] = []
        self._static_outputs: list[Any] = []
        self.calls = 0

    def __call__(self, *inputs) -> list[Any]:
        self.calls += 1
        if self.graph is None:
            if self.calls == 1:  # warm-up: Triton compiles each kernel on its first launch
                return self.launcher(*inputs)
            self._capture(inputs)
        for static, tensor in zip(self._static_inputs, inputs):
            if static.data_ptr() != tensor.data_ptr():
                static.copy_(tensor)
        self.graph.replay()
        return [out.clone() for out in self._static_outputs]

    def _capture(self, inputs: Sequence[Any]) -> None:
        import torch

        self._static_inputs = [tensor.clone() for tensor in inputs]
        side = torch.cuda.Stream(device=self.launcher.device)
        side.wait_stream(torch.cuda.current_stream(self.launcher.device))
        with torch.cuda.stream(side):  # the allocator's warm-up for the capture, as torch's docs advise
            self.launcher(*self._static_inputs)
        torch.cuda.current_stream(self.launcher.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._static_outputs = self.launcher(*self._static_inputs)
        self.graph = graph


__all__ = ["Launcher", "GraphedLauncher", "Step"]
