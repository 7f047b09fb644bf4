"""Systems for device placement: devices with a roofline cost per kernel, joined by links.

A `Device` has a peak flop rate per dtype, a memory bandwidth, a memory capacity, the kernel
kinds (op categories) it can run, and per-kind efficiencies; a kernel's time on it is

    launch_overhead + max(flops / (peak[dtype] * efficiency[kind]), bytes / memory_bandwidth)

A `Link` joins two or more devices (a PCIe lane, NVLink, an on-chip bus) with a bandwidth and a
latency; a transfer of n bytes takes `latency + n / bandwidth` and holds the link for that time.
A duplex link between two devices is two independent channels, one per direction; a bus is one
channel shared by all its devices. Systems are the placement view of the hardware description
(`ir/hardware.py`): `load_system("cpu-gpu-npu")` by preset name or path.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from .errors import TilegraphError
from .types import DType
from .units import format_bytes, format_seconds


# Op categories, strongest first: a fused kernel's efficiency is that of its strongest category.
KIND_ORDER = ("contraction", "window", "reduction", "composite", "elementwise", "layout", "source")
KINDS = frozenset(KIND_ORDER)


class SystemSpecError(TilegraphError):
    """A system description that is malformed or inconsistent; the message names the field."""


def dominant_kind(kinds: Iterable[str]) -> str:
    """The kind that sets a fused kernel's efficiency: the first of KIND_ORDER present."""
    present = set(kinds)
    return next((k for k in KIND_ORDER if k in present), "elementwise")


@dataclass(frozen=True)
class Device:
    """One processor: roofline speeds, memory capacity (bytes) and the kernel kinds it runs.

    `peak_flops` maps dtype to flop/s; a dtype not listed uses f32's rate (integers: i32's, then
    f32's). `efficiency` maps kind to the fraction of peak reached (default 1.0). Kinds "source"
    (constants) run everywhere.
    """

    name: str
    peak_flops: tuple[tuple[DType, float], ...]
    memory_bandwidth: float
    memory: int
    kinds: frozenset[str]
    efficiency: tuple[tuple[str, float], ...] = ()
    launch_overhead: float = 0.0

    def __post_init__(self) -> None:
        if not self.peak_flops:
            raise SystemSpecError(f"device {self.name}: peak_flops is empty")
        if any(rate <= 0 for _, rate in self.peak_flops):
            raise SystemSpecError(f"device {self.name}: peak_flops must be positive")
        if self.memory_bandwidth <= 0:
            raise SystemSpecError(f"device {self.name}: memory_bandwidth must be positive")
        if self.memory < 0:
            raise SystemSpecError(f"device {self.name}: memory must be non-negative")
        unknown = set(self.kinds) - KINDS
        if unknown:
            raise SystemSpecError(f"device {self.name}: unknown kind(s) {', '.join(sorted(unknown))}; "
                                  f"known: {', '.join(KIND_ORDER)}")
        object.__setattr__(self, "kinds", frozenset(self.kinds) | {"source"})

    def flop_rate(self, dtype: DType) -> float:
        rates = dict(self.peak_flops)
        if dtype in rates:
            return rates[dtype]
        if dtype.is_int and DType.i32 in rates:
            return rates[DType.i32]
        return rates.get(DType.f32, max(rates.values()))

    def supports(self, kinds: Iterable[str]) -> bool:
        """Whether every kind in `kinds` runs here (an empty set, a pure-constant kernel, does)."""
        return set(kinds) <= self.kinds

    def kernel_time(self, kinds: Iterable[str], flops: float, nbytes: float, dtype: DType = DType.f32) -> float:
        """Roofline time in seconds of a kernel with these kinds, flops and off-chip bytes."""
        eff = dict(self.efficiency).get(dominant_kind(kinds), 1.0)
        compute = flops / (self.flop_rate(dtype) * eff) if flops else 0.0
        return self.launch_overhead + max(compute, nbytes / self.memory_bandwidth)


