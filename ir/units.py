"""Byte sizes and times as people write and read them: `256KiB` in, `1.50 MiB` and `12.3 ms` out."""
from __future__ import annotations

_BINARY = (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))
_SIZE_UNITS = {"tib": 1 << 40, "gib": 1 << 30, "mib": 1 << 20, "kib": 1 << 10, "tb": 10**12, "gb": 10**9,
               "mb": 10**6, "kb": 10**3, "t": 1 << 40, "g": 1 << 30, "m": 1 << 20, "k": 1 << 10, "b": 1, "": 1}


def format_bytes(n: float) -> str:
    """`1.50 MiB`: byte counts in reports (binary units)."""
    for unit, scale in _BINARY:
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{int(n)} B"


def parse_bytes(text: str | int) -> int:
    """'256KiB', '1.5 MiB', '4096', '64k' -> bytes (KiB/MiB/GiB and k/m/g binary, kB/MB/GB decimal)."""
    if isinstance(text, int):
        return text
    lower = text.strip().replace(" ", "").replace("_", "").lower()
    number = lower.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = lower[len(number):]
    try:
        value = float(number)
    except ValueError:
        value = -1.0
    if unit not in _SIZE_UNITS or not value > 0:
        raise ValueError(f"cannot read {text!r} as a positive size (e.g. 256KiB, 1.5MiB, 65536)")
    return int(value * _SIZE_UNITS[unit])


def format_seconds(value: float) -> str:
    """`12.3 ms`: times in reports."""
    if value >= 1:
        return f"{value:.4g} s"
    if value >= 1e-3:
        return f"{value * 1e3:.4g} ms"
    return f"{value * 1e6:.4g} us" if value >= 1e-6 or value == 0 else f"{value * 1e9:.4g} ns"
