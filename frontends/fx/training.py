"""Training under `torch.compile(backend="tilegraph")`: graphs that need gradients go through AOTAutograd.

Dynamo's graph is split by AOTAutograd into an ATen forward graph and an ATen backward graph, with
core-ATen decompositions (so that backward ops become ops the converters know); each is compiled by
tilegraph like any captured graph (`TilegraphGraph`) and runs eagerly, with the fallback warning, where
it cannot be converted (Dynamo's whole graph runs eagerly where AOTAutograd itself fails). Graphs that
need no gradient keep the direct path of `dynamo.py`.
"""
from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx as fx

from .dynamo import DynamoOptions, TilegraphGraph
from .errors import TilegraphFallbackWarning

aten = torch.ops.aten

# Decompositions beyond the core-ATen set: batch norm in training mode becomes var_mean and arithmetic
# (its forward has no converter; the running statistics' update is returned as ordinary outputs).
_EXTRA_DECOMPOSITIONS = ("_native_batch_norm_legit_functional", "_native_batch_norm_legit", "native_batch_norm")
# Left out of the core set: decomposing the CPU flash-attention forward while AOTAutograd keeps its
# backward op gives wrong gradients in torch 2.13 (aot_eager too: 0.16 off on a causal encoder layer);
# both have converters instead (ops_grad.py), so attention stays one fused op in the forward graph.
_KEPT = ("_scaled_dot_product_flash_attention_for_cpu",)


def needs_autograd(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> bool:
    """Whether calling the graph now records autograd: grad mode is on (Dynamo guards on it, so a
    graph captured under torch.no_grad is another graph) and some input or parameter requires grad."""
    if not torch.is_grad_enabled():
        return False
    if any(isinstance(a, torch.Tensor) and a.requires_grad for a in example_inputs):
        return True
    return any(p.requires_grad for p in gm.parameters())


def decompositions() -> dict:
    """The ATen decompositions AOTAutograd applies while tracing the forward and backward graphs."""
    from torch._decomp import core_aten_decompositions, get_decompositions

    kept = {getattr(aten, name) for name in _KEPT if hasattr(aten, name)}
    table = {op: fn for op, fn in core_aten_decompositions().items()
             if op not in kept and getattr(op, "overloadpacket", None) not in kept}
    ops = [getattr(aten, name) for name in _EXTRA_DECOMPOSITIONS if hasattr(aten, name)]
    table.update(get_decompositions(ops))
    return table


def compile_with_autograd(gm: fx.GraphModule, example_inputs: Sequence[Any], options: DynamoOptions) -> Callable:
    """Dynamo's graph through AOTAutograd, its forward and backward graphs each compiled by tilegraph."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._dynamo.exc import TensorifyScalarRestartAnalysis

    backend = aot_autograd(fw_compiler=_compiler(options), bw_compiler=_compiler(options),
                           decompositions=decompositions())
    try:
        return backend(gm, list(example_inputs))
    except TensorifyScalarRestartAnalysis:  # Dynamo's signal to capture again, not a failure
        raise
    except Exception as e:  # the model must still train: Dynamo's graph runs eagerly, with autograd
        warnings.warn(f"tilegraph: running a graph eagerly in PyTorch: AOTAutograd could not split it into "
                      f"forward and backward graphs: {type(e).__name__}: {e}", TilegraphFallbackWarning,
                      stacklevel=2)
        return gm


def _compiler(options: DynamoOptions) -> Callable:
    def compile_aten_graph(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> Callable:
        return AtenGraph(gm, example_inputs, options)

    return compile_aten_graph


class AtenGraph:
    """One AOTAutograd forward or backward graph, compiled by tilegraph; called boxed (a list of
    arguments, which it empties, as AOTAutograd asks, so saved activations are freed early)."""

    def __init__(self, gm: fx.GraphModule, example_inputs: Sequence[Any], options: DynamoOptions) -> None:
        self.graph = TilegraphGraph(gm, example_inputs, options)
        # AOTAutograd's marker for a compiled graph that takes its arguments as one list; set on the
        # instance, since the torch._dynamo.disable wrapper around a backward graph copies only __dict__
        self._boxed_call = True

    def __call__(self, args: list[Any]) -> Any:
        # weights arrive as nn.Parameters: as plain tensors they are graph inputs, read at each call,
        # rather than state copied into the program (which an optimizer step would make stale)
        inputs = [a.detach() if isinstance(a, torch.nn.Parameter) else a for a in args]
        args.clear()
        return self.graph(*inputs)
