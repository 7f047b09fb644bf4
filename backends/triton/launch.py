"""Running a generated module on torch tensors with as little Python per call as possible.

`Launcher` prepares the launch sequence of one program on one device once: the parameters are
bound (the caller's own tensors where it gives them, else one device copy), every step's argument
slots are resolved from names to list positions, and the arena is allocated once. A call then
only walks a list. On CUDA, at the first call, `DirectLaunch` takes Triton's per-call dispatch
out as well: each kernel is bound once to its compiled binary for its grid (`JITFunction.warmup`,
then `CompiledKernel[grid]`), the arena views are made once, and a call only allocates the graph's
outputs and hands each binary its tensors. Binding compiles every kernel of the program at once, on a
pool of threads (`parallel_compiles`), not one by one as a walk would reach them. `GraphedLauncher`
captures the launches into a CUDA graph after a warm-up call and replays it, as torch.compile's
`mode="reduce-overhead"` does: inputs are copied into static buffers, the graph is replayed, and the
outputs are cloned out of the graph's memory so that the next replay cannot overwrite what the caller
holds. Those copies cost more than the replay saves where a few long kernels hide their launches, so at
the capture it times both ways and replays only where that is faster.
"""
from __future__ import annotations

import os
import statistics
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from tilegraph.ir import TilegraphError
from tilegraph.ir.graph import Value

