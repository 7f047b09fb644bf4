"""Placement: the place pass's decision, as plain data attached to a Program.

Every kernel gets a device and a start/finish time; every tensor that crosses devices gets a
transfer with its link channel and times; each device's peak live memory is recorded. Times are
integers in `tick` seconds (exact replay by the checker); `seconds()` converts. The makespan comes
with a lower bound, the gap between them, and the method that produced the answer.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .errors import TilegraphError
from .system import format_bytes, format_seconds


class PlacementError(TilegraphError):
    """No valid placement exists (or none was found in time); the message says why."""


class UnsupportedKernelError(PlacementError):
    """A kernel that no device of the system can run; names the kernel and its kinds."""

    def __init__(self, message: str, kernel: str) -> None:
        super().__init__(message)
        self.kernel = kernel


class MemoryInfeasibleError(PlacementError):
    """Memory capacities that no placement can respect; `device` names the device at fault."""

    def __init__(self, message: str, device: str) -> None:
        super().__init__(message)
        self.device = device


@dataclass(frozen=True)
class KernelPlacement:
    kernel: str
    device: str
    start: int
    finish: int


@dataclass(frozen=True)
class Transfer:
    """`tensor` copied from `src` to `dst` over link channel `link` during [start, finish)."""

    tensor: str
    src: str
    dst: str
    link: str
    nbytes: int
    start: int
    finish: int


@dataclass(frozen=True)
class Placement:
    """Device and times per kernel, transfers, parameter devices, peak memory, and how good it is.

    `lower_bound` is a proven lower bound on any placement's makespan; `method` names the
    algorithm whose schedule this is ("cpsat", "lns", "heft", ...); `optimal` is True when the
    solver proved it. `stats` holds the other methods' makespans and solve times, in ticks and
    seconds, for reports.
    """

    system: str
    kernels: tuple[KernelPlacement, ...]
    transfers: tuple[Transfer, ...]
    peak_memory: tuple[tuple[str, int], ...]
    capacity: tuple[tuple[str, int], ...]
    makespan: int
    lower_bound: int
    method: str
    tick: float = 1e-6
    optimal: bool = False
    stats: tuple[tuple[str, float], ...] = field(default=(), compare=False)  # report-only: timings vary
    devices: tuple[str, ...] = field(default=())
    parameters: tuple[tuple[str, str], ...] = ()

    @property
    def gap(self) -> float:
        """(makespan - lower bound) / lower bound; 0 when both are zero."""
        if self.lower_bound <= 0:
            return 0.0 if self.makespan <= 0 else float("inf")
        return (self.makespan - self.lower_bound) / self.lower_bound

    def seconds(self, ticks: float) -> float:
        return ticks * self.tick

    def device_of(self, kernel: str) -> str:
        for k in self.kernels:
            if k.kernel == kernel:
                return k.device
        raise KeyError(f"no kernel {kernel!r} in this placement")

    def utilisation(self) -> dict[str, float]:
        """Busy time / makespan per device (and per link channel with any transfer)."""
        names = self.devices or tuple(dict.fromkeys(k.device for k in self.kernels))
        busy = dict.fromkeys(names, 0)
        for k in self.kernels:
            busy[k.device] = busy.get(k.device, 0) + k.finish - k.start
        for t in self.transfers:
            busy[t.link] = busy.get(t.link, 0) + t.finish - t.start
        span = max(self.makespan, 1)
        return {name: b / span for name, b in busy.items()}

    def lines(self) -> list[str]:
        s = self.seconds
        head = (f"placement on {self.system}: makespan {format_seconds(s(self.makespan))}, "
                f"lower bound {format_seconds(s(self.lower_bound))}, gap {self.gap:.1%}, "
                f"method {self.method}{' (optimal)' if self.optimal else ''}")
        out = [head]
        for k in self.kernels:
            out.append(f"  {k.kernel} @{k.device} [{format_seconds(s(k.start))}, {format_seconds(s(k.finish))})")
        for name, device in self.parameters:
            out.append(f"  parameter {name} @{device}")
        for t in self.transfers:
            out.append(f"  transfer {t.tensor} {t.src}->{t.dst} on {t.link} ({format_bytes(t.nbytes)}) "
                       f"[{format_seconds(s(t.start))}, {format_seconds(s(t.finish))})")
        cap = dict(self.capacity)
        for name, peak in self.peak_memory:
            out.append(f"  peak memory {name}: {format_bytes(peak)} of {format_bytes(cap.get(name, 0))}")
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())


# ----- program text: the `placement { ... }` section (registered in program_text) ----------------
def placement_record(p: Placement) -> list[tuple[str, object]]:
    """The section's fields in printing order (solver timings vary between runs, so they are left out)."""
    return [
        ("system", p.system), ("tick", p.tick), ("makespan", p.makespan), ("lower_bound", p.lower_bound),
        ("method", p.method), ("optimal", p.optimal), ("devices", list(p.devices)),
        ("capacity", p.capacity), ("peak_memory", p.peak_memory),
        ("kernels", [(k.kernel, k.device, k.start, k.finish) for k in p.kernels]),
        ("transfers", [(t.tensor, t.src, t.dst, t.link, t.nbytes, t.start, t.finish) for t in p.transfers]),
        ("parameters", p.parameters),
        ("stats", [(k, v) for k, v in p.stats if not k.startswith("seconds.")]),
    ]


PLACEMENT_FIELDS = ("system", "tick", "makespan", "lower_bound", "method", "optimal", "devices", "capacity",
                    "peak_memory", "kernels", "transfers", "parameters", "stats")


def placement_from_record(v: dict) -> Placement:
    """The Placement of a parsed section's values (TypeError/ValueError when malformed)."""
    return Placement(
        system=str(v["system"]), kernels=tuple(KernelPlacement(*r) for r in v["kernels"]),
        transfers=tuple(Transfer(*r) for r in v["transfers"]),
        peak_memory=tuple(tuple(r) for r in v["peak_memory"]), capacity=tuple(tuple(r) for r in v["capacity"]),
        makespan=int(v["makespan"]), lower_bound=int(v["lower_bound"]), method=str(v["method"]),
        tick=float(v["tick"]), optimal=bool(v["optimal"]), stats=tuple(tuple(r) for r in v["stats"]),
        devices=tuple(v["devices"]), parameters=tuple(tuple(r) for r in v["parameters"]))
