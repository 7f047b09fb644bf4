"""MemoryProblem: the plain description the memplan solvers, checker and generators share.

Tensors are numbered 0..n-1 and kernels 0..m-1 (kernel ids are positions in the Program's order,
which is a valid topological order). Translating a Program into this form is the only place the
memplan package touches the graph IR.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from functools import cached_property

from tilegraph.ir.errors import TilegraphError


class MemplanError(TilegraphError):
    """Base of memplan errors a user can cause (bad capacity, malformed problem)."""


class InfeasibleCapacityError(MemplanError):
    """The capacity is below some kernel's working set: no plan exists."""


class TensorKind(enum.Enum):
    INPUT = "input"  # a graph input: in DRAM from the start, first load compulsory
    WEIGHT = "weight"  # a parameter: as INPUT
    INTERMEDIATE = "intermediate"  # produced by a kernel


@dataclass(frozen=True)
class MemoryProblem:
    """Tensor sizes and kinds, and which tensors each kernel reads and writes."""

    tensor_names: tuple[str, ...]
    sizes: tuple[int, ...]
    kinds: tuple[TensorKind, ...]
    is_output: tuple[bool, ...]
    kernel_names: tuple[str, ...]
    kernel_inputs: tuple[tuple[int, ...], ...]
    kernel_outputs: tuple[tuple[int, ...], ...]
    after: tuple[tuple[int, int], ...] = ()  # (p, k): kernel p runs before k, for tensors left out (streamed)

    def __post_init__(self) -> None:
        n, m = len(self.tensor_names), len(self.kernel_names)
        if not (len(self.sizes) == len(self.kinds) == len(self.is_output) == n):
            raise MemplanError("tensor fields have different lengths")
        if not (len(self.kernel_inputs) == len(self.kernel_outputs) == m):
            raise MemplanError("kernel fields have different lengths")
        if any(s <= 0 for s in self.sizes):
            raise MemplanError("tensor sizes must be positive")
        producer = [-1] * n
        for k, outs in enumerate(self.kernel_outputs):
            for i in outs:
                if producer[i] != -1:
                    raise MemplanError(f"tensor {self.tensor_names[i]} produced twice")
                if self.kinds[i] is not TensorKind.INTERMEDIATE:
                    raise MemplanError(f"{self.kinds[i].value} {self.tensor_names[i]} cannot be produced")
                producer[i] = k
        for k, ins in enumerate(self.kernel_inputs):
            for i in ins:
                if self.kinds[i] is TensorKind.INTERMEDIATE and not 0 <= producer[i] < k:
                    raise MemplanError(f"kernel {self.kernel_names[k]} reads {self.tensor_names[i]} "
                                       "before it is produced (kernels must be in topological order)")
                if i in self.kernel_outputs[k]:
                    raise MemplanError(f"kernel {self.kernel_names[k]} reads its own output")
        for i, kind in enumerate(self.kinds):
            if kind is TensorKind.INTERMEDIATE and producer[i] == -1:
                raise MemplanError(f"intermediate {self.tensor_names[i]} has no producer")

    # ----- derived facts ------------------------------------------------------------------
    @property
    def num_tensors(self) -> int:
        return len(self.tensor_names)

    @property
    def num_kernels(self) -> int:
        return len(self.kernel_names)

    @cached_property
    def producer(self) -> tuple[int, ...]:
        """Producing kernel of each tensor, -1 for inputs and weights."""
        prod = [-1] * self.num_tensors
        for k, outs in enumerate(self.kernel_outputs):
            for i in outs:
                prod[i] = k
        return tuple(prod)

    @cached_property
    def consumers(self) -> tuple[tuple[int, ...], ...]:
        cons: list[list[int]] = [[] for _ in range(self.num_tensors)]
        for k, ins in enumerate(self.kernel_inputs):
            for i in dict.fromkeys(ins):
                cons[i].append(k)
        return tuple(tuple(c) for c in cons)

    @cached_property
    def users(self) -> tuple[tuple[int, ...], ...]:
        """Kernels that need each tensor resident: its producer (if any) and its consumers."""
        return tuple(((p,) if p >= 0 else ()) + c for p, c in zip(self.producer, self.consumers))

    @cached_property
    def io(self) -> tuple[tuple[int, ...], ...]:
        """Distinct tensors each kernel needs resident: inputs then outputs."""
        return tuple(tuple(dict.fromkeys(ins + outs)) for ins, outs in zip(self.kernel_inputs, self.kernel_outputs))

    @cached_property
    def working_sets(self) -> tuple[int, ...]:
        return tuple(sum(self.sizes[i] for i in io) for io in self.io)

    @cached_property
    def preds(self) -> tuple[tuple[int, ...], ...]:
        """Kernels each kernel must follow: the producers of what it reads, and the pairs of `after`."""
        extra: list[set[int]] = [set() for _ in range(self.num_kernels)]
        for p, k in self.after:
            extra[k].add(p)
        out = []
        for ins, more in zip(self.kernel_inputs, extra):
            out.append(tuple(sorted({self.producer[i] for i in ins if self.producer[i] >= 0} | more)))
        return tuple(out)

    @cached_property
    def succs(self) -> tuple[tuple[int, ...], ...]:
        out: list[list[int]] = [[] for _ in range(self.num_kernels)]
        for k, ps in enumerate(self.preds):
            for p in ps:
                out[p].append(k)
        return tuple(tuple(s) for s in out)

    def is_clean(self, i: int) -> bool:
        """True when a DRAM copy exists without a spill: inputs, weights and graph outputs."""
        return self.kinds[i] is not TensorKind.INTERMEDIATE or self.is_output[i]

    def max_working_set(self) -> tuple[int, int]:
        """(bytes, kernel id) of the largest working set."""
        if not self.num_kernels:
            return 0, -1
        k = max(range(self.num_kernels), key=lambda k: (self.working_sets[k], -k))
        return self.working_sets[k], k

    def use_steps(self, position: tuple[int, ...] | list[int], i: int) -> list[int]:
        """Sorted distinct steps at which tensor `i` must be resident, for kernel positions `position`."""
        return sorted({position[k] for k in self.users[i]})

    def check_capacity(self, capacity: int) -> None:
        """Raise InfeasibleCapacityError naming the kernel whose working set exceeds `capacity`."""
        ws, k = self.max_working_set()
        if capacity < ws:
            parts = ", ".join(f"%{self.tensor_names[i]} {self.sizes[i]} B" for i in self.io[k])
            raise InfeasibleCapacityError(
                f"capacity {capacity} B is below the working set of kernel {self.kernel_names[k]}: "
                f"{ws} B ({parts}); the smallest feasible capacity is {ws} B")

    def is_topological(self, order: tuple[int, ...] | list[int]) -> bool:
        if sorted(order) != list(range(self.num_kernels)):
            return False
        pos = positions(order)
        return all(pos[p] < pos[k] for k in range(self.num_kernels) for p in self.preds[k])


