"""Target descriptions for fusion and tiling: the on-chip memory a tile must fit, and how data moves.

A `Target` is plain data: the on-chip budget one tile's working set must fit (`onchip_bytes`: the
L2 share of a CPU core, a GPU block's shared memory, an accelerator's scratchpad), whether the
target double-buffers (then every off-chip tile is held twice, one being loaded while the other is
used), the transfer granularity (`line_bytes`: a cache line, a GPU memory transaction, a DMA burst),
how many tiles it runs at once (`parallel_units`), and the kind-specific sizes (cache levels,
shared memory and threads per block, PE array) that describe the machine. A Target is the tiling
view of a device of the hardware description (`ir/hardware.py`): `load_target("accel-small")`
by preset name or path. Older flat target files (keys grouped in tables only for reading) still load.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from .errors import TilegraphError
from .presets import from_flat_toml
from .units import format_bytes

KINDS = ("cpu", "gpu", "accelerator")


class TargetError(TilegraphError):
    """An unknown preset or a malformed target description; the message names the field."""


@dataclass(frozen=True)
class Target:
    """What the tiling cost model needs to know about a machine (sizes in bytes, rates per second)."""

    name: str
    kind: str
    onchip_bytes: int
    double_buffer: bool = False
    line_bytes: int = 64
    parallel_units: int = 1
    description: str = ""
    # CPU caches
    l1_bytes: int = 0
    l2_bytes: int = 0
    l3_bytes: int = 0
    vector_bytes: int = 0
    # GPU blocks
    shared_memory_per_block: int = 0
    max_threads_per_block: int = 0
    warp_size: int = 0
    registers_per_block: int = 0
    matrix_unit: int = 0  # smallest M, N and K a tensor-core product takes (0: no matrix unit)
    matrix_block: int = 0  # narrowest dot block side the unit runs at full rate (0: matrix_unit)
    # accelerator PE array
    pe_rows: int = 0
    pe_cols: int = 0
    dataflow: str = ""
    # rates
    clock_ghz: float = 0.0
    peak_flops: float = 0.0
    dram_bandwidth: float = 0.0
    dram_latency_ns: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise TargetError(f"target {self.name}: kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.onchip_bytes <= 0:
            raise TargetError(f"target {self.name}: onchip_bytes must be positive, got {self.onchip_bytes}")
        if self.line_bytes < 1 or self.parallel_units < 1:
            raise TargetError(f"target {self.name}: line_bytes and parallel_units must be at least 1")

    @property
    def buffers(self) -> int:
        """How many copies of each off-chip tile are resident: 2 when double-buffered."""
        return 2 if self.double_buffer else 1

    @property
    def holds_elements(self) -> bool:
        """Whether a staged tile takes on-chip room for its elements only (a GPU block's shared memory,
        filled element-wise by cp.async), not for the whole lines that bring them (a cache)."""
        return self.kind == "gpu"

    def describe(self) -> str:
        buffering = "double-buffered" if self.double_buffer else "single-buffered"
        return (f"{self.name} ({self.kind}): {format_bytes(self.onchip_bytes)} on chip per tile, {buffering}, "
                f"{self.line_bytes} B lines, {self.parallel_units} parallel unit(s)")


def target_from_dict(data: dict[str, Any], default_name: str = "target") -> Target:
    """Build a Target from TOML data: top-level keys and the keys of any tables, flattened."""
    return from_flat_toml(Target, data, default_name, TargetError, "target")


def presets() -> list[str]:
    """Names of the shipped hardware presets that are devices (every device can be tiled for)."""
    from .hardware import preset_names

    return preset_names("target")


def load_target(name_or_path: str | Path | Target) -> Target:
    """A device's tiling view (`ir/hardware.py`) by preset name (`cpu`, `accel-small`, `edge-npu`, ...)
    or .toml path; an older flat target file still loads; a Target is returned as is."""
    if isinstance(name_or_path, Target):
        return name_or_path
    from .hardware import device_view, load_view

    return load_view(name_or_path, "target", device_view("target", lambda d: d.target()), target_from_dict,
                     TargetError)


# ----- program text: the `target { ... }` section (registered in program_text) -----------------
TARGET_FIELDS = tuple(f.name for f in fields(Target))


def target_record(target: Target) -> list[tuple[str, object]]:
    """Every field, so a scheduled Program carries its target whole (no preset file needed to read it)."""
    return [(name, getattr(target, name)) for name in TARGET_FIELDS]


def target_from_record(values: dict) -> Target:
    return Target(**values)