@dataclass(frozen=True)
class Link:
    """A connection between devices; a transfer of n bytes holds it for `latency + n / bandwidth`."""

    name: str
    devices: tuple[str, ...]
    bandwidth: float
    latency: float = 0.0
    duplex: bool = False

    def __post_init__(self) -> None:
        if len(self.devices) < 2 or len(set(self.devices)) != len(self.devices):
            raise SystemSpecError(f"link {self.name}: needs two or more distinct devices")
        if self.bandwidth <= 0 or self.latency < 0:
            raise SystemSpecError(f"link {self.name}: bandwidth must be positive and latency non-negative")
        if self.duplex and len(self.devices) != 2:
            raise SystemSpecError(f"link {self.name}: only a link between two devices can be duplex")

    def transfer_time(self, nbytes: float) -> float:
        return self.latency + nbytes / self.bandwidth

    def channel(self, src: str, dst: str) -> str:
        """The name of the resource a src->dst transfer holds (one per direction when duplex)."""
        return f"{self.name}:{src}>{dst}" if self.duplex else self.name

    def channels(self) -> tuple[str, ...]:
        if self.duplex:
            a, b = self.devices
            return (self.channel(a, b), self.channel(b, a))
        return (self.name,)


@dataclass(frozen=True)
class System:
    """Devices and links. `home` is where graph inputs and parameters live at the start."""

    name: str
    devices: tuple[Device, ...]
    links: tuple[Link, ...]
    home: str
    description: str = ""

    def __post_init__(self) -> None:
        names = [d.name for d in self.devices]
        if not names:
            raise SystemSpecError(f"system {self.name}: no devices")
        if len(set(names)) != len(names):
            raise SystemSpecError(f"system {self.name}: duplicate device names")
        if self.home not in names:
            raise SystemSpecError(f"system {self.name}: home device {self.home!r} is not one of {', '.join(names)}")
        link_names = [l.name for l in self.links]
        if len(set(link_names)) != len(link_names):
            raise SystemSpecError(f"system {self.name}: duplicate link names")
        for link in self.links:
            for d in link.devices:
                if d not in names:
                    raise SystemSpecError(f"link {link.name}: unknown device {d!r}")
        for a in names:
            for b in names:
                if a != b and self.link_between(a, b) is None:
                    raise SystemSpecError(f"system {self.name}: no link joins {a} and {b}")

    @property
    def device_names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.devices)

    @cached_property
    def _index(self) -> dict[str, int]:
        return {d.name: i for i, d in enumerate(self.devices)}

    def device(self, name: str) -> Device:
        try:
            return self.devices[self._index[name]]
        except KeyError:
            raise SystemSpecError(f"system {self.name}: no device {name!r} "
                                  f"(devices: {', '.join(self.device_names)})") from None

    def link_between(self, a: str, b: str) -> Link | None:
        """The fastest link joining a and b (ties: the first listed), or None."""
        best = None
        for link in self.links:
            if a in link.devices and b in link.devices and (best is None or link.bandwidth > best.bandwidth):
                best = link
        return best

    def channels(self) -> tuple[str, ...]:
        return tuple(c for link in self.links for c in link.channels())

    def with_memory(self, **capacities: int) -> System:
        """A copy with some devices' memory capacities (bytes) replaced: `with_memory(gpu=2**30)`."""
        for name in capacities:
            self.device(name)
        devices = tuple(replace(d, memory=int(capacities.get(d.name, d.memory))) for d in self.devices)
        return replace(self, devices=devices)

    def __str__(self) -> str:
        lines = [f"system {self.name} (home: {self.home})" + (f": {self.description}" if self.description else "")]
        for d in self.devices:
            rates = ", ".join(f"{dt}={_fmt(r, 'FLOP/s')}" for dt, r in d.peak_flops)
            lines.append(f"  device {d.name}: {rates}; {_fmt(d.memory_bandwidth, 'B/s')}; "
                         f"memory {format_bytes(d.memory)}; kinds {', '.join(k for k in KIND_ORDER if k in d.kinds)}")
        for l in self.links:
            lines.append(f"  link {l.name}: {' <-> '.join(l.devices)}; {_fmt(l.bandwidth, 'B/s')}, "
                         f"latency {l.latency * 1e6:g} us{' (duplex)' if l.duplex else ''}")
        return "\n".join(lines)


# ----- loading ------------------------------------------------------------------------------

_UNITS = {
    "": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "p": 1e15,
    "ki": 2.0 ** 10, "mi": 2.0 ** 20, "gi": 2.0 ** 30, "ti": 2.0 ** 40,
}
_TIME = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
_QUANTITY = re.compile(r"^\s*([0-9.eE+-]+)\s*([A-Za-z/]*)\s*$")


