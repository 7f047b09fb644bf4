"""Launch configurations (warps, pipeline stages) per kernel, timed on the device when there is one.

Without a CUDA device (tests run the Triton interpreter) every kernel gets `DEFAULT` and nothing is
timed. With one, the first run of a program times each candidate of each kernel with
`triton.testing.do_bench` on the real buffers and keeps the fastest; winners are cached per
(kernel source, shapes) in a JSON file under the user cache directory, so later processes skip it.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

DEFAULT = (4, 2)
DOT_CANDIDATES = ((4, 3), (8, 3), (4, 4), (8, 4), (4, 2))
CANDIDATES = ((4, 2), (8, 2), (2, 2), (16, 2), (4, 3))


def cache_dir() -> Path:
    """`$TILEGRAPH_CACHE_DIR`, else `$XDG_CACHE_HOME/tilegraph`, else `~/.cache/tilegraph`."""
    if os.environ.get("TILEGRAPH_CACHE_DIR"):
        return Path(os.environ["TILEGRAPH_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tilegraph"


def candidates(uses_dot: bool) -> tuple[tuple[int, int], ...]:
    return DOT_CANDIDATES if uses_dot else CANDIDATES


def config_key(kernel_text: str, device_name: str) -> str:
    """Kernel sources hold every shape as a constant, so the text identifies kernel and shapes."""
    return hashlib.sha256(f"{device_name}\n{kernel_text}".encode()).hexdigest()[:24]


class ConfigCache:
    """Winners on disk: one JSON object key -> [warps, stages]."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or cache_dir() / "triton" / "autotune.json"
        try:
            self.data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            self.data = {}

    def get(self, key: str) -> tuple[int, int] | None:
        found = self.data.get(key)
        return (int(found[0]), int(found[1])) if found else None

    def put(self, key: str, config: tuple[int, int]) -> None:
        self.data[key] = list(config)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(self.data, indent=1, sort_keys=True))
            tmp.replace(self.path)
        except OSError:
            pass  # a read-only cache only costs re-tuning


def tune(run, options: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], dict]:
    """Time `run(warps, stages)` for each option on the current CUDA device; the fastest and all times (ms)."""
    from triton.testing import do_bench

    times = {}
    for config in options:
        try:
            times[config] = do_bench(lambda: run(*config), warmup=5, rep=20)
        except Exception:  # a config the device cannot run (too many registers, shared memory) is skipped
            continue
    if not times:
        return DEFAULT, {}
    return min(times, key=times.get), times


__all__ = ["DEFAULT", "cache_dir", "candidates", "config_key", "ConfigCache", "tune"]
