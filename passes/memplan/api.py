"""plan_memory: heuristic plan first, then the exact models within the time limit.

Stages (each keeps the best plan so far, so the answer is never worse than the heuristic):
1. TFLite-style heuristics on a few topological orders (the warm start and the baseline); with
   weights, the same problem without them, planned whole (a relaxation: its bound holds here, and
   its order is tried); with free order, a local search over orders scored by the bytes-only Belady
   traffic (order_search.py).
2. Free order, at most `free_order_limit` kernels or `free_order_cells` model variables: the
   time-indexed capacity-only model gives a bound for every order and an order with replacement
   decisions. Else, up to `band_limit` kernels: the partition bound (the same model on parts of the
   graph, linked by the tensors crossing parts; a bound for every order), then the model restricted
   to orders near the best one (a band of steps), for better orders only.
3. For the chosen order(s): the capacity-only fixed-order model (bound for the order), placement of
   its decisions with `NoOverlap2D`; if that does not place, the joint model (small graphs) or the
   windowed joint model (large graphs), warm-started from the incumbent.
4. Free order, time left: the free-order model again, hinted with the best plan so far.

Determinism: the heuristics are deterministic; CP-SAT runs with a fixed `random_seed`. By default
(`SolverConfig(deterministic=False)`) it runs a 2-worker portfolio under a wall-clock limit, which
is not reproducible when a limit is hit (an optimum proven within the limit has the same traffic,
possibly another plan). `Options(config=SolverConfig(deterministic=True))` interleaves the workers,
limits each solve by deterministic time, and splits the budget by what was handed out rather than
by the wall clock, so the same input and options give the same plan (the wall-clock limit of
1 s + 5x each budget is a safety net; hitting it, on a heavily loaded machine, breaks the promise).
"""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass

from tilegraph.ir.memory_plan import MemoryPlan, PlanBounds

from .bounds import cover_bound
from .cpsat import SolverConfig, solve_fixed
from .free_order import model_cells, solve_free_order
from .heuristics import heuristic_plans
from .order_search import evaluations_for, order_cost, search_order
from .orders import candidate_orders, program_order
from .partition import joint_partition_bound
from .problem import MemoryProblem, MemplanError, TensorKind, from_program, peak_live, without_tensors
from .solution import Solution, Timeline, compulsory, to_plan_parts, traffic
from .windowed import improve_windowed

SOLVERS = ("auto", "heuristic", "cpsat")


@dataclass(frozen=True)
class Progress:
    """What a progress callback receives: the stage, seconds so far, best traffic and best bound."""

    stage: str
    elapsed: float
    best: int | None
    bound: int | None

    def __str__(self) -> str:
        best = "-" if self.best is None else f"{self.best} B"
        bound = "-" if self.bound is None else f"{self.bound} B"
        return f"[{self.elapsed:6.1f}s] {self.stage}: best {best}, bound {bound}"


@dataclass(frozen=True)
class Options:
    """Knobs of the exact stages (the defaults are what the benchmark measured)."""

    free_order_limit: int = 80  # graphs up to this many kernels get the free-order model
    free_order_cells: int = 20_000  # larger graphs too when the model is this small (see model_cells)
    full_model_limit: int = 300  # largest graph for the one-piece joint model
    window: int = 48  # steps per window in the windowed scheme
    window_time: float = 2.0  # seconds per window
    explore_orders: int = 4  # free order: other orders tried when one's decisions do not fit in address space
    explore_share: float = 0.8  # of the time left after the heuristics: the first free-order solve and the exploration
    first_share: float = 0.75  # of the time left: the first free-order solve, the one bound over all orders
    band_limit: int = 300  # largest graph for the banded free-order search (orders near the best one)
    band: int = 4  # steps each kernel may move from its place in the best order, per banded solve
    band_share: float = 0.85  # of the time left after the heuristics: the banded search
    partition_share: float = 0.25  # graphs too big for free order (up to band_limit): the partition bound
    partition_size: int = 20  # kernels per part of the partition bound
    order_search_share: float = 0.2  # free order: of the time limit, local search over orders (order_search.py)
    weightless_share: float = 0.5  # with weights: of the time left, planning the problem without them (a bound)
    weightless_trigger: float = 0.9  # ... when the best order's heuristic plan keeps this share of its traffic without them
    config: SolverConfig = SolverConfig()


