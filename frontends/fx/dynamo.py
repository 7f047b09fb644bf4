"""The TorchDynamo backend: `torch.compile(model, backend="tilegraph")`.

Dynamo hands over each captured graph with its example arguments (module weights arrive as
placeholders). Each graph is converted for the argument shapes it is called with (the IR has static
shapes, so a new shape converts again), compiled with `tilegraph.compile` through the target's
default pipeline, and run by a `Runner`: graphs on a CUDA device as Triton kernels on that device
(torch tensors in and out, launches replayed through a CUDA graph), CPU graphs as the C++ library
(`options={"target": ...}` chooses; see `DynamoOptions`). A graph that cannot be converted or
built runs eagerly in PyTorch instead, with a `TilegraphFallbackWarning` naming what was
unsupported.
"""
from __future__ import annotations

import contextlib
import gc
import hashlib
import itertools
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import torch
import torch.fx as fx
import torch.utils._pytree as pytree

from tilegraph.ir import DType, Graph, TilegraphError
from tilegraph.ir.verifier import verify

from .convert import Conversion, convert_graph_module
from .errors import TilegraphFallbackWarning, TilegraphRecompileWarning

BACKEND_NAME = "tilegraph"
# torch.compile's `mode` names, read as DynamoOptions (CUDA graphs are the default already)
MODES: dict[str, dict[str, bool]] = {"default": {}, "reduce-overhead": {"cudagraphs": True},
                                     "max-autotune": {"autotune": True},
                                     "max-autotune-no-cudagraphs": {"autotune": True, "cudagraphs": False}}
TARGETS = ("auto", "cpp", "triton", "reference")


@dataclass(frozen=True)
class DynamoOptions:
    """`torch.compile(..., backend="tilegraph", options={...})`.

    target: "auto" (graphs on a CUDA device run as Triton kernels there, CPU graphs as C++),
        "cpp", "triton" (on CUDA tensors, or on the CPU under TRITON_INTERPRET=1), or "reference"
        (the numpy reference executor: slow, for checking the converter).
    cudagraphs: replay a Triton graph's launches through a CUDA graph after a warm-up call, where
        that times faster than launching them one by one (`launch.GraphedLauncher`).
    autotune: time each Triton kernel's launch configurations on its first CUDA call (cached on
        disk); off by default, like Inductor's default mode, because it multiplies compile time.
    program_cache: reuse the scheduled Program of a graph compiled before (same graph, weights and
        tilegraph code), from disk: a recompile skips the passes (`tilegraph.program_cache`; the
        environment variable TILEGRAPH_PROGRAM_CACHE=0 turns it off too).
    max_shapes: argument shapes one graph is compiled for (shapes are static: each new one compiles
        again); calls with further new shapes run eagerly in PyTorch, said once by a TilegraphRecompileWarning,
        as Dynamo's own recompile limit (8) does. A decode loop over a growing KV cache would otherwise
        compile at every token. 0: no limit.
    """

    target: str = "auto"
    cudagraphs: bool = True
    autotune: bool = False
    program_cache: bool = True
    max_shapes: int = 8

    @classmethod
    def parse(cls, options: Mapping[str, Any] | None, mode: str | None = None) -> DynamoOptions:
        """The options (or Inductor's `mode` names, `MODES`) as given to torch.compile; a TilegraphError names
        the valid ones."""
        if mode is not None and mode not in MODES:
            raise TilegraphError(f"torch.compile(backend={BACKEND_NAME!r}): mode {mode!r} is not one of "
                                 f"{', '.join(map(repr, MODES))}")
        options = {**MODES.get(mode, {}), **dict(options or {})}
        valid = {f.name: f.type for f in fields(cls)}
        unknown = sorted(set(options) - set(valid))
        if unknown:
            raise TilegraphError(f"torch.compile(backend={BACKEND_NAME!r}): unknown option(s) "
                                 f"{', '.join(map(repr, unknown))}; valid options: {', '.join(valid)}")
        if options.get("target", "auto") not in TARGETS:
            raise TilegraphError(f"torch.compile(backend={BACKEND_NAME!r}): target {options['target']!r} is not "
                                 f"one of {', '.join(map(repr, TARGETS))}")
        for flag in ("cudagraphs", "autotune", "program_cache"):
            if not isinstance(options.get(flag, True), bool):
                raise TilegraphError(f"torch.compile(backend={BACKEND_NAME!r}): {flag} must be True or False, "
                                     f"not {options[flag]!r}")
        shapes = options.get("max_shapes", 0)
        if isinstance(shapes, bool) or not isinstance(shapes, int) or shapes < 0:
            raise TilegraphError(f"torch.compile(backend={BACKEND_NAME!r}): max_shapes must be a whole number >= 0 "
                                 f"(0: no limit), not {shapes!r}")
        return cls(**options)

    def target_for(self, args: Sequence[Any]) -> str:
        """The backend a graph with these arguments compiles for."""
        if self.target != "auto":
            return self.target
        return "triton" if any(isinstance(a, torch.Tensor) and a.is_cuda for a in args) else "cpp"