from .library import LibraryCall
from .packing import permuted, stored_shape, to_tf32


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
        layouts = program.generated.layouts
        bound = []
        for value, array in program.params.items():
            if value in names:
                tensor = given.get(value)
                tensor = tensor if tensor is not None else program.to_torch(array, value.type.dtype, device)
                if value in layouts:  # stored as the kernels read it (`packing.py`): a copy, made once
                    tensor = permuted(tensor, layouts[value])
                if value in program.generated.rounded:  # only TF32 dots read it: rounded once, a copy
                    tensor = to_tf32(tensor)
                bound.append((slot(value), tensor))
        self.steps = [Step(function, tuple(slot(v) for v in reads), tuple(slot(v) for v in writes), position)
                      for position, (function, (reads, writes)) in enumerate(zip(module.STEPS, program.generated.steps))]
        self._outputs = [slot(v) for v in graph.outputs]
        self._env = [None] * len(slots)
        for index, tensor in bound:
            self._env[index] = tensor
        self.arena = torch.empty(max(module.ARENA_BYTES, 1), dtype=torch.uint8, device=device)
        self._lock = threading.Lock()
        self._slots = slots
        # CUDA: built after the first call (its kernels compiled and tuned); False where it cannot be
        self.direct: DirectLaunch | None | bool = None if device.type == "cuda" else False
        self.direct_error: str | None = None

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
            if self.direct is None:  # the first CUDA call: every kernel compiled at once, then bound
                self.bind_direct(inputs, compiled_runner)
            direct = self.direct
            if direct and direct.accepts(inputs):
                return direct(inputs)
            return self._walk(inputs, lambda step, args: self._launch(step, args, *configs[step.position]))

    def bind_direct(self, inputs: Sequence[Any], runner_for: Callable) -> None:
        """Build the direct path (`DirectLaunch`) for calls like this one, its kernels compiled side by side
        (`parallel_compiles`); if it cannot be built, say why once and keep walking the steps."""
        try:
            with parallel_compiles():
                self.direct = DirectLaunch(self, inputs, runner_for)
        except Exception as error:  # a Triton whose launch API differs: the generic path still works
            self.direct, self.direct_error = False, f"{type(error).__name__}: {error}"
            warnings.warn(f"tilegraph: Triton kernels launch through triton.jit's dispatch ({self.direct_error})",
                          RuntimeWarning, stacklevel=3)

    def arguments(self, inputs: Sequence[Any]) -> tuple[list[Any], dict[int, Any]]:
        """Every slot's tensor for calls with these inputs, without running anything: the inputs, the parameters,
        and each value a step writes as a tensor of its type (its arena view, the same on every call, or a
        stand-in for a graph output); and those arena views that kernels write, by slot. An arena view has the
        shape of its stored axes (`Program.layouts`), as the module's steps bind it: a library call reads it
        through torch, which follows shapes, where generated kernels read only its pointer."""
        import torch

        from .runtime import torch_dtype

        program, arena = self.program, self.program.generated.arena
        layouts = program.generated.layouts
        env = self._env.copy()
        for index, tensor in zip(self._inputs, inputs):
            env[index] = tensor
        fixed = {}
        for step, source in zip(self.steps, program.generated.kernels):
            for index, value in zip(step.writes, program.generated.steps[step.position][1]):
                dtype = torch_dtype(value.type.dtype)
                if value in arena.offsets:
                    offset = arena.offsets[value]
                    shape = stored_shape(value, layouts.get(value))
                    env[index] = self.arena[offset:offset + value.type.nbytes].view(dtype).view(shape)
                    if source is not None:
                        fixed[index] = env[index]
                else:
                    env[index] = torch.empty(value.type.shape, dtype=dtype, device=self.device)
        return env, fixed

    def argument_slots(self, source) -> tuple[int, ...]:
        """The env slots of a kernel's arguments, in order."""
        names = self.program.generated.names
        return tuple(self._slots[names[v]] for v in source.args)

    def tune(self, inputs: Sequence[Any]) -> None:
        """Time each kernel's launch configurations (and a dot kernel's block sizes) on tensors for these inputs
        (CUDA only; cached on disk; `tuner.py`). The kernels expected to take longest go first, since one budget
        serves the program (counting every launch of a kernel: a repeated layer's weighs as all its launches);
        each kernel's candidates compile side by side before they are timed."""
        from . import autotune
        from .tuner import state_of

        program, module = self.program, self.program.module()
        cache = autotune.ConfigCache()
        env, _ = self.arguments(inputs)
        kernels = [(step, source) for step, source in zip(self.steps, program.generated.kernels) if source is not None]
        expected = dict(state_of(program).left)  # canonical source -> expected seconds of all its launches
        kernels.sort(key=lambda kernel: -expected.get(autotune.canonical(kernel[1].text), 0.0))
        for step, source in kernels:
            args = [env[i] for i in self.argument_slots(source)]

            def launch(warps: int, stages: int, source=source, args=args):  # (args: the tuner's probe copies too)
                return getattr(module, source.function)[(source.grid,)](*args, num_warps=warps, num_stages=stages)

            def warm(fn, grid: int, warps: int, stages: int, args=args):
                if hasattr(fn, "warmup"):  # (the interpreter's functions compile nothing)
                    fn.warmup(*args, grid=(grid,), num_warps=warps, num_stages=stages)

            program.configs[step.position] = program._tune(step.position, launch, source, self.device, cache, warm,
                                                           args)
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


COMPILE_THREADS = "TILEGRAPH_COMPILE_THREADS"


def compile_threads() -> int:
    """Threads compiling a program's kernels: $TILEGRAPH_COMPILE_THREADS, else one per CPU (at most 32)."""
    value = os.environ.get(COMPILE_THREADS, "")
    if value.strip():
        try:
            return max(1, int(value))
        except ValueError:
            raise TilegraphError(f"{COMPILE_THREADS}={value!r}: expected a whole number of threads") from None
    return max(1, min(32, os.cpu_count() or 1))


