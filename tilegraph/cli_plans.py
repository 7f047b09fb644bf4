"""`tilegraph memplan`, `place` and `simulate`: the planners and the accelerator simulator, with plots."""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Optional

import typer

from tilegraph.ir import TilegraphError
from tilegraph.ir.program import Program

from .cli import Entry, ModelFile, app


def fused_program(model: Path, entry: str | None) -> Program:
    """The model as kernels: a fused .tgir Program as it is, anything else through canonicalize,fuse."""
    from tilegraph.driver import compile_program, load_program

    program = load_program(model, entry)
    if "fused" in program.properties:
        return program
    return compile_program(program, "canonicalize,fuse")[0]


@contextmanager
def progress_line(what: str):
    """A one-line status on stderr (animated on a terminal) that a solver callback keeps current."""
    from rich.console import Console

    console = Console(stderr=True)
    if not console.is_terminal:
        yield lambda text: None
        return
    with console.status(what) as status:
        yield lambda text: status.update(f"{what}: {text}")


def _plot(draw, path: Path | None, *args) -> None:
    if path is None:
        return
    try:
        draw(*args, str(path))
    except (ImportError, RuntimeError) as error:
        raise TilegraphError(f"cannot draw {path}: {error}") from None
    typer.echo(f"wrote {path}")


@app.command()
def memplan(
    model: ModelFile,
    capacity: Annotated[str, typer.Option(help="scratchpad size, e.g. 256KiB, 1.5MiB, 65536")] = "256KiB",
    order: Annotated[str, typer.Option(help="free: the solver picks the kernel order; fixed: the program's")] = "free",
    weights: Annotated[bool, typer.Option("--weights", help="weights and parameters compete for the scratchpad")] = False,
    time_limit: Annotated[float, typer.Option(min=0.0, help="seconds for the exact solvers")] = 10.0,
    solver: Annotated[str, typer.Option(help="auto (heuristic, then CP-SAT), heuristic, cpsat")] = "auto",
    plot: Annotated[Optional[Path], typer.Option(help="draw the memory map (address against step) to this image")] = None,
    min_footprint: Annotated[bool, typer.Option("--min-footprint", help="instead: the smallest arena with no "
                                                "spill (order and addresses together; --capacity is ignored)")] = False,
    stream: Annotated[bool, typer.Option("--stream", help="stream tensors too big to keep whole by tiles; "
                                         "the plan counts their tile traffic")] = False,
    entry: Entry = None,
) -> None:
    """Plan the scratchpad: kernel order, tensor addresses and spills/reloads, with a proven bound."""
    from tilegraph.ir.units import parse_bytes
    from tilegraph.passes.memplan import (Options, SolverConfig, check_plan, format_report, from_program,
                                          plan_memory, plot_memory_map)

    program = fused_program(model, entry)
    problem = from_program(program, weights=weights)
    if min_footprint:
        from tilegraph.passes.memplan.footprint import format_footprint
        from tilegraph.passes.memplan.footprint import min_footprint as smallest

        with progress_line(f"minimum footprint of {len(program.kernels)} kernels"):
            found = smallest(problem, time_limit=time_limit)
        check_plan(problem, found.plan)
        typer.echo(format_footprint(found))
        typer.echo("  checked: valid (no spill, residency at use, no overlap, fixed addresses)")
        _plot(plot_memory_map, plot, found.plan)
        return
    try:
        size = parse_bytes(capacity)
    except ValueError as error:
        raise TilegraphError(f"--capacity: {error}") from None
    if stream:
        _memplan_streamed(program, size, order, weights, time_limit, solver, plot)
        return
    with progress_line(f"memplan of {len(program.kernels)} kernels") as show:
        plan = plan_memory(problem, size, order=order, weights=weights, time_limit=time_limit, solver=solver,
                           progress=lambda p: show(str(p)),
                           options=Options(config=SolverConfig(deterministic=True)))
    check_plan(problem, plan)  # the independent checker: a failure here is a bug, not bad input
    typer.echo(format_report(plan))
    typer.echo("  checked: valid (residency at use, no overlap, capacity, fixed addresses, traffic = events)")
    _plot(plot_memory_map, plot, plan)


