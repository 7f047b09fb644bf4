"""OpDef: one op declared as data (attributes, type inference, numpy semantics, iteration space, cost)."""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ShapeError
from ..structured import IterationSpace
from ..types import DType, TensorType, normalize_axis, to_dtype

REQUIRED = object()

# What an attribute value may be; `axes` accepts an int or a list of ints and is stored sorted,
# non-negative; `shape`/`ints` are tuples of ints; `pair` takes an int or two and stores two (strides,
# padding); `scalar` is a bool, int or float.
ATTR_KINDS = ("int", "float", "bool", "ints", "axes", "shape", "pair", "dtype", "str", "scalar")

# Categories say how later passes may treat an op.
ELEMENTWISE, REDUCTION, CONTRACTION, WINDOW, LAYOUT, COMPOSITE, SOURCE = (
    "elementwise", "reduction", "contraction", "window", "layout", "composite", "source")


@dataclass(frozen=True)
class AttrSpec:
    name: str
    kind: str
    default: Any = REQUIRED
    choices: tuple | None = None

    def __post_init__(self) -> None:
        assert self.kind in ATTR_KINDS, self.kind

    def check(self, op: str, value: Any) -> Any:
        """Coerce a value to this attribute's kind or raise ShapeError naming op and attribute."""
        def bad(expected: str) -> ShapeError:
            return ShapeError(f"{op}: attribute {self.name} must be {expected}, got {value!r}")

        kind = self.kind
        if value is None and self.default is None:
            return None
        if kind == "int":
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise bad("an integer")
            value = int(value)
        elif kind == "float":
            if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
                raise bad("a number")
            value = float(value)
        elif kind == "bool":
            if not isinstance(value, (bool, np.bool_)):
                raise bad("true or false")
            value = bool(value)
        elif kind == "scalar":
            if isinstance(value, (bool, np.bool_)):
                value = bool(value)
            elif isinstance(value, (int, np.integer)):
                value = int(value)
            elif isinstance(value, (float, np.floating)):
                value = float(value)
            else:
                raise bad("a number")
        elif kind in ("ints", "shape", "axes", "pair"):
            if kind in ("axes", "pair") and isinstance(value, (int, np.integer)) and not isinstance(value, bool):
                value = (int(value),)
            if not isinstance(value, (list, tuple)) or not all(
                    isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value):
                raise bad("a list of integers")
            value = tuple(int(v) for v in value)
            if kind == "pair":
                if len(value) == 1:
                    value = value * 2
                if len(value) != 2:
                    raise bad("an integer or a pair of integers")
        elif kind == "dtype":
            if isinstance(value, str):
                try:
                    value = DType.parse(value)
                except ValueError as e:
                    raise ShapeError(f"{op}: attribute {self.name}: {e}") from None
            if not isinstance(value, DType):
                raise bad("a dtype")
        elif kind == "str":
            if not isinstance(value, str):
                raise bad("a string")
        if self.choices is not None and value not in self.choices:
            options = ", ".join(map(str, self.choices))
            raise ShapeError(f"{op}: attribute {self.name}={value!r} is not valid; expected one of {options}")
        return value


