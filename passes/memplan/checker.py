"""Independent plan checker: replays a MemoryPlan step by step against the raw problem.

It shares no code with the solvers: it reads only the raw fields of the problem (names, sizes,
kinds, kernel inputs and outputs) and the plan's named data, and recomputes everything else.
Checked: the order is a topological permutation; every operand of the running kernel is resident;
co-resident tensors never overlap; every residency lies inside the capacity at one fixed offset;
a tensor is resident only after it exists; each residency starts with its creation or a load of a
valid DRAM copy; graph outputs reach DRAM; and the reported traffic equals the listed events.
Streamed tensors (never resident) are checked apart, when the plan records their tile traffic:
events only at steps of kernels that read (loads) or write (stores) them, each reader loading at
least what it surely reads, the producer storing at least the tensor, the compulsory part only on
the first reader of an input and the producer of an output, and the streamed totals equal to them.
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


def find_violations(problem, plan, reads: dict[tuple[str, str], int] | None = None) -> list[str]:
    """Every way `plan` breaks the model of `problem` (empty when valid). Tensors the plan streams
    are checked apart (`_check_streams`); `reads` gives, per (kernel, tensor), bytes the kernel
    surely reads of it (its loop domain's distinct elements): a streamed load must move at least
    those (without it, at least one byte)."""
    bad: list[str] = []
    _check_streams(problem, plan, reads, bad)
    _check_streamed_precedence(problem, plan, bad)
    problem = _without(problem, set(getattr(plan, "streamed", ())))
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
    r = _Replay(problem, plan, names, tid, kid, sizes, C, made_by, is_input, step_of)
    _check_precedence(r, bad)
    spans = _check_residencies(r, bad)
    _check_steps(r, bad)
    loads, stores = _check_events(r, spans, bad)
    _check_loads_and_stores(r, spans, loads, stores, bad)
    _check_traffic(r, bad)
    return bad


class _Replay(namedtuple("_Replay", "problem plan names tid kid sizes capacity made_by is_input step_of")):
    """What every check reads (immutable; a namedtuple, as the checker imports nothing but `collections`): the
    raw problem and the plan, tensor names and indices (`tid`), kernel indices (`kid`), sizes, the capacity,
    each tensor's producing kernel (`made_by`), which tensors start in DRAM (`is_input`), each kernel's step."""

    __slots__ = ()

    @property
    def steps(self) -> int:
        return len(self.plan.order)


def _check_streamed_precedence(problem, plan, bad: list[str]) -> None:
    """Kernels reading a streamed tensor run after its producer (dropping the tensor from the
    scratchpad problem must not drop the dependence it carries)."""
    streamed = set(getattr(plan, "streamed", ()))
    step_of = {name: t for t, name in enumerate(plan.order)}
    made_at = {i: step_of.get(problem.kernel_names[k]) for k, outs in enumerate(problem.kernel_outputs) for i in outs}
    for k, ins in enumerate(problem.kernel_inputs):
        for i in ins:
            name, here = problem.tensor_names[i], step_of.get(problem.kernel_names[k])
            if name in streamed and i in made_at and None not in (here, made_at[i]) and made_at[i] >= here:
                bad.append(f"kernel {problem.kernel_names[k]} runs at step {here} before streamed %{name} is "
                           f"produced at step {made_at[i]}")


def _check_precedence(r: _Replay, bad: list[str]) -> None:
    """Every kernel runs after the producers of its inputs."""
    step_of, names = r.step_of, r.names
    for k, ins in enumerate(r.problem.kernel_inputs):
        for i in ins:
            if i in r.made_by and step_of[r.made_by[i]] >= step_of[k]:
                bad.append(f"kernel {r.problem.kernel_names[k]} runs at step {step_of[k]} before "
                           f"%{names[i]} is produced")


def _check_residencies(r: _Replay, bad: list[str]) -> dict[int, list]:
    """Residencies: size, steps and bytes in bounds, not before the tensor exists, no self-overlap in
    time; each known tensor's residencies, in order of start."""
    T, C, sizes, step_of, made_by = r.steps, r.capacity, r.sizes, r.step_of, r.made_by
    spans: dict[int, list] = defaultdict(list)
    for res in r.plan.residencies:
        if res.tensor not in r.tid:
            bad.append(f"residency of unknown tensor %{res.tensor}")
            continue
        i = r.tid[res.tensor]
        if res.size != sizes[i]:
            bad.append(f"%{res.tensor}: residency size {res.size} != tensor size {sizes[i]}")
        if not 0 <= res.start <= res.end < T:
            bad.append(f"%{res.tensor}: residency steps {res.start}..{res.end} outside 0..{T - 1}")
        if res.offset < 0 or res.offset + sizes[i] > C:
            bad.append(f"%{res.tensor}: bytes [{res.offset}, {res.offset + sizes[i]}) outside capacity {C}")
        if i in made_by and res.start < step_of[made_by[i]]:
            bad.append(f"%{res.tensor}: resident at step {res.start} before it is produced at step "
                       f"{step_of[made_by[i]]}")
        spans[i].append(res)
    for i, rs in spans.items():
        rs.sort(key=lambda res: res.start)
        for a, b in zip(rs, rs[1:]):
            if b.start <= a.end:
                bad.append(f"%{r.names[i]}: residencies {a.start}..{a.end} and {b.start}..{b.end} overlap in time")
    return spans


def _check_steps(r: _Replay, bad: list[str]) -> None:
    """Step by step: the running kernel's operands resident, the bytes within the capacity, no two
    residents overlapping."""
    T, C, names, problem = r.steps, r.capacity, r.names, r.problem
    at_step: list[list] = [[] for _ in range(T)]
    for res in r.plan.residencies:
        if res.tensor in r.tid and 0 <= res.start <= res.end < T:
            for t in range(res.start, res.end + 1):
                at_step[t].append(res)
    for t, name in enumerate(r.plan.order):
        k = r.kid[name]
        here = {res.tensor for res in at_step[t]}
        for i in list(problem.kernel_inputs[k]) + list(problem.kernel_outputs[k]):
            if names[i] not in here:
                bad.append(f"step {t} ({name}): operand %{names[i]} is not resident")
        rs = sorted(at_step[t], key=lambda res: (res.offset, res.tensor))
        if sum(res.size for res in rs) > C:
            bad.append(f"step {t}: {sum(res.size for res in rs)} B resident exceeds capacity {C}")
        end_so_far, owner = 0, None
        for res in rs:
            if res.offset < end_so_far:
                bad.append(f"step {t}: %{res.tensor} [{res.offset}, {res.offset + res.size}) overlaps %{owner}")
            if res.offset + res.size > end_so_far:
                end_so_far, owner = res.offset + res.size, res.tensor


def _check_events(r: _Replay, spans: dict[int, list],
                  bad: list[str]) -> tuple[defaultdict[int, list[int]], defaultdict[int, list[int]]]:
    """Events: known tensor, its size, a known kind, stores only while resident; the steps of each
    tensor's loads and stores."""
    loads: defaultdict[int, list[int]] = defaultdict(list)
    stores: defaultdict[int, list[int]] = defaultdict(list)
    for e in r.plan.events:
        if e.tensor not in r.tid:
            bad.append(f"event on unknown tensor %{e.tensor}")
            continue
        i = r.tid[e.tensor]
        if e.bytes != r.sizes[i]:
            bad.append(f"{e.kind} %{e.tensor}: {e.bytes} B != size {r.sizes[i]}")
        if e.kind == "load":
            loads[i].append(e.step)
        elif e.kind == "store":
            stores[i].append(e.step)
            if not any(res.start <= e.step <= res.end for res in spans.get(i, [])):
                bad.append(f"store %{e.tensor} at step {e.step}: not resident then")
        else:
            bad.append(f"event kind {e.kind!r} is neither load nor store")
    return loads, stores


def _check_loads_and_stores(r: _Replay, spans: dict[int, list], loads: defaultdict[int, list[int]],
                            stores: defaultdict[int, list[int]], bad: list[str]) -> None:
    """Each residency begins with its creation or one load; loads need a DRAM copy and start a
    residency; graph outputs reach DRAM."""
    names, made_by, step_of = r.names, r.made_by, r.step_of
    for i, rs in spans.items():
        for n, res in enumerate(rs):
            created = i in made_by and res.start == step_of[made_by[i]] and n == 0
            n_loads = loads[i].count(res.start)
            if created and n_loads:
                bad.append(f"%{names[i]}: loaded at step {res.start} where it is produced")
            if not created:
                if n_loads != 1:
                    bad.append(f"%{names[i]}: residency from step {res.start} has {n_loads} loads (needs 1)")
                elif not r.is_input[i] and not any(s < res.start for s in stores[i]):
                    bad.append(f"%{names[i]}: loaded at step {res.start} with no earlier store to DRAM")
    for i, steps in loads.items():
        for s in steps:
            if not any(res.start == s for res in spans.get(i, [])):
                bad.append(f"load %{names[i]} at step {s} starts no residency")
    outputs = [i for i in range(len(names)) if r.problem.is_output[i]]
    for i in outputs:
        if i in made_by and not stores[i]:
            bad.append(f"graph output %{names[i]} is never stored")


def _check_traffic(r: _Replay, bad: list[str]) -> None:
    """The reported traffic and compulsory traffic equal the events' bytes, each event marked
    compulsory exactly when it is the first load of an input or the first store of an output."""
    plan, tid = r.plan, r.tid
    compulsory = traffic = 0
    seen_load: set[int] = set()
    seen_out_store: set[int] = set()
    for e in sorted(plan.events, key=lambda e: (e.step, e.kind, e.tensor)):
        if e.tensor not in tid:
            continue
        i = tid[e.tensor]
        if e.kind == "load" and r.is_input[i] and i not in seen_load:
            seen_load.add(i)
            should = True
        elif e.kind == "store" and r.problem.is_output[i] and i not in seen_out_store:
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


def _check_streams(problem, plan, reads: dict[tuple[str, str], int] | None, bad: list[str]) -> None:
    """The tile traffic of streamed tensors, when the plan records it (`stream_events` not None).
    A reader must load what `reads` says it surely reads (nothing where it names no bytes), or
    without `reads` at least one byte. A size check uses the tensor's size less the plan's alignment
    padding (its true bytes are at least that)."""
    streamed = set(getattr(plan, "streamed", ()))
    events = getattr(plan, "stream_events", None)
    if events is None:
        return
    names = list(problem.tensor_names)
    tid = {n: i for i, n in enumerate(names)}
    step_of = {n: t for t, n in enumerate(plan.order)}
    kid = {n: k for k, n in enumerate(problem.kernel_names)}
    pad = max(1, getattr(plan, "align", 1)) - 1
    for name in sorted(streamed - set(tid)):
        bad.append(f"streamed tensor %{name} is no tensor of the problem")
    moved: defaultdict[tuple[str, str, int], int] = defaultdict(int)  # (tensor, kind, step) -> bytes
    comp: defaultdict[tuple[str, str], list[int]] = defaultdict(list)  # (tensor, kind) -> steps of compulsory bytes
    comp_bytes: defaultdict[tuple[str, str], int] = defaultdict(int)
    total = {True: 0, False: 0}
    for e in events:
        total[bool(e.compulsory)] += e.bytes
        if e.tensor not in streamed or e.tensor not in tid:
            bad.append(f"stream-{e.kind} of %{e.tensor}, which the plan does not stream")
            continue
        if e.kind not in ("load", "store"):
            bad.append(f"stream event kind {e.kind!r} is neither load nor store")
            continue
        if e.bytes <= 0:
            bad.append(f"stream-{e.kind} %{e.tensor} at step {e.step} moves {e.bytes} B")
        if not 0 <= e.step < len(plan.order):
            bad.append(f"stream-{e.kind} %{e.tensor} at step {e.step} outside 0..{len(plan.order) - 1}")
            continue
        k = kid.get(plan.order[e.step])
        ops = () if k is None else problem.kernel_inputs[k] if e.kind == "load" else problem.kernel_outputs[k]
        if tid[e.tensor] not in ops:
            verb = "read" if e.kind == "load" else "write"
            bad.append(f"stream-{e.kind} %{e.tensor} at step {e.step}: kernel {plan.order[e.step]} does not {verb} it")
            continue
        moved[e.tensor, e.kind, e.step] += e.bytes
        if e.compulsory:
            comp[e.tensor, e.kind].append(e.step)
            comp_bytes[e.tensor, e.kind] += e.bytes
    for name in sorted(streamed & set(tid)):
        i = tid[name]
        size = max(1, problem.sizes[i] - pad)
        readers = sorted((step_of[problem.kernel_names[k]], problem.kernel_names[k])
                         for k, ins in enumerate(problem.kernel_inputs) if i in ins and problem.kernel_names[k] in step_of)
        for t, kernel in readers:
            need = 1 if reads is None else reads.get((kernel, name), 0)
            if moved[name, "load", t] < need:
                bad.append(f"streamed %{name}: kernel {kernel} (step {t}) loads {moved[name, 'load', t]} B, "
                           f"less than the {need} B it reads")
        makers = [k for k, outs in enumerate(problem.kernel_outputs) if i in outs]
        for k in makers:
            t = step_of.get(problem.kernel_names[k])
            if t is not None and moved[name, "store", t] < size:
                bad.append(f"streamed %{name}: its producer {problem.kernel_names[k]} (step {t}) stores "
                           f"{moved[name, 'store', t]} B, less than its {size} B")
        dram_born = problem.kinds[i].value in ("input", "weight")
        first = [readers[0][0]] if dram_born and readers else []
        if any(t not in first for t in comp[name, "load"]):
            bad.append(f"streamed %{name}: compulsory loads at steps {comp[name, 'load']}; only the first read of "
                       "an input or weight is compulsory")
        if comp_bytes[name, "load"] > problem.sizes[i]:
            bad.append(f"streamed %{name}: {comp_bytes[name, 'load']} B of compulsory loads exceed its size")
        if dram_born and readers and comp_bytes[name, "load"] < min(size, moved[name, "load", first[0]]):
            bad.append(f"streamed %{name}: its first read at step {first[0]} is not counted as compulsory")
        wrote = [step_of[problem.kernel_names[k]] for k in makers if problem.kernel_names[k] in step_of]
        if comp[name, "store"] and (not problem.is_output[i] or any(t not in wrote for t in comp[name, "store"])):
            bad.append(f"streamed %{name}: compulsory stores, but it is no graph output written there")
        if problem.is_output[i] and wrote and comp_bytes[name, "store"] < size:
            bad.append(f"streamed graph output %{name}: {comp_bytes[name, 'store']} B of compulsory stores, "
                       f"less than its {size} B")
    if total[False] != getattr(plan, "streamed_traffic", 0):
        bad.append(f"reported streamed traffic {plan.streamed_traffic} B != {total[False]} B counted from "
                   "the stream events")
    if total[True] != getattr(plan, "streamed_compulsory", 0):
        bad.append(f"reported streamed compulsory traffic {plan.streamed_compulsory} B != {total[True]} B "
                   "counted from the stream events")


def check_plan(problem, plan, reads: dict[tuple[str, str], int] | None = None) -> None:
    """Raise PlanCheckError when `plan` is not a valid plan for `problem` (`reads`: see find_violations)."""
    violations = find_violations(problem, plan, reads)
    if violations:
        raise PlanCheckError(violations)
