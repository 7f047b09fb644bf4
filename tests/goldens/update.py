"""Process-replay goldens: what the compiler generates for every example, kept in the repository.

For every `examples/*.tg`, after the default pipeline each backend gets from `tilegraph.compile`
(`driver.default_pipeline` of the backend's tile target, from the backend registry; on a GPU target it
runs the layout pass):

    <example>.cpp            backends.cpp.generate_source
    <example>.sycl.cpp       backends.sycl.generate_source
    <example>.triton.py      backends.triton.generate_source (only where triton is importable)
    <example>.sim-edge-npu.txt  the simulator's timeline on accelerator edge-npu, one line per command

`tests/test_goldens.py` regenerates them in memory and fails with a diff when any differ: a change
to generated code shows up in review as a change to these files. After an intended change, run

    python tests/goldens/update.py

and explain the change in the commit message. `--check` only reports the files that differ.
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GOLDENS = Path(__file__).resolve().parent
EXAMPLES = sorted((ROOT / "examples").glob("*.tg"))
SIM_ACCEL = "edge-npu"


def triton_available() -> bool:
    return importlib.util.find_spec("triton") is not None


def scheduled(source, backend: str):
    """An example (a path) or a Graph after the default pipeline of `backend`: the pipeline
    `tilegraph.compile` runs, for the tile target of the backend's registry entry."""
    from tilegraph.backends.base import get_backend
    from tilegraph.driver import compile_program, load_program

    program, _ = compile_program(load_program(source) if isinstance(source, Path) else source,
                                 target=get_backend(backend).tile_target)
    return program


def sim_timeline(path: Path, accel: str = SIM_ACCEL) -> str:
    """The simulator's timeline for the example on `accel`: one line per command, in issue order,
    with its kind, unit, kernel, tensor, bytes and start and end cycle."""
    from tilegraph.backends.sim import simulate
    from tilegraph.frontends.dsl import parse_file
    from tilegraph.simulation import prepare

    report = simulate(prepare(parse_file(path), accel, solver="heuristic"), accel)
    lines = [f"# simulated timeline of {path.name} on {accel}: {report.cycles} cycles, "
             f"{len(report.timeline)} commands",
             "# start end kind unit kernel step tensor bytes"]
    for t in report.timeline:
        c = t.command
        lines.append(f"{t.start} {t.end} {c.kind} {c.unit} {c.kernel} {c.step} {c.tensor or '-'} {c.bytes}")
    return "\n".join(lines) + "\n"


def _cpp(path: Path) -> str:
    from tilegraph.backends import cpp

    return cpp.generate_source(scheduled(path, "cpp"))


def _sycl(path: Path) -> str:
    from tilegraph.backends import sycl

    return sycl.generate_source(scheduled(path, "sycl"))


def _triton(path: Path) -> str:
    from tilegraph.backends import triton

    return triton.generate_source(scheduled(path, "triton"))


# golden kind -> (file suffix, generator, whether it needs triton)
KINDS: dict[str, tuple[str, Callable[[Path], str], bool]] = {
    "cpp": (".cpp", _cpp, False),
    "sycl": (".sycl.cpp", _sycl, False),
    "triton": (".triton.py", _triton, True),
    "sim": (f".sim-{SIM_ACCEL}.txt", sim_timeline, False),
}


def golden_path(example: Path, kind: str) -> Path:
    return GOLDENS / f"{example.stem}{KINDS[kind][0]}"


def generate(example: Path, kind: str) -> str:
    """The text the golden of `example` and `kind` should hold."""
    return KINDS[kind][1](example)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="report the goldens that differ, write nothing")
    args = parser.parse_args(argv)
    kinds = [k for k, (_, _, needs_triton) in KINDS.items() if triton_available() or not needs_triton]
    if "triton" not in kinds:
        print("triton is not importable: the Triton goldens are left as they are", file=sys.stderr)
    stale = []
    for example in EXAMPLES:
        for kind in kinds:
            path, text = golden_path(example, kind), generate(example, kind)
            old = path.read_text(encoding="utf-8") if path.exists() else None
            if old == text:
                continue
            stale.append(path)
            if not args.check:
                path.write_text(text, encoding="utf-8")
    known = {golden_path(e, k) for e in EXAMPLES for k in KINDS}
    orphans = sorted(p for p in GOLDENS.iterdir() if p.is_file() and p.name != "update.py" and p not in known)
    for path in stale:
        print(f"{'differs' if args.check else 'wrote'} {path.relative_to(ROOT)}")
    for path in orphans:
        print(f"no example makes {path.relative_to(ROOT)} (remove it)")
    if not stale and not orphans:
        print("goldens up to date")
    return 1 if args.check and (stale or orphans) else 0


if __name__ == "__main__":
    sys.exit(main())
