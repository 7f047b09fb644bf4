"""The pass manager: runs a Pipeline with verification, IR printing and dumps, timing and statistics.

    pm = PassManager("canonicalize,fuse,tile{target=accel-small}", print_ir_after={"fuse"}, dump_dir="dumps")
    program = pm.run(graph, PassContext(target=...))
    print(pm.format_timing())

Before each pass the manager checks the pass's `requires` against `Program.properties`; after it,
it keeps the input's properties the pass `preserves` (and those it established), adds its
`ensures`, and clears the decisions whose property is gone (`DECISIONS`: a re-fused program keeps
no stale tiles, memory plan or placement). With verify_each it also checks checks the graph verifier, the Program-level
invariants (`verify_program`) and that the pass left its input untouched. A pass that crashes (any
exception that is not a TilegraphError) or breaks an invariant becomes a PassError naming the pass,
with a reproducer directory: the input IR and the pipeline string to re-run it.
"""
from __future__ import annotations

import shlex
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from tilegraph.ir.errors import TilegraphError, VerifyError
from tilegraph.ir.graph import Graph
from tilegraph.ir.program import Program
from tilegraph.ir.program_text import print_program
from tilegraph.ir.verifier import find_problems

from .pipeline import Pipeline, PipelineError, PipelineStep, parse_pipeline
from .registry import PassContext, all_passes

__all__ = ["PassManager", "PassError", "PassRecord", "verify_program", "find_program_problems",
           "register_property_check", "format_statistics"]


class PassError(TilegraphError):
    """A pass crashed or produced invalid IR; names the pass and where its reproducer was written."""

    exit_code = 1

    def __init__(self, message: str, pass_name: str, reproducer: Path | None = None) -> None:
        super().__init__(message)
        self.pass_name = pass_name
        self.reproducer = reproducer


# ----- properties after a pass ------------------------------------------------------------------
# The property that vouches for each decision a Program carries, and how to clear the decision.
def _untiled(program: Program) -> Program:
    if program.target is None and not any(k.tiles for k in program.kernels):
        return program
    return replace(program, target=None, kernels=tuple(k.with_tiles(()) for k in program.kernels))


DECISIONS: dict[str, Callable[[Program], Program]] = {
    "laid_out": lambda p: replace(p, layouts=()),
    "tiled": _untiled,
    "memplanned": lambda p: replace(p, memory_plan=None),
    "placed": lambda p: replace(p, placement=None),
}


def settle_properties(spec, before: Program, result: Program) -> Program:
    """`result` with the properties `spec` leaves standing, and no decision whose property was dropped."""
    kept = result.properties - (before.properties - spec.preserves)
    properties = kept | spec.ensures
    for name, clear in DECISIONS.items():
        if name not in properties and name not in spec.preserves:
            result = clear(result)
    return replace(result, properties=properties)


# ----- Program-level verification --------------------------------------------------------------
_PROPERTY_CHECKS: dict[str, Callable[[Program], Iterable[str]]] = {}


def register_property_check(name: str, check: Callable[[Program], Iterable[str]]) -> None:
    """Make verify_program check property `name` on every Program that claims it (yield problems)."""
    if name in _PROPERTY_CHECKS:
        raise ValueError(f"a check for property {name} is already registered")
    _PROPERTY_CHECKS[name] = check


def find_program_problems(program: Program) -> list[str]:
    """Every broken invariant of the graph, the kernels and the claimed properties, one message each."""
    problems = list(find_problems(program.graph))
    problems += _kernel_problems(program)
    for name in sorted(program.properties):
        if name in _PROPERTY_CHECKS:
            problems += [f"property {name}: {p}" for p in _PROPERTY_CHECKS[name](program)]
    return problems


def verify_program(program: Program) -> None:
    """Raise VerifyError listing every problem find_program_problems reports."""
    problems = find_program_problems(program)
    if problems:
        listed = "\n".join(f"  - {p}" for p in problems)
        raise VerifyError(f"program @{program.graph.name} is invalid ({len(problems)} problem(s)):\n{listed}")


def _kernel_problems(program: Program) -> list[str]:
    """Each node in exactly one kernel; kernels (and nodes inside them) in a valid order; sane tiles."""
    problems = []
    graph_nodes = set(program.graph.nodes)
    done: set = set()  # values available so far: graph inputs, params, results of earlier nodes
    done.update(program.graph.inputs, program.graph.params)
    owner: dict = {}
    names: set[str] = set()
    for kernel in program.kernels:
        if kernel.name in names:
            problems.append(f"kernel name {kernel.name} is used twice")
        names.add(kernel.name)
        if not kernel.nodes:
            problems.append(f"kernel {kernel.name} has no nodes")
        for node in kernel.nodes:
            if node not in graph_nodes:
                problems.append(f"kernel {kernel.name} holds {node!r}, which is not in the graph")
                continue
            if node in owner:
                problems.append(f"%{node.name} ({node.op}) is in kernels {owner[node]} and {kernel.name}")
                continue
            owner[node] = kernel.name
            for value in node.inputs:
                if value not in done and value.producer in graph_nodes:
                    where = owner.get(value.producer)
                    later = "a later kernel" if where is None else f"kernel {where}, later in it"
                    problems.append(f"kernel {kernel.name}: %{node.name} ({node.op}) reads %{value.name} "
                                    f"before it is computed (by {later})")
            done.update(node.results)
        loops = [loop for loop, _ in kernel.tiles]
        if len(set(loops)) != len(loops):
            problems.append(f"kernel {kernel.name}: a loop has two tile sizes: {list(kernel.tiles)}")
        for loop, size in kernel.tiles:
            if not isinstance(size, int) or size < 1:
                problems.append(f"kernel {kernel.name}: tile size of {loop} must be a positive integer, got {size!r}")
    for node in program.graph.nodes:
        if node not in owner:
            problems.append(f"%{node.name} ({node.op}) is in no kernel")
    layout = program.layout_problem()
    if layout:
        problems.append(f"layouts: {layout}")
    return problems


