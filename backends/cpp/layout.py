"""Layout kernels: reshape (a copy), concat and gather, which have no affine loop nest."""
from __future__ import annotations

import math

from tilegraph.ir import TilegraphError
from tilegraph.ir.graph import Node
from tilegraph.ir.ops.layout import concat_windows

from .code import Code
from .dialect import Dialect
from .names import c_type


def emit_layout(code: Code, node: Node, dialect: Dialect, ptr: dict) -> bool:
    """Write the body of a lone layout node; returns whether it sets the error flag (`*err`)."""
    out = ptr[node.result]
    if node.op == "reshape":
        n = node.result.type.numel
        src = ptr[node.inputs[0]]
        dialect.serial(code, 0, lambda c: c.line(f"for (int64_t n = 0; n < {n}; ++n) {out}[n] = {src}[n];"))
        return False
    if node.op == "concat":
        axis = node.attrs["axis"]
        shape = node.result.type.shape
        outer = math.prod(shape[:axis])
        out_inner = math.prod(shape[axis:])

        rest = math.prod(shape[axis + 1:])

        def body(c: Code) -> None:
            offset = 0
            for value, (start, size) in zip(node.inputs, concat_windows(node.inputs, node.attrs)):
                whole, inner = math.prod(value.type.shape[axis:]), size * rest  # the operand's and its window's
                with c.block(f"for (int64_t o = 0; o < {outer}; ++o)"):
                    c.line(f"for (int64_t n = 0; n < {inner}; ++n) "
                           f"{out}[o * {out_inner} + {offset} + n] = {ptr[value]}[o * {whole} + {start * rest} + n];")
                offset += inner
        dialect.serial(code, 0, body)
        return False
    if node.op == "gather":
        table, indices = node.inputs
        axis = node.attrs["axis"]
        outer = math.prod(table.type.shape[:axis])
        size = table.type.shape[axis]
        inner = math.prod(table.type.shape[axis + 1:])
        count = indices.type.numel
        c_type(table.type.dtype, node.op)

        def gather(c: Code) -> None:
            with c.block(f"for (int64_t o = 0; o < {outer}; ++o)"):
                with c.block(f"for (int64_t n = 0; n < {count}; ++n)"):
                    c.line(f"int64_t ix = static_cast<int64_t>({ptr[indices]}[n]);")
                    c.line(f"if (ix < 0) ix += {size};")
                    c.line(f"if (ix < 0 || ix >= {size}) {{ *err = 1; ix = 0; }}")
                    c.line(f"for (int64_t r = 0; r < {inner}; ++r) "
                           f"{out}[(o * {count} + n) * {inner} + r] = {ptr[table]}[(o * {size} + ix) * {inner} + r];")
        dialect.serial(code, 0, gather)
        return True
    raise TilegraphError(f"cpp backend: op {node.op!r} (%{node.name}) has no loop nest and no code generator; "
                         "run canonicalize so composites are decomposed")
