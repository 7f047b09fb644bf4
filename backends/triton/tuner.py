"""The first CUDA run's tuning of one kernel: block-size variants (dot kernels), then warps and stages.

`TritonProgram._tune` hands each kernel here. Within the program's time budget (`autotune.Budget`,
one line printed when it starts) a dot kernel's variants (`variants.dot_variants`) are emitted as
functions of a module of their own and timed (3 stages; 4 warps, 8 for big blocks); the fastest is
installed in place of the kernel's function in the generated module (the launch step looks the
function up when it runs, so it launches the variant on its own grid), then warps and stages are
timed for it. Before it is timed, each candidate runs once on copies of the kernel's arguments and must give the
generated kernel's results (`crosscheck.py`): one that does not is reported and never installed. A kernel that is
one matmul (and an add, a short epilogue) or starts with one convolution also
times its library call (`library.py`: cuBLAS; `library_conv.py`: cuDNN, then the kernel's other ops generated),
right after its own tiling and before the other variants compile, so that compiles which take the kernel's whole
share never leave it out; if that wins, there are no warps and stages to time. Past the budget, such a kernel
still times its untuned self against the library call (two timings, nothing cached). Winners are kept per program
(kernels equal up to names are tuned once) and cached on disk per (kernel source, shapes, device); a cached variant
is installed again without timing. Any failure leaves the kernel as generated. The launcher hands the kernels over
longest first (`expected_seconds`, summed over a kernel's launches), and each kernel's share of the budget left is
its part of the expected time of the kernels left (`budget_share`), so a short budget goes where it pays, and each
set of candidates (the variants, then the winner's warps and stages) compiles side by side before any of the set is
timed (`warm`, `launch.parallel_compiles`).
"""
from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from . import autotune, crosscheck, library, library_conv, variants
from .launch import parallel_compiles

VARIANT_STAGES = 3  # pipeline stages the variants are compared at (4 warps, 8 for 128x128 blocks and up)
MIN_KERNEL_S = 3.0  # each kernel's share of the budget (the rest, by its part of the time left), at least this


class VariantLaunch:
    """Stands in for a kernel's @triton.jit function in the generated module: `fn[grid]` launches the
    variant on the variant's own grid, whatever grid the step asks for."""

    def __init__(self, fn, grid: int) -> None:
        self.fn, self.grid = fn, grid

    def __getitem__(self, grid):
        return self.fn[(self.grid,)]


@dataclass
class TuningState:
    """One program's tuning: its budget, winners by key, and the functions it replaced."""

    budget: autotune.Budget
    kernels: int
    # keys of the kernels not tuned yet -> their expected seconds per call (every launch of them): a kernel's share
    # of the budget is its part of what is left, so a program's few long products get the time they need
    left: dict[str, float] = field(default_factory=dict)
    chosen: dict[str, autotune.Choice] = field(default_factory=dict)
    launches: dict[str, tuple] = field(default_factory=dict)  # key -> (variant function, grid) installed
    originals: dict[str, object] = field(default_factory=dict)
    modules: list = field(default_factory=list)
    rejected: dict[str, dict[str, float]] = field(default_factory=dict)  # function -> {candidate: its deviation}


def state_of(compiled) -> TuningState:
    state = compiled.__dict__.get("_tuning")
    if state is None:
        left: dict[str, float] = {}
        for kernel, source in zip(compiled.program.kernels, compiled.generated.kernels):
            if source is not None:
                key = autotune.canonical(source.text)
                left[key] = left.get(key, 0.0) + expected_seconds(kernel, compiled.program.target)
        state = compiled.__dict__["_tuning"] = TuningState(autotune.Budget.from_env(), len(left), left)
    return state


def budget_share(state: TuningState, key: str, remaining: float) -> float:
    """Kernel `key`'s share of the `remaining` seconds, by its expected time among the kernels left (equal shares
    where none has one), at least MIN_KERNEL_S; it is no longer left after."""
    weight = state.left.pop(key, 0.0)
    total = weight + sum(state.left.values())
    share = remaining * weight / total if total > 0 else remaining / (len(state.left) + 1)
    return max(share, MIN_KERNEL_S)


def variant_functions(compiled, position: int, source, chosen: list[variants.Variant]):
    """Load the variants of kernel `position` as a module of their own (with the helpers they call):
    [(variant, jit function, grid)]."""
    from .module import kernel_module
    from .runtime import _interpreting, load_module

    kernel = compiled.program.kernels[position]
    options = compiled.options  # variants keep the precision the program was built with
    emitted = []
    for n, variant in enumerate(chosen):
        emitted.append((variant, variants.emit_variant(kernel, variant, f"{source.function}_v{n}", _interpreting(),
                                                       compiled.generated.names, options, compiled.generated.layouts,
                                                       compiled.generated.rounded)))
    module = load_module(kernel_module("\n\n".join(s.text for _, s in emitted)))
    return [(variant, getattr(module, s.function), s.grid) for variant, s in emitted]


