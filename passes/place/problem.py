"""The placement problem as plain data, independent of the IR, and its solutions.

`PlacementProblem` has tasks with an integer duration per device (None where the device cannot
run the task), tensors (bytes, producing task or -1 for a graph input/parameter that starts on
the home device, consuming tasks), memory capacity per device, and link channels: a transfer of
tensor t from device p to q holds channel `route[p][q]` for `xfer(t, p, q)` ticks.

The rules every solver follows and the checker verifies:
- each task runs once, on a device that can run it, without overlapping another task there;
- a tensor is on its producer's device from the producer's start; a consumer on another device
  needs one transfer of the tensor to that device (shared by all consumers there), which starts
  after the producer finishes and ends before the consumer starts; a channel carries one
  transfer at a time;
- graph inputs start on the home device; each parameter is preloaded onto one device (the
  schedule's `param_device`), ready at time 0; transfers of either start from there;
- memory: a tensor occupies its producer's device from the producer's start until its last
  local consumer, last outgoing transfer, or (graph outputs) the makespan; a copy occupies the
  destination from the transfer's start until its last consumer there; graph inputs occupy the
  home device and parameters their device throughout. Intervals are half-open [start, end). At
  every instant each device's occupied bytes stay within its capacity.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

from tilegraph.ir.placement import MemoryInfeasibleError, UnsupportedKernelError
from tilegraph.ir.system import System, format_bytes
from tilegraph.ir.types import DType


@dataclass(frozen=True)
class Tensor:
    """`size` bytes made by task `producer` and read by `consumers`.

    `producer == -1` marks a graph input or parameter: an input (`movable` False) starts on the
    home device; a parameter (`movable` True) is loaded before the run onto one device of the
    solver's choice (home unless moved) and stays there throughout.
    """

    name: str
    size: int
    producer: int
    consumers: tuple[int, ...]
    output: bool = False
    movable: bool = False


@dataclass(frozen=True)
class TaskSpec:
    """A device-independent kernel description: op kinds, flops, off-chip bytes, dtype."""

    name: str
    kinds: frozenset[str]
    flops: float
    nbytes: float
    dtype: DType = DType.f32


@dataclass(frozen=True, eq=False)
class PlacementProblem:
    """Tasks (in a topological order), devices, tensors, capacities and link channels, in ticks."""

    name: str
    tasks: tuple[str, ...]
    devices: tuple[str, ...]
    duration: tuple[tuple[int | None, ...], ...]
    tensors: tuple[Tensor, ...]
    capacity: tuple[int, ...]
    home: int
    channels: tuple[str, ...]
    route: tuple[tuple[int, ...], ...]
    latency: tuple[tuple[int, ...], ...]
    bandwidth: tuple[tuple[float, ...], ...]
    tick: float = 1e-6
    kinds: tuple[frozenset[str], ...] = field(default=())

    def __post_init__(self) -> None:
        n, m = len(self.tasks), len(self.devices)
        if len(self.duration) != n or any(len(row) != m for row in self.duration):
            raise ValueError("duration must be a tasks x devices table")
        for i, row in enumerate(self.duration):
            if all(d is None for d in row):
                raise UnsupportedKernelError(f"no device of the system can run kernel {self.tasks[i]}", self.tasks[i])
            if any(d is not None and (d < 1 or int(d) != d) for d in row):
                raise ValueError(f"task {self.tasks[i]}: durations must be positive integers")
        for t in self.tensors:
            if not -1 <= t.producer < n or any(not t.producer < c < n for c in t.consumers):
                raise ValueError(f"tensor {t.name}: producer must come before its consumers (a topological order)")
            if t.size < 0:
                raise ValueError(f"tensor {t.name}: negative size")
        if len(self.capacity) != m or not 0 <= self.home < m:
            raise ValueError("capacity needs one entry per device and home must be a device index")
        for p in range(m):
            for q in range(m):
                if p != q and not 0 <= self.route[p][q] < len(self.channels):
                    raise ValueError(f"no channel from {self.devices[p]} to {self.devices[q]}")

    # ----- derived facts ----------------------------------------------------------------------
    @property
    def n(self) -> int:
        return len(self.tasks)

    @property
    def m(self) -> int:
        return len(self.devices)

    @cached_property
    def capable(self) -> tuple[tuple[int, ...], ...]:
        return tuple(tuple(p for p, d in enumerate(row) if d is not None) for row in self.duration)

    @cached_property
    def fastest(self) -> tuple[int, ...]:
        return tuple(min(d for d in row if d is not None) for row in self.duration)

    @cached_property
    def inputs(self) -> tuple[tuple[int, ...], ...]:
        """Tensor indices each task reads."""
        out: list[list[int]] = [[] for _ in self.tasks]
        for k, t in enumerate(self.tensors):
            for c in t.consumers:
                out[c].append(k)
        return tuple(tuple(dict.fromkeys(x)) for x in out)

    @cached_property
    def outputs(self) -> tuple[tuple[int, ...], ...]:
        """Tensor indices each task makes."""
        out: list[list[int]] = [[] for _ in self.tasks]
        for k, t in enumerate(self.tensors):
            if t.producer >= 0:
                out[t.producer].append(k)
        return tuple(map(tuple, out))

    @cached_property
    def preds(self) -> tuple[tuple[int, ...], ...]:
        out: list[dict[int, None]] = [{} for _ in self.tasks]
        for t in self.tensors:
            if t.producer >= 0:
                for c in t.consumers:
                    out[c][t.producer] = None
        return tuple(tuple(sorted(d)) for d in out)

    @cached_property
    def succs(self) -> tuple[tuple[int, ...], ...]:
        out: list[dict[int, None]] = [{} for _ in self.tasks]
        for t in self.tensors:
            if t.producer >= 0:
                out[t.producer].update(dict.fromkeys(t.consumers))
        return tuple(tuple(sorted(d)) for d in out)

    @cached_property
    def baseline(self) -> tuple[int, ...]:
        """Bytes resident throughout on each device whatever the placement: graph inputs on home."""
        base = [0] * self.m
        base[self.home] = sum(t.size for t in self.tensors if t.producer < 0 and not t.movable and t.consumers)
        return tuple(base)

    @cached_property
    def memory_limited(self) -> tuple[bool, ...]:
        """Per device: whether memory can bind there (its room beside the baseline is below the bytes of
        all tensors together); elsewhere no memory check is needed."""
        total = sum(t.size for t in self.tensors)
        return tuple(self.capacity[p] - self.baseline[p] < total for p in range(self.m))

    @cached_property
    def params(self) -> tuple[int, ...]:
        """Indices of the parameters (movable sources) that some task reads."""
        return tuple(k for k, t in enumerate(self.tensors) if t.producer < 0 and t.movable and t.consumers)

    @cached_property
    def xfer(self) -> tuple[tuple[int, ...], ...]:
        """xfer[t][p * m + q]: ticks to move tensor t from device p to q (0 when p == q)."""
        m = self.m
        rows = []
        for t in self.tensors:
            row = [0] * (m * m)
            for p in range(m):
                for q in range(m):
                    if p != q:
                        row[p * m + q] = max(1, self.latency[p][q] + math.ceil(t.size / self.bandwidth[p][q] - 1e-9))
            rows.append(tuple(row))
        return tuple(rows)

    def transfer_time(self, t: int, p: int, q: int) -> int:
        return self.xfer[t][p * self.m + q]

    def working_set(self, i: int, p: int) -> int:
        """Bytes task i needs resident on device p while it runs, beyond p's baseline."""
        total = sum(self.tensors[k].size for k in self.outputs[i])
        for k in self.inputs[i]:
            t = self.tensors[k]
            if not (p == self.home and t.producer < 0 and not t.movable):
                total += t.size
        return total

    def seconds(self, ticks: float) -> float:
        return ticks * self.tick

    def with_capacity(self, capacity: Sequence[int]) -> PlacementProblem:
        from dataclasses import replace

        return replace(self, capacity=tuple(int(c) for c in capacity))

    def check_memory_feasible(self) -> None:
        """Raise MemoryInfeasibleError for capacities no placement can respect (necessary checks)."""
        home = self.home
        if self.baseline[home] > self.capacity[home]:
            raise MemoryInfeasibleError(
                f"device {self.devices[home]}: graph inputs and parameters need {format_bytes(self.baseline[home])} "
                f"but its memory is {format_bytes(self.capacity[home])}", self.devices[home])
        for i in range(self.n):
            fits = [p for p in self.capable[i]
                    if self.working_set(i, p) + self.baseline[p] <= self.capacity[p]]
            if not fits:
                worst = max(self.capable[i], key=lambda p: self.capacity[p] - self.baseline[p])
                need = self.working_set(i, worst)
                raise MemoryInfeasibleError(
                    f"kernel {self.tasks[i]} needs {format_bytes(need)} of live memory (inputs and outputs), but "
                    + ", ".join(f"device {self.devices[p]} has {format_bytes(self.capacity[p] - self.baseline[p])} free"
                                for p in self.capable[i]), self.devices[worst])


