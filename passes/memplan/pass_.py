"""The `memplan` pass: plan the scratchpad for a Program and attach the MemoryPlan.

    canonicalize,fuse,tile{target=accel-small},memplan{capacity=256KiB,time_limit=10}

Without `capacity`, the scratchpad is the on-chip memory of the target the tile pass used.
`stream=true` leaves tensors too big to keep whole out of the plan (streamed by tiles, recorded in
the plan); `grow=true` plans for the largest remaining working set when it exceeds the capacity
(the plan records the capacity asked for) instead of failing.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tilegraph.ir.memory_plan import MemoryPlan
from tilegraph.ir.program import Program
from tilegraph.ir.stream_traffic import read_at_least
from tilegraph.ir.units import parse_bytes
from tilegraph.passes.manager import register_property_check
from tilegraph.passes.pipeline import parse_flag
from tilegraph.passes.registry import PassContext, register_pass

from .api import SOLVERS, Options, as_problem, solve_problem, with_plan
from .checker import find_violations
from .cpsat import SolverConfig
from .problem import MemplanError, without_tensors
from .streaming import check_tile_capacity, choose_streamed, planned_streams, stream_tiling_target


@dataclass(frozen=True)
class MemplanOptions:
    """Options of the memplan pass (strings from a pipeline are converted)."""

    capacity: str = ""  # '256KiB', '1.5MiB' or bytes; empty: the tiling target's on-chip memory
    order: str = "free"  # free: the solver picks the kernel order; fixed: the Program's order
    weights: bool = False  # weights and parameters compete for the scratchpad too
    time_limit: float = 10.0
    solver: str = "auto"
    deterministic: bool = True  # same input and options, same plan (CP-SAT on deterministic time)
    stream: bool = False  # stream tensors that cannot be resident whole instead of failing
    grow: bool = False  # plan for a larger capacity when a kernel's working set needs it, instead of failing
    align: int = 1  # round tensor sizes (so offsets) up to multiples of this many bytes; 64 for the C++ backend

    def __post_init__(self) -> None:
        object.__setattr__(self, "capacity", str(self.capacity))
        if self.capacity:
            parse_bytes(self.capacity)  # a bad size fails here, naming the text
        object.__setattr__(self, "time_limit", float(self.time_limit))
        object.__setattr__(self, "align", int(self.align))
        if self.align < 1:
            raise ValueError(f"memplan: align must be a positive number of bytes, got {self.align}")
        object.__setattr__(self, "weights", parse_flag(self.weights))
        for name in ("deterministic", "stream", "grow"):
            object.__setattr__(self, name, parse_flag(getattr(self, name)))
        if self.order not in ("free", "fixed"):
            raise ValueError(f"memplan: order must be free or fixed, got {self.order!r}")
        if self.solver not in SOLVERS:
            raise ValueError(f"memplan: unknown solver {self.solver!r} (solvers: {', '.join(SOLVERS)})")
        if self.time_limit < 0:
            raise ValueError("memplan: time_limit must not be negative")


def scratchpad_capacity(program: Program, options: MemplanOptions) -> int:
    """The capacity asked for, else the on-chip memory of the target the tile pass used."""
    if options.capacity:
        return parse_bytes(options.capacity)
    if program.target is not None:
        return program.target.onchip_bytes
    raise MemplanError("memplan needs a capacity (memplan{capacity=256KiB}) or a tile pass before it")


@register_pass("memplan", MemplanOptions, requires=(), ensures={"memplanned"},
               preserves={"canonical", "decomposed", "fused", "laid_out", "tiled", "placed"})
def memplan_pass(program: Program, options: MemplanOptions, ctx: PassContext) -> Program:
    """Order kernels, place tensors in the scratchpad and decide spills/reloads (heuristic, then CP-SAT)."""
    plan = plan_program(program, options)
    ctx.stat("memplan", "capacity", plan.capacity)
    ctx.stat("memplan", "non-compulsory bytes", plan.traffic)
    ctx.stat("memplan", "lower bound bytes", plan.lower_bound)
    ctx.stat("memplan", "gap", plan.gap)
    ctx.stat("memplan", "solver", plan.solver)
    if plan.streamed:
        ctx.stat("memplan", "streamed tensors", len(plan.streamed))
        ctx.stat("memplan", "streamed tile re-read bytes", plan.streamed_traffic)
    return dataclasses.replace(with_plan(program, plan), properties=program.properties | {"memplanned"})


def plan_program(program: Program, options: MemplanOptions) -> MemoryPlan:
    """The memory plan the pass attaches: streamed tensors left out, capacity grown, when the options say so."""
    problem = as_problem(program, weights=options.weights, align=options.align)
    wanted = scratchpad_capacity(program, options)
    target = stream_tiling_target(program, wanted)
    if options.stream and not options.grow:
        check_tile_capacity(program, problem, wanted, target)
    streamed = choose_streamed(problem, wanted) if options.stream else frozenset()
    names = tuple(sorted(problem.tensor_names[i] for i in streamed))
    problem = without_tensors(problem, streamed)
    capacity = max(wanted, problem.max_working_set()[0], 1) if options.grow else wanted
    plan = solve_problem(problem, capacity, order=options.order, time_limit=options.time_limit,
                         solver=options.solver, weights=options.weights,
                         options=Options(config=SolverConfig(deterministic=options.deterministic)))
    plan = dataclasses.replace(plan, streamed=names, requested_capacity=wanted if capacity > wanted else None,
                               align=options.align)
    return planned_streams(program, plan, target) if names else plan


def _plan_problems(program: Program):
    """Property "memplanned": a plan in the kernels' order that the independent checker accepts."""
    plan = program.memory_plan
    if plan is None:
        yield "no memory plan is recorded"
        return
    if tuple(plan.order) != tuple(k.name for k in program.kernels):
        yield "the kernels are not in the memory plan's order"
        return
    yield from plan_violations(program, plan)


def plan_violations(program: Program, plan: MemoryPlan) -> list[str]:
    """The independent checker on `plan` for `program`, with the bytes each kernel surely reads of
    each operand (from its loop domain), against which streamed loads are checked."""
    reads = {(k.name, tensor): size for k in program.kernels if set(plan.streamed) & {v.name for v in k.inputs}
             for tensor, size in read_at_least(k).items()}
    return find_violations(as_problem(program, weights=plan.weights, align=plan.align), plan, reads=reads)


register_property_check("memplanned", _plan_problems)
