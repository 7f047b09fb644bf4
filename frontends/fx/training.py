"""Training under `torch.compile(backend="tilegraph")`: graphs that need gradients go through AOTAutograd.

Dynamo's graph is split by AOTAutograd into an ATen forward graph and an ATen backward graph, with
core-ATen decompositions (so that backward ops become ops the converters know); each is compiled by
tilegraph like any captured graph (`TilegraphGraph`) and runs eagerly, with the fallback warning, where
it cannot be converted (Dynamo's whole graph runs eagerly where AOTAutograd itself fails). Graphs that
need no gradient keep the direct path of `dynamo.py`.
"""
from __future__ import annotations

import operator
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
# CUDA's fused attention ops are not in the table either; listed so that a later torch adding them keeps them.
_KEPT = ("_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention",
         "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention")
# CUDA attention forward -> (its dropout_p position, the positions of its random state among its results),
# and each backward -> the positions of the random state among its arguments
_RNG_RESULTS = {"_scaled_dot_product_flash_attention": (3, (6, 7)),
                "_scaled_dot_product_efficient_attention": (5, (2, 3)),
                "_scaled_dot_product_cudnn_attention": (5, (6, 7))}
_RNG_ARGUMENTS = {"_scaled_dot_product_flash_attention_backward": (10, (12, 13)),
                  "_scaled_dot_product_efficient_attention_backward": (9, (7, 8)),
                  "_scaled_dot_product_cudnn_attention_backward": (13, (6, 7))}


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


def _dropout(node: fx.Node, position: int) -> float:
    return node.args[position] if len(node.args) > position else node.kwargs.get("dropout_p", 0.0)


def _op_name(node: fx.Node) -> str:
    return getattr(getattr(node.target, "overloadpacket", None), "__name__", "") if node.op == "call_function" else ""


def forward_without_rng(gm: fx.GraphModule) -> list[tuple[int, torch.Tensor]]:
    """Drop from a forward graph's outputs the random state of CUDA attention run without dropout
    (saved for the backward, which reads none of it; flash's is uint64, which the IR has not): each
    becomes None. Returns (output position, its fake value) for each, to be filled with an empty tensor."""
    output = next(n for n in gm.graph.nodes if n.op == "output")
    results = output.args[0]
    if not isinstance(results, (tuple, list)):
        return []
    dropped, kept = [], list(results)
    for i, node in enumerate(results):
        if not (isinstance(node, fx.Node) and node.target is operator.getitem):
            continue
        source, index = node.args
        spec = _RNG_RESULTS.get(_op_name(source))
        if spec and index in spec[1] and not _dropout(source, spec[0]) and isinstance(node.meta.get("val"),
                                                                                       torch.Tensor):
            dropped.append((i, node.meta["val"]))
            kept[i] = None
    if dropped:
        output.args = (type(results)(kept),)
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return dropped


def backward_without_rng(gm: fx.GraphModule) -> list[int]:
    """Route a backward graph's CUDA attention backward ops run without dropout through
    `ops_grad.attention_backward_without_rng`, which makes their random state itself, and remove the
    inputs only they read. Returns the positions of the removed inputs."""
    from .ops_grad import attention_backward_without_rng

    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    freed: set[fx.Node] = set()
    for node in list(gm.graph.nodes):
        spec = _RNG_ARGUMENTS.get(_op_name(node))
        if spec is None or _dropout(node, spec[0]) or len(node.args) <= max(spec[1]):
            continue
        rng, args = [], list(node.args)
        for position in spec[1]:
            value = getattr(args[position], "meta", {}).get("val")
            if not isinstance(value, torch.Tensor):
                break
            rng.append((position, tuple(value.shape), value.dtype))
            args[position] = None
        else:
            freed.update(node.args[p] for p in spec[1])
            node.target, node.args = attention_backward_without_rng, (node.target, tuple(rng), *args)
    removed = [i for i, p in enumerate(placeholders) if p in freed and not p.users]
    for i in removed:
        gm.graph.erase_node(placeholders[i])
    if removed or any(n.target is attention_backward_without_rng for n in gm.graph.nodes):
        gm.recompile()
    return removed


class AtenGraph:
    """One AOTAutograd forward or backward graph, compiled by tilegraph; called boxed (a list of
    arguments, which it empties, as AOTAutograd asks, so saved activations are freed early)."""

    def __init__(self, gm: fx.GraphModule, example_inputs: Sequence[Any], options: DynamoOptions) -> None:
        self.empties = forward_without_rng(gm)  # random state the forward returns, made here instead
        self.removed = set(backward_without_rng(gm))  # inputs no longer read
        example_inputs = [a for i, a in enumerate(example_inputs) if i not in self.removed]
        self.graph = TilegraphGraph(gm, example_inputs, options)
        # AOTAutograd's marker for a compiled graph that takes its arguments as one list; set on the
        # instance, since the torch._dynamo.disable wrapper around a backward graph copies only __dict__
        self._boxed_call = True

    def __call__(self, args: list[Any]) -> Any:
        # weights arrive as nn.Parameters: as plain tensors they are graph inputs, read at each call,
        # rather than state copied into the program (which an optimizer step would make stale)
        inputs = [a.detach() if isinstance(a, torch.nn.Parameter) else a for i, a in enumerate(args)
                  if i not in self.removed]
        args.clear()
        results = self.graph(*inputs)
        if not self.empties:
            return results
        filled = list(results)
        for position, fake in self.empties:
            filled[position] = torch.empty(fake.shape, dtype=fake.dtype, device=fake.device)
        return type(results)(filled)