def parse_quantity(value: Any, what: str, unit: str) -> float:
    """A number, or a string with a unit: "80 GiB", "25 GB/s", "19.5 TFLOP/s", "10 us"."""
    if isinstance(value, bool):
        raise SystemSpecError(f"{what}: expected a number, got {value!r}")
    if isinstance(value, (int, float)):
        return float(value)
    match = _QUANTITY.match(str(value))
    if not match:
        raise SystemSpecError(f"{what}: cannot read {value!r} as a quantity in {unit}")
    number, suffix = float(match.group(1)), match.group(2)
    if unit == "s":
        if suffix in _TIME:
            return number * _TIME[suffix]
        raise SystemSpecError(f"{what}: unknown time unit {suffix!r} (use s, ms, us, ns)")
    base = {"B": ("B",), "B/s": ("B/s", "Bps"), "FLOP/s": ("FLOP/s", "FLOPS", "flop/s", "flops")}[unit]
    for b in base:
        if suffix.endswith(b):
            prefix = suffix[: -len(b)].lower()
            if prefix in _UNITS:
                return number * _UNITS[prefix]
    if suffix == "":
        return number
    raise SystemSpecError(f"{what}: unknown unit {suffix!r} (expected {unit} with a k/M/G/T or Ki/Mi/Gi prefix)")


def _device_from(data: Mapping[str, Any]) -> Device:
    name = str(data.get("name", ""))
    if not name:
        raise SystemSpecError("a device has no name")
    where = f"device {name}"
    try:
        flops = data["peak_flops"]
        kinds = data["kinds"]
        bandwidth = data["memory_bandwidth"]
        memory = data["memory"]
    except KeyError as e:
        raise SystemSpecError(f"{where}: missing field {e.args[0]}") from None
    if not isinstance(flops, Mapping):
        raise SystemSpecError(f"{where}: peak_flops must be a table of dtype = rate")
    try:
        peak = tuple((DType.parse(k), parse_quantity(v, f"{where}.peak_flops.{k}", "FLOP/s")) for k, v in flops.items())
    except ValueError as e:
        raise SystemSpecError(f"{where}: {e}") from None
    eff = tuple((str(k), float(v)) for k, v in dict(data.get("efficiency", {})).items())
    for k, v in eff:
        if k not in KINDS or not 0 < v <= 1:
            raise SystemSpecError(f"{where}: efficiency.{k} must name a kind and lie in (0, 1]")
    return Device(name, peak, parse_quantity(bandwidth, f"{where}.memory_bandwidth", "B/s"),
                  int(parse_quantity(memory, f"{where}.memory", "B")), frozenset(map(str, kinds)), eff,
                  parse_quantity(data.get("launch_overhead", 0.0), f"{where}.launch_overhead", "s"))


def link_from_dict(data: Mapping[str, Any]) -> Link:
    name = str(data.get("name", ""))
    if not name:
        raise SystemSpecError("a link has no name")
    try:
        devices = tuple(map(str, data["devices"]))
        bandwidth = parse_quantity(data["bandwidth"], f"link {name}.bandwidth", "B/s")
    except KeyError as e:
        raise SystemSpecError(f"link {name}: missing field {e.args[0]}") from None
    return Link(name, devices, bandwidth, parse_quantity(data.get("latency", 0.0), f"link {name}.latency", "s"),
                bool(data.get("duplex", False)))


def system_from_dict(data: Mapping[str, Any], default_name: str = "system") -> System:
    devices = tuple(_device_from(d) for d in data.get("devices", ()))
    links = tuple(link_from_dict(l) for l in data.get("links", ()))
    home = str(data.get("home", devices[0].name if devices else ""))
    return System(str(data.get("name", default_name)), devices, links, home, str(data.get("description", "")))


def presets() -> list[str]:
    """Names of the shipped hardware presets (a device alone is a system of one)."""
    from .hardware import preset_names

    return preset_names("system")


def load_system(name_or_path: str | Path) -> System:
    """A system's placement view (`ir/hardware.py`) by preset name (`cpu-gpu-npu`) or .toml path; a
    device preset is a system of one; an older system file (flat device tables) still loads."""
    from .hardware import load_view, system_view

    return load_view(name_or_path, "system", system_view, system_from_dict, SystemSpecError)


def _fmt(value: float, unit: str) -> str:
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


__all__ = ["Device", "Link", "System", "SystemSpecError", "load_system", "presets", "system_from_dict",
           "parse_quantity", "dominant_kind", "format_bytes", "format_seconds", "KIND_ORDER"]
