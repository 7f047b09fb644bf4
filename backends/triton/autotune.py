"""Launch configurations per kernel, timed on the device when there is one: warps and pipeline stages for
every kernel, and for dot kernels (matmul, conv, attention) also block sizes BLOCK_M/N/K and GROUP_M
(`variants.py`: candidate tilings from the tile model, each emitted as its own function).

Without a CUDA device (tests run the Triton interpreter) every kernel gets `default_config` and the
Program's tiles, and nothing is timed. With one, the first run of a program times the candidates of each kernel
on the real buffers (`measure`: triton's do_bench, or its CUDA-graph timer with TILEGRAPH_TUNE_TIMER=graph) and
keeps the fastest, within a time budget per program (`TILEGRAPH_TUNE_SECONDS`, default `TUNE_SECONDS`; it
prints one line when it starts). Winners
are cached per (kernel source, shapes, device) in a JSON file under the user cache directory, so later
processes skip it; kernels the budget did not reach keep their defaults and are not cached.
"""
from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT = (4, 2)
DOT_DEFAULT = (4, 3)  # a tl.dot kernel's loads pipelined three stages deep, where they fit
STAGED_BYTES = 192 << 10  # shared memory all stages' operand blocks may take (the epilogue's scratch needs room)
WIDE_ACCUMULATOR = 128 * 128  # accumulator elements from which a dot kernel runs 8 warps (`dot_warps`)
DOT_CANDIDATES = ((4, 3), (8, 3), (4, 4), (8, 4), (4, 2))
CANDIDATES = ((4, 2), (8, 2), (2, 2), (16, 2), (4, 3))
TUNE_SECONDS = 60.0  # one program's first-run tuning, at most (compiles included)