def install(compiled, state: TuningState, source, fn=None, grid: int | None = None) -> None:
    """Launch `fn` on `grid` in place of the kernel's function (None: the generated function again).
    Programs of one source share the loaded module, so the generated functions are kept in it."""
    module = compiled.module()
    originals = module.__dict__.setdefault("_tg_generated_functions", {})
    if source.function not in originals:
        originals[source.function] = getattr(module, source.function)
    state.originals[source.function] = originals[source.function]
    setattr(module, source.function, originals[source.function] if fn is None else VariantLaunch(fn, grid))


def expected_seconds(kernel, target) -> float:
    """A kernel's roofline time on the target it was tiled for: the order the kernels are tuned in (0 for a
    program built without a target, such as a test's tiny tiling)."""
    if target is None:
        return 0.0
    compute = kernel.flops / target.peak_flops if target.peak_flops else 0.0
    traffic = kernel.io_bytes / target.dram_bandwidth if target.dram_bandwidth else 0.0
    return max(compute, traffic)


# (jit function, grid, warps, stages): compile it for the kernel's arguments
Warm = Callable[[object, int, int, int], object]


def _warm_all(warm: Warm | None, requests: Sequence[tuple[object, int, int, int]]) -> None:
    """Compile every (function, grid, warps, stages) side by side before any is timed; a compile that fails
    shows again when its candidate is launched, where the tuner skips it."""
    if warm is None:
        return
    try:
        with parallel_compiles(ignore_errors=True):
            for request in requests:
                warm(*request)
    except Exception:  # noqa: BLE001 (only the compiles ahead of time are lost: each launch compiles on its own)
        pass


def installed(compiled, source) -> tuple[object, int]:
    """The function and grid launched for kernel `source` now (a variant's, once one is installed)."""
    current = getattr(compiled.module(), source.function)
    return (current.fn, current.grid) if isinstance(current, VariantLaunch) else (current, source.grid)


def tune_kernel(compiled, position: int, launch, source, device, cache: autotune.ConfigCache,
                warm: Warm | None = None, args: Sequence | None = None) -> tuple[int, int]:
    """The (warps, stages) to launch kernel `position` with, its block-size variant installed. `warm`
    compiles a candidate without launching it (None: each compiles at its first launch); `args`: the kernel's
    arguments, which `launch(warps, stages, args=...)` also takes, to cross-check candidates on copies of them
    (None: unchecked)."""
    import torch

    state = state_of(compiled)
    name = torch.cuda.get_device_name(device)
    key = autotune.config_key(source.text, name)
    found = state.chosen.get(key) or cache.get(key)
    if found is not None and found.library and not library.enabled():
        found = None  # library calls switched off since: tune again
    if found is not None:
        state.left.pop(autotune.canonical(source.text), None)
        if key in state.launches:  # a kernel equal to one tuned here (a repeated layer): its variant, compiled once
            install(compiled, state, source, *state.launches[key])
            return found.config
        as_generated = found.tiles is None and not found.library
        if as_generated or _install_choice(compiled, state, position, source, found, key):
            state.chosen[key] = found
            return found.config
    budget = state.budget
    budget.start(f"{state.kernels} distinct Triton kernels on {name}")
    if budget.spent():
        budget.skipped.append(source.function)
        if source.uses_dot:
            _library_if_faster(compiled, state, position, launch, source, key, warm, args)
        return compiled.configs[position]
    now = budget.clock()
    deadline = min(budget.deadline, now + budget_share(state, autotune.canonical(source.text), budget.deadline - now))
    times: dict = {}
    chosen_variant, configs = None, autotune.candidates(source.uses_dot)
    if source.uses_dot:
        chosen_variant, times["tiles"], timed_at = _tune_tiles(compiled, state, position, launch, source, deadline,
                                                               budget.clock, key, warm, args)
        if chosen_variant is not None and chosen_variant.library:  # no warps or stages to time
            compiled.timings[position] = times
            choice = state.chosen[key] = autotune.Choice(*timed_at, library=True)
            if budget.clock() < deadline:
                cache.put(key, choice)
            return choice.config
        # the winner's own (warps, stages) first: the one always timed, so a deadline that cuts the rest
        # never leaves a 256 x 128 block at 4 warps (its accumulator alone would fill the registers)
        configs = (timed_at, *(c for c in configs if c != timed_at)) if timed_at else configs
    # past the deadline only the first is timed: compile only it
    ahead = configs if budget.clock() < deadline else configs[:1]
    _warm_all(warm, [(*installed(compiled, source), *config) for config in ahead])
    best, config_times, complete = autotune.tune(launch, configs, deadline=deadline, clock=budget.clock)
    times["config"] = config_times
    compiled.timings[position] = times
    choice = autotune.Choice(*best) if chosen_variant is None else \
        autotune.Choice(*best, tiles=chosen_variant.tiles, group_m=chosen_variant.group_m,
                        persistent=chosen_variant.persistent)
    # kept for this program's kernels equal to this one whatever the deadline cut (a repeated layer tuned again
    # past the budget kept its generated kernel), cached on disk only when complete, so that a run with more
    # budget tunes the rest
    state.chosen[key] = choice
    if complete:
        cache.put(key, choice)
    return best