class _Search:
    """The best plan so far, the best bounds, and the clock."""

    def __init__(self, problem: MemoryProblem, time_limit: float, progress: Callable | None,
                 deterministic: bool = False) -> None:
        self.problem = problem
        self.start = time.perf_counter()
        self.deadline = self.start + max(0.0, time_limit)
        self.limit = max(0.0, time_limit)
        self.deterministic = deterministic  # budgets counted from what was handed out, not the wall clock
        self.spent = 0.0
        self.progress = progress
        self.best: Solution | None = None
        self.best_cost: int | None = None
        self.best_source = ""
        self.bound = 0  # valid for the problem as posed
        self.bound_source = "trivial"
        self.capacity_only: int | None = None
        self.stats: dict[str, object] = {}
        self.order_bounds: dict[tuple[int, ...], int] = {}  # bounds valid for one order only
        self.order_optima: dict[tuple[int, ...], tuple] = {}  # proven capacity-only (keep, traffic) per order

    def left(self) -> float:
        if self.deterministic:
            return self.limit - self.spent
        return self.deadline - time.perf_counter()

    def take(self, seconds: float) -> float:
        """A solver time limit of `seconds` (at least 0.05), charged to the deterministic clock."""
        seconds = max(0.05, seconds)
        if self.deterministic:
            self.spent += seconds
        return seconds

    def offer(self, sol: Solution | None, source: str) -> bool:
        if sol is None:
            return False
        cost = traffic(self.problem, sol.keep)
        if self.best_cost is None or cost < self.best_cost:
            self.best, self.best_cost, self.best_source = sol, cost, source
            self.report(source)
            return True
        return False

    def raise_bound(self, value: int, source: str) -> None:
        if value > self.bound:
            self.bound, self.bound_source = value, source

    def done(self) -> bool:
        return self.best_cost is not None and self.best_cost <= self.bound

    def report(self, stage: str, best: int | None = None, bound: int | None = None) -> None:
        if self.progress is not None:
            self.progress(Progress(stage, time.perf_counter() - self.start,
                                   self.best_cost if best is None or self.best_cost is None else min(best, self.best_cost),
                                   self.bound if bound is None else max(bound, self.bound)))

    def reporter(self, stage: str):
        if self.progress is None:
            return None
        return lambda best, bound: self.report(stage, best, None)


def plan_memory(program_or_graph, capacity: int, order: str = "free", weights: bool = False,
                time_limit: float = 10.0, progress: Callable[[Progress], None] | None = None, *,
                solver: str = "auto", options: Options = Options()) -> MemoryPlan:
    """Plan a Program (or a Graph, taken unfused, or a MemoryProblem) for a scratchpad of `capacity` bytes.

    Raises InfeasibleCapacityError (a TilegraphError) when a kernel's working set exceeds the capacity.
    """
    problem = as_problem(program_or_graph, weights=weights)
    return solve_problem(problem, capacity, order=order, time_limit=time_limit, progress=progress,
                         solver=solver, options=options, weights=weights)


def as_problem(program_or_graph, *, weights: bool = False, align: int = 1) -> MemoryProblem:
    from tilegraph.ir.graph import Graph
    from tilegraph.ir.program import Program

    if isinstance(program_or_graph, MemoryProblem):
        return program_or_graph
    if isinstance(program_or_graph, Graph):
        program_or_graph = Program.unfused(program_or_graph)
    if not isinstance(program_or_graph, Program):
        raise TypeError(f"expected a Program, Graph or MemoryProblem, got {type(program_or_graph).__name__}")
    return from_program(program_or_graph, weights=weights, align=align)


