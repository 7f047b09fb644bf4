"""`tilegraph sweep`: design-space exploration over accelerators x models (tilegraph/sweep/)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from tilegraph.ir import TilegraphError

from .cli import app


@app.command()
def sweep(
    spec: Annotated[Optional[Path], typer.Argument(help="sweep spec (TOML): models, a base accelerator, axes",
                                                   show_default=False)] = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="results folder; points whose results "
                                                   "are already there are not rerun")] = None,
    workers: Annotated[Optional[int], typer.Option(min=1, help="worker processes (default: the CPUs); with --ray, "
                                                   "the CPUs of the local Ray instance")] = None,
    ray: Annotated[bool, typer.Option("--ray", help="run the points as tasks on a local Ray instance")] = False,
    address: Annotated[Optional[str], typer.Option(help="run on the Ray cluster at ADDR (implies --ray)")] = None,
    report: Annotated[Optional[Path], typer.Option(help="only redraw pareto.png and report.html from the results "
                                                   "stored in this folder")] = None,
) -> None:
    """Simulate every model at every design point; write results.parquet, Pareto plots and an HTML report."""
    from tilegraph.sweep import load_spec, pool_executor, ray_executor, run_sweep
    from tilegraph.sweep.report import write_report
    from tilegraph.sweep.table import require_pyarrow

    if report is not None:
        if spec is not None or output is not None:
            raise TilegraphError("--report DIR redraws stored results; give it alone, without a spec or -o")
        _echo_written(write_report(report))
        return
    if spec is None or output is None:
        raise TilegraphError("give a spec and a results folder: tilegraph sweep spec.toml -o DIR "
                             "(or --report DIR to redraw stored results)")
    require_pyarrow()
    parsed = load_spec(spec)
    use_ray = ray or address is not None
    executor = ray_executor(address, workers) if use_ray else pool_executor(workers)
    points, models = len(parsed.points()), len(parsed.models)
    typer.echo(f"sweep: {points} point(s) x {models} model(s) on {parsed.accelerator.name}"
               + (f" (Ray{' at ' + address if address else ''})" if use_ray else ""), err=True)
    outcome = run_sweep(parsed, output, executor)
    typer.echo(f"{len(outcome.rows)} rows: {outcome.ran} ran, {outcome.reused} reused, {outcome.failed} failed "
               f"in {outcome.wall_s:.1f} s")
    for row in [r for r in outcome.rows if r["status"] != "ok"][:5]:
        typer.echo(f"  failed: {row['model']} point {row['point']}: {row['error']}")
    fronts = {}
    for row in outcome.rows:
        fronts[row["model"]] = fronts.get(row["model"], 0) + bool(row["pareto"])
    typer.echo("Pareto front (latency x energy x area): "
               + ", ".join(f"{model} {count} point(s)" for model, count in fronts.items()))
    _echo_written([outcome.table, *write_report(output)])


def _echo_written(paths: list[Path]) -> None:
    typer.echo("wrote " + ", ".join(map(str, paths)))