def _variant_warps(kernel, variant: variants.Variant) -> int:
    """Warps a variant is timed with: as an untuned kernel of its blocks would launch (`autotune.dot_warps`)."""
    shape = variants.dot_shape(kernel.with_tiles(variant.tiles))
    return autotune.dot_warps(shape.accumulator if shape is not None else 0)


def library_candidate(compiled, position: int, source) -> library.LibraryCall | None:
    """The library call computing kernel `position`: cuBLAS for one matmul with a short epilogue, cuDNN for a
    convolution with its epilogue generated (None: neither)."""
    from .runtime import _interpreting

    kernel, layouts, names = compiled.program.kernels[position], compiled.generated.layouts, compiled.generated.names
    name = f"{source.function}_library"
    return library.library_call(kernel, source.args, layouts, compiled.options, name, names, _interpreting()) or \
        library_conv.conv_call(kernel, source.args, layouts, compiled.options, name, names, _interpreting())


def _device_units() -> int | None:
    """The current CUDA device's SMs: what a persistent variant launches (None without CUDA: the target's)."""
    import torch

    return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count \
        if torch.cuda.is_available() else None


def _candidates(compiled, position, source) -> list[tuple[variants.Variant, object, int]]:
    """[(variant, function, grid)]: the Program's own tiling (its function unused: the generated one runs), the
    library call where the kernel is one, then the other block-size variants."""
    kernel = compiled.program.kernels[position]
    try:
        proposed = variants.dot_variants(kernel, compiled.program.target, options=compiled.options,
                                         orders=compiled.program.storage_orders(), units=_device_units())
        loaded = variant_functions(compiled, position, source, proposed) if len(proposed) > 1 else []
    except Exception:  # no variants for this kernel
        proposed, loaded = [], []
    found = loaded or [(proposed[0] if proposed else variants.Variant(tuple(kernel.tiles)), None, source.grid)]
    call = library_candidate(compiled, position, source) if library.enabled() else None
    if call is not None:
        found.insert(1, (variants.Variant(found[0][0].tiles, library=True), call, source.grid))
    return found


def _cross_check(compiled, position: int, source, args, run) -> crosscheck.CrossCheck | None:
    """The generated kernel's results on probe copies of its arguments (None without arguments, or if the
    generated kernel itself cannot run on them)."""
    if args is None:
        return None
    kernel = compiled.program.kernels[position]
    written = [n for n, value in enumerate(source.args) if value in kernel.outputs]
    shared = [n for n, value in enumerate(source.args) if value in compiled.params]
    try:
        return crosscheck.CrossCheck.of(args, written, shared, run)
    except Exception:  # noqa: BLE001 (the candidates are then timed unchecked, as before cross-checks)
        return None


def _agrees(state, check: crosscheck.CrossCheck | None, source, label: str, run) -> bool:
    """Whether the installed candidate gives the generated kernel's results (True when unchecked); a candidate
    that does not is reported once and kept in `state.rejected`."""
    if check is None:
        return True
    deviation = check.deviation(run)
    if deviation <= crosscheck.TOLERANCE:
        return True
    state.rejected.setdefault(source.function, {})[label] = deviation
    print(f"tilegraph: {source.function}: {label} left out: its results differ from the generated kernel's by "
          f"{deviation:.3g} of their magnitude", file=sys.stderr, flush=True)
    return False