def solve_problem(problem: MemoryProblem, capacity: int, *, order: str = "free", time_limit: float = 10.0,
                  progress=None, solver: str = "auto", options: Options = Options(),
                  weights: bool = False) -> MemoryPlan:
    """plan_memory on the plain problem."""
    if order not in ("free", "fixed"):
        raise MemplanError(f"order must be 'free' or 'fixed', got {order!r}")
    if solver not in SOLVERS:
        raise MemplanError(f"unknown memplan solver {solver!r} (solvers: {', '.join(SOLVERS)})")
    capacity = int(capacity)
    if capacity <= 0:
        raise MemplanError(f"capacity must be positive, got {capacity}")
    problem.check_capacity(capacity)
    search = _Search(problem, time_limit, progress, options.config.deterministic)
    K = problem.num_kernels
    if K == 0:
        empty = Solution((), tuple(() for _ in problem.sizes), tuple(() for _ in problem.sizes))
        search.offer(empty, "empty")
        return _make_plan(problem, capacity, search, 0, order, weights)

    # 1. heuristics: the warm start and the baseline
    orders = candidate_orders(problem) if order == "free" else {"program": program_order(problem)}
    plans = heuristic_plans(problem, capacity, orders)
    baseline_orders = ("program/", "min-memory/") if order == "free" else ("program/",)
    baseline = min(p.traffic for p in plans if p.name.startswith(baseline_orders))
    search.offer(plans[0].solution, f"heuristic {plans[0].name}")
    search.stats["heuristic"] = plans[0].name
    search.report("heuristic")
    if solver == "heuristic" or search.best_cost == 0:
        return _make_plan(problem, capacity, search, baseline, order, weights)

    cfg = options.config
    cover = cover_bound(problem, capacity, time_limit=search.take(min(1.0, 0.1 * search.left())), config=cfg)
    search.raise_bound(cover, "forced-live cover")
    search.stats["cover_bound"] = cover
    if search.done():
        return _make_plan(problem, capacity, search, baseline, order, weights)
    # 1b. with weights: the problem without them is a relaxation, far easier to bound where weights
    #     cause little of the traffic (a weight read by one kernel only adds to its working set): then
    #     its bound holds here, and its order is tried
    searched: list[tuple[int, ...]] = []
    weight_ids = {i for i, kind in enumerate(problem.kinds) if kind is TensorKind.WEIGHT}
    relaxed = without_tensors(problem, weight_ids) if weight_ids and options.weightless_share > 0 else None
    if relaxed is not None and heuristic_plans(relaxed, capacity, {"best": search.best.order})[0].traffic \
            >= options.weightless_trigger * search.best_cost:
        # progress lines name the relaxation's stage but show this problem's best plan and bound
        tick = None if progress is None else (lambda p: search.report(f"without weights, {p.stage}"))
        sub = solve_problem(relaxed, capacity, order=order, solver=solver, progress=tick,
                            time_limit=search.take(options.weightless_share * search.left()),
                            options=dataclasses.replace(options, weightless_share=0.0))
        search.raise_bound(sub.bounds.traffic, "the problem without weights")
        search.stats["weightless_bound"] = sub.bounds.traffic
        search.report("the problem without weights")
        if search.done():
            return _make_plan(problem, capacity, search, baseline, order, weights)
        if order == "free":
            kernel_id = {name: k for k, name in enumerate(problem.kernel_names)}
            weightless_order = tuple(kernel_id[name] for name in sub.order)
            searched.append(weightless_order)
            search.offer(heuristic_plans(problem, capacity, {"weightless": weightless_order})[0].solution,
                         "heuristic on the weightless plan's order")
            if search.done():
                return _make_plan(problem, capacity, search, baseline, order, weights)
    # 1c. free order: local search over orders from the best heuristic one; its order is placed by
    #     the heuristics and joins the orders the exact stages try
    if order == "free" and options.order_search_share > 0:
        start = min([*orders.values(), *searched], key=lambda o: order_cost(problem, o, capacity))
        evaluations = evaluations_for(problem, search.take(options.order_search_share * search.left()))
        found, cost = search_order(problem, capacity, start, evaluations, stop_at=search.bound)
        search.stats["order_search"] = cost
        if found != start:
            searched.append(found)
            search.offer(heuristic_plans(problem, capacity, {"searched": found})[0].solution,
                         "heuristic on a searched order")
            search.report("order search")
    # 2. free order on small graphs: the capacity-only optimum over all orders, then other orders
    #    (each excluding those tried) until one's decisions also fit in address space
    explored: list[tuple[int, ...]] = []
    small = order == "free" and (K <= options.free_order_limit or model_cells(problem) <= options.free_order_cells)
    if small:
        if K > options.free_order_limit:  # a big graph: first the best order's own optimum (cheap)
            _improve_order(search, capacity, search.best.order, options, free=True, share=0.1, joint=False)
        if not search.done():
            _explore_orders(search, capacity, options, explored,
                            until=search.left() * (1 - options.explore_share), joint=False)
    elif order == "free" and K <= options.band_limit:  # too big for all orders: a bound from parts of the graph,
        if options.partition_share > 0:  # then orders near the best one, starting from the best order's own optimum
            value = joint_partition_bound(problem, capacity, part_size=options.partition_size,
                                          time_limit=search.take(options.partition_share * search.left()), config=cfg)
            search.raise_bound(value, "partition bound")
            search.stats["partition_bound"] = value
            search.report("partition bound")
            if search.done():
                return _make_plan(problem, capacity, search, baseline, order, weights)
        until = search.left() * (1 - options.band_share)
        _improve_order(search, capacity, search.best.order, options, free=True, share=0.3)
        _band_search(search, capacity, options, until=until)
    # 3. the joint model on the best order so far, then on the heuristic orders
    #    (for fixed order, the program's own only)
    if order == "free":
        queue = [search.best.order] + searched + explored[:1] + [p.solution.order for p in plans]
    else:
        queue = [program_order(problem)]
    queue = list(dict.fromkeys(queue))
    for n, candidate in enumerate(queue):
        if search.done() or search.left() <= 0.05:
            break
        _improve_order(search, capacity, candidate, options, free=(order == "free"),
                       share=1.0 if n == len(queue) - 1 else 0.7)
    # 4. time left on a small graph: more orders, now with the joint model on each
    if small and K > options.free_order_limit:  # a big graph: first the best order's own optimum (cheap)
        _improve_order(search, capacity, search.best.order, options, free=True, share=0.1, joint=False)
    if small and not search.done():
        _explore_orders(search, capacity, options, explored, until=0.5, joint=True)
    return _make_plan(problem, capacity, search, baseline, order, weights)