@contextmanager
def parallel_compiles(threads: int | None = None, ignore_errors: bool = False) -> Iterator[None]:
    """Kernels that Triton's JIT compiles inside (`JITFunction.warmup`) compile on a pool of threads, through
    Triton's async compile mode: the warm-up returns a future, and all are done when the block ends.
    Most of a compile (MLIR, LLVM, ptxas) runs without the GIL, so a model's 10-30 kernels compile side by side
    (sm_90 on 2 cores: 1.7x faster). One thread, or a Triton without the mode, compiles in the caller.
    `ignore_errors`: a compile that fails is dropped (its launch will fail, where the caller sees it)."""
    threads = compile_threads() if threads is None else threads
    try:
        from triton.runtime._async_compile import AsyncCompileMode, active_mode
    except ImportError:  # a Triton before 3.4
        AsyncCompileMode = active_mode = None
    if threads <= 1 or AsyncCompileMode is None or active_mode.get() is not None:  # (the caller's mode serves)
        yield
        return
    with ThreadPoolExecutor(threads, thread_name_prefix="tilegraph-compile") as pool:
        try:
            with AsyncCompileMode(pool, ignore_errors=ignore_errors):
                yield
        finally:  # Triton 3.6 leaves its mode set when a compile fails: later compiles would go to a closed pool
            active_mode.set(None)


@dataclass(frozen=True, slots=True)
class Compiling:
    """A kernel still compiling (`parallel_compiles`): `result()` waits, then binds it to its grid."""

    kernel: Any  # Triton's FutureKernel
    grid: int

    def result(self) -> Callable:
        return self.kernel.result()[(self.grid, 1, 1)]


def compiled_runner(fn, grid: int, args: Sequence[Any], warps: int, stages: int) -> Callable | Compiling:
    """The compiled binary of jit function `fn` for these arguments, bound to its 1-D grid: `run(*args)`
    launches it on the current stream (Triton's `CompiledKernel[grid]`), with none of `fn[grid](...)`'s
    per-call argument binding and cache lookup. Under `parallel_compiles`, a `Compiling` to wait for. A library
    call (`library.py`) has nothing to compile: it runs as it is."""
    if isinstance(fn, LibraryCall):
        return fn
    kernel = fn.warmup(*args, grid=(grid,), num_warps=warps, num_stages=stages)
    if hasattr(kernel, "result"):  # compiling on a thread (Triton's async compile mode)
        return Compiling(kernel, grid)
    return kernel[(grid, 1, 1)]


@dataclass(frozen=True, slots=True)
class DirectStep:
    """A kernel step bound to its binary (`run` None: a layout step, run through its step function)."""

    run: Callable | None
    args: tuple[int, ...]  # env slots of the kernel's arguments, in order (a layout step: those it reads)
    fresh: tuple[tuple[int, tuple, Any], ...]  # (slot, shape, dtype) of graph outputs it writes, new per call
    step: Step


class DirectLaunch:
    """One program's launch sequence bound to compiled binaries (see the module docstring).

    Binaries are specialised on the alignment of their pointers, as Triton's dispatch would: arena views
    and parameters never move and outputs come from the allocator, so only the graph's inputs are checked
    per call (`accepts`: 16-byte aligned, as they were when the binaries were bound).
    """

    ALIGN = 16

    def __init__(self, launcher: Launcher, inputs: Sequence[Any], runner_for: Callable) -> None:
        from .runtime import torch_dtype
        from .tuner import installed

        program, arena = launcher.program, launcher.program.generated.arena
        if not self.accepts(inputs):
            raise ValueError("inputs not 16-byte aligned when the binaries would be bound")
        env, fixed = launcher.arguments(inputs)
        steps = []
        for step, source in zip(launcher.steps, program.generated.kernels):
            if source is None:
                steps.append(DirectStep(None, step.reads, (), step))
                continue
            fn, grid = installed(program, source)  # (the tuner's block-size variant: its own function and grid)
            args = launcher.argument_slots(source)
            warps, stages = program.configs[step.position]
            run = runner_for(fn, grid, [env[i] for i in args], warps, stages)
            fresh = tuple((index, tuple(value.type.shape), torch_dtype(value.type.dtype))
                          for index, value in zip(step.writes, program.generated.steps[step.position][1])
                          if value not in arena.offsets)
            steps.append(DirectStep(run, args, fresh, step))
        # every kernel is compiling by now (`parallel_compiles`): wait for each in turn
        steps = [replace(s, run=s.run.result()) if isinstance(s.run, Compiling) else s for s in steps]
        self._env = launcher._env.copy()
        for index, view in fixed.items():
            self._env[index] = view
        self.steps = tuple(steps)
        self._inputs, self._outputs = launcher._inputs, launcher._outputs
        self._device, self._arena = launcher.device, launcher.arena

    @classmethod
    def accepts(cls, inputs: Sequence[Any]) -> bool:
        return all(tensor.data_ptr() % cls.ALIGN == 0 for tensor in inputs)

    def __call__(self, inputs: Sequence[Any]) -> list[Any]:
        import torch

        env = self._env.copy()
        for index, tensor in zip(self._inputs, inputs):
            env[index] = tensor
        device, empty = self._device, torch.empty
        for direct in self.steps:
            if direct.run is None:
                step = direct.step
                for index, tensor in zip(step.writes, step.function(device, 0, 0, self._arena,
                                                                    *[env[i] for i in direct.args])):
                    env[index] = tensor
                continue
            for index, shape, dtype in direct.fresh:
                env[index] = empty(shape, dtype=dtype, device=device)
            direct.run(*[env[i] for i in direct.args])
        return [env[i] for i in self._outputs]


