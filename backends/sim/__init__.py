"""The cycle-approximate accelerator simulator backend.

    from tilegraph.simulation import simulate_graph      # prepare (fuse, tile, memplan) + simulate
    from tilegraph.backends.sim import format_sim_report
    report = simulate_graph(graph, "edge-npu")
    print(format_sim_report(report))
    write_trace(report, "out.json"); plot_timeline(report, "out.png")

Modules: `array` (GEMM folds on the PE array per dataflow, SCALE-Sim's count, its SRAM traffic),
`workload` (what a kernel asks of the array and vector unit), `footprint` (the elements kernels
read), `streaming` (tensors too big for the scratchpad, moved by tiles), `moves` and `commands`
(lowering to tile-level commands), `demand`, `readbuffer` and `calc` (SCALE-Sim's operand order,
read buffer and CALC memory interface, `dram_model = "calc"`), `engine` (event-driven timing),
`energy` (per-access energies by component), `report` (SimReport and its table), `trace`
(Perfetto trace, plot), `api` (simulate, prepare_pipeline: the passes a Program needs first, run
by `tilegraph.simulation.prepare`), `compiled` (`tilegraph.compile(target="sim")`),
`scalesim_config` (SCALE-Sim's layers and configs, `accel_like_scalesim`) and `scalesim` (running
the real SCALE-Sim in its own virtual environment).
"""
from .api import plan_notes, prepare_pipeline, simulate
from .array import Gemm, array_cycles
from .commands import Command, SimError, lower
from .report import KernelSim, SimReport, format_sim_report
from .trace import plot_timeline, trace_events, write_trace

__all__ = [
    "simulate", "prepare_pipeline", "plan_notes", "SimReport", "KernelSim", "format_sim_report",
    "write_trace", "trace_events", "plot_timeline", "Gemm", "array_cycles", "Command", "SimError", "lower",
]