def _explore_orders(search: _Search, capacity: int, options: Options, explored: list[tuple[int, ...]], *,
                    until: float, joint: bool) -> None:
    """Solve the free-order capacity model again and again, each time excluding the orders already
    explored, and try each new order (placement; with `joint`, the joint model too), while more than
    `until` seconds are left. The bound combines the model's (valid for the orders not excluded) with
    each excluded order's own."""
    problem = search.problem
    while not search.done() and len(explored) <= options.explore_orders and \
            (not explored or search.left() > until + 0.05):
        # the first solve gives the bound over all orders: it gets the larger share
        budget = options.first_share * search.left() if not explored else 0.5 * (search.left() - until)
        result = solve_free_order(problem, capacity, hint=search.best, lower_bound=search.bound,
                                  time_limit=search.take(budget), config=options.config,
                                  progress=search.reporter("free-order capacity model"), exclude=tuple(explored))
        excluded = min((search.order_bounds.get(o, 0) for o in explored), default=result.bound)
        search.raise_bound(min(result.bound, excluded), "free-order capacity model")
        if not explored:
            search.stats["free_order_status"] = result.status
            search.capacity_only = result.bound if result.status != "unknown" else None
        if result.order is None:
            break
        explored.append(result.order)
        search.order_bounds[result.order] = max(result.bound, search.order_bounds.get(result.order, 0))
        _improve_order(search, capacity, result.order, options, hint_keep=result.keep,
                       keep_cost=traffic(problem, result.keep), free=True, share=0.5 if not joint else 1.0,
                       joint=joint)
    search.stats["orders_explored"] = len(explored)