def _memplan_streamed(program, size: int, order: str, weights: bool, time_limit: float, solver: str, plot) -> None:
    """`memplan --stream`: the memplan pass's plan, tensors too big to keep whole streamed by tiles."""
    from tilegraph.passes.memplan import PlanCheckError, format_report, plot_memory_map
    from tilegraph.passes.memplan.pass_ import MemplanOptions, plan_program, plan_violations

    try:
        options = MemplanOptions(capacity=str(size), order=order, weights=weights, time_limit=time_limit,
                                 solver=solver, stream=True)
    except ValueError as error:
        raise TilegraphError(str(error)) from None
    with progress_line(f"memplan of {len(program.kernels)} kernels, streaming"):
        plan = plan_program(program, options)
    violations = plan_violations(program, plan)
    if violations:  # the independent checker: a failure here is a bug, not bad input
        raise PlanCheckError(violations)
    typer.echo(format_report(plan))
    typer.echo("  checked: valid (residency at use, no overlap, capacity, fixed addresses, traffic = events, "
               "streamed tile traffic)")
    _plot(plot_memory_map, plot, plan)


@app.command()
def place(
    model: ModelFile,
    system: Annotated[str, typer.Option(help="system preset (cpu-gpu-pcie, cpu-gpu-npu, 4-core-npu) or TOML")] = "cpu-gpu-pcie",
    time_limit: Annotated[float, typer.Option(min=0.0, help="seconds for the solvers")] = 30.0,
    method: Annotated[str, typer.Option(help="auto, or one method (heft, cpop, peft, metf, lp, cpsat, ...)")] = "auto",
    gantt: Annotated[Optional[Path], typer.Option(help="draw the schedule, one lane per device and link")] = None,
    entry: Entry = None,
) -> None:
    """Place kernels on heterogeneous devices: makespan, lower bound, gap and per-device utilisation."""
    from tilegraph.ir.system import load_system
    from tilegraph.passes.place import check_placement, draw_gantt, format_report, place_program
    from tilegraph.passes.place.solve import METHODS

    if method not in METHODS:
        raise TilegraphError(f"unknown --method {method!r}; choose one of {', '.join(METHODS)}")
    program = fused_program(model, entry)
    target = load_system(system)
    with progress_line(f"placing {len(program.kernels)} kernels on {target.name}") as show:
        placement = place_program(
            program, target, time_limit, method,
            progress=lambda stage, makespan, bound, elapsed: show(
                f"[{elapsed:5.1f}s] {stage}: makespan {makespan * 1e3:.4g} ms, bound {bound * 1e3:.4g} ms"))
    check_placement(program, target, placement)
    typer.echo(format_report(placement))
    typer.echo("  checked: valid (precedence, transfers on links, one kernel per device at a time, memory)")
    _plot(draw_gantt, gantt, placement)


@app.command()
def simulate(
    model: ModelFile,
    accel: Annotated[str, typer.Option(help="accelerator preset (edge-npu, tpu-like, scalesim-default) or TOML")] = "edge-npu",
    time_limit: Annotated[float, typer.Option(min=0.0, help="seconds for the memory planner")] = 2.0,
    trace: Annotated[Optional[Path], typer.Option(help="write a Chrome/Perfetto trace of the commands (JSON)")] = None,
    plot: Annotated[Optional[Path], typer.Option(help="draw the timeline and a roofline of the kernels")] = None,
    entry: Entry = None,
) -> None:
    """Fuse, tile and memory-plan for an accelerator, then simulate it cycle-approximately."""
    from tilegraph.backends.sim import format_sim_report, plot_timeline, write_trace
    from tilegraph.driver import load_program
    from tilegraph.simulation import simulate_graph

    program = load_program(model, entry)
    with progress_line(f"simulating on {accel}") as show:
        show("fuse, tile, memplan")
        report = simulate_graph(program, accel, time_limit=time_limit)
    typer.echo(format_sim_report(report))
    if trace is not None:
        typer.echo(f"wrote {write_trace(report, trace)}")
    _plot(plot_timeline, plot, report)