@dataclass(frozen=True)
class Schedule:
    """A solution: device and start per task, transfers as (tensor, src, dst, start), the device of
    each parameter as (tensor, device), and the method that made it."""

    device: tuple[int, ...]
    start: tuple[int, ...]
    finish: tuple[int, ...]
    transfers: tuple[tuple[int, int, int, int], ...]
    makespan: int
    method: str = ""
    param_device: tuple[tuple[int, int], ...] = ()

    def renamed(self, method: str) -> Schedule:
        from dataclasses import replace

        return replace(self, method=method)

    def origins(self, problem: PlacementProblem) -> list[int]:
        """The device each tensor starts from: its producer's, its parameter device, or home."""
        params = dict(self.param_device)
        return [self.device[t.producer] if t.producer >= 0 else params.get(k, problem.home) if t.movable
                else problem.home for k, t in enumerate(problem.tensors)]


def make_schedule(problem: PlacementProblem, device: Sequence[int], start: Sequence[int],
                  transfers: Sequence[tuple[int, int, int, int]], method: str,
                  param_device: dict[int, int] | Sequence[tuple[int, int]] = ()) -> Schedule:
    """A Schedule with finish times and makespan filled in from the problem's durations."""
    finish = tuple(int(s) + problem.duration[i][p] for i, (s, p) in enumerate(zip(start, device)))
    params = dict(param_device)
    return Schedule(tuple(map(int, device)), tuple(map(int, start)), finish,
                    tuple(sorted((int(a), int(b), int(c), int(d)) for a, b, c, d in transfers)),
                    max(finish, default=0), method,
                    tuple(sorted((int(k), int(params.get(k, problem.home))) for k in problem.params)))


