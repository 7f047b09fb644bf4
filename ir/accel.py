"""Accelerator descriptions for the cycle-approximate simulator: PE array, vector unit, memories, DMA.

An `Accelerator` is plain data (sizes in bytes, rates per cycle): a `pe_rows x pe_cols` systolic
array running one dataflow (`ws` weight-, `os` output- or `is` input-stationary), a vector unit
for elementwise and reduction work, an on-chip scratchpad, DRAM reached through `dma_engines`
DMA engines sharing `dram_bytes_per_cycle` with `dram_latency` cycles per transfer, and whether
transfers overlap compute (`double_buffer`). Optional per-access energies (pJ, Accelergy/ZigZag
style: per MAC, per vector operation, per byte of DRAM read and write, per byte of scratchpad read
and write for each operand, and static power) give an energy estimate by component.

Two fields configure the memory model like SCALE-Sim's (`backends/sim/scalesim_config.py` builds
such an accelerator from a SCALE-Sim config; preset `scalesim-calc`):

- `dram_model = "calc"`: SCALE-Sim's CALC interface. The scratchpad is three equal operand SRAMs
  (ifmap, filter, ofmap), each double-buffered, each operand on its own DRAM port. Before a
  kernel computes, each operand fills the active half of its SRAM (at most) at
  `dram_bytes_per_cycle` in whole bursts; later refills are sized to never stall (they take no
  time). Outputs collect in the ofmap SRAM, whose full halves drain during compute; what is left
  at the end drains afterwards at one word per array column per cycle. An array operand bigger
  than the active half is re-read as SCALE-Sim's fold order sweeps it. `"dma"` (default): every
  byte crosses one shared interface at `dram_bytes_per_cycle`.
- `psum_writeback = true`: in ws and is the reduction (K) runs down the array rows, and each fold
  of K over the rows writes its partial sums to DRAM (as SCALE-Sim does) instead of accumulating
  on chip: an array kernel writes its result ceil(K / pe_rows) times.

An Accelerator is the simulator's view of a device with a PE array in the hardware description
(`ir/hardware.py`): `load_accel("edge-npu")` by preset name or path. Older flat accelerator files
(TOML tables only for reading, every key one field) still load.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import TilegraphError
from .presets import from_flat_toml
from .target import Target

DATAFLOWS = ("ws", "os", "is")
DRAM_MODELS = ("dma", "calc")
OPERANDS = ("ifmap", "filter", "ofmap")
# per-access energies (pJ): per MAC, per vector operation, per byte read or written in DRAM and in
# the scratchpad per operand, and the static power (mW)
ENERGY_FIELDS = ("mac_pj", "vector_op_pj", "dram_read_pj_per_byte", "dram_write_pj_per_byte",
                 *(f"{o}_{rw}_pj_per_byte" for o in OPERANDS for rw in ("read", "write")), "leakage_mw")
# shorthands a file may give instead: one value for both fields, or for every operand's
ENERGY_SHORTHANDS = {"dram_pj_per_byte": ("dram_read_pj_per_byte", "dram_write_pj_per_byte"),
                     "sram_read_pj_per_byte": tuple(f"{o}_read_pj_per_byte" for o in OPERANDS),
                     "sram_write_pj_per_byte": tuple(f"{o}_write_pj_per_byte" for o in OPERANDS)}


def expand_energy(table: dict[str, Any]) -> dict[str, Any]:
    """An energy table with its shorthands (`ENERGY_SHORTHANDS`) spelled out; a field given itself wins."""
    out = {k: v for k, v in table.items() if k not in ENERGY_SHORTHANDS}
    for short, fields in ENERGY_SHORTHANDS.items():
        if short in table:
            for field in fields:
                out.setdefault(field, table[short])
    return out


class AccelError(TilegraphError):
    """An unknown accelerator preset or a malformed description; the message names the field."""


@dataclass(frozen=True)
class Accelerator:
    """A DNN accelerator as the simulator sees it (cycles are clock cycles of `clock_ghz`)."""

    name: str
    pe_rows: int
    pe_cols: int
    dataflow: str
    scratchpad_bytes: int
    dram_bytes_per_cycle: float
    description: str = ""
    dram_latency: int = 100  # cycles from issue to the first byte
    dma_engines: int = 2
    double_buffer: bool = True
    vector_lanes: int = 16
    vector_ops_per_cycle: int = 1  # per lane
    clock_ghz: float = 1.0
    word_bytes: int = 4  # bytes per data word (tensor sizes come from their dtypes; exports to SCALE-Sim use it)
    dma_burst_bytes: int = 64
    # energies per access (picojoules; see ENERGY_FIELDS), 0 to leave a component out of the estimate
    mac_pj: float = 0.0
    vector_op_pj: float = 0.0
    dram_read_pj_per_byte: float = 0.0
    dram_write_pj_per_byte: float = 0.0
    ifmap_read_pj_per_byte: float = 0.0  # scratchpad, per operand: ifmap (activations), filter (weights),
    ifmap_write_pj_per_byte: float = 0.0  # ofmap (results)
    filter_read_pj_per_byte: float = 0.0
    filter_write_pj_per_byte: float = 0.0
    ofmap_read_pj_per_byte: float = 0.0
    ofmap_write_pj_per_byte: float = 0.0
    leakage_mw: float = 0.0  # static power while the accelerator runs (mW x ns = pJ)
    # memory model (see the module docstring): "dma" or SCALE-Sim's "calc"; partial sums per K fold
    dram_model: str = "dma"
    psum_writeback: bool = False

    def __post_init__(self) -> None:
        if self.dataflow not in DATAFLOWS:
            raise AccelError(f"accelerator {self.name}: dataflow must be one of {', '.join(DATAFLOWS)}, "
                             f"got {self.dataflow!r}")
        if self.dram_model not in DRAM_MODELS:
            raise AccelError(f"accelerator {self.name}: dram_model must be one of {', '.join(DRAM_MODELS)}, "
                             f"got {self.dram_model!r}")
        for name in ("pe_rows", "pe_cols", "scratchpad_bytes", "dma_engines", "vector_lanes",
                     "vector_ops_per_cycle", "word_bytes", "dma_burst_bytes"):
            if getattr(self, name) < 1:
                raise AccelError(f"accelerator {self.name}: {name} must be at least 1, got {getattr(self, name)}")
        if self.dram_bytes_per_cycle <= 0 or self.clock_ghz <= 0:
            raise AccelError(f"accelerator {self.name}: dram_bytes_per_cycle and clock_ghz must be positive")
        if self.dram_latency < 0:
            raise AccelError(f"accelerator {self.name}: dram_latency must be >= 0, got {self.dram_latency}")

    @property
    def dram_pj_per_byte(self) -> float:
        """DRAM read energy per byte (the files' `dram_pj_per_byte` sets reads and writes alike)."""
        return self.dram_read_pj_per_byte

    @property
    def pes(self) -> int:
        return self.pe_rows * self.pe_cols

    @property
    def vector_width(self) -> int:
        """Elementwise operations the vector unit finishes per cycle."""
        return self.vector_lanes * self.vector_ops_per_cycle

    @property
    def operand_sram_bytes(self) -> int:
        """With `dram_model = "calc"`: the size of each of the three operand SRAMs."""
        return self.scratchpad_bytes // 3

    @property
    def drain_bytes_per_cycle(self) -> float:
        """With `dram_model = "calc"`: the ofmap port's rate, one word per array column per cycle."""
        return float(self.pe_cols * self.word_bytes)

    @property
    def dram_gbps(self) -> float:
        return self.dram_bytes_per_cycle * self.clock_ghz

    def tiling_target(self) -> Target:
        """The Target the tile pass fits kernels to: this accelerator's scratchpad, buffering, DMA burst, array, rates."""
        return Target(
            name=self.name, kind="accelerator", onchip_bytes=self.scratchpad_bytes,
            double_buffer=self.double_buffer, line_bytes=self.dma_burst_bytes, parallel_units=1,
            description=f"derived from accelerator {self.name}", pe_rows=self.pe_rows, pe_cols=self.pe_cols,
            dataflow=self.dataflow, clock_ghz=self.clock_ghz, peak_flops=2.0 * self.pes * self.clock_ghz * 1e9,
            dram_bandwidth=self.dram_bytes_per_cycle * self.clock_ghz * 1e9,
            dram_latency_ns=self.dram_latency / self.clock_ghz)

    def describe(self) -> str:
        buffering = "double-buffered" if self.double_buffer else "single-buffered"
        return (f"{self.name}: {self.pe_rows}x{self.pe_cols} {self.dataflow} array, {self.vector_lanes}-lane vector "
                f"unit, {self.scratchpad_bytes // 1024} KiB scratchpad ({buffering}), DRAM "
                f"{self.dram_bytes_per_cycle:g} B/cycle + {self.dram_latency} cycles, {self.dma_engines} DMA "
                f"engine(s), {self.clock_ghz:g} GHz"
                + (", SCALE-Sim CALC interface" if self.dram_model == "calc" else "")
                + (", partial sums per K fold" if self.psum_writeback else ""))


def accel_from_dict(data: dict[str, Any], default_name: str = "accel") -> Accelerator:
    """Build an Accelerator from TOML data: top-level keys and the keys of any tables, flattened
    (energy shorthands such as `dram_pj_per_byte` spelled out)."""
    data = {k: expand_energy(v) if isinstance(v, dict) else v for k, v in expand_energy(data).items()}
    return from_flat_toml(Accelerator, data, default_name, AccelError, "accelerator")


def accel_presets() -> list[str]:
    """Names of the shipped hardware presets with a PE array."""
    from .hardware import preset_names

    return preset_names("accelerator")


def load_accel(name_or_path: str | Path | Accelerator) -> Accelerator:
    """A device's simulator view (`ir/hardware.py`: it needs a PE array) by preset name (`edge-npu`,
    `tpu-like`, `scalesim-default`, `scalesim-calc`, ...) or .toml path; an older flat accelerator
    file still loads; an Accelerator is returned as is."""
    if isinstance(name_or_path, Accelerator):
        return name_or_path
    from .hardware import device_view, load_view

    return load_view(name_or_path, "accelerator", device_view("accelerator", lambda d: d.accelerator()),
                     accel_from_dict, AccelError)
