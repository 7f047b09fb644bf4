"""Facts about the machine this process runs on (as against the modelled hardware of `hardware.py`)."""
from __future__ import annotations

import os


def usable_cpus() -> int:
    """The CPUs this process may run on: its affinity mask (`os.cpu_count()` counts the whole host, which in a
    container can be many times more; where there is no affinity call, as on macOS, that count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


__all__ = ["usable_cpus"]
