"""Independent plan checker: replays a MemoryPlan step by step against the raw problem.

It shares no code with the solvers: it reads only the raw fields of the problem (names, sizes,
kinds, kernel inputs and outputs) and the plan's named data, and recomputes everything else.
Checked: the order is a topological permutation; every operand of the running kernel is resident;
co-resident tensors never overlap; every residency lies inside the capacity at one fixed offset;
a tensor is resident only after it exists; each residency starts with its creation or a load of a
valid DRAM copy; graph outputs reach DRAM; and the reported traffic equals the listed events.
"""
from __future__ import annotations

from collections import defaultdict, namedtuple

_Problem = namedtuple("_Problem", "tensor_names sizes kinds is_output kernel_names kernel_inputs kernel_outputs")


def _without(problem, streamed: set[str]):
    """The raw problem without the tensors the plan streams by tiles (they never enter the scratchpad)."""
    if not streamed:
        return problem
    keep = [i for i, name in enumerate(problem.tensor_names) if name not in streamed]
    new = {old: i for i, old in enumerate(keep)}

    def pick(per_kernel):
        return tuple(tuple(new[i] for i in ts if i in new) for ts in per_kernel)
    return _Problem(*(tuple(getattr(problem, f)[i] for i in keep) for f in ("tensor_names", "sizes", "kinds",
                                                                         "is_output")),
                    problem.kernel_names, pick(problem.kernel_inputs), pick(problem.kernel_outputs))


class PlanCheckError(AssertionError):
    """A plan breaks the model; `violations` lists every problem found."""

    def __init__(self, violations: list[str]) -> None:
        self.violations = violations
        shown = "\n".join(f"  - {v}" for v in violations[:20])
        more = f"\n  ... and {len(violations) - 20} more" if len(violations) > 20 else ""
        super().__init__(f"memory plan is invalid ({len(violations)} violation(s)):\n{shown}{more}")


