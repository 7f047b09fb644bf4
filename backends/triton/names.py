"""Identifiers for generated source: every name is built here, from a safe alphabet.

User-supplied names (kernel names from a .tgir file, value names from a model) never appear in the
generated Python as written. Tensors and kernels are named after their IR names through
`identifier` (ASCII letters, digits and single underscores: `self_attention.wq` is
`self_attention_wq`, `%22` is `v22`) and a `NameTable`, which keeps the names of a scope distinct
and away from Python's keywords and builtins and from the generated module's own names (`pid`,
`base0`, `kernel_...`, `step_...`, `_tg_...`). Names in comments go through `mangle`, which keeps
ASCII letters and digits and spells every other character as `_xHH_` (its code point in hex). So
the result can never close a string, start a comment or shadow what the code uses.
"""
from __future__ import annotations

import builtins
import keyword
import re
import string

from tilegraph.ir.graph import Value
from tilegraph.ir.program import Program

from ..cpp.names import NameTable, identifier, kernel_functions

_SAFE = frozenset(string.ascii_letters + string.digits)

# Names the generated module defines or uses at module level, in its launch steps and in its
# kernels (module.py, kernel.py, dot.py, attention.py); keep in step with them.
PY_RUNTIME = frozenset("""
    torch triton tl math dev warps stages arena pid tile zr group rows rt m_i l_i o_i s m_new shift p scale pv res
    STEPS OUTPUTS ARENA_BYTES
""".split())
# index families of the kernels (base0 iv0 ix0 mv0 mk0 rb0), kernel functions and launch steps,
# private helpers
_PY_FAMILIES = re.compile(r"(?:base|iv|ix|mv|mk|rb)\d+|kernel_\w*|step_\w*|_\w*")
_PY_RESERVED = frozenset(keyword.kwlist) | frozenset(keyword.softkwlist) | frozenset(dir(builtins)) | PY_RUNTIME


def py_reserved(name: str) -> bool:
    """Whether a tensor may not be called `name` in the generated module."""
    return name in _PY_RESERVED or bool(_PY_FAMILIES.fullmatch(name))


def mangle(name: str, prefix: str = "tg_") -> str:
    """A Python identifier for `name`: `prefix` + letters/digits, everything else as `_xHH_`."""
    out = []
    for ch in name:
        out.append(ch if ch in _SAFE else f"_x{ord(ch):x}_")
    return prefix + "".join(out)


def tensor_names(program: Program) -> tuple[dict[Value, str], NameTable]:
    """One name per tensor of the Program (graph inputs and parameters first, then node results in
    graph order), and the table that holds them (a kernel's scope is `table.child()`)."""
    table = NameTable(py_reserved)
    names: dict[Value, str] = {}
    graph = program.graph
    for value in [*graph.inputs, *graph.params, *(v for n in graph.nodes for v in n.results)]:
        if value not in names:
            names[value] = table.take(identifier(value.name))
    return names, table


__all__ = ["mangle", "identifier", "kernel_functions", "tensor_names", "py_reserved", "NameTable"]
