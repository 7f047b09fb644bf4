"""Baselines: HEFT (with insertion), CPOP, PEFT, memory-aware ETF and topological order (Baechi's
m-ETF and m-TOPO), and list scheduling of a fixed device assignment. All run on the shared engine, so all respect shared links and
memory capacities; each returns None when memory leaves it stuck.
"""
from __future__ import annotations

from collections.abc import Sequence

from .listsched import Stuck, best_device, etf_schedule, list_schedule
from .problem import PlacementProblem, Schedule


def mean_costs(pb: PlacementProblem) -> tuple[list[float], list[float]]:
    """Mean duration of each task over its devices, and mean transfer time of each tensor over device pairs."""
    w = [sum(pb.duration[i][p] for p in pb.capable[i]) / len(pb.capable[i]) for i in range(pb.n)]
    m = pb.m
    pairs = [(p, q) for p in range(m) for q in range(m) if p != q]
    c = [sum(row[p * m + q] for p, q in pairs) / len(pairs) if pairs else 0.0 for row in pb.xfer]
    return w, c


def edge_costs(pb: PlacementProblem, c: Sequence[float]) -> dict[tuple[int, int], float]:
    """Communication cost of each task edge: the sum over the tensors i makes that j reads."""
    cost: dict[tuple[int, int], float] = {}
    for k, t in enumerate(pb.tensors):
        if t.producer >= 0:
            for j in t.consumers:
                cost[(t.producer, j)] = cost.get((t.producer, j), 0.0) + c[k]
    return cost


def upward_rank(pb: PlacementProblem, w: Sequence[float], comm: dict[tuple[int, int], float]) -> list[float]:
    """rank_u(i) = w_i + max over successors j of (comm(i, j) + rank_u(j))."""
    rank = [0.0] * pb.n
    for i in range(pb.n - 1, -1, -1):
        rank[i] = w[i] + max((comm.get((i, j), 0.0) + rank[j] for j in pb.succs[i]), default=0.0)
    return rank


def downward_rank(pb: PlacementProblem, w: Sequence[float], comm: dict[tuple[int, int], float]) -> list[float]:
    """rank_d(i) = max over predecessors j of (rank_d(j) + w_j + comm(j, i))."""
    rank = [0.0] * pb.n
    for i in range(pb.n):
        rank[i] = max((rank[j] + w[j] + comm.get((j, i), 0.0) for j in pb.preds[i]), default=0.0)
    return rank


def heft_priority(pb: PlacementProblem) -> list[float]:
    w, c = mean_costs(pb)
    return upward_rank(pb, w, edge_costs(pb, c))


def heft(pb: PlacementProblem, stream: bool = False) -> Schedule | None:
    """HEFT (Topcuoglu et al. 2002): upward rank order, earliest finish with insertion."""
    try:
        return list_schedule(pb, heft_priority(pb), "heft", stream=stream)
    except Stuck:
        return None


def peft(pb: PlacementProblem, weight: float = 1.0, stream: bool = False) -> Schedule | None:
    """PEFT (Arabnejad and Barbosa 2014) with exact transfer costs: priority is the mean over
    devices of the optimistic cost table (the least time after a task on a device, `paths.tails`),
    and each task goes where EFT + weight * OCT is least, so a device that is fast now but costly
    for the successors is avoided."""
    from .paths import tails

    oct_ = tails(pb)
    prio = [sum(oct_[i][p] + pb.duration[i][p] for p in pb.capable[i]) / len(pb.capable[i]) for i in range(pb.n)]

    def choose(engine, i):
        best = None
        for q in pb.capable[i]:
            res = engine.evaluate(i, q)
            if res is not None:
                key = res[1] + weight * oct_[i][q]
                if best is None or key < best[0]:
                    best = (key, q, res)
        return best

    try:
        return list_schedule(pb, prio, "peft", choose=choose, stream=stream)
    except Stuck:
        return None


def thrifty(pb: PlacementProblem, weight: float = 1.0, stream: bool = False) -> Schedule | None:
    """HEFT order; each task where EFT + weight * (its time there - its fastest time) is least.

    On a busy system, running a task on a device much slower for it wastes capacity that later
    tasks need; plain EFT ignores that."""
    prio = heft_priority(pb)

    def choose(engine, i):
        best = None
        for q in pb.capable[i]:
            res = engine.evaluate(i, q)
            if res is not None:
                key = res[1] + weight * (pb.duration[i][q] - pb.fastest[i])
                if best is None or key < best[0]:
                    best = (key, q, res)
        return best

    try:
        return list_schedule(pb, prio, "thrifty", choose=choose, stream=stream)
    except Stuck:
        return None


PRIORITIES = ("rank_mean", "rank_fast", "oct")
CHOICES = ("eft", "thrifty0.5", "thrifty1", "thrifty2", "thrifty4", "oct0.5", "oct+thrifty")


def portfolio_variants() -> list[tuple[str, str]]:
    """(priority, device choice) pairs of the list-scheduling portfolio, best first on our benchmarks."""
    return [(p, c) for c in CHOICES for p in PRIORITIES if (p, c) != ("rank_mean", "eft")]


