"""Running a sweep: the point function, the executors (a local process pool, Ray) and resume.

Each (model, point) is one task: `run_point` prepares and simulates it and returns a row, never
raising, so a failing point is recorded with its error and the sweep goes on. An executor takes the
tasks and yields their rows as they finish; `run_sweep` skips the tasks whose content hash already
has a successful row in DIR (failed rows are rerun: a failure may come from the machine, such as a
killed worker), journals new rows as they arrive behind a progress bar, and writes the table.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tilegraph.ir.host import usable_cpus

from .spec import Model, PointTask, SweepSpec
from .table import Journal, assemble, read_journal, require_pyarrow, write_table

Row = dict[str, Any]
Executor = Callable[[Sequence[PointTask]], Iterator[Row]]


def parse_model(model: Model):
    """The model's Graph (.tg) or Program (.tgir) from its text, so a remote worker needs no files."""
    if model.suffix == ".tg":
        from tilegraph.frontends.dsl import parse

        return parse(model.text, filename=str(model.path))
    from tilegraph.ir.program_text import parse_program

    return parse_program(model.text, filename=str(model.path))


def run_point(task: PointTask) -> Row:
    """prepare -> simulate one (model, point); the row has the metrics, or status "error" and the message."""
    from tilegraph.backends.sim.api import simulate
    from tilegraph.simulation import prepare

    start = time.perf_counter()
    try:
        accel, settings = task.accelerator(), task.settings()
        program = prepare(parse_model(task.model), accel, time_limit=settings.time_limit, solver=settings.solver,
                          order=settings.order, capacity=settings.capacity)
        report = simulate(program, accel)
        row: Row = {"status": "ok", "error": "", "cycles": report.cycles, "latency_s": report.time_s,
                    "energy_pj": report.energy_pj, "dram_bytes": report.dram_bytes,
                    "dram_compulsory_bytes": report.compulsory_bytes, "dram_spill_reload_bytes": report.spill_bytes,
                    "dram_stream_bytes": report.stream_bytes, "utilisation": report.utilisation,
                    "plan_gap": program.memory_plan.gap, "plan_status": program.memory_plan.status}
    except Exception as e:  # any failure is this point's result, not the sweep's end
        row = error_row(task, e)
    row.update(key=task.key, wall_s=time.perf_counter() - start)
    return row


def error_row(task: PointTask, error: BaseException) -> Row:
    """A failed point: its error's type and first line."""
    lines = str(error).strip().splitlines()
    return {"key": task.key, "status": "error", "error": f"{type(error).__name__}: {lines[0] if lines else ''}"}


WARM_MODULES = ["tilegraph.frontends.dsl", "tilegraph.ir.program_text", "tilegraph.passes", "tilegraph.simulation",
                "tilegraph.sweep.run"]


def warm_up() -> None:
    """Import the pipeline once per worker, so that a worker's first point times only itself."""
    import importlib

    for name in WARM_MODULES:
        importlib.import_module(name)


def default_workers() -> int:
    """The CPUs this process may run on."""
    return usable_cpus()


def pool_executor(workers: int | None = None) -> Executor:
    """Tasks on a local process pool of `workers` processes (default: the CPUs). Workers come from a
    fork server, so a progress bar's thread in this process never forks mid-lock; as with any such
    pool, a script that calls this needs the `if __name__ == "__main__":` guard."""
    def execute(tasks: Sequence[PointTask]) -> Iterator[Row]:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        if not tasks:
            return
        context = multiprocessing.get_context("forkserver" if os.name == "posix" else "spawn")
        if os.name == "posix":
            context.set_forkserver_preload(WARM_MODULES)  # imported once in the server, inherited by each worker
        pool = ProcessPoolExecutor(max_workers=min(workers or default_workers(), len(tasks)), mp_context=context,
                                   initializer=warm_up)
        try:
            futures = {pool.submit(run_point, task): task for task in tasks}
            for future in as_completed(futures):
                try:
                    yield future.result()
                except Exception as e:  # the worker died (e.g. out of memory): record it, keep going
                    yield error_row(futures[future], e)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
    return execute