def compile_graph(graph: Graph, target: str = "cpp", *, program_cache: bool = True):
    """A converted graph through the pipeline (or its scheduled Program from the cache), built for `target`."""
    import tilegraph

    verify(graph)
    return tilegraph.compile(graph, target=target, program_cache=program_cache)


class TilegraphGraph:
    """What the backend returns to Dynamo for one captured graph: call it with the graph's arguments."""

    _numbers = itertools.count()

    def __init__(self, gm: fx.GraphModule, example_inputs: Sequence[Any],
                 options: DynamoOptions | None = None) -> None:
        self.gm = gm
        self.options = options or DynamoOptions()
        self.name = f"dynamo_graph_{next(self._numbers)}"  # in messages
        # the IR graph is named by the captured code, so the same graph captured again (after
        # torch._dynamo.reset(), in a new process) gives the same source and hits the build cache
        self.ir_name = "dynamo_" + hashlib.sha1(gm.code.encode()).hexdigest()[:12]
        self.eager = False
        self.fallback_reason: str | None = None
        self._cache: dict[tuple, Runner] = {}
        # (free_key, runner) of the last call, checked first: a model is mostly called with one set of shapes
        self._last: tuple[tuple | None, Runner] | None = None
        self._scalar_positions: list[int] = []
        self._compile_seconds = 0.0  # spent compiling for each argument shape so far
        self._limit_said = False  # the TilegraphRecompileWarning of `_at_shape_limit`
        if all(_is_concrete(a) for a in example_inputs) and not _has_empty(example_inputs):
            self._compile(list(example_inputs))  # report unsupported graphs at compile time

    def __call__(self, *args: Any) -> Any:
        if self.eager:
            return self.gm(*args)
        last = self._last
        if last is not None and last[1].free_key(args) == last[0] and last[1].current(args):
            return last[1](args)
        runner = self._cache.get(self._key(args))
        if runner is None and _has_empty(args):
            return self.gm(*args)  # an empty batch: nothing to compile for (`driver._refuse_empty_tensors`)
        if runner is None and self._at_shape_limit():
            return self.gm(*args)
        if runner is None or not runner.current(args):
            runner = self._compile(list(args))  # new shapes, or weights updated since conversion
            if runner is None:
                return self.gm(*args)
        self._last = (runner.free_key(args), runner)
        return runner(args)

    @property
    def target(self) -> str | None:
        """The backend the last compiled shapes run on (None before any)."""
        return next(reversed(self._cache.values())).target if self._cache else None

    def _compile(self, args: list[Any]) -> Runner | None:
        target = self.options.target_for(args)
        with _collector_paused():
            return self._compile_now(args, target)

    def _compile_now(self, args: list[Any], target: str) -> Runner | None:
        try:
            start = time.perf_counter()
            # the weights' own memory: an update in place makes `Runner.current` false, and converts again
            conversion = convert_graph_module(self.gm, args, name=self.name, share_weights=True, write_back=True)
            conversion.graph.name = self.ir_name
            converted = time.perf_counter() - start
            program = compile_graph(conversion.graph, target, program_cache=self.options.program_cache)
            program.compile_seconds = {"conversion": converted, **program.compile_seconds}
            runner_type = TritonRunner if target == "triton" else HostRunner
            runner = runner_type(conversion, program, args, self.options)
        except TilegraphError as e:
            return self._fall_back(str(e))
        except Exception as e:  # a bug in tilegraph must not break the user's model: run it eagerly, say why
            return self._fall_back(f"internal error {type(e).__name__}: {e} (please report it)")
        self._scalar_positions = conversion.scalar_positions
        self._cache[self._key(args)] = runner
        self._compile_seconds += time.perf_counter() - start
        return runner

    def _at_shape_limit(self) -> bool:
        """Whether a call with new argument shapes runs eagerly: `max_shapes` compiled already (said once)."""
        limit = self.options.max_shapes
        if not limit or len(self._cache) < limit:
            return False
        if not self._limit_said:
            self._limit_said = True
            warnings.warn(f"tilegraph: graph {self.name} has been compiled for {len(self._cache)} argument shapes "
                          f"({self._compile_seconds:.1f} s in all): shapes are static, so each new one would compile "
                          "again; calls with other shapes now run eagerly in PyTorch (options={'max_shapes': N} "
                          "raises the limit, 0 for none; inputs padded to a few fixed sizes compile once each)",
                          TilegraphRecompileWarning, stacklevel=4)
        return True

    def _fall_back(self, reason: str) -> None:
        self.eager = True
        self.fallback_reason = reason
        warnings.warn(f"tilegraph: running graph {self.name} eagerly in PyTorch: {reason}", TilegraphFallbackWarning,
                      stacklevel=4)

    def _key(self, args: Sequence[Any]) -> tuple:
        """Argument shapes, dtypes and devices, plus the values the graph was specialised to."""
        return _key(args) + tuple(args[p].item() for p in self._scalar_positions)


