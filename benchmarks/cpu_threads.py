"""How the C++ backend's threads scale on this host, with the facts that decide them.

    python benchmarks/cpu_threads.py                 # writes benchmarks/results/cpu_threads.md
    python benchmarks/cpu_threads.py --out /tmp/t.md # GPT-2 small (2 layers), batch 1, f32, anywhere

On the 16-core host of a GPU machine the dynamo CPU row ran 4.4x slower than Inductor (`dynamo_gpu.md`), while on a
2-core machine it is 1.5x faster: as if tilegraph's kernels ran on one thread there. This script times tilegraph's
library and torch eager side by side at 1 thread, at half and at all of the CPUs this process may use (setting both
`torch.set_num_threads` and the library's `threads`), then with nothing set, and again after CUDA is initialised
where there is a GPU. Beside each row it records what fixes the thread count: the CPUs in the affinity mask (the
main thread's and every thread's), the cgroup CPU quota, the OpenMP and compiler variables, torch's threads, the
OpenMP runtimes loaded, and the library's compiler flags. Two runtimes (torch's own libgomp and the system's) mean
`torch.set_num_threads` does not reach tilegraph's kernels; `omp max` is the library's own runtime's
`omp_get_max_threads()`, the cap on its threads.
"""
from __future__ import annotations

import argparse
import datetime
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from timing import interleaved  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "cpu_threads.md"
ROUNDS, CALLS = 7, 5


def cgroup_quota() -> str:
    """The cgroup's CPU quota in CPUs ("none" if unlimited or unreadable): v2 cpu.max, else v1 cfs."""
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()
        return "none" if quota == "max" else f"{int(quota) / int(period):g}"
    except (OSError, ValueError):
        pass
    try:
        quota = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").read_text())
        period = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us").read_text())
        return "none" if quota < 0 else f"{quota / period:g}"
    except (OSError, ValueError):
        return "none"


def openmp_runtimes() -> list[str]:
    """The OpenMP runtimes mapped into this process, by path."""
    try:
        maps = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return []
    return sorted({line.split()[-1] for line in maps if re.search(r"/lib[gi]?omp[-.][^/]*$", line.split()[-1])})


def thread_affinities() -> str:
    """Every thread's allowed CPUs, grouped: "N x LIST" per distinct list (a pinned pool shows up here)."""
    counts: dict[str, int] = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            status = (task / "status").read_text()
        except OSError:
            continue
        found = re.search(r"Cpus_allowed_list:\s*(\S+)", status)
        if found:
            counts[found.group(1)] = counts.get(found.group(1), 0) + 1
    return ", ".join(f"{n} x {cpus}" for cpus, n in sorted(counts.items(), key=lambda item: -item[1]))


def facts(torch, fn) -> str:
    lib = getattr(fn, "_lib", None)
    omp_max = lib.omp_get_max_threads() if lib is not None and hasattr(lib, "omp_get_max_threads") else "?"
    env = ", ".join(f"{k}={os.environ[k]}" for k in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "OMP_PROC_BIND",
                                                   "GOMP_CPU_AFFINITY", "GOMP_SPINCOUNT", "CXX", "CXXFLAGS")
                    if k in os.environ)
    return (f"torch {torch.get_num_threads()}; omp max {omp_max}; main thread CPUs {len(os.sched_getaffinity(0))} "
            f"of {os.cpu_count()}; quota {cgroup_quota()}; {env or 'no OMP variables'}; "
            f"runtimes {', '.join(Path(r).name for r in openmp_runtimes()) or 'none'}; "
            f"threads by CPUs {thread_affinities()}")


def timed(calls: dict) -> dict[str, float]:
    """Median ms per call of each callable, interleaved in rounds."""
    return {name: seconds * 1e3 for name, seconds in interleaved(calls, ROUNDS, CALLS).items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--layers", type=int, default=2)
    args = parser.parse_args()

    import numpy as np
    import torch
    from torch_models import whole_model

    import tilegraph
    from tilegraph.ir.host import usable_cpus
    from tilegraph.frontends.fx import from_module

    model = whole_model("gpt2_small")
    module, inputs = model.build_in("f32", 1, layers=args.layers)
    with torch.no_grad():
        fn = tilegraph.compile(from_module(module, inputs), target="cpp")
        arrays = [x.numpy() for x in inputs]
        want = module(*inputs)
    got = fn(*arrays)[0]
    error = float(np.abs(got - want.numpy()).max() / np.abs(want.numpy()).max())
    default_torch, default_tg, cpus = torch.get_num_threads(), fn.threads, usable_cpus()
    built = f"{Path(fn.build_info.get('compiler', '?').split()[0]).name} {fn.build_info.get('flags', '?')}"

    def row(label: str) -> str:
        with torch.no_grad():
            t = timed({"tg": lambda: fn(*arrays), "eager": lambda: module(*inputs)})
        line = (f"| {label} | {fn.threads} / {torch.get_num_threads()} | {t['tg']:.2f} | {t['eager']:.2f} | "
                f"{t['tg'] / t['eager']:.2f} | {facts(torch, fn)} |")
        print(line, flush=True)
        return line

    rows = []
    for threads in sorted({1, max(1, cpus // 2), cpus}):
        torch.set_num_threads(threads)
        fn.threads = threads
        rows.append(row(f"{threads} set"))
    torch.set_num_threads(default_torch)
    fn.threads = default_tg
    rows.append(row("defaults"))
    if torch.cuda.is_available():  # the dynamo row ran after GPU rows: does CUDA's start change the CPU side?
        torch.zeros(1, device="cuda").add_(1)
        torch.cuda.synchronize()
        rows.append(row("defaults, CUDA initialised"))

    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    text = "\n".join([
        "# C++ backend threads on this host: tilegraph vs torch eager", "",
        f"Run {when} by `python benchmarks/cpu_threads.py{' ' + ' '.join(sys.argv[1:]) if sys.argv[1:] else ''}`; "
        f"torch {torch.__version__}; GPT-2 small, {args.layers} layers, batch 1, f32; max error vs eager "
        f"{error:.1e} of the output's magnitude; built by `{built}`. Median ms per call over {ROUNDS} interleaved "
        f"rounds of {CALLS} calls. "
        "`threads tg / torch`: the library's `threads` and `torch.get_num_threads()`; `omp max`: "
        "`omp_get_max_threads()` of the library's own OpenMP runtime (its cap); `threads by CPUs`: how many of the "
        "process's threads may run on which CPUs.", "",
        "| setting | threads tg / torch | tg ms | eager ms | tg/eager | facts |", "|---|---|---:|---:|---:|---|",
        *rows, ""])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
