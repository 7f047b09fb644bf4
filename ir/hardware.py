"""One hardware description: devices with memories and compute units, accelerators, systems.

A `DeviceSpec` has memory levels (off-chip first, then on-chip; one of them is where a tile must
fit), compute units (how many run tiles at once, their clock, peak rates, the op categories they
run) and, for an accelerator, a `PEArray`; a GPU adds its thread-block limits (`GPUBlocks`). A
`SystemSpec` is devices joined by links. Every consumer reads a view of the same description:

- tiling: `device.target()` -> `Target` (the tile memory's size and buffering, transfer lines);
- the simulator: `device.accelerator()` -> `Accelerator` (needs a PE array);
- placement: `device.placement_device()` and `system.system()` -> `system.Device`, `System`.

Presets live in `ir/hardware_presets/*.toml` and load by name (`load_hardware("edge-npu")`) or path; a file
with `[[devices]]` is a system. `load_target`, `load_accel` and `load_system` read them, and still
read the older flat preset files (a target's, an accelerator's or a system's own format).
Quantities may carry units: "256 KiB", "25 GB/s", "90 ns", "5 us"; on a device with a clock,
also "16 B/cycle" and "100 cycles".
"""
from __future__ import annotations

import difflib
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from .accel import DATAFLOWS, DRAM_MODELS, ENERGY_FIELDS, ENERGY_SHORTHANDS, Accelerator, expand_energy
from .errors import TilegraphError
from .system import KIND_ORDER, Device, Link, System, SystemSpecError, link_from_dict, parse_quantity
from .target import KINDS as DEVICE_KINDS
from .target import Target
from .types import DType

PRESET_DIR = Path(__file__).parent / "hardware_presets"
RATE_DIGITS = 9  # per-cycle rates derived from B/s are rounded to this many decimals (exact for presets)


class HardwareError(TilegraphError):
    """A malformed hardware description, or a device asked for a view it cannot give; names the field."""


@dataclass(frozen=True)
class Memory:
    """One memory level: its size, the rate and latency it delivers at, and its transfer line."""

    name: str
    bytes: int = 0
    bandwidth: float = 0.0  # bytes per second
    latency_ns: float = 0.0
    line_bytes: int = 64  # transfer granularity: cache line, DMA burst, memory transaction
    double_buffer: bool = False  # tiles held here are double-buffered (one loads while one computes)


@dataclass(frozen=True)
class ComputeUnits:
    """The device's compute: parallel units, clock, peak rates per dtype, the op categories it runs."""

    units: int = 1
    clock_ghz: float = 0.0
    peak_flops: tuple[tuple[DType, float], ...] = ()
    kinds: tuple[str, ...] = KIND_ORDER[:-1]  # op categories it runs ("source" runs everywhere)
    efficiency: tuple[tuple[str, float], ...] = ()
    launch_overhead: float = 0.0  # seconds per kernel
    vector_bytes: int = 0  # SIMD register width
    vector_lanes: int = 16
    vector_ops_per_cycle: int = 1

    def peak(self, dtype: DType = DType.f32) -> float | None:
        return dict(self.peak_flops).get(dtype)


@dataclass(frozen=True)
class Energy:
    """Per-access energies of an accelerator (its `[energy]` table, Accelergy/ZigZag style), picojoules:
    per MAC, per vector operation, per byte of DRAM and of scratchpad read and written (per operand:
    ifmap, filter, ofmap), and static power in mW. `dram_pj_per_byte` and `sram_read/write_pj_per_byte`
    in a file set both directions or every operand at once."""

    mac_pj: float = 0.0
    vector_op_pj: float = 0.0
    dram_read_pj_per_byte: float = 0.0
    dram_write_pj_per_byte: float = 0.0
    ifmap_read_pj_per_byte: float = 0.0
    ifmap_write_pj_per_byte: float = 0.0
    filter_read_pj_per_byte: float = 0.0
    filter_write_pj_per_byte: float = 0.0
    ofmap_read_pj_per_byte: float = 0.0
    ofmap_write_pj_per_byte: float = 0.0
    leakage_mw: float = 0.0


@dataclass(frozen=True)
class PEArray:
    """A systolic array of processing elements, as the simulator models it (see `ir/accel.py`)."""

    rows: int
    cols: int
    dataflow: str
    dma_engines: int = 2
    word_bytes: int = 4
    dram_model: str = "dma"
    psum_writeback: bool = False
    energy: Energy = Energy()


