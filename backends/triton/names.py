"""Identifiers for generated source: every name is built here, from a safe alphabet.

User-supplied names (kernel names from a .tgir file, value names from a model) never appear in the
generated Python as written: `mangle` keeps ASCII letters and digits and spells every other
character as `_xHH_` (its code point in hex), under a fixed prefix, so the result is always a
valid identifier that cannot close a string, start a comment or shadow a builtin.
"""
from __future__ import annotations

import string

_SAFE = frozenset(string.ascii_letters + string.digits)


def mangle(name: str, prefix: str = "tg_") -> str:
    """A Python identifier for `name`: `prefix` + letters/digits, everything else as `_xHH_`."""
    out = []
    for ch in name:
        out.append(ch if ch in _SAFE else f"_x{ord(ch):x}_")
    return prefix + "".join(out)


def kernel_function(position: int, name: str) -> str:
    """The `@triton.jit` function of the kernel at `position` in the Program."""
    return mangle(name, prefix=f"tg_k{position}_")


__all__ = ["mangle", "kernel_function"]
