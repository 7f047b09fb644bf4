"""Parameter folding: values computed from parameters alone are computed once, when the program loads.

A compiled program's parameters are fixed, so a node whose operands are all parameters (or results
of such nodes) computes the same tensor on every call: the transposed weight of a torch `Linear`,
batch-norm's `gamma * rsqrt(var + eps)`. The generated code does not run these nodes; the runtime
evaluates them with the numpy reference semantics at load time and passes the results in as extra
inputs (after the graph inputs and parameters), read like any other kernel input.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from tilegraph.ir.graph import Node, Value
from tilegraph.ir.program import Program

# a folded tensor may be larger than what it is computed from by this much (broadcast constants)
SLACK_BYTES = 4096


@dataclass(frozen=True)
class Folding:
    """Which nodes run at load time, and which of their results the kernels read (in `ins` order)."""

    nodes: tuple[Node, ...]  # graph order
    inputs: tuple[Value, ...]  # folded values read by nodes that still run
    packs: tuple = ()  # conv.WeightPack: repacked constants, passed after `inputs`

    @cached_property
    def node_set(self) -> frozenset[Node]:
        return frozenset(self.nodes)

    @cached_property
    def values(self) -> frozenset[Value]:
        return frozenset(v for n in self.nodes for v in n.results)


NO_FOLDING = Folding((), ())


def plan_folding(program: Program) -> Folding:
    """The nodes of generic kernels whose operands depend on parameters only, that are not graph
    outputs and do not blow up in size (a folded tensor is held for the program's lifetime)."""
    graph = program.graph
    foldable_kernel = {n: k.template is None for k in program.kernels for n in k.nodes}
    known: dict[Value, int] = {v: v.type.nbytes for v in graph.params}
    outputs = set(graph.outputs)
    nodes = []
    for node in graph.nodes:
        if not foldable_kernel.get(node, False) or any(v not in known for v in node.inputs):
            continue
        if any(v in outputs for v in node.results):
            continue
        source = sum(known[v] for v in node.inputs)
        if sum(v.type.nbytes for v in node.results) > source + SLACK_BYTES:
            continue
        nodes.append(node)
        for v in node.results:
            known[v] = v.type.nbytes
    folded = frozenset(nodes)
    inputs = tuple(v for n in nodes for v in n.results if any(u not in folded for u in v.users))
    return Folding(tuple(nodes), inputs)


def evaluate_folding(folding: Folding, params: Mapping[Value, np.ndarray]) -> list[np.ndarray]:
    """The arrays of `folding.inputs`, computed from the parameter values, then those of
    `folding.packs` (C order, storage dtype)."""
    env: dict[Value, np.ndarray] = dict(params)
    for node in folding.nodes:
        outs = node.opdef.reference([env[v] for v in node.inputs], node.attrs, node.result_types)
        env.update(zip(node.results, outs))
    arrays = [np.ascontiguousarray(env[v], dtype=v.type.dtype.numpy) for v in folding.inputs]
    return arrays + [np.ascontiguousarray(pack.apply(np.asarray(env[pack.source], dtype=pack.source.type.dtype.numpy)))
                     for pack in folding.packs]