@dataclass(frozen=True)
class GPUBlocks:
    """What one GPU thread block may use."""

    shared_memory_per_block: int = 0
    max_threads_per_block: int = 0
    warp_size: int = 0
    registers_per_block: int = 0
    matrix_unit: int = 0  # smallest M, N and K a tensor-core product takes
    matrix_block: int = 0  # narrowest dot block side the tensor cores run at full rate (0: matrix_unit)


@dataclass(frozen=True)
class DeviceSpec:
    """A device: memories (off-chip first), the one tiles fit (`tile_memory`), compute, and an
    optional PE array (an accelerator) or GPU block limits."""

    name: str
    kind: str  # cpu, gpu, accelerator
    memories: tuple[Memory, ...]
    tile_memory: str
    compute: ComputeUnits = ComputeUnits()
    array: PEArray | None = None
    gpu: GPUBlocks | None = None
    description: str = ""

    def __post_init__(self) -> None:
        if self.kind not in DEVICE_KINDS:
            raise HardwareError(f"device {self.name}: kind must be one of {', '.join(DEVICE_KINDS)}, got {self.kind!r}")
        if not self.memories:
            raise HardwareError(f"device {self.name}: no memories (the first is the off-chip one)")
        if self.tile_memory not in [m.name for m in self.memories]:
            raise HardwareError(f"device {self.name}: tile_memory {self.tile_memory!r} is not one of its memories "
                                f"({', '.join(m.name for m in self.memories)})")
        if self.array is not None and self.array.dataflow not in DATAFLOWS:
            raise HardwareError(f"device {self.name}: dataflow must be one of {', '.join(DATAFLOWS)}")
        if self.array is not None and self.array.dram_model not in DRAM_MODELS:
            raise HardwareError(f"device {self.name}: dram_model must be one of {', '.join(DRAM_MODELS)}")

    def memory(self, name: str) -> Memory | None:
        return next((m for m in self.memories if m.name == name), None)

    @property
    def offchip(self) -> Memory:
        return self.memories[0]

    @property
    def tile(self) -> Memory:
        return self.memory(self.tile_memory)

    def peak_flops(self, dtype: DType = DType.f32) -> float:
        """Peak flop/s: the listed rate, else two per PE per cycle on an array, else 0."""
        listed = self.compute.peak(dtype)
        if listed is not None:
            return listed
        if self.array is not None:
            return 2.0 * self.array.rows * self.array.cols * self.compute.clock_ghz * 1e9
        return 0.0

    # ----- views ---------------------------------------------------------------------------
    def target(self) -> Target:
        """What the tile pass fits kernels to: the tile memory, the off-chip line, the parallel units."""
        sizes = {level: m.bytes for level in ("l1", "l2", "l3") if (m := self.memory(level)) is not None}
        gpu, array = self.gpu or GPUBlocks(), self.array
        return Target(
            name=self.name, kind=self.kind, onchip_bytes=self.tile.bytes, double_buffer=self.tile.double_buffer,
            line_bytes=self.offchip.line_bytes, parallel_units=self.compute.units, description=self.description,
            l1_bytes=sizes.get("l1", 0), l2_bytes=sizes.get("l2", 0), l3_bytes=sizes.get("l3", 0),
            vector_bytes=self.compute.vector_bytes, shared_memory_per_block=gpu.shared_memory_per_block,
            max_threads_per_block=gpu.max_threads_per_block, warp_size=gpu.warp_size,
            registers_per_block=gpu.registers_per_block, matrix_unit=gpu.matrix_unit,
            matrix_block=gpu.matrix_block,
            pe_rows=array.rows if array else 0, pe_cols=array.cols if array else 0,
            dataflow=array.dataflow if array else "", clock_ghz=self.compute.clock_ghz,
            peak_flops=self.peak_flops(), dram_bandwidth=self.offchip.bandwidth,
            dram_latency_ns=self.offchip.latency_ns)

    def accelerator(self) -> Accelerator:
        """What the simulator runs: the PE array, the tile memory as scratchpad, DRAM per cycle."""
        array = self.array
        if array is None:
            raise HardwareError(f"device {self.name} has no PE array, so the simulator cannot run it "
                                "(give an accelerator: a device with an [array] table)")
        hz = self.compute.clock_ghz * 1e9
        if hz <= 0:
            raise HardwareError(f"device {self.name}: an accelerator needs compute.clock_ghz")
        dram = self.offchip
        return Accelerator(
            name=self.name, pe_rows=array.rows, pe_cols=array.cols, dataflow=array.dataflow,
            scratchpad_bytes=self.tile.bytes, dram_bytes_per_cycle=round(dram.bandwidth / hz, RATE_DIGITS),
            description=self.description, dram_latency=round(dram.latency_ns * self.compute.clock_ghz),
            dma_engines=array.dma_engines, double_buffer=self.tile.double_buffer,
            vector_lanes=self.compute.vector_lanes, vector_ops_per_cycle=self.compute.vector_ops_per_cycle,
            clock_ghz=self.compute.clock_ghz, word_bytes=array.word_bytes, dma_burst_bytes=dram.line_bytes,
            dram_model=array.dram_model, psum_writeback=array.psum_writeback,
            **{k: getattr(array.energy, k) for k in ENERGY_FIELDS})

    def placement_device(self) -> Device:
        """What placement schedules on: roofline rates, the off-chip memory, the kinds it runs."""
        rates = self.compute.peak_flops or ((DType.f32, self.peak_flops()),)
        return Device(self.name, rates, self.offchip.bandwidth, self.offchip.bytes, frozenset(self.compute.kinds),
                      self.compute.efficiency, self.compute.launch_overhead)


