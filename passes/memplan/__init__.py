"""memplan: joint kernel order, scratchpad addresses and spill/reload decisions (heuristic + CP-SAT).

    plan = plan_memory(program, capacity=256 * 1024, order="free", weights=False, time_limit=10)
    print(format_report(plan))
    program = memplan(program, capacity=256 * 1024)        # the pass: plan attached
"""
from .api import Options, Progress, as_problem, memplan, plan_from_solution, plan_memory, solve_problem
from .checker import PlanCheckError, check_plan, find_violations
from .cpsat import SolverConfig
from .problem import InfeasibleCapacityError, MemoryProblem, MemplanError, TensorKind, from_program, peak_live
from .pass_ import MemplanOptions, memplan_pass, plan_program, plan_violations, scratchpad_capacity
from .report import format_bytes, format_report, parse_bytes, plot_memory_map

__all__ = [
    "plan_memory", "memplan", "solve_problem", "plan_from_solution", "as_problem", "Options", "Progress", "SolverConfig",
    "MemoryProblem", "TensorKind", "from_program", "peak_live", "MemplanError", "InfeasibleCapacityError",
    "check_plan", "find_violations", "PlanCheckError", "format_report", "format_bytes", "parse_bytes",
    "plot_memory_map", "MemplanOptions", "memplan_pass", "scratchpad_capacity", "plan_program", "plan_violations",
]