def find_violations(problem, plan) -> list[str]:
    """Every way `plan` breaks the model of `problem` (empty when valid); tensors the plan streams are left out."""
    problem = _without(problem, set(getattr(plan, "streamed", ())))
    bad: list[str] = []
    names = list(problem.tensor_names)
    tid = {n: i for i, n in enumerate(names)}
    kid = {n: k for k, n in enumerate(problem.kernel_names)}
    sizes = list(problem.sizes)
    C = plan.capacity
    made_by: dict[int, int] = {}
    for k, outs in enumerate(problem.kernel_outputs):
        for i in outs:
            made_by[i] = k
    is_input = [problem.kinds[i].value in ("input", "weight") for i in range(len(names))]

    # order: a permutation respecting producers
    if sorted(plan.order) != sorted(problem.kernel_names) or len(set(plan.order)) != len(plan.order):
        return [f"order {list(plan.order)} is not a permutation of the kernels"]
    step_of = {kid[n]: t for t, n in enumerate(plan.order)}
    for k, ins in enumerate(problem.kernel_inputs):
        for i in ins:
            if i in made_by and step_of[made_by[i]] >= step_of[k]:
                bad.append(f"kernel {problem.kernel_names[k]} runs at step {step_of[k]} before "
                           f"%{names[i]} is produced")
    T = len(plan.order)

    # residencies: shape, bounds, no self-overlap in time
    spans: dict[int, list] = defaultdict(list)
    for r in plan.residencies:
        if r.tensor not in tid:
            bad.append(f"residency of unknown tensor %{r.tensor}")
            continue
        i = tid[r.tensor]
        if r.size != sizes[i]:
            bad.append(f"%{r.tensor}: residency size {r.size} != tensor size {sizes[i]}")
        if not 0 <= r.start <= r.end < T:
            bad.append(f"%{r.tensor}: residency steps {r.start}..{r.end} outside 0..{T - 1}")
        if r.offset < 0 or r.offset + sizes[i] > C:
            bad.append(f"%{r.tensor}: bytes [{r.offset}, {r.offset + sizes[i]}) outside capacity {C}")
        if i in made_by and r.start < step_of[made_by[i]]:
            bad.append(f"%{r.tensor}: resident at step {r.start} before it is produced at step "
                       f"{step_of[made_by[i]]}")
        spans[i].append(r)
    for i, rs in spans.items():
        rs.sort(key=lambda r: r.start)
        for a, b in zip(rs, rs[1:]):
            if b.start <= a.end:
                bad.append(f"%{names[i]}: residencies {a.start}..{a.end} and {b.start}..{b.end} overlap in time")

    # step by step: operands resident, no overlap, capacity
    at_step: list[list] = [[] for _ in range(T)]
    for r in plan.residencies:
        if r.tensor in tid and 0 <= r.start <= r.end < T:
            for t in range(r.start, r.end + 1):
                at_step[t].append(r)
    for t, name in enumerate(plan.order):
        k = kid[name]
        here = {r.tensor for r in at_step[t]}
        for i in list(problem.kernel_inputs[k]) + list(problem.kernel_outputs[k]):
            if names[i] not in here:
                bad.append(f"step {t} ({name}): operand %{names[i]} is not resident")
        rs = sorted(at_step[t], key=lambda r: (r.offset, r.tensor))
        if sum(r.size for r in rs) > C:
            bad.append(f"step {t}: {sum(r.size for r in rs)} B resident exceeds capacity {C}")
        end_so_far, owner = 0, None
        for r in rs:
            if r.offset < end_so_far:
                bad.append(f"step {t}: %{r.tensor} [{r.offset}, {r.offset + r.size}) overlaps %{owner}")
            if r.offset + r.size > end_so_far:
                end_so_far, owner = r.offset + r.size, r.tensor

    # events: each residency begins with its creation or one load; loads need a DRAM copy
    loads = defaultdict(list)
    stores = defaultdict(list)
    for e in plan.events:
        if e.tensor not in tid:
            bad.append(f"event on unknown tensor %{e.tensor}")
            continue
        i = tid[e.tensor]
        if e.bytes != sizes[i]:
            bad.append(f"{e.kind} %{e.tensor}: {e.bytes} B != size {sizes[i]}")
        if e.kind == "load":
            loads[i].append(e.step)
        elif e.kind == "store":
            stores[i].append(e.step)
            if not any(r.start <= e.step <= r.end for r in spans.get(i, [])):
                bad.append(f"store %{e.tensor} at step {e.step}: not resident then")
        else:
            bad.append(f"event kind {e.kind!r} is neither load nor store")
    for i, rs in spans.items():
        for n, r in enumerate(rs):
            created = i in made_by and r.start == step_of[made_by[i]] and n == 0
            n_loads = loads[i].count(r.start)
            if created and n_loads:
                bad.append(f"%{names[i]}: loaded at step {r.start} where it is produced")
            if not created:
                if n_loads != 1:
                    bad.append(f"%{names[i]}: residency from step {r.start} has {n_loads} loads (needs 1)")
                elif not is_input[i] and not any(s < r.start for s in stores[i]):
                    bad.append(f"%{names[i]}: loaded at step {r.start} with no earlier store to DRAM")
    for i, steps in loads.items():
        for s in steps:
            if not any(r.start == s for r in spans.get(i, [])):
                bad.append(f"load %{names[i]} at step {s} starts no residency")
    outputs = [i for i in range(len(names)) if problem.is_output[i]]
    for i in outputs:
        if i in made_by and not stores[i]:
            bad.append(f"graph output %{names[i]} is never stored")

    # traffic: recount from the events
    compulsory = traffic = 0
    seen_load: set[int] = set()
    seen_out_store: set[int] = set()
    for e in sorted(plan.events, key=lambda e: (e.step, e.kind, e.tensor)):
        if e.tensor not in tid:
            continue
        i = tid[e.tensor]
        if e.kind == "load" and is_input[i] and i not in seen_load:
            seen_load.add(i)
            should = True
        elif e.kind == "store" and problem.is_output[i] and i not in seen_out_store:
            seen_out_store.add(i)
            should = True
        else:
            should = False
        if e.compulsory != should:
            bad.append(f"{e.kind} %{e.tensor} at step {e.step} marked compulsory={e.compulsory}, should be {should}")
        if should:
            compulsory += e.bytes
        else:
            traffic += e.bytes
    if traffic != plan.traffic:
        bad.append(f"reported traffic {plan.traffic} B != {traffic} B counted from the events")
    if compulsory != plan.compulsory:
        bad.append(f"reported compulsory traffic {plan.compulsory} B != {compulsory} B counted from the events")
    return bad


def check_plan(problem, plan) -> None:
    """Raise PlanCheckError when `plan` is not a valid plan for `problem`."""
    violations = find_violations(problem, plan)
    if violations:
        raise PlanCheckError(violations)
