"""The `memplan` pass: plan the scratchpad for a Program and attach the MemoryPlan.

    canonicalize,fuse,tile{target=accel-small},memplan{capacity=256KiB,time_limit=10}

Without `capacity`, the scratchpad is the on-chip memory of the target the tile pass used.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tilegraph.ir.program import Program
from tilegraph.ir.units import parse_bytes
from tilegraph.passes.registry import PassContext, register_pass

from .api import SOLVERS, Options, memplan
from .cpsat import SolverConfig
from .problem import MemplanError


def _flag(value: bool | str) -> bool:
    if isinstance(value, bool):
        return value
    if value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {value!r}")


@dataclass(frozen=True)
class MemplanOptions:
    """Options of the memplan pass (strings from a pipeline are converted)."""

    capacity: str = ""  # '256KiB', '1.5MiB' or bytes; empty: the tiling target's on-chip memory
    order: str = "free"  # free: the solver picks the kernel order; fixed: the Program's order
    weights: bool = False  # weights and parameters compete for the scratchpad too
    time_limit: float = 10.0
    solver: str = "auto"
    deterministic: bool = True  # same input and options, same plan (CP-SAT on deterministic time)

    def __post_init__(self) -> None:
        object.__setattr__(self, "capacity", str(self.capacity))
        if self.capacity:
            parse_bytes(self.capacity)  # a bad size fails here, naming the text
        object.__setattr__(self, "time_limit", float(self.time_limit))
        object.__setattr__(self, "weights", _flag(self.weights))
        object.__setattr__(self, "deterministic", _flag(self.deterministic))
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
    if "target" in program.notes:
        from tilegraph.ir.target import load_target

        return load_target(program.notes["target"]).onchip_bytes
    raise MemplanError("memplan needs a capacity (memplan{capacity=256KiB}) or a tile pass before it")


@register_pass("memplan", MemplanOptions, requires=(), ensures={"memplanned"})
def memplan_pass(program: Program, options: MemplanOptions, ctx: PassContext) -> Program:
    """Order kernels, place tensors in the scratchpad and decide spills/reloads (heuristic, then CP-SAT)."""
    planned = memplan(program, capacity=scratchpad_capacity(program, options), order=options.order,
                      weights=options.weights, time_limit=options.time_limit, solver=options.solver,
                      options=Options(config=SolverConfig(deterministic=options.deterministic)))
    plan = planned.memory_plan
    ctx.stat("memplan", "capacity", plan.capacity)
    ctx.stat("memplan", "non-compulsory bytes", plan.traffic)
    ctx.stat("memplan", "lower bound bytes", plan.lower_bound)
    ctx.stat("memplan", "gap", plan.gap)
    ctx.stat("memplan", "solver", plan.solver)
    return dataclasses.replace(planned, properties=program.properties | {"memplanned"})