def without_tensors(problem: MemoryProblem, dropped: set[int]) -> MemoryProblem:
    """The same kernels without the tensors in `dropped`: a relaxation, since every plan of the
    problem, with those tensors' residencies and events removed, is a plan of this one with no more
    traffic. Kernel ids (so orders) are unchanged, and so is which orders are valid (`after`)."""
    kept = [i for i in range(problem.num_tensors) if i not in dropped]
    index = {i: n for n, i in enumerate(kept)}

    def pick(values):
        return tuple(values[i] for i in kept)

    def remap(lists):
        return tuple(tuple(index[i] for i in ts if i in index) for ts in lists)

    # the dropped tensors still order their producer before their readers
    after = set(problem.after) | {(problem.producer[i], k) for i in dropped if problem.producer[i] >= 0
                                  for k in problem.consumers[i]}
    return MemoryProblem(pick(problem.tensor_names), pick(problem.sizes), pick(problem.kinds),
                         pick(problem.is_output), problem.kernel_names, remap(problem.kernel_inputs),
                         remap(problem.kernel_outputs), tuple(sorted(after)))


def positions(order) -> list[int]:
    """Inverse permutation: step of each kernel."""
    pos = [0] * len(order)
    for t, k in enumerate(order):
        pos[k] = t
    return pos


def peak_live(problem: MemoryProblem, order) -> int:
    """Peak live bytes of `order`: every tensor resident from its first to its last use, nothing else."""
    if not order:
        return 0
    pos = positions(order)
    delta = [0] * (len(order) + 1)
    for i in range(problem.num_tensors):
        steps = [pos[k] for k in problem.users[i]]
        if steps:
            delta[min(steps)] += problem.sizes[i]
            delta[max(steps) + 1] -= problem.sizes[i]
    best = cur = 0
    for d in delta[:-1]:
        cur += d
        best = max(best, cur)
    return best


def from_program(program, *, weights: bool = False, align: int = 1) -> MemoryProblem:
    """Translate a Program: its kernels, in order, and the tensors crossing kernel boundaries.

    Parameters are tensors only with `weights=True` (else they are streamed and never occupy the
    scratchpad). Tensors of zero bytes and tensors no kernel touches are left out. With `align`,
    sizes are rounded up to its multiples, so every offset a solver picks is aligned too.
    """
    from tilegraph.ir.graph import ValueKind

    graph_outputs = set(program.graph.outputs)
    index: dict[object, int] = {}
    names, sizes, kinds, outs = [], [], [], []

    def tensor(value) -> int | None:
        if value in index:
            return index[value]
        if value.kind is ValueKind.PARAM and not weights:
            return None
        if value.type.nbytes == 0:
            return None
        kind = {ValueKind.INPUT: TensorKind.INPUT, ValueKind.PARAM: TensorKind.WEIGHT,
                ValueKind.RESULT: TensorKind.INTERMEDIATE}[value.kind]
        index[value] = len(names)
        names.append(value.name)
        sizes.append(-(-value.type.nbytes // align) * align)
        kinds.append(kind)
        outs.append(value in graph_outputs)
        return index[value]

    k_ins, k_outs = [], []
    for kernel in program.kernels:
        ins = tuple(i for i in (tensor(v) for v in kernel.inputs) if i is not None)
        k_outs_list = tuple(i for i in (tensor(v) for v in kernel.outputs) if i is not None)
        k_ins.append(ins)
        k_outs.append(k_outs_list)
    # Constants built inside another kernel are results too; values read but never produced by a
    # kernel of this program (e.g. a constant node with no kernel) would break the model.
    return MemoryProblem(tuple(names), tuple(sizes), tuple(kinds), tuple(outs),
                         tuple(k.name for k in program.kernels), tuple(k_ins), tuple(k_outs))
