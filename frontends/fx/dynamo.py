"""The TorchDynamo backend: `torch.compile(model, backend="tilegraph")`.

Dynamo hands over each captured graph with its example arguments (module weights arrive as
placeholders). Each graph is converted for the argument shapes it is called with (the IR has static
shapes, so a new shape converts again), compiled with `tilegraph.compile` for the default
executable backend (`DYNAMO_TARGET`, C++) through that backend's default pipeline, and run. A
graph that cannot be converted or built runs eagerly in PyTorch instead, with a
`TilegraphFallbackWarning` naming what was unsupported.
"""
from __future__ import annotations

import hashlib
import itertools
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.fx as fx
import torch.utils._pytree as pytree

from tilegraph.ir import Graph, TilegraphError
from tilegraph.ir.verifier import verify

from .convert import Conversion, convert_graph_module
from .errors import TilegraphFallbackWarning

BACKEND_NAME = "tilegraph"


DYNAMO_TARGET = "cpp"  # the default executable backend (C++ with OpenMP)


def compile_graph(graph: Graph, target: str | None = None):
    """A converted graph through the pipeline, built for the default executable backend."""
    import tilegraph

    verify(graph)
    return tilegraph.compile(graph, target=target or DYNAMO_TARGET)


class _Compiled:
    """One converted graph for one set of argument shapes, and the weights it was converted with."""

    def __init__(self, conversion: Conversion, program, state: list[torch.Tensor]) -> None:
        self.conversion = conversion
        self.program = program  # a tilegraph CompiledProgram
        self.state_stamp = _stamp(state)


class TilegraphGraph:
    """What the backend returns to Dynamo for one captured graph: call it with the graph's arguments."""

    _numbers = itertools.count()

    def __init__(self, gm: fx.GraphModule, example_inputs: Sequence[Any]) -> None:
        self.gm = gm
        self.name = f"dynamo_graph_{next(self._numbers)}"  # in messages
        # the IR graph is named by the captured code, so the same graph captured again (after
        # torch._dynamo.reset(), in a new process) gives the same source and hits the build cache
        self.ir_name = "dynamo_" + hashlib.sha1(gm.code.encode()).hexdigest()[:12]
        self.eager = False
        self.fallback_reason: str | None = None
        self._cache: dict[tuple, _Compiled] = {}
        self._scalar_positions: list[int] = []
        if all(_is_concrete(a) for a in example_inputs):
            self._compile(list(example_inputs))  # report unsupported graphs at compile time

    def __call__(self, *args: Any) -> Any:
        if self.eager:
            return self.gm(*args)
        compiled = self._cache.get(self._key(args))
        if compiled is None or compiled.state_stamp != _stamp([args[p] for p in compiled.conversion.state_positions]):
            compiled = self._compile(list(args))  # new shapes, or weights updated since conversion
            if compiled is None:
                return self.gm(*args)
        return self._run(compiled, args)

    def _compile(self, args: list[Any]) -> _Compiled | None:
        try:
            conversion = convert_graph_module(self.gm, args, name=self.name)
            conversion.graph.name = self.ir_name
            program = compile_graph(conversion.graph)
        except TilegraphError as e:
            return self._fall_back(str(e))
        except Exception as e:  # a bug in tilegraph must not break the user's model: run it eagerly, say why
            return self._fall_back(f"internal error {type(e).__name__}: {e} (please report it)")
        compiled = _Compiled(conversion, program, [args[p] for p in conversion.state_positions])
        self._scalar_positions = conversion.scalar_positions
        self._cache[self._key(args)] = compiled
        return compiled

    def _fall_back(self, reason: str) -> None:
        self.eager = True
        self.fallback_reason = reason
        warnings.warn(f"tilegraph: running graph {self.name} eagerly in PyTorch: {reason}", TilegraphFallbackWarning,
                      stacklevel=4)

    def _key(self, args: Sequence[Any]) -> tuple:
        """Argument shapes and dtypes, plus the values the graph was specialised to."""
        return _key(args) + tuple(args[p].item() for p in self._scalar_positions)

    def _run(self, compiled: _Compiled, args: Sequence[Any]) -> Any:
        conversion = compiled.conversion
        inputs = [_to_numpy(args[p]) for p in conversion.input_positions]
        results = compiled.program(*inputs)
        tensors = [torch.from_numpy(np.array(r, copy=True)).to(dtype)
                   for r, dtype in zip(results, conversion.output_dtypes)]
        leaves = [tensors[leaf] if isinstance(leaf, int) else leaf[1] for leaf in conversion.output_leaves]
        return pytree.tree_unflatten(leaves, conversion.output_spec)


def tilegraph_backend(gm: fx.GraphModule, example_inputs: Sequence[Any], **options: Any) -> TilegraphGraph:
    """The Dynamo compiler function registered as `backend="tilegraph"`."""
    return TilegraphGraph(gm, example_inputs)


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


def _is_concrete(arg: Any) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return not isinstance(arg, (FakeTensor, torch.SymInt, torch.SymFloat, torch.SymBool))


def _key(args: Sequence[Any]) -> tuple:
    return tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else (type(a).__name__, a)
                 for a in args)


def _stamp(tensors: Sequence[torch.Tensor]) -> tuple:
    return tuple((id(t), t._version) for t in tensors)


def _to_numpy(tensor: torch.Tensor) -> np.ndarray:
    tensor = tensor.detach().cpu()
    if tensor.dtype is torch.bfloat16:
        tensor = tensor.float()
    return tensor.numpy()
