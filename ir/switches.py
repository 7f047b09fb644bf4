"""Environment switches: features on by default that a user turns off with `NAME=0` (or off, false, no)."""
from __future__ import annotations

import os

OFF = ("0", "off", "false", "no")


def switched_on(name: str) -> bool:
    """Whether $`name` leaves its feature on: unset, or anything but 0, off, false or no."""
    return os.environ.get(name, "1").strip().lower() not in OFF


__all__ = ["switched_on", "OFF"]