@dataclass(frozen=True)
class SystemSpec:
    """Devices joined by links; `home` holds graph inputs and parameters at the start."""

    name: str
    devices: tuple[DeviceSpec, ...]
    links: tuple[Link, ...]
    home: str
    description: str = field(default="")

    def system(self) -> System:
        return System(self.name, tuple(d.placement_device() for d in self.devices), self.links, self.home,
                      self.description)


# ----- reading --------------------------------------------------------------------------------
class _Reader:
    """Reads one device table; every error names the device and the field."""

    def __init__(self, data: Mapping[str, Any], where: str) -> None:
        self.data, self.where = data, where

    def table(self, key: str) -> Mapping[str, Any]:
        value = self.data.get(key, {})
        if not isinstance(value, Mapping):
            raise HardwareError(f"{self.where}: {key} must be a table")
        return value

    def check_keys(self, table: Mapping[str, Any], allowed: tuple[str, ...], what: str) -> None:
        unknown = sorted(set(table) - set(allowed))
        if unknown:
            raise HardwareError(f"{self.where}: unknown field(s) {', '.join(unknown)} in {what}; "
                                f"fields: {', '.join(allowed)}")


def _quantity(value: Any, what: str, unit: str, clock_ghz: float) -> float:
    """A bandwidth in B/s or a latency in ns (unit "s"): parse_quantity's units, plus "16 B/cycle"
    and "100 cycles" on a device with a clock."""
    if isinstance(value, str) and value.strip().endswith(("cycle", "cycles")):
        if clock_ghz <= 0:
            raise HardwareError(f"{what}: a value per cycle needs compute.clock_ghz")
        number = float(value.split()[0])
        return number * clock_ghz * 1e9 if unit == "B/s" else number / clock_ghz
    if unit == "s" and isinstance(value, str) and value.strip().endswith("ns"):
        return float(value.strip()[:-2])  # nanoseconds as written, not through seconds (exact)
    try:
        return parse_quantity(value, what, unit) * (1e9 if unit == "s" else 1.0)
    except TilegraphError as e:
        raise HardwareError(str(e)) from None


_MEMORY_FIELDS = ("name", "bytes", "bandwidth", "latency", "line_bytes", "double_buffer")
_COMPUTE_FIELDS = ("units", "clock_ghz", "peak_flops", "kinds", "efficiency", "launch_overhead", "vector_bytes",
                   "vector_lanes", "vector_ops_per_cycle")
_ARRAY_FIELDS = ("rows", "cols", "dataflow", "dma_engines", "word_bytes", "dram_model", "psum_writeback")
_ENERGY_FIELDS = (*ENERGY_FIELDS, *ENERGY_SHORTHANDS)
_GPU_FIELDS = ("shared_memory_per_block", "max_threads_per_block", "warp_size", "registers_per_block", "matrix_unit",
               "matrix_block")
