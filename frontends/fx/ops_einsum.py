"""torch.einsum as the IR's products: each pair of operands one matmul (or batch_matmul) between transposes.

Operands are contracted left to right. For a pair, each index is a batch index (in both, still needed after),
contracted (in both, not needed), or kept from one side; indices found in one operand only and not needed are
summed first. The pair becomes [B, M, K] @ [B, K, N] (a 2-D matmul where there is no batch index, so a weight
read as `x @ w` stays the linear kernel's operand), reshaped back to its indices; the result is transposed into
the output's order. A repeated index within one operand (a diagonal, `ii->i`) is reported as unsupported.
XLNet, Funnel and many research models write their attention this way.
"""
from __future__ import annotations

import math
import string
from collections.abc import Sequence

import torch

from tilegraph.ir import Value

from .context import Unsupported
from .registry import converts, optional

aten = torch.ops.aten
ELLIPSIS_LETTERS = string.ascii_uppercase[::-1]  # stand-ins for the dims of "...", not in einsum's own lowercase use


def parse_equation(equation: str, ranks: Sequence[int]) -> tuple[list[str], str]:
    """Each operand's index letters and the output's, with "..." spelled out (aligned from the right, as
    broadcasting aligns) and the implicit output (no "->": indices seen once, sorted, after "...")."""
    equation = equation.replace(" ", "")
    lhs, arrow, rhs = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise Unsupported(f"einsum {equation!r}: {len(terms)} operand terms for {len(ranks)} operands")
    widest = max((rank - len(term.replace("...", "")) for term, rank in zip(terms, ranks) if "..." in term), default=0)
    dots = "".join(ELLIPSIS_LETTERS[:widest][::-1])
    spelled = []
    for term, rank in zip(terms, ranks):
        if "..." in term:
            own = rank - len(term.replace("...", ""))
            term = term.replace("...", dots[widest - own:])
        if len(term) != rank or not all(c.isalpha() for c in term):
            raise Unsupported(f"einsum {equation!r}: term {term!r} does not index a rank-{rank} operand")
        spelled.append(term)
    if arrow:
        out = rhs.replace("...", dots)
    else:
        seen = "".join(spelled)
        out = dots + "".join(sorted(c for c in set(seen) if seen.count(c) == 1 and c not in dots))
    return spelled, out


def _sum_out(cx, x: Value, letters: str, keep: set[str]) -> tuple[Value, str]:
    """Sum the indices of x not in `keep`."""
    axes = tuple(i for i, c in enumerate(letters) if c not in keep)
    if not axes:
        return x, letters
    return cx.b.sum(x, axes=axes, keepdims=False), "".join(c for c in letters if c in keep)


def _permuted(cx, x: Value, letters: str, order: str) -> Value:
    return cx.transpose(x, [letters.index(c) for c in order])


def _pair(cx, a: Value, la: str, b: Value, lb: str, keep: set[str]) -> tuple[Value, str]:
    """a and b contracted over their shared indices not in `keep`; the result's indices: batch, a's, b's."""
    a, la = _sum_out(cx, a, la, keep | set(lb))
    b, lb = _sum_out(cx, b, lb, keep | set(la))
    batch = [c for c in la if c in lb and c in keep]
    contract = [c for c in la if c in lb and c not in keep]
    rows, cols = [c for c in la if c not in lb], [c for c in lb if c not in la]
    size = {**dict(zip(lb, b.shape)), **dict(zip(la, a.shape))}
    for c in set(la) & set(lb):
        if a.shape[la.index(c)] != b.shape[lb.index(c)]:
            raise Unsupported(f"einsum index {c!r} has sizes {a.shape[la.index(c)]} and {b.shape[lb.index(c)]} "
                              "(broadcast operands)")
    n = {group: math.prod(size[c] for c in letters) for group, letters in
         (("b", batch), ("m", rows), ("k", contract), ("n", cols))}
    a = _permuted(cx, a, la, "".join(batch + rows + contract))
    b = _permuted(cx, b, lb, "".join(batch + contract + cols))
    if batch:
        product = cx.b.batch_matmul(cx.reshape(a, (n["b"], n["m"], n["k"])), cx.reshape(b, (n["b"], n["k"], n["n"])))
    else:
        product = cx.b.matmul(cx.reshape(a, (n["m"], n["k"])), cx.reshape(b, (n["k"], n["n"])))
    letters = "".join(batch + rows + cols)
    return cx.reshape(product, tuple(size[c] for c in letters)), letters


@converts(torch.einsum, optional(torch.functional, "einsum"), "einsum", optional(aten, "einsum"))
def einsum(cx, equation: str, *operands, path=None):
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    dtype = cx.out_dtype
    values = [cx.value(x, dtype) for x in operands]
    terms, out = parse_equation(equation, [v.type.rank for v in values])
    for term in terms:
        if len(set(term)) != len(term):
            raise Unsupported(f"einsum {equation!r}: a repeated index in one operand (a diagonal)")
    x, letters = values[0], terms[0]
    for position in range(1, len(values)):
        later = set(out).union(*terms[position + 1:])
        x, letters = _pair(cx, x, letters, values[position], terms[position], later)
    x, letters = _sum_out(cx, x, letters, set(out))
    return cx.reshape(_permuted(cx, x, letters, out), cx.out_shape)