def variant(pb: PlacementProblem, priority: str, choice: str, stream: bool = False) -> Schedule | None:
    """One list scheduler of the portfolio.

    Priorities: upward rank with mean costs (HEFT's), with fastest costs and half the mean
    transfer, or PEFT's optimistic-cost rank. Device choice: earliest finish plus
    `thrifty w`: w * (time on the device - fastest time), `oct w`: w * optimistic cost after it,
    or `oct+thrifty`: half the optimistic cost plus the waste.
    """
    from .paths import tails

    w, c = mean_costs(pb)
    oct_ = tails(pb) if "oct" in priority or "oct" in choice else None
    if priority == "rank_mean":
        prio = upward_rank(pb, w, edge_costs(pb, c))
    elif priority == "rank_fast":
        prio = upward_rank(pb, [float(f) for f in pb.fastest], edge_costs(pb, [x * 0.5 for x in c]))
    else:
        prio = [sum(oct_[i][p] + pb.duration[i][p] for p in pb.capable[i]) / len(pb.capable[i]) for i in range(pb.n)]

    def key(i: int, q: int, finish: int) -> float:
        if choice == "eft":
            return finish
        if choice.startswith("thrifty"):
            return finish + float(choice[7:]) * (pb.duration[i][q] - pb.fastest[i])
        if choice == "oct+thrifty":
            return finish + 0.5 * oct_[i][q] + (pb.duration[i][q] - pb.fastest[i])
        return finish + float(choice[3:]) * oct_[i][q]

    def choose(engine, i):
        best = None
        for q in pb.capable[i]:
            res = engine.evaluate(i, q)
            if res is not None:
                k = key(i, q, res[1])
                if best is None or k < best[0]:
                    best = (k, q, res)
        return best

    try:
        return list_schedule(pb, prio, "portfolio", choose=choose, stream=stream)
    except Stuck:
        return None


def memory_binds(pb: PlacementProblem) -> bool:
    """Whether some device's capacity is below the bytes that could ever live on it."""
    return any(pb.memory_limited)


def cpop(pb: PlacementProblem) -> Schedule | None:
    """CPOP: priority rank_u + rank_d; the critical path goes on the one device fastest for all of it."""
    w, c = mean_costs(pb)
    comm = edge_costs(pb, c)
    up, down = upward_rank(pb, w, comm), downward_rank(pb, w, comm)
    prio = [a + b for a, b in zip(up, down)]
    if not pb.n:
        return list_schedule(pb, prio, "cpop")
    cp_len = max(prio)
    tol = 1e-9 * max(cp_len, 1.0)
    current = max((i for i in range(pb.n) if not pb.preds[i]), key=lambda i: (prio[i], -i))
    path = [current]
    while pb.succs[current]:
        nxt = [j for j in pb.succs[current] if abs(prio[j] - cp_len) <= tol]
        if not nxt:
            break
        current = nxt[0]
        path.append(current)
    on_path = set(path)
    able = [p for p in range(pb.m) if all(pb.duration[i][p] is not None for i in path)]
    cp_dev = min(able, key=lambda p: (sum(pb.duration[i][p] for i in path), p)) if able else None

    def choose(engine, i):
        if cp_dev is not None and i in on_path:
            res = engine.evaluate(i, cp_dev)
            if res is not None:
                return res[1], cp_dev, res
        return best_device(engine, i, pb.capable[i])

    try:
        return list_schedule(pb, prio, "cpop", choose=choose)
    except Stuck:
        return None


def metf(pb: PlacementProblem, width: int = 12) -> Schedule | None:
    """Memory-aware earliest-task-first (m-ETF, Baechi 2020), ties broken by upward rank."""
    try:
        return etf_schedule(pb, heft_priority(pb), "m-etf", width=width)
    except Stuck:
        return None


def mtopo(pb: PlacementProblem, stream: bool = False) -> Schedule | None:
    """Memory-aware topological order (Baechi's m-TOPO): program order, which keeps few tensors
    alive, each task at its earliest-finishing device that has room."""
    try:
        return list_schedule(pb, [-float(i) for i in range(pb.n)], "m-topo", stream=stream)
    except Stuck:
        return None


def assigned_priority(pb: PlacementProblem, assign: Sequence[int]) -> list[float]:
    """Upward rank with each task at its assigned device and transfers only where devices differ."""
    m = pb.m
    w = [pb.duration[i][assign[i]] for i in range(pb.n)]
    comm: dict[tuple[int, int], float] = {}
    for k, t in enumerate(pb.tensors):
        if t.producer >= 0:
            p = assign[t.producer]
            for j in t.consumers:
                q = assign[j]
                if p != q:
                    comm[(t.producer, j)] = comm.get((t.producer, j), 0.0) + pb.xfer[k][p * m + q]
    return upward_rank(pb, w, comm)


def assigned(pb: PlacementProblem, assign: Sequence[int], method: str,
             priority: Sequence[float] | None = None, strict: bool = False,
             param_pref: dict[int, int] | None = None) -> Schedule | None:
    """List-schedule with each task on its assigned device (another one where memory forbids it,
    unless `strict`); priority defaults to the upward rank under the assignment."""
    prio = priority if priority is not None else assigned_priority(pb, assign)

    def choose(engine, i):
        q = assign[i]
        res = engine.evaluate(i, q)
        if res is not None:
            return res[1], q, res
        if strict:
            return None
        return best_device(engine, i, pb.capable[i])

    try:
        return list_schedule(pb, prio, method, choose=choose, param_pref=param_pref)
    except Stuck:
        return None