def cache_dir() -> Path:
    """`$TILEGRAPH_CACHE_DIR`, else `$XDG_CACHE_HOME/tilegraph`, else `~/.cache/tilegraph`."""
    if os.environ.get("TILEGRAPH_CACHE_DIR"):
        return Path(os.environ["TILEGRAPH_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tilegraph"


def dot_warps(accumulator: int) -> int:
    """Warps for a dot kernel whose f32 accumulator blocks (all its dots', live together) have `accumulator`
    elements: 8 (two warpgroups) from 128 x 128 up, else 4. At 4 warps a 128 x 256 block took 255 registers a thread on
    sm_90 (170 at 8), one 4-warp program per multiprocessor."""
    return 8 if accumulator >= WIDE_ACCUMULATOR else 4


def default_config(stage_bytes: int | None, accumulator: int = 0) -> tuple[int, int]:
    """(warps, stages) of a kernel before tuning, or when the budget does not reach it: `DEFAULT` for a kernel
    without tl.dot (`stage_bytes` None); for a dot kernel `dot_warps(accumulator)` and three stages where its
    operand blocks (`stage_bytes` a stage) fit three in `STAGED_BYTES`, else two. Untuned dot kernels (most of
    a whole model's in a short budget) then overlap their loads."""
    if not stage_bytes:
        return DEFAULT
    stages = DOT_DEFAULT[1] if DOT_DEFAULT[1] * stage_bytes <= STAGED_BYTES else DEFAULT[1]
    return dot_warps(accumulator), stages


def candidates(uses_dot: bool) -> tuple[tuple[int, int], ...]:
    return DOT_CANDIDATES if uses_dot else CANDIDATES


# string literals (kept), then names: not attributes (`tl.dot`), not keyword arguments (`mask=`)
_WORD = re.compile(r"(\"[^\"\n]*\"|'[^'\n]*')|(?<![.\w])[A-Za-z_]\w*(?!\w|=(?!=))")


def _bound_names(kernel_text: str) -> frozenset[str]:
    """The names the kernel itself binds: its function, parameters and locals. Every other name (a
    helper such as `_tg_tanh`, `tl`, a builtin) means the same in every kernel and must stay."""
    try:
        tree = ast.parse(kernel_text)
    except SyntaxError:  # not a whole function: rename nothing, so it equals only itself
        return frozenset()
    bound = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            bound.add(node.name)
            bound.update(arg.arg for arg in node.args.args)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
    return frozenset(bound)


def canonical(kernel_text: str) -> str:
    """The kernel's text with its own names (function, pointers, locals) renamed in order of first use:
    kernels equal up to names (the layers of a transformer) get one key, so one tuning, and one compiled
    function, serves all. Names it does not bind keep their spelling: a kernel calling `_tg_tanh` never
    equals one calling `_tg_erf`."""
    bound = _bound_names(kernel_text)
    renamed: dict[str, str] = {}

    def rename(match: re.Match) -> str:
        word = match.group(0)
        if match.group(1) or word not in bound:
            return word
        return renamed.setdefault(word, f"n{len(renamed)}")

    return _WORD.sub(rename, kernel_text)


def config_key(kernel_text: str, device_name: str) -> str:
    """Kernel sources hold every shape as a constant, so the text (up to names) identifies kernel and shapes."""
    return hashlib.sha256(f"{device_name}\n{canonical(kernel_text)}".encode()).hexdigest()[:24]


@dataclass(frozen=True)
class Choice:
    """A kernel's launch: warps, stages, and the tiles of a block-size variant (None: the Program's), or
    `library`: the kernel runs as a library call (`library.py`; warps and stages unused)."""

    warps: int
    stages: int
    tiles: tuple[tuple[str, int], ...] | None = None
    group_m: int | None = None
    library: bool = False
    persistent: int = 0  # the variant's programs when it is a persistent kernel

    @property
    def config(self) -> tuple[int, int]:
        return self.warps, self.stages

    def to_json(self) -> dict:
        out: dict = {"warps": self.warps, "stages": self.stages}
        if self.tiles is not None:
            out["tiles"] = [list(t) for t in self.tiles]
            out["group_m"] = self.group_m
        if self.library:
            out["library"] = True
        if self.persistent:
            out["persistent"] = self.persistent
        return out

    @staticmethod
    def from_json(found) -> Choice:
        if isinstance(found, list):  # written before block sizes were tuned: [warps, stages]
            return Choice(int(found[0]), int(found[1]))
        tiles = found.get("tiles")
        return Choice(int(found["warps"]), int(found["stages"]),
                      None if tiles is None else tuple((str(n), int(s)) for n, s in tiles),
                      None if found.get("group_m") is None else int(found["group_m"]), bool(found.get("library")),
                      int(found.get("persistent", 0)))


class ConfigCache:
    """Winners on disk: one JSON object key -> Choice (as `Choice.to_json`)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or cache_dir() / "triton" / "autotune.json"
        try:
            self.data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            self.data = {}

    def get(self, key: str) -> Choice | None:
        found = self.data.get(key)
        try:
            return Choice.from_json(found) if found else None
        except (KeyError, TypeError, ValueError):  # an entry this version cannot read: tune again
            return None

    def put(self, key: str, choice: Choice | tuple[int, int]) -> None:
        if not isinstance(choice, Choice):
            choice = Choice(*choice)
        self.data[key] = choice.to_json()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(self.data, indent=1, sort_keys=True))
            tmp.replace(self.path)
        except OSError:
            pass  # a read-only cache only costs re-tuning


@dataclass
class Budget:
    """The time one program may spend tuning on its first run; says so once when it starts."""

    seconds: float
    clock: object = time.perf_counter
    started: float | None = None
    skipped: list[str] = field(default_factory=list)

    @staticmethod
    def from_env() -> Budget:
        try:
            seconds = float(os.environ.get("TILEGRAPH_TUNE_SECONDS", TUNE_SECONDS))
        except ValueError:
            seconds = TUNE_SECONDS
        return Budget(max(seconds, 0.0))

    def start(self, what: str) -> None:
        if self.started is None:
            self.started = self.clock()
            print(f"tilegraph: tuning {what} for at most {self.seconds:g} s (TILEGRAPH_TUNE_SECONDS); "
                  f"winners are cached in {cache_dir() / 'triton'}", file=sys.stderr, flush=True)

    @property
    def deadline(self) -> float:
        return (self.started if self.started is not None else self.clock()) + self.seconds

    def spent(self) -> bool:
        return self.started is not None and self.clock() >= self.deadline


TIMER = "TILEGRAPH_TUNE_TIMER"  # "launch" (default) or "graph": how `measure` times a candidate


def measure(fn) -> float:
    """Milliseconds per call of `fn` on the current CUDA device: triton's `do_bench`, the calls launched one by one
    (where the host is slower than the device, its time counts: a library call's several torch kernels), or with
    TILEGRAPH_TUNE_TIMER=graph triton's `do_bench_cudagraph`, the device's time alone, as a replayed program runs."""
    import triton.testing

    if os.environ.get(TIMER, "launch").strip().lower() == "graph":
        return float(triton.testing.do_bench_cudagraph(fn, rep=20))
    return float(triton.testing.do_bench(fn, warmup=5, rep=20))


def tune(run, options, deadline: float | None = None, clock=time.perf_counter):
    """Time `run(*option)` for each option on the current CUDA device (`measure`), until `deadline` (`clock()`'s
    time; the first option is always timed). Returns the fastest, all times (ms), and whether every
    option was tried."""
    times = {}
    complete = True
    for n, option in enumerate(options):
        if n and deadline is not None and clock() >= deadline:
            complete = False
            break
        try:
            times[option] = measure(lambda: run(*option))
        except Exception:  # a config the device cannot run (too many registers, shared memory) is skipped
            continue
    if not times:
        return options[0] if options else DEFAULT, {}, complete
    return min(times, key=times.get), times, complete


__all__ = ["DEFAULT", "DOT_DEFAULT", "default_config", "dot_warps", "TUNE_SECONDS", "cache_dir", "candidates",
           "canonical", "config_key", "Choice", "ConfigCache", "Budget", "tune", "measure", "TIMER"]