def ray_executor(address: str | None = None, workers: int | None = None) -> Executor:
    """Tasks as Ray tasks (one CPU each): on the cluster at `address`, on the Ray instance this process
    already joined, or on a new local one with `workers` CPUs (default: the CPUs). The tasks carry the
    model text, so a cluster's workers need tilegraph installed but not the model files."""
    def execute(tasks: Sequence[PointTask]) -> Iterator[Row]:
        ray = require_ray()
        if not tasks:
            return
        started = not ray.is_initialized()
        if started:
            ray.init(address=address, num_cpus=None if address else (workers or default_workers()),
                     include_dashboard=False, logging_level="warning", log_to_driver=False)
        try:
            remote = ray.remote(num_cpus=1)(run_point)
            pending = {remote.remote(task): task for task in tasks}
            while pending:
                done, _ = ray.wait(list(pending), num_returns=min(len(pending), 64), timeout=0.2)
                for ref in done:
                    task = pending.pop(ref)
                    try:
                        yield ray.get(ref)
                    except Exception as e:  # the task or its worker died: record it, keep going
                        yield error_row(task, e)
        finally:
            if started:
                ray.shutdown()
    return execute


def require_ray():
    from tilegraph.ir import TilegraphError

    try:
        import ray
    except ModuleNotFoundError:
        raise TilegraphError("--ray needs Ray, which is not installed: pip install 'tilegraph[dse]'") from None
    return ray


@dataclass(frozen=True)
class SweepOutcome:
    """What a run did: the table's path and rows, how many points ran, were reused, failed; wall seconds."""

    table: Path
    rows: list[Row]
    ran: int
    reused: int
    failed: int
    wall_s: float


def run_sweep(spec: SweepSpec, out_dir: Path, executor: Executor | None = None, *,
              progress: bool = True) -> SweepOutcome:
    """Run the spec's tasks that DIR has no successful row for, then write DIR/results.parquet."""
    require_pyarrow()
    start = time.perf_counter()
    out_dir = Path(out_dir)
    executor = executor or pool_executor()
    tasks = spec.tasks()
    results = {key: row for key, row in read_journal(out_dir).items() if row.get("status") == "ok"}
    todo = list({t.key: t for t in tasks if t.key not in results}.values())  # one run per distinct hash
    reused = sum(t.key in results for t in tasks)
    journal = Journal(out_dir)
    try:
        with _progress(len(todo), progress) as advance:
            for row in executor(todo):
                journal.append(row)
                results[row["key"]] = row
                advance(row["status"] == "ok")
    finally:
        journal.close()
    rows = assemble(spec, results)
    table = write_table(spec, rows, out_dir)
    return SweepOutcome(table, rows, len(todo), reused, sum(r["status"] != "ok" for r in rows),
                        time.perf_counter() - start)


class _progress:
    """A rich progress bar on stderr (only on a terminal) counting finished and failed points."""

    def __init__(self, total: int, enabled: bool) -> None:
        from rich.console import Console

        console = Console(stderr=True)
        self.enabled = enabled and console.is_terminal and total > 0
        self.total, self.failed = total, 0
        if self.enabled:
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                                       TimeRemainingColumn)

            self.bar = Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[note]}"),
                                TimeElapsedColumn(), TimeRemainingColumn(), console=console)
            self.task = self.bar.add_task("sweep", total=total, note="")

    def __enter__(self) -> Callable[[bool], None]:
        if self.enabled:
            self.bar.start()
        return self.advance

    def advance(self, ok: bool) -> None:
        self.failed += not ok
        if self.enabled:
            self.bar.update(self.task, advance=1, note=f"{self.failed} failed" if self.failed else "")

    def __exit__(self, *exc) -> None:
        if self.enabled:
            self.bar.stop()