def _tune_tiles(compiled, state, position, launch, source, deadline, clock, key, warm=None, args=None):
    """Time the kernel's block-size variants (and library call), each cross-checked first against the generated
    kernel where `args` are given; install the fastest. (variant or None, {label: ms}, the (warps, stages) the
    winner was timed at, or None when nothing was timed)."""
    kernel = compiled.program.kernels[position]
    loaded = _candidates(compiled, position, source)
    if len(loaded) <= 1:
        return None, {}, None
    install(compiled, state, source)  # variant 0 is the generated function itself
    generated = installed(compiled, source)
    warps_of = [_variant_warps(kernel, variant) for variant, _, _ in loaded]
    times = {}
    checks = []  # the generated kernel's results on probe copies, once it is compiled (first set, on the pool)

    def time_each(positions) -> None:
        _warm_all(warm, [(*(generated if n == 0 else loaded[n][1:]), warps_of[n], VARIANT_STAGES) for n in positions])
        if not checks:
            install(compiled, state, source)
            checks.append(_cross_check(compiled, position, source, args,
                                       lambda probe: launch(warps_of[0], VARIANT_STAGES, args=probe)))
        check = checks[0]
        for n in positions:
            variant, fn, grid = loaded[n]
            if n and not variant.library and clock() >= deadline:
                return
            try:
                install(compiled, state, source, None if n == 0 else fn, grid)
                if n and not _agrees(state, check, source, variant.label(),
                                     lambda probe: launch(warps_of[n], VARIANT_STAGES, args=probe)):
                    continue
                times[variant.label()] = autotune.measure(lambda: launch(warps_of[n], VARIANT_STAGES))
            except Exception:  # a tiling this device cannot run
                continue

    # the kernel as generated and its library call first, whatever the deadline: neither compiles more than the
    # kernel's first launch would (compiling every variant ahead can take a big kernel's whole share)
    time_each([n for n, (variant, _, _) in enumerate(loaded) if n == 0 or variant.library])
    if clock() < deadline:
        time_each([n for n, (variant, _, _) in enumerate(loaded) if n and not variant.library])
    if not times:
        install(compiled, state, source)
        return None, {}, None
    best = min(times, key=times.get)
    n = next(n for n, (v, _, _) in enumerate(loaded) if v.label() == best)
    variant, fn, grid = loaded[n]
    install(compiled, state, source, None if n == 0 else fn, grid)
    state.launches[key] = (None, None) if n == 0 else (fn, grid)
    return (None if n == 0 else variant), times, (warps_of[n], VARIANT_STAGES)


def _library_if_faster(compiled, state, position, launch, source, key, warm=None, args=None) -> None:
    """Past the budget: the generated kernel (untuned) and its library call timed once each (no compiles but
    the kernel's own, which its first launch needs anyway), the faster installed and kept for the program's
    kernels equal to it; not cached, so that a run with more budget tunes the kernel in full."""
    call = library_candidate(compiled, position, source) if library.enabled() else None
    if call is None:
        return
    warps, stages = compiled.configs[position]
    _warm_all(warm, [(*installed(compiled, source), warps, stages)])
    times = {}
    check = _cross_check(compiled, position, source, args, lambda probe: launch(warps, stages, args=probe))
    try:
        times["generated"] = autotune.measure(lambda: launch(warps, stages))
        install(compiled, state, source, call, source.grid)
        if not _agrees(state, check, source, library.LABEL, lambda probe: launch(warps, stages, args=probe)):
            install(compiled, state, source)
            return
        times[library.LABEL] = autotune.measure(lambda: launch(warps, stages))
    except Exception:  # noqa: BLE001 (either failing: the generated kernel stays)
        install(compiled, state, source)
        return
    compiled.timings[position] = {"tiles": times}
    won = min(times, key=times.get) == library.LABEL
    if not won:
        install(compiled, state, source)
    state.launches[key] = (call, source.grid) if won else (None, None)
    state.chosen[key] = autotune.Choice(warps, stages, library=won)


def _install_choice(compiled, state, position, source, choice: autotune.Choice, key: str) -> bool:
    """Install a cached variant or library call; False (and the generated function kept) if it cannot be made
    now."""
    try:
        if choice.library:
            fn, grid = library_candidate(compiled, position, source), source.grid
            if fn is None:
                raise ValueError("no longer a library call")
        else:
            variant = variants.Variant(choice.tiles, choice.group_m or variants.GROUP_M,
                                       persistent=choice.persistent)
            ((_, fn, grid),) = variant_functions(compiled, position, source, [variant])
        install(compiled, state, source, fn, grid)
        state.launches[key] = (fn, grid)
        return True
    except Exception:
        install(compiled, state, source)
        return False


__all__ = ["tune_kernel", "expected_seconds", "installed", "VariantLaunch", "TuningState", "variant_functions",
           "install", "library_candidate"]