def _band_search(search: _Search, capacity: int, options: Options, *, until: float) -> None:
    """Large graphs: the free-order capacity model restricted to orders near the best one (each kernel
    within `options.band` steps), its decisions placed, repeated from the new best while it improves
    and more than `until` seconds are left. Gives better orders only, no bound."""
    problem = search.problem
    rounds = 0
    while not search.done() and search.left() > until + 0.05:
        before = search.best_cost
        result = solve_free_order(problem, capacity, hint=search.best, lower_bound=search.bound,
                                  time_limit=search.take(0.6 * (search.left() - until)), config=options.config,
                                  band=(search.best.order, options.band))
        rounds += 1
        if result.order is None:
            break
        cost = traffic(problem, result.keep)
        if cost < search.best_cost:
            _improve_order(search, capacity, result.order, options, hint_keep=result.keep, keep_cost=cost,
                           free=True, share=0.5, joint=False)
        if search.best_cost >= before:
            break
    search.stats["band_rounds"] = rounds


def _improve_order(search: _Search, capacity: int, order: tuple[int, ...], options: Options, *,
                   hint_keep=None, keep_cost: int | None = None, free: bool, share: float, joint: bool = True) -> None:
    """Capacity-only bound, placement, then (if `joint`) the joint or windowed model for one order."""
    problem = search.problem
    cfg = options.config
    start_left = search.left()
    budget = share * start_left

    def remaining() -> float:
        return budget - (start_left - search.left())
    incumbent = search.best if search.best.order == order else None
    if incumbent is None:  # a heuristic plan on this order to warm-start from
        incumbent = heuristic_plans(problem, capacity, {"model": order})[0].solution
        search.offer(incumbent, "heuristic on the model's order")
    inc_cost = traffic(problem, incumbent.keep)

    # capacity-only optimum for this order (solved once: a later visit reuses the proven one)
    if order in search.order_optima:
        keep, cost = search.order_optima[order]
        if cost >= search.best_cost:
            return
        if keep_cost is None or cost < keep_cost:
            hint_keep, keep_cost = keep, cost
    elif hint_keep is None or keep_cost is None or keep_cost > search.bound:
        res = solve_fixed(problem, order, capacity, addresses=False, incumbent=incumbent,
                          lower_bound=search.bound, time_limit=search.take(0.3 * remaining()), config=cfg)
        if res.keep is not None:
            order_bound = res.bound
            if not free:
                search.raise_bound(order_bound, "capacity-only model")
                search.capacity_only = order_bound
            search.order_bounds[order] = max(order_bound, search.order_bounds.get(order, 0))
            if keep_cost is None or res.objective < keep_cost:
                hint_keep, keep_cost = res.keep, res.objective
            if res.status == "optimal":
                search.order_optima[order] = (res.keep, res.objective)
                if res.bound >= search.best_cost:
                    return  # this order cannot beat the incumbent
    if search.done():
        return
    # place the capacity-only decisions
    if hint_keep is not None and keep_cost < min(inc_cost, search.best_cost) and remaining() > 0:
        res = solve_fixed(problem, order, capacity, fixed_keep=hint_keep, time_limit=search.take(0.3 * remaining()),
                          config=cfg)
        search.stats["placement"] = res.status
        if res.solution is not None and search.offer(res.solution, "cpsat capacity-only + placement"):
            incumbent = res.solution
    if search.done() or remaining() <= 0 or not joint:
        return
    # joint model, in one piece or windowed
    if problem.num_kernels <= options.full_model_limit:
        res = solve_fixed(problem, order, capacity, incumbent=incumbent, lower_bound=search.bound,
                          time_limit=search.take(remaining()), config=cfg, progress=search.reporter("cpsat joint model"))
        search.stats["joint"] = res.status
        if res.solution is not None:
            search.offer(res.solution, "cpsat joint model")
        if res.status in ("optimal", "feasible"):
            search.order_bounds[order] = max(res.bound, search.order_bounds.get(order, 0))
            if not free:
                search.raise_bound(res.bound, "cpsat joint model")
    else:
        def tick(cost: int) -> None:
            search.report("cpsat windowed", best=cost)
        sol, cost, n = improve_windowed(problem, incumbent, capacity, remaining=remaining, take=search.take,
                                        window=options.window, window_time=options.window_time, config=cfg,
                                        progress=tick, stop_at=search.bound)
        search.stats["windows"] = n
        search.offer(sol, "cpsat windowed")