class Runner:
    """One converted graph built for one set of argument shapes: calls it with the fx graph's arguments."""

    target = "abstract"

    def __init__(self, conversion: Conversion, program, args: Sequence[Any], options: DynamoOptions) -> None:
        self.conversion = conversion
        self.program = program  # a tilegraph CompiledProgram
        self._state = [args[p] for p in conversion.state_positions]
        self._versions = [t._version for t in self._state]
        self._storage = [t.data_ptr() for t in self._state]  # `.data = ...` swaps storage, bumping no version
        self._positions = conversion.input_positions
        self._leaves = conversion.output_leaves
        self._spec = conversion.output_spec
        # a flat tuple of graph outputs, in order (the usual case) is returned without the pytree
        self._flat = (self._spec.type is tuple and self._leaves == list(range(len(self._leaves)))
                      and all(child.is_leaf() for child in _children(self._spec)))
        state = set(conversion.state_positions)
        self._arity = len(args)
        self._free = [p for p in range(len(args)) if p not in state]

    def free_key(self, args: Sequence[Any]) -> tuple | None:
        """What `TilegraphGraph._key` says of `args` but for the weights (which `current` checks): the other
        arguments' shapes, dtypes and devices and the values the graph is specialised to. None for another arity."""
        if len(args) != self._arity:
            return None
        return _key([args[p] for p in self._free]) + tuple(args[p].item() for p in self.conversion.scalar_positions)

    def current(self, args: Sequence[Any]) -> bool:
        """Whether the weights are the tensors it was converted with, not updated in place or given
        new storage (`.data = ...`) since."""
        return all(args[p] is t and t._version == v and t.data_ptr() == d for p, t, v, d in
                   zip(self.conversion.state_positions, self._state, self._versions, self._storage))

    def __call__(self, args: Sequence[Any]) -> Any:
        tensors = self.run([args[p] for p in self._positions])
        for position, index in self.conversion.written_back:  # inputs the model updates in place
            args[position].copy_(tensors[index])
        if self._flat:
            return tuple(tensors[:len(self._leaves)])
        leaves = [tensors[leaf] if isinstance(leaf, int) else leaf[1] for leaf in self._leaves]
        return pytree.tree_unflatten(leaves, self._spec)

    def run(self, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        raise NotImplementedError


class HostRunner(Runner):
    """A host backend (the C++ library, or the numpy reference): CPU tensors' memory goes in without
    a copy, and the arrays it allocates for the results come back as the tensors' storage. Where the
    library writes every output itself, it reads and writes torch tensors' memory with no array between
    (`NativeProgram.run_addresses`): a small model's call costs little more than its kernels."""

    def __init__(self, conversion, program, args, options) -> None:
        super().__init__(conversion, program, args, options)
        self.target = program.backend
        self._dtypes = conversion.output_dtypes
        devices = [args[p].device for p in self._positions if isinstance(args[p], torch.Tensor)]
        self._device = devices[0] if devices else torch.device("cpu")
        self._outputs = _addressed_outputs(program, conversion, [args[p] for p in self._positions])

    def run(self, inputs):
        if self._outputs is not None:
            inputs = [t if t.is_contiguous() else t.contiguous() for t in inputs]
            outputs = [torch.empty(shape, dtype=dtype) for shape, dtype in self._outputs]
            self.program.run_addresses([t.data_ptr() for t in inputs], [t.data_ptr() for t in outputs])
            return outputs
        results = self.program(*[_to_numpy(t) for t in inputs])
        tensors = [_from_numpy(r, dtype) for r, dtype in zip(results, self._dtypes)]
        if self._device.type != "cpu":  # a host target chosen for tensors on another device
            tensors = [t.to(self._device) for t in tensors]
        return tensors


class TritonRunner(Runner):
    """The Triton kernels on the inputs' own device: torch tensors in and out, the module's weights
    read in place where the passes left them unchanged, launches replayed through a CUDA graph on
    CUDA devices (unless turned off)."""

    target = "triton"

    def __init__(self, conversion, program, args, options) -> None:
        super().__init__(conversion, program, args, options)
        # the tensors the graph reads: not the 0-d CPU tensors Dynamo passes for Python numbers, which the
        # graph is specialised to (`scalar_positions`), even when the model is on a GPU
        read = (*self._positions, *conversion.state_positions)
        devices = {args[p].device for p in read if isinstance(args[p], torch.Tensor)}
        if len(devices) > 1:
            raise TilegraphError(f"the graph's tensors are on several devices ({', '.join(sorted(map(str, devices)))})")
        device = devices.pop() if devices else torch.device("cuda")
        if device.type == "cpu" and not _interpreting():
            raise TilegraphError("target 'triton' on CPU tensors needs TRITON_INTERPRET=1 (set before triton is "
                                 "imported); use target 'cpp' or 'auto' for CPU graphs")
        program.autotune = options.autotune
        launcher = program.launcher(device, _own_tensors(program, conversion, device))
        if device.type == "cuda" and options.autotune:
            launcher.tune(launcher.check([args[p] for p in self._positions]))
        self._launcher = launcher
        self._graphed = None
        if device.type == "cuda" and options.cudagraphs:
            from tilegraph.backends.triton.launch import GraphedLauncher

            self._graphed = GraphedLauncher(launcher)

    def run(self, inputs):
        inputs = self._launcher.check(inputs)
        return (self._graphed or self._launcher)(*inputs)


def tilegraph_backend(gm: fx.GraphModule, example_inputs: Sequence[Any],
                      options: Mapping[str, Any] | None = None, mode: str | None = None) -> Callable[..., Any]:
    """The Dynamo compiler function registered as `backend="tilegraph"` (`options`: see DynamoOptions; `mode`:
    Inductor's names, `MODES`). Graphs that need gradients go through AOTAutograd (`training.py`)."""
    from .training import compile_with_autograd, needs_autograd

    parsed = DynamoOptions.parse(options, mode)
    if needs_autograd(gm, example_inputs):
        return compile_with_autograd(gm, example_inputs, parsed)
    return TilegraphGraph(gm, example_inputs, parsed)


def register_backend() -> None:
    """Register with Dynamo under the name "tilegraph" (once, however often this module is imported).

    When the package is installed, its `torch_dynamo_backends` entry point already names this
    backend and Dynamo loads it on first use; registering here too would collide with that.
    """
    from importlib.metadata import entry_points

    import torch._dynamo

    if BACKEND_NAME in entry_points(group="torch_dynamo_backends").names:
        return
    try:
        torch._dynamo.register_backend(compiler_fn=tilegraph_backend, name=BACKEND_NAME)
    except AssertionError:  # registered already
        pass


@contextlib.contextmanager
def _collector_paused():
    """Python's cyclic garbage collector off while a graph compiles. A process that imported torch and
    transformers tracks ~0.5M objects, so each full collection takes 0.3-0.7 s; the compile allocates
    enough to set one off, and its short-lived objects die by reference counting anyway (the few
    cycles among them, old IR graphs, go at the next collection)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _is_concrete(arg: Any) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return not isinstance(arg, (FakeTensor, torch.SymInt, torch.SymFloat, torch.SymBool))


def _key(args: Sequence[Any]) -> tuple:
    return tuple((tuple(a.shape), a.dtype, a.device) if isinstance(a, torch.Tensor) else (type(a).__name__, a)
                 for a in args)


def _interpreting() -> bool:
    from tilegraph.backends.triton.runtime import _interpreting as interpreting

    return interpreting()


def _own_tensors(program, conversion: Conversion, device: torch.device) -> dict:
    """Parameters the program reads unchanged from a torch tensor already on `device`: that tensor,
    read in place at each call, instead of a copy (parameters the passes rewrote keep their copy)."""
    from tilegraph.backends.triton.runtime import torch_dtype

    converted = {v.name: v.data for v in conversion.graph.params}
    own = {}
    for value, array in program.params.items():
        tensor = conversion.param_tensors.get(value.name)
        if (tensor is None or tensor.device != device or tuple(tensor.shape) != value.type.shape
                or tensor.dtype != torch_dtype(value.type.dtype) or not tensor.is_contiguous()):
            continue
        source = converted.get(value.name)
        if source is not None and (source is array or np.array_equal(source, array)):
            own[value] = tensor.detach()
    return own


def _has_empty(args: Sequence[Any]) -> bool:
    """Whether a tensor among `args` has a zero-size axis (which tilegraph does not compile)."""
    return any(isinstance(a, torch.Tensor) and a.numel() == 0 for a in args)


def _children(spec: pytree.TreeSpec) -> list[pytree.TreeSpec]:
    """A pytree spec's child specs: `children()` where torch has it (`children_specs` warns of deprecation in 2.13)."""
    children = getattr(spec, "children", None)
    return list(children()) if callable(children) else list(spec.children_specs)


def _addressed_outputs(program, conversion: Conversion, inputs: Sequence[Any]) -> list | None:
    """The outputs' (shape, torch dtype) where `program` can run on these inputs' memory directly:
    a C++ library writing every output itself, CPU tensors in and out, each held in the dtype the
    library reads or writes (bf16 is not: the host backends hold it as f32). None otherwise."""
    from .context import torch_dtype

    graph = program.program.graph
    if not (getattr(program, "writes_outputs_directly", False)
            and all(isinstance(t, torch.Tensor) and t.device.type == "cpu" for t in inputs)):
        return None
    values = [*graph.inputs, *graph.outputs]
    dtypes = [t.dtype for t in inputs] + list(conversion.output_dtypes)
    if len(values) != len(dtypes) or any(v.type.dtype is DType.bf16 or torch_dtype(v.type.dtype) != dtype
                                         for v, dtype in zip(values, dtypes)):
        return None
    return [(v.type.shape, torch_dtype(v.type.dtype)) for v in graph.outputs]


def _to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """A CPU tensor's memory as an array, without a copy (bf16 and other devices are converted)."""
    tensor = tensor.detach()
    if tensor.dtype is torch.bfloat16:
        tensor = tensor.float()
    return tensor.cpu().numpy()


def _from_numpy(array: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    """A result array as a tensor that owns it (a copy only for a dtype numpy does not hold, bf16)."""
    if not array.flags.writeable:
        array = array.copy()
    tensor = torch.from_numpy(array)
    return tensor if tensor.dtype == dtype else tensor.to(dtype)
