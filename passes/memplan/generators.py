"""Seeded random MemoryProblems: layered DAGs with local and long-range edges, for tests and benchmarks."""
from __future__ import annotations

import random

from .problem import MemoryProblem, TensorKind


def random_dag(seed: int, kernels: int, *, inputs: int = 2, max_fan_in: int = 3, locality: int = 8,
               long_edges: float = 0.15, weights: bool = False, size_choices=(1, 2, 3, 4, 6, 8),
               unit: int = 1024, extra_outputs: float = 0.05) -> MemoryProblem:
    """A random topologically ordered DAG: each kernel reads 1..max_fan_in recent tensors (sometimes an
    older one) and writes one tensor; with `weights` each kernel also reads a weight of its own."""
    rng = random.Random(seed)
    names, sizes, kinds = [], [], []

    def new(name: str, kind: TensorKind) -> int:
        names.append(name)
        sizes.append(rng.choice(size_choices) * unit)
        kinds.append(kind)
        return len(names) - 1

    produced = [new(f"in{j}", TensorKind.INPUT) for j in range(max(1, inputs))]
    k_in, k_out = [], []
    for k in range(kernels):
        fan = rng.randint(1, max_fan_in)
        recent = produced[-locality:]
        chosen = set(rng.sample(recent, min(fan, len(recent))))
        if rng.random() < long_edges and len(produced) > locality:
            chosen.add(rng.choice(produced[:-locality]))
        ins = tuple(sorted(chosen))
        if weights:
            ins = ins + (new(f"w{k}", TensorKind.WEIGHT),)
        out = new(f"t{k}", TensorKind.INTERMEDIATE)
        produced.append(out)
        k_in.append(ins)
        k_out.append((out,))
    read = {i for ins in k_in for i in ins}
    is_output = [kinds[i] is TensorKind.INTERMEDIATE and (i not in read or rng.random() < extra_outputs)
                 for i in range(len(names))]
    return MemoryProblem(tuple(names), tuple(sizes), tuple(kinds), tuple(is_output),
                         tuple(f"k{k}" for k in range(kernels)), tuple(k_in), tuple(k_out))