# ----- records -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class PassRecord:
    """What happened in one step: its time, the time verifying it, and whether the printed IR changed."""

    index: int
    name: str
    step: str
    seconds: float
    verify_seconds: float
    changed: bool


def format_statistics(statistics: dict[str, dict[str, Any]]) -> str:
    """ctx.statistics as an aligned `pass  key  value` table."""
    rows = [(name, key, str(value)) for name, stats in statistics.items() for key, value in stats.items()]
    if not rows:
        return "no statistics"
    width = [max(len(r[i]) for r in rows + [("pass", "statistic", "value")]) for i in range(3)]
    lines = [f"{'pass':<{width[0]}}  {'statistic':<{width[1]}}  value"]
    lines += [f"{a:<{width[0]}}  {b:<{width[1]}}  {c}" for a, b, c in rows]
    return "\n".join(lines)


# ----- the manager -------------------------------------------------------------------------------
class PassManager:
    """Runs a pipeline with instrumentation. `print_ir_after` is a set of pass names or "all";
    IR is printed to `stream` (default: sys.stderr at the time of printing)."""

    def __init__(self, pipeline: Pipeline | str | Iterable[PipelineStep | str], *, verify_each: bool = True,
                 print_ir_after: Collection[str] | str = frozenset(), dump_dir: str | Path | None = None,
                 time_passes: bool = False, stream: TextIO | None = None) -> None:
        if isinstance(pipeline, str):
            pipeline = parse_pipeline(pipeline)
        elif not isinstance(pipeline, Pipeline):
            pipeline = Pipeline.of(*pipeline)
        self.pipeline = pipeline
        self.verify_each = verify_each
        self.print_all = print_ir_after == "all"
        self.print_after = frozenset() if self.print_all else frozenset(
            [print_ir_after] if isinstance(print_ir_after, str) else print_ir_after)
        unknown = sorted(self.print_after - {s.name for s in pipeline})
        if unknown:
            raise PipelineError(f"print_ir_after names {', '.join(unknown)}, not in the pipeline "
                                f"({str(pipeline) or 'empty'})")
        self.dump_dir = Path(dump_dir) if dump_dir is not None else None
        self.time_passes = time_passes
        self.stream = stream
        self.records: list[PassRecord] = []
        self.statistics: dict[str, dict[str, Any]] = {}

    # ----- running ---------------------------------------------------------------------------
    def run(self, program: Program | Graph, ctx: PassContext | None = None) -> Program:
        """Run every step on `program` (a Graph starts as Program.unfused) and return the result."""
        ctx = ctx if ctx is not None else PassContext()
        program = Program.unfused(program) if isinstance(program, Graph) else program
        self.records = []
        self.statistics = ctx.statistics
        if self.verify_each:
            problems = find_program_problems(program)
            if problems:
                listed = "\n".join(f"  - {p}" for p in problems)
                raise VerifyError(f"the input program is invalid ({len(problems)} problem(s)):\n{listed}")
        text = print_program(program)
        if self.dump_dir is not None:
            self.dump_dir.mkdir(parents=True, exist_ok=True)
            (self.dump_dir / "00_input.tgir").write_text(text + "\n", encoding="utf-8")
        for index, step in enumerate(self.pipeline, start=1):
            program, text = self._run_step(index, step, program, text, ctx)
        if self.time_passes:
            self._write(self.format_timing() + "\n")
        return program

    def _run_step(self, index: int, step: PipelineStep, program: Program, before: str,
                  ctx: PassContext) -> tuple[Program, str]:
        spec = step.spec
        missing = sorted(spec.requires - program.properties)
        if missing:
            raise PipelineError(self._missing_message(index, step, missing, program))
        start = time.perf_counter()
        try:
            result = spec.run(program, step.options, ctx)
        except TilegraphError:
            raise
        except Exception as e:
            detail = f"{type(e).__name__}: {e}"
            raise self._failure(index, step, program, before, f"crashed: {detail}", traceback.format_exc()) from e
        seconds = time.perf_counter() - start
        if not isinstance(result, Program):
            raise self._failure(index, step, program, before,
                                f"returned {type(result).__name__}, not a Program")
        result = settle_properties(spec, program, result)
        start = time.perf_counter()
        after = self._print_output(index, step, program, before, result)
        if self.verify_each:
            self._check(index, step, program, before, result, after)
        verify_seconds = time.perf_counter() - start
        stats = ctx.statistics.setdefault(spec.name, {})
        stats.setdefault("nodes", len(result.graph))
        stats.setdefault("kernels", len(result.kernels))
        self.records.append(PassRecord(index, spec.name, str(step), seconds, verify_seconds, after != before))
        if self.print_all or spec.name in self.print_after:
            self._write(f"# ----- IR after {spec.name} (step {index}) -----\n{after}\n")
        if self.dump_dir is not None and after != before:
            (self.dump_dir / f"{index:02d}_{_file_part(spec.name)}.tgir").write_text(after + "\n", encoding="utf-8")
        return result, after

    def _print_output(self, index, step, program, before, result) -> str:
        try:
            return print_program(result)
        except Exception as e:
            raise self._failure(index, step, program, before, f"produced IR that cannot be printed "
                                f"({type(e).__name__}: {e})", traceback.format_exc()) from e

    def _check(self, index, step, program, before, result, after) -> None:
        problems = find_program_problems(result)
        if problems:
            listed = "\n".join(f"  - {p}" for p in problems)
            raise self._failure(index, step, program, before, f"produced invalid IR:\n{listed}", after=after)
        if print_program(program) != before:
            raise self._failure(index, step, program, before,
                                "changed its input program (a pass must work on a clone)", after=after)

    def _missing_message(self, index: int, step: PipelineStep, missing: list[str], program: Program) -> str:
        providers = {name: sorted(p.name for p in all_passes().values() if name in p.ensures) for name in missing}
        hints = "; ".join(f"{name} is ensured by {', '.join(found)}" if found else f"no pass ensures {name}"
                          for name, found in providers.items())
        have = ", ".join(sorted(program.properties)) or "none"
        return (f"pass {step.name} (step {index}) requires {', '.join(missing)}, which the program does not have "
                f"(it has: {have}); {hints}. Run such a pass before {step.name}.")

    # ----- crashes and reproducers ------------------------------------------------------------
    def _failure(self, index: int, step: PipelineStep, program: Program, before: str, what: str,
                 trace: str | None = None, after: str | None = None) -> PassError:
        folder = self._write_reproducer(index, step, program, before, what, trace, after)
        ir_file = folder / "input.tgir"
        command = f"tilegraph compile {shlex.quote(str(ir_file))} --pipeline {shlex.quote(str(step))}"
        message = (f"pass {step.name} (step {index} of {len(self.pipeline)}) {what}\n"
                   f"reproducer written to {folder}\nre-run with: {command}")
        if (folder / "params.npz").exists():
            message += f"\n(parameter data is in {folder / 'params.npz'})"
        return PassError(message, step.name, folder)

    def _write_reproducer(self, index, step, program, before, what, trace, after) -> Path:
        if self.dump_dir is not None:
            folder = self.dump_dir / f"reproducer_{index:02d}_{_file_part(step.name)}"
            folder.mkdir(parents=True, exist_ok=True)
        else:
            folder = Path(tempfile.mkdtemp(prefix=f"tilegraph-{_file_part(step.name)}-"))
        (folder / "input.tgir").write_text(before + "\n", encoding="utf-8")
        (folder / "pipeline.txt").write_text(str(step) + "\n", encoding="utf-8")
        details = [f"pass {step.name} (step {index}) {what}", f"full pipeline: {self.pipeline}"]
        if trace:
            details.append(trace)
        (folder / "error.txt").write_text("\n".join(details) + "\n", encoding="utf-8")
        if after is not None:
            (folder / "output.tgir").write_text(after + "\n", encoding="utf-8")
        data = {v.name: v.data for v in program.graph.params if v.data is not None}
        if data:
            np.savez(folder / "params.npz", **data)
        return folder

    # ----- reports -----------------------------------------------------------------------------
    def format_timing(self) -> str:
        """The last run's per-pass times (and the time spent verifying), as a table."""
        total = sum(r.seconds + r.verify_seconds for r in self.records) or 1e-12
        rows = [(f"{r.index}", r.name, r.seconds) for r in self.records]
        rows.append(("", "(verify and print)", sum(r.verify_seconds for r in self.records)))
        width = max([len(r[1]) for r in rows] + [4])
        lines = [f"{'#':>3}  {'pass':<{width}}  {'time (ms)':>10}  {'share':>6}"]
        lines += [f"{i:>3}  {name:<{width}}  {s * 1e3:>10.2f}  {100 * s / total:>5.1f}%" for i, name, s in rows]
        lines.append(f"{'':>3}  {'total':<{width}}  {total * 1e3:>10.2f}  100.0%")
        return "\n".join(lines)

    def format_statistics(self) -> str:
        """The statistics of the last run (ctx.statistics) as a table."""
        return format_statistics(self.statistics)

    def _write(self, text: str) -> None:
        stream = self.stream if self.stream is not None else sys.stderr
        stream.write(text)
        stream.flush()


def _file_part(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "_-" else "_" for ch in name)
