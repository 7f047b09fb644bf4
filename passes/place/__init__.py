"""The place pass: schedule a Program's kernels onto the devices of a System.

    placement = place_program(program, "cpu-gpu-npu", time_limit=30)
    print(format_report(placement))

The Program is translated into a plain `PlacementProblem` (problem.py); solvers work on that:
heuristics (heuristics.py on the engine in listsched.py), the LP bound and rounding (lp.py),
local search (local.py), the exact CP-SAT model (cpsat.py), all driven by solve.py; checker.py
verifies every schedule independently; report.py prints and draws the result.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from tilegraph.ir.placement import Placement, PlacementError
from tilegraph.ir.program import Program
from tilegraph.ir.system import System, load_system
from tilegraph.passes.manager import register_property_check
from tilegraph.passes.pipeline import parse_flag
from tilegraph.passes.registry import PassContext, register_pass

from .checker import check_placement
from .convert import to_placement
from .problem import PlacementProblem, problem_from_program
from .report import draw_gantt, format_report
from .solve import METHODS, Outcome, SolveOptions, solve

ProgressFn = Callable[[str, float, float, float], None]


@dataclass(frozen=True)
class PlaceOptions:
    """Options of the place pass (strings from a pipeline are converted)."""

    system: str = ""  # preset name or TOML path; empty: the context's target System, else cpu-gpu-pcie
    time_limit: float = 30.0
    method: str = "auto"
    seed: int = 0
    deterministic: bool = True
    workers: int = 0  # CP-SAT workers; 0: one per core, at most 8

    def __post_init__(self) -> None:
        object.__setattr__(self, "time_limit", float(self.time_limit))
        object.__setattr__(self, "seed", int(self.seed))
        object.__setattr__(self, "workers", int(self.workers))
        object.__setattr__(self, "deterministic", parse_flag(self.deterministic))
        if self.method not in METHODS:
            raise ValueError(f"place: unknown method {self.method!r} (methods: {', '.join(METHODS)})")
        if self.time_limit <= 0:
            raise ValueError("place: time_limit must be positive")


def _system(system: System | str) -> System:
    return system if isinstance(system, System) else load_system(system)


def place_program(program: Program, system: System | str, time_limit: float = 30.0, method: str = "auto",
                  progress: ProgressFn | None = None, *, seed: int = 0, deterministic: bool = True,
                  workers: int = 0) -> Placement:
    """Place every kernel of `program` on `system` (a System, a preset name or a TOML path).

    `progress(stage, makespan_s, bound_s, elapsed_s)` is called as better schedules appear.
    Raises UnsupportedKernelError or MemoryInfeasibleError (both PlacementError, a TilegraphError)
    when no placement exists, naming the kernel or the device.
    """
    sys_ = _system(system)
    if not program.kernels:
        raise PlacementError("the program has no kernels to place")
    pb = problem_from_program(program, sys_)
    def tick_progress(stage: str, makespan: int, bound: int, elapsed: float) -> None:
        progress(stage, makespan * pb.tick, bound * pb.tick, elapsed)
    options = SolveOptions(time_limit=time_limit, method=method, seed=seed, deterministic=deterministic,
                           workers=workers or None)
    outcome = solve(pb, options, tick_progress if progress is not None else None)
    return to_placement(pb, outcome, sys_.name)


@register_pass("place", PlaceOptions, requires=(), ensures={"placed"},
               preserves={"canonical", "decomposed", "fused", "laid_out", "tiled", "memplanned"})
def place(program: Program, options: PlaceOptions, ctx: PassContext) -> Program:
    """Assign every kernel a device and a start time (CP-SAT warm-started from HEFT and others)."""
    if options.system:
        system: System | str = options.system
    elif isinstance(ctx.target, System):
        system = ctx.target
    else:
        system = "cpu-gpu-pcie"
    placement = place_program(program, system, options.time_limit, options.method, seed=options.seed,
                              deterministic=options.deterministic, workers=options.workers)
    ctx.stat("place", "makespan_s", placement.seconds(placement.makespan))
    ctx.stat("place", "lower_bound_s", placement.seconds(placement.lower_bound))
    ctx.stat("place", "gap", placement.gap)
    ctx.stat("place", "method", placement.method)
    return dataclasses.replace(program, placement=placement, properties=program.properties | {"placed"})


def _placement_problems(program: Program):
    """Property "placed": a placement that places exactly the program's kernels."""
    placement = program.placement
    if placement is None:
        yield "no placement is recorded"
        return
    placed = [k.kernel for k in placement.kernels]
    if sorted(placed) != sorted(k.name for k in program.kernels):
        yield f"the placement places kernels {sorted(placed)}, not the program's"


register_property_check("placed", _placement_problems)


__all__ = ["place_program", "format_report", "draw_gantt", "check_placement", "PlaceOptions", "Placement",
           "PlacementProblem", "problem_from_program", "solve", "SolveOptions", "Outcome", "METHODS"]
