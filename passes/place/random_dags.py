"""Seeded random layered DAGs of kernels, shaped like deep-learning graphs, for tests and benchmarks.

Tasks come in layers; each reads one to three tensors from the previous two layers (at least one
from the layer just before). Kinds follow a DL mix (contractions, elementwise, reductions,
windows, layout, composites), sizes are log-uniform, a third of the tensors are f16. Graph
inputs and the weights of contractions and windows start on the home device; sinks are graph
outputs. Durations come from a System's roofline via `build_problem`.
"""
from __future__ import annotations

import math
import random

from tilegraph.ir.system import System
from tilegraph.ir.types import DType

from .problem import PlacementProblem, TaskSpec, Tensor, build_problem

KIND_MIX = (("contraction", 0.30), ("elementwise", 0.35), ("reduction", 0.10), ("window", 0.10),
            ("layout", 0.10), ("composite", 0.05))


def _loguniform(rng: random.Random, lo: float, hi: float) -> float:
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


def random_tasks(n: int, seed: int = 0, width: int | None = None,
                 size_range: tuple[float, float] = (256 * 2 ** 10, 16 * 2 ** 20)) -> tuple[list[TaskSpec], list[Tensor]]:
    """TaskSpecs and Tensors of a random layered DAG with n tasks (topological order by index)."""
    rng = random.Random(seed)
    width = width or max(2, round(math.sqrt(n) * 0.8))
    layers: list[list[int]] = []
    count = 0
    while count < n:
        size = min(n - count, rng.randint(1, 2 * width - 1) if layers else rng.randint(1, width))
        layers.append(list(range(count, count + size)))
        count += size
    kinds, weights = zip(*KIND_MIX)
    specs: list[TaskSpec] = []
    tensors: list[Tensor] = []
    reads: list[list[int]] = [[] for _ in range(n)]  # tensor indices each task reads
    made: list[int] = []  # tensor index each task makes
    for li, layer in enumerate(layers):
        for i in layer:
            kind = rng.choices(kinds, weights)[0]
            dtype = DType.f16 if rng.random() < 1 / 3 else DType.f32
            out_bytes = int(_loguniform(rng, *size_range)) // 4 * 4
            if li == 0:
                src = len(tensors)
                tensors.append(Tensor(f"in{i}", int(_loguniform(rng, *size_range)) // 4 * 4, -1, (i,)))
                reads[i].append(src)
            else:
                prev = layers[li - 1]
                chosen = {rng.choice(prev)}
                pool = prev + (layers[li - 2] if li >= 2 else [])
                for _ in range(rng.choices((0, 1, 2), (0.45, 0.4, 0.15))[0]):
                    chosen.add(rng.choice(pool))
                reads[i].extend(made[j] for j in sorted(chosen))
            in_bytes = sum(tensors[k].size for k in reads[i])
            elems = out_bytes / dtype.itemsize
            if kind in ("contraction", "window"):
                depth = _loguniform(rng, 64, 4096) if kind == "contraction" else _loguniform(rng, 144, 2304)
                weight = int(min(_loguniform(rng, 64 * 2 ** 10, 8 * 2 ** 20), depth * 4096 * dtype.itemsize))
                w = len(tensors)
                tensors.append(Tensor(f"w{i}", weight // 4 * 4, -1, (i,), movable=True))
                reads[i].append(w)
                in_bytes += weight
                flops = 2.0 * elems * depth
            elif kind == "reduction":
                flops = float(in_bytes / dtype.itemsize)
            elif kind == "composite":
                flops = 5.0 * elems
            elif kind == "layout":
                flops = 0.0
            else:
                flops = elems * rng.choice((1, 2, 4))
            made.append(len(tensors))
            tensors.append(Tensor(f"t{i}", out_bytes, i, ()))
            specs.append(TaskSpec(f"k{i}", frozenset({kind}), flops, float(in_bytes + out_bytes), dtype))
    # a task nobody reads (outside the last layer) feeds a random task of a later layer, so graph
    # outputs are few, as in real models
    read_by_someone = {k for ks in reads for k in ks}
    for li, layer in enumerate(layers[:-1]):
        for i in layer:
            if made[i] not in read_by_someone:
                later = rng.choice(layers[li + 1] if rng.random() < 0.7 else layers[rng.randint(li + 1, len(layers) - 1)])
                reads[later].append(made[i])
                read_by_someone.add(made[i])
    consumers: dict[int, list[int]] = {}
    for i, ks in enumerate(reads):
        for k in ks:
            consumers.setdefault(k, []).append(i)
    final = []
    for k, t in enumerate(tensors):
        users = tuple(sorted(set(consumers.get(k, ()))))
        final.append(Tensor(t.name, t.size, t.producer, users, t.producer >= 0 and not users, t.movable))
    return specs, final


def random_problem(n: int, system: System, seed: int = 0, **kwargs) -> PlacementProblem:
    """A random layered DAG of n kernels placed on `system`."""
    specs, tensors = random_tasks(n, seed, **kwargs)
    return build_problem(f"random-{n}-s{seed}", specs, tensors, system)


def tiny_problem(seed: int, n: int = 5, m: int = 2, *, bus: bool = False, memory: float | None = None,
                 unsupported: float = 0.2, params: bool = True) -> PlacementProblem:
    """A small synthetic problem with integer durations, for property tests and brute force.

    Devices d0..d{m-1} (d0 is home and runs everything); each other device cannot run a task with
    probability `unsupported`. Links: one shared bus, or one duplex channel pair per device pair.
    `memory` scales capacities relative to the total tensor bytes (None: unlimited).
    """
    rng = random.Random(seed)
    devices = tuple(f"d{p}" for p in range(m))
    duration = []
    for i in range(n):
        row = [rng.randint(1, 12)]
        for _ in range(1, m):
            row.append(None if rng.random() < unsupported else rng.randint(1, 12))
        duration.append(tuple(row))
    tensors: list[Tensor] = []
    reads: list[list[int]] = [[] for _ in range(n)]
    for i in range(n):
        if i == 0 or rng.random() < 0.3:
            tensors.append(Tensor(f"in{i}", rng.randint(0, 40), -1, (i,)))
        if params and rng.random() < 0.4:
            tensors.append(Tensor(f"w{i}", rng.randint(1, 40), -1, (i,), movable=True))
    made = []
    for i in range(n):
        made.append(len(tensors))
        tensors.append(Tensor(f"t{i}", rng.randint(0, 60), i, ()))
    for j in range(1, n):
        for i in range(j):
            if rng.random() < 0.35:
                reads[j].append(made[i])
    consumers: dict[int, list[int]] = {}
    for j, ks in enumerate(reads):
        for k in ks:
            consumers.setdefault(k, []).append(j)
    final = []
    for k, t in enumerate(tensors):
        users = tuple(sorted(set(t.consumers) | set(consumers.get(k, ()))))
        final.append(Tensor(t.name, t.size, t.producer, users, t.producer >= 0 and not users, t.movable))
    if bus:
        channels = ("bus",)
        route = tuple(tuple(-1 if p == q else 0 for q in range(m)) for p in range(m))
    else:
        names, index = [], {}
        for p in range(m):
            for q in range(m):
                if p != q:
                    index[(p, q)] = len(names)
                    names.append(f"{devices[p]}>{devices[q]}")
        channels = tuple(names)
        route = tuple(tuple(index.get((p, q), -1) for q in range(m)) for p in range(m))
    latency = tuple(tuple(0 if p == q else rng.randint(0, 3) for q in range(m)) for p in range(m))
    bandwidth = tuple(tuple(1.0 if p == q else float(rng.choice((5, 10, 20))) for q in range(m)) for p in range(m))
    total = sum(t.size for t in final)
    cap = 10 ** 12 if memory is None else max(1, int(total * memory))
    return PlacementProblem(f"tiny-{seed}", tuple(f"k{i}" for i in range(n)), devices, tuple(duration),
                            tuple(final), tuple(cap for _ in range(m)), 0, channels, route, latency, bandwidth)