class GraphedLauncher:
    """A Launcher replayed through a CUDA graph after one eager warm-up call (static shapes only). `replay`:
    None times the replay against plain launches right after the capture and keeps the faster (a replay's
    input and output copies outweigh its saved launches where a few long kernels hide them: ResNet-18's block
    in f32 on an H200, 0.180 ms replayed against 0.152 launched); True or False decides it outright."""

    ROUNDS, CALLS = 5, 3  # timed rounds of each way, calls back to back in a round

    def __init__(self, launcher: Launcher, replay: bool | None = None) -> None:
        self.launcher = launcher
        self.replay = replay
        self.graph = None
        self._static_inputs: list[Any] = []
        self._static_outputs: list[Any] = []
        self.calls = 0

    def __call__(self, *inputs) -> list[Any]:
        self.calls += 1
        # the first call warms up: the kernels compile (all at once) and are bound
        if self.calls == 1 or self.replay is False:
            return self.launcher(*inputs)
        if self.graph is None:
            self._capture(inputs)
            if self.replay is None:
                self.replay = self._replay_pays(inputs)
                if not self.replay:  # the graph's memory goes back to the allocator
                    self.graph, self._static_inputs, self._static_outputs = None, [], []
                    return self.launcher(*inputs)
        return self._replayed(inputs)

    def _replayed(self, inputs: Sequence[Any]) -> list[Any]:
        for static, tensor in zip(self._static_inputs, inputs):
            if static.data_ptr() != tensor.data_ptr():
                static.copy_(tensor)
        self.graph.replay()
        return [out.clone() for out in self._static_outputs]

    def _replay_pays(self, inputs: Sequence[Any]) -> bool:
        """Whether CALLS replays back to back take less time than CALLS plain calls (the medians of ROUNDS
        alternating rounds, each from a synchronized device to the device synchronized after its last call)."""
        import torch

        ways = {True: lambda: self._replayed(inputs), False: lambda: self.launcher(*inputs)}
        seconds: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(self.ROUNDS):
            for way, call in ways.items():
                torch.cuda.synchronize(self.launcher.device)
                start = time.perf_counter()
                for _ in range(self.CALLS):
                    call()
                torch.cuda.synchronize(self.launcher.device)
                seconds[way].append(time.perf_counter() - start)
        return statistics.median(seconds[True]) <= statistics.median(seconds[False])

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


__all__ = ["Launcher", "GraphedLauncher", "DirectLaunch", "Step", "Compiling", "compiled_runner", "parallel_compiles"]