_DEVICE_FIELDS = ("name", "kind", "description", "tile_memory", "memories", "compute", "array", "energy", "gpu")


def device_from_dict(data: Mapping[str, Any], default_name: str = "device") -> DeviceSpec:
    """A DeviceSpec from the TOML of a device preset (or one `[[devices]]` entry of a system)."""
    name = str(data.get("name", default_name))
    try:
        return _device_from_dict(data, name)
    except (SystemSpecError, TypeError, ValueError) as e:
        message = str(e)
        raise HardwareError(message if message.startswith("device ") else f"device {name}: {message}") from None


def _device_from_dict(data: Mapping[str, Any], name: str) -> DeviceSpec:
    r = _Reader(data, f"device {name}")
    r.check_keys(data, _DEVICE_FIELDS, "the device")
    compute = r.table("compute")
    r.check_keys(compute, _COMPUTE_FIELDS, "[compute]")
    clock = float(compute.get("clock_ghz", 0.0))
    try:
        peak = tuple((DType.parse(k), parse_quantity(v, f"{r.where}.compute.peak_flops.{k}", "FLOP/s"))
                     for k, v in dict(compute.get("peak_flops", {})).items())
    except ValueError as e:
        raise HardwareError(f"{r.where}: {e}") from None
    units = ComputeUnits(
        units=int(compute.get("units", 1)), clock_ghz=clock, peak_flops=peak,
        kinds=tuple(map(str, compute.get("kinds", ComputeUnits.kinds))),
        efficiency=tuple((str(k), float(v)) for k, v in dict(compute.get("efficiency", {})).items()),
        launch_overhead=parse_quantity(compute.get("launch_overhead", 0.0), f"{r.where}.launch_overhead", "s"),
        vector_bytes=int(compute.get("vector_bytes", 0)), vector_lanes=int(compute.get("vector_lanes", 16)),
        vector_ops_per_cycle=int(compute.get("vector_ops_per_cycle", 1)))
    memories = []
    for entry in data.get("memories", ()):
        r.check_keys(entry, _MEMORY_FIELDS, "a [[memories]] entry")
        where = f"{r.where}.memories.{entry.get('name', '?')}"
        memories.append(Memory(
            str(entry.get("name", "")), int(parse_quantity(entry.get("bytes", 0), f"{where}.bytes", "B")),
            _quantity(entry.get("bandwidth", 0.0), f"{where}.bandwidth", "B/s", clock),
            _quantity(entry.get("latency", 0.0), f"{where}.latency", "s", clock),
            int(entry.get("line_bytes", 64)), bool(entry.get("double_buffer", False))))
    array = gpu = None
    if "array" in data:
        table, energy = r.table("array"), r.table("energy")
        r.check_keys(table, _ARRAY_FIELDS, "[array]")
        r.check_keys(energy, _ENERGY_FIELDS, "[energy]")
        energy = expand_energy(dict(energy))
        try:
            array = PEArray(int(table["rows"]), int(table["cols"]), str(table["dataflow"]),
                            int(table.get("dma_engines", 2)), int(table.get("word_bytes", 4)),
                            str(table.get("dram_model", "dma")), bool(table.get("psum_writeback", False)),
                            Energy(**{k: float(energy.get(k, 0.0)) for k in ENERGY_FIELDS}))
        except KeyError as e:
            raise HardwareError(f"{r.where}: [array] lacks {e.args[0]}") from None
    if "gpu" in data:
        table = r.table("gpu")
        r.check_keys(table, _GPU_FIELDS, "[gpu]")
        gpu = GPUBlocks(*(int(table.get(k, 0)) for k in _GPU_FIELDS))
    return DeviceSpec(name, str(data.get("kind", "accelerator" if array else "cpu")), tuple(memories),
                      str(data.get("tile_memory", memories[-1].name if memories else "")), units, array, gpu,
                      str(data.get("description", "")))


def system_spec_from_dict(data: Mapping[str, Any], default_name: str = "system") -> SystemSpec:
    """A SystemSpec from the TOML of a system preset: `[[devices]]` in the device format, `[[links]]`."""
    devices = tuple(device_from_dict(d) for d in data.get("devices", ()))
    links = tuple(link_from_dict(l) for l in data.get("links", ()))
    home = str(data.get("home", devices[0].name if devices else ""))
    return SystemSpec(str(data.get("name", default_name)), devices, links, home, str(data.get("description", "")))