# ----- building problems -------------------------------------------------------------------------

def choose_tick(serial_seconds: float) -> float:
    """A power of ten (>= 1 ns) making the fastest serial time about a million ticks or fewer."""
    tick = 1e-9
    while serial_seconds / tick > 1e6:
        tick *= 10
    return tick


def build_problem(name: str, specs: Sequence[TaskSpec], tensors: Sequence[Tensor], system: System,
                  tick: float | None = None) -> PlacementProblem:
    """Roofline durations of each task on each device of `system`, channels and routes from its links."""
    devices = system.devices
    seconds = [[d.kernel_time(s.kinds, s.flops, s.nbytes, s.dtype) if d.supports(s.kinds) else None
                for d in devices] for s in specs]
    for s, row in zip(specs, seconds):
        if all(x is None for x in row):
            kinds = ", ".join(sorted(s.kinds)) or "none"
            raise UnsupportedKernelError(f"no device of system {system.name} can run kernel {s.name} "
                                         f"(kinds: {kinds})", s.name)
    if tick is None:
        tick = choose_tick(sum(min(x for x in row if x is not None) for row in seconds))
    duration = tuple(tuple(None if x is None else max(1, math.ceil(x / tick - 1e-9)) for x in row) for row in seconds)
    channels = system.channels()
    m = len(devices)
    route = [[-1] * m for _ in range(m)]
    latency = [[0] * m for _ in range(m)]
    bandwidth = [[1.0] * m for _ in range(m)]
    for p, a in enumerate(devices):
        for q, b in enumerate(devices):
            if p != q:
                link = system.link_between(a.name, b.name)
                route[p][q] = channels.index(link.channel(a.name, b.name))
                latency[p][q] = math.ceil(link.latency / tick - 1e-9)
                bandwidth[p][q] = link.bandwidth * tick
    names = [d.name for d in devices]
    return PlacementProblem(
        name, tuple(s.name for s in specs), tuple(names), duration, tuple(tensors),
        tuple(d.memory for d in devices), names.index(system.home), channels,
        tuple(map(tuple, route)), tuple(map(tuple, latency)), tuple(map(tuple, bandwidth)), tick,
        tuple(frozenset(s.kinds) for s in specs))


def kernel_kinds(kernel) -> frozenset[str]:
    """The op categories of a kernel's nodes, constants aside (they can be made anywhere)."""
    return frozenset(node.opdef.category for node in kernel.nodes) - {"source"}


def program_tasks(program) -> tuple[list[TaskSpec], list[Tensor]]:
    """TaskSpecs and Tensors of a Program's kernels: the IR side of the translation."""
    kernels = program.kernels
    if len({k.name for k in kernels}) != len(kernels):
        raise ValueError("kernel names must be unique")
    specs = []
    for k in kernels:
        outs = k.outputs or tuple(v for n in k.nodes for v in n.results)
        dtype = max(outs, key=lambda v: v.type.nbytes).dtype if outs else DType.f32
        specs.append(TaskSpec(k.name, kernel_kinds(k), float(k.flops), float(k.io_bytes), dtype))
    graph_outputs = set(program.graph.outputs)
    readers: dict = {}
    for i, k in enumerate(kernels):
        for v in k.inputs:
            readers.setdefault(v, []).append(i)
    tensors = []
    params = set(program.graph.params)
    for v, users in readers.items():
        if v.producer is None:
            tensors.append(Tensor(v.name, v.type.nbytes, -1, tuple(sorted(set(users))), movable=v in params))
    for i, k in enumerate(kernels):
        for v in k.outputs:
            users = [u for u in readers.get(v, []) if u != i]
            if any(u < i for u in users):
                raise ValueError(f"kernels are not in a topological order: {kernels[min(users)].name} reads "
                                 f"%{v.name} before {k.name} makes it")
            tensors.append(Tensor(v.name, v.type.nbytes, i, tuple(sorted(set(users))), v in graph_outputs))
    return specs, tensors


def problem_from_program(program, system: System, tick: float | None = None) -> PlacementProblem:
    """Translate a Program (its kernels in order) for placement on `system`."""
    specs, tensors = program_tasks(program)
    return build_problem(program.graph.name, specs, tensors, system, tick)