@dataclass(frozen=True)
class OpDef:
    """Everything the compiler knows about one op, registered by name.

    - `infer(in_types, attrs) -> result types` checks operands; messages name the op and shapes.
    - `reference(arrays, attrs, result types) -> arrays`: numpy semantics, the oracle.
    - `space(in_types, attrs, result types) -> IterationSpace` for structured ops, else None.
    - `decompose(builder, values, attrs) -> results` for composites, in terms of simpler ops.
    """

    name: str
    category: str
    arity: tuple[int, int]  # (min, max) number of operands
    infer_fn: Callable[..., Any]
    reference_fn: Callable[..., Any]
    attrs: tuple[AttrSpec, ...] = ()
    space_fn: Callable[..., IterationSpace] | None = None
    decompose_fn: Callable[..., Any] | None = None
    normalize_fn: Callable[..., dict] | None = None
    flops_fn: Callable[..., int] | None = None
    doc: str = ""
    attr_index: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        self.attr_index.update({a.name: a for a in self.attrs})

    @property
    def is_structured(self) -> bool:
        return self.space_fn is not None

    @property
    def is_composite(self) -> bool:
        return self.decompose_fn is not None

    def check_arity(self, count: int) -> None:
        lo, hi = self.arity
        if not lo <= count <= hi:
            expected = str(lo) if lo == hi else f"{lo} to {hi}"
            noun = "operand" if hi == 1 else "operands"
            raise ShapeError(f"{self.name}: takes {expected} {noun}, got {count}")

    def normalize_attrs(self, in_types: Sequence[TensorType], attrs: dict[str, Any]) -> dict[str, Any]:
        """Check names and kinds, fill defaults, and put values in canonical form."""
        self.check_arity(len(in_types))
        for key in attrs:
            if key not in self.attr_index:
                known = ", ".join(self.attr_index) or "none"
                raise ShapeError(f"{self.name}: unknown attribute {key!r} (attributes: {known})")
        result = {}
        for spec in self.attrs:
            if spec.name in attrs:
                result[spec.name] = spec.check(self.name, attrs[spec.name])
            elif spec.default is REQUIRED:
                raise ShapeError(f"{self.name}: missing attribute {spec.name}")
            else:
                result[spec.name] = spec.default
        if self.normalize_fn is not None:
            result = self._wrap(self.normalize_fn, in_types, result)
        return result

    def infer(self, in_types: Sequence[TensorType], attrs: dict[str, Any]) -> tuple[TensorType, ...]:
        self.check_arity(len(in_types))
        result = self._wrap(self.infer_fn, tuple(in_types), attrs)
        return result if isinstance(result, tuple) else (result,)

    def reference(self, arrays: Sequence[np.ndarray], attrs: dict[str, Any],
                  result_types: Sequence[TensorType]) -> list[np.ndarray]:
        with np.errstate(all="ignore"):
            out = self.reference_fn(list(arrays), attrs, *result_types)
        outs = out if isinstance(out, (list, tuple)) else [out]
        return [to_dtype(np.asarray(o).reshape(t.shape), t.dtype) for o, t in zip(outs, result_types)]

    def space(self, in_types: Sequence[TensorType], attrs: dict[str, Any],
              result_types: Sequence[TensorType]) -> IterationSpace | None:
        if self.space_fn is None:
            return None
        return self.space_fn(tuple(in_types), attrs, *result_types)

    def flops(self, in_types: Sequence[TensorType], attrs: dict[str, Any],
              result_types: Sequence[TensorType]) -> int:
        if self.flops_fn is not None:
            return int(self.flops_fn(tuple(in_types), attrs, *result_types))
        space = self.space(in_types, attrs, result_types)
        if space is not None:
            return space.flops()
        if self.decompose_fn is not None:
            return sum(n.flops() for n in self.expand(in_types, attrs).nodes)
        return 0

    def expand(self, in_types: Sequence[TensorType], attrs: dict[str, Any]):
        """A scratch Graph holding this composite's decomposition, for cost queries."""
        from ..builder import GraphBuilder  # the builder depends on this module

        b = GraphBuilder(self.name)
        values = [b.input(f"in{i}", t) for i, t in enumerate(in_types)]
        return b.output(*self.decompose_fn(b, values, attrs))

    def bytes(self, in_types: Sequence[TensorType], result_types: Sequence[TensorType]) -> int:
        """Bytes touched if every operand is read once and every result written once."""
        return sum(t.nbytes for t in in_types) + sum(t.nbytes for t in result_types)

    def _wrap(self, fn: Callable, in_types: Sequence[TensorType], attrs: dict[str, Any]):
        try:
            return fn(tuple(in_types), attrs)
        except ShapeError:
            raise
        except ValueError as e:
            raise ShapeError(f"{self.name}: {e}") from None


_REGISTRY: dict[str, OpDef] = {}


def register(opdef: OpDef) -> OpDef:
    if opdef.name in _REGISTRY:
        raise ValueError(f"op {opdef.name} registered twice")
    _REGISTRY[opdef.name] = opdef
    return opdef


def get_op(name: str) -> OpDef:
    try:
        return _REGISTRY[name]
    except KeyError:
        import difflib

        close = difflib.get_close_matches(name, _REGISTRY, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise ShapeError(f"unknown op {name!r}{hint}") from None


def all_ops() -> dict[str, OpDef]:
    return dict(_REGISTRY)


# ----- helpers the op modules share ----------------------------------------------------------
def same_dtype(op_inputs: Sequence[TensorType], what: str = "operands") -> DType:
    dtypes = {t.dtype for t in op_inputs}
    if len(dtypes) > 1:
        shown = ", ".join(t.compact() for t in op_inputs)
        raise ValueError(f"{what} must have one dtype, got {shown}")
    return op_inputs[0].dtype


def normalize_axes(axes: tuple[int, ...] | None, rank: int) -> tuple[int, ...]:
    """Sorted, non-negative, unique axes; None means every axis."""
    if axes is None:
        return tuple(range(rank))
    normal = sorted({normalize_axis(a, rank) for a in axes})
    if len(normal) != len(axes):
        raise ValueError(f"repeated axis in {list(axes)}")
    return tuple(normal)


def numel(shape: Sequence[int]) -> int:
    return math.prod(shape)