def is_hardware_format(data: Mapping[str, Any]) -> bool:
    """Whether TOML data is in this module's format (else it is an older flat target/accelerator/system file)."""
    if "devices" in data:
        return all("memories" in d or "compute" in d for d in data["devices"])
    return "memories" in data


def hardware_from_dict(data: Mapping[str, Any], default_name: str) -> DeviceSpec | SystemSpec:
    return system_spec_from_dict(data, default_name) if "devices" in data else device_from_dict(data, default_name)


def presets() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.toml"))


def preset_names(what: str) -> list[str]:
    """The shipped presets that give a `what`: "target" (every device), "accelerator" (devices with
    a PE array), "system" (systems, and every device as a system of one), or "hardware" (all)."""
    if what in ("hardware", "system"):
        return presets()
    specs = {name: load_hardware(name) for name in presets()}
    return [name for name, spec in specs.items() if isinstance(spec, DeviceSpec)
            and (what == "target" or spec.array is not None)]


def read_toml(name_or_path: str | Path, what: str) -> tuple[dict[str, Any], str]:
    """(TOML data, its name) of a hardware preset name or a .toml path."""
    path = Path(name_or_path)
    if path.suffix != ".toml" and not path.exists():
        path = PRESET_DIR / f"{name_or_path}.toml"
        if not path.exists():
            known = preset_names(what)
            close = difflib.get_close_matches(str(name_or_path), known, n=1)
            raise HardwareError(f"unknown {what} {str(name_or_path)!r}; presets: {', '.join(known)} "
                                "(or give the path of a .toml file)" + (f"; did you mean {close[0]}?" if close else ""))
    try:
        return tomllib.loads(path.read_text(encoding="utf-8")), path.stem
    except FileNotFoundError:
        raise HardwareError(f"{path}: no such {what} file") from None
    except tomllib.TOMLDecodeError as e:
        raise HardwareError(f"{path}: {e}") from None


def load_hardware(name_or_path: str | Path) -> DeviceSpec | SystemSpec:
    """A hardware preset by name (`cpu`, `edge-npu`, `cpu-gpu-npu`, ...) or a .toml file in this format."""
    data, name = read_toml(name_or_path, "hardware")
    if not is_hardware_format(data):
        raise HardwareError(f"{name_or_path}: not in the hardware format (no [[memories]] or [[devices]]); "
                            "load it with load_target, load_accel or load_system")
    return hardware_from_dict(data, name)


V = TypeVar("V")


def load_view(name_or_path: str | Path, what: str, view: Callable[[DeviceSpec | SystemSpec], V],
              legacy: Callable[[dict[str, Any], str], V], error: type[TilegraphError]) -> V:
    """The `what` view of a hardware preset or file; an older flat file of that kind loads as before.
    Every mistake is an `error` naming the file, device and field."""
    try:
        data, name = read_toml(name_or_path, what)
        if not is_hardware_format(data):
            return legacy(data, name)
        return view(hardware_from_dict(data, name))
    except HardwareError as e:
        raise error(str(e)) from None


def device_view(what: str, view: Callable[[DeviceSpec], V]) -> Callable[[DeviceSpec | SystemSpec], V]:
    """`view` of a device, with a clear error when the preset is a system."""
    def of(spec: DeviceSpec | SystemSpec) -> V:
        if isinstance(spec, SystemSpec):
            raise HardwareError(f"{spec.name} is a system of {len(spec.devices)} devices, not a {what}")
        return view(spec)
    return of


def system_view(spec: DeviceSpec | SystemSpec) -> System:
    """A system preset's placement System; a device alone is a system of one."""
    if isinstance(spec, DeviceSpec):
        return System(spec.name, (spec.placement_device(),), (), spec.name, spec.description)
    return spec.system()


__all__ = ["Memory", "ComputeUnits", "Energy", "PEArray", "GPUBlocks", "DeviceSpec", "SystemSpec", "HardwareError",
           "load_hardware", "load_view", "device_view", "system_view", "device_from_dict", "system_spec_from_dict",
           "is_hardware_format", "presets", "preset_names"]