def _make_plan(problem: MemoryProblem, capacity: int, search: _Search, baseline: int, order_mode: str,
               weights: bool) -> MemoryPlan:
    sol = search.best
    tl = Timeline(problem, sol.order)
    residencies, events = to_plan_parts(tl, sol)
    ws, k = problem.max_working_set()
    cost = search.best_cost
    scope = "all orders" if order_mode == "free" else "this order"
    bound, source = min(search.bound, cost), search.bound_source
    if cost <= bound:
        status = "optimal"
    elif search.best_source.startswith("heuristic"):
        status = "heuristic"
    else:
        status = "feasible"
    if cost == 0:
        status = "optimal"
        bound = 0
    stats = dict(search.stats)
    if sol.order in search.order_bounds:
        stats["order_bound"] = min(cost, max(bound, search.order_bounds[sol.order]))
    return MemoryPlan(
        capacity=capacity,
        order=tuple(problem.kernel_names[k] for k in sol.order),
        residencies=residencies,
        events=events,
        traffic=cost,
        compulsory=compulsory(problem),
        bounds=PlanBounds(ws, problem.kernel_names[k] if k >= 0 else "", peak_live(problem, sol.order),
                          bound, source, scope, search.capacity_only),
        solver=search.best_source,
        status=status,
        solve_time=time.perf_counter() - search.start,
        baseline_traffic=baseline,
        weights=weights,
        order_mode=order_mode,
        stats=tuple(sorted((k, v) for k, v in stats.items())),
    )


def memplan(program, *, capacity: int, order: str = "free", weights: bool = False, time_limit: float = 10.0,
            solver: str = "auto", progress=None, options: Options = Options()):
    """The Program with its memory plan attached and its kernels in the plan's order."""
    plan = plan_memory(program, capacity, order=order, weights=weights, time_limit=time_limit, progress=progress,
                       solver=solver, options=options)
    return with_plan(program, plan)


def with_plan(program, plan: MemoryPlan):
    """`program` with `plan` attached and its kernels in the plan's order."""
    by_name = {k.name: k for k in program.kernels}
    return dataclasses.replace(program, kernels=tuple(by_name[name] for name in plan.order), memory_plan=plan)


def plan_from_solution(problem: MemoryProblem, solution: Solution, capacity: int, *, solver: str = "given",
                       order_mode: str = "fixed", weights: bool = False) -> MemoryPlan:
    """A MemoryPlan for any solver-form solution (trivial bound), e.g. to check a heuristic's plan."""
    search = _Search(problem, 0.0, None)
    search.offer(solution, solver)
    return _make_plan(problem, capacity, search, search.best_cost, order_mode, weights)
