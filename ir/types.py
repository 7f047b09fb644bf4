"""Element types and static tensor types: the vocabulary every other part of the IR speaks."""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass

import numpy as np


class DType(enum.Enum):
    """Element type of a tensor. `bf16` is held in numpy as float32 rounded to bf16 precision."""

    f32 = "f32"
    f16 = "f16"
    bf16 = "bf16"
    i32 = "i32"
    i64 = "i64"
    bool = "bool"

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE[self]

    @property
    def numpy(self) -> np.dtype:
        """The numpy dtype that stores values of this type (bf16 is stored as float32)."""
        return np.dtype(_NUMPY[self])

    @property
    def is_float(self) -> bool:
        return self in (DType.f32, DType.f16, DType.bf16)

    @property
    def is_int(self) -> bool:
        return self in (DType.i32, DType.i64)

    @classmethod
    def parse(cls, text: str) -> DType:
        try:
            return cls(text)
        except ValueError:
            known = ", ".join(d.value for d in cls)
            raise ValueError(f"unknown dtype {text!r}; known: {known}") from None

    @classmethod
    def from_numpy(cls, dtype: np.dtype) -> DType:
        dtype = np.dtype(dtype)
        for candidate in (cls.f32, cls.f16, cls.i32, cls.i64, cls.bool):
            if candidate.numpy == dtype:
                return candidate
        if dtype == np.float64:
            return cls.f32
        raise ValueError(f"no tilegraph dtype for numpy {dtype}")

    def __str__(self) -> str:
        return self.value

    def __repr__(self) -> str:
        return f"DType.{self.value}"


_ITEMSIZE = {DType.f32: 4, DType.f16: 2, DType.bf16: 2, DType.i32: 4, DType.i64: 8, DType.bool: 1}
_NUMPY = {
    DType.f32: np.float32,
    DType.f16: np.float16,
    DType.bf16: np.float32,
    DType.i32: np.int32,
    DType.i64: np.int64,
    DType.bool: np.bool_,
}


def to_dtype(array: np.ndarray, dtype: DType) -> np.ndarray:
    """Convert `array` to the storage of `dtype`, rounding to bf16 precision where needed."""
    out = np.asarray(array).astype(dtype.numpy, copy=False)
    if dtype is DType.bf16:
        out = round_to_bf16(out)
    return out


def round_to_bf16(array: np.ndarray) -> np.ndarray:
    """Round float32 values to the nearest bf16 (ties to even), kept as float32. Values that are bf16 already
    (a bf16 model's weights, which passes and runs convert again) come back as they are, strides and all,
    as `astype` gives an f32 array back; the rest is rounded in place on one copy. Through numpy
    temporaries, a 7B layer's 200M weights took 10 s per compile."""
    source = np.asarray(array, dtype=np.float32)
    bits = source.view(np.uint32)
    if _bf16_already(bits):
        return source
    rounded = np.right_shift(bits, np.uint32(16), out=np.empty_like(bits))  # an array, rank 0 too
    rounded &= np.uint32(1)
    rounded += np.uint32(0x7FFF)
    rounded += bits
    np.copyto(rounded, bits, where=~np.isfinite(source))  # inf and NaN are truncated, not rounded over
    rounded &= np.uint32(0xFFFF0000)
    return rounded.view(np.float32)


def _bf16_already(bits: np.ndarray, chunk: int = 1 << 18) -> bool:
    """Whether no value has bits below bf16's 16: checked a cache-sized block of rows at a time, so f32 data
    stops at the first block and no array-sized temporary is made."""
    if bits.ndim == 0 or bits.size <= chunk:
        return not (bits & np.uint32(0xFFFF)).any()
    rows = max(1, chunk * bits.shape[0] // bits.size)
    return not any((bits[i:i + rows] & np.uint32(0xFFFF)).any() for i in range(0, bits.shape[0], rows))


@dataclass(frozen=True)
class TensorType:
    """A tensor with a static shape. Rank 0 is a scalar."""

    shape: tuple[int, ...]
    dtype: DType = DType.f32

    def __post_init__(self) -> None:
        shape = tuple(int(d) for d in self.shape)
        if any(d < 0 for d in shape):
            raise ValueError(f"negative dimension in shape {list(shape)}")
        object.__setattr__(self, "shape", shape)
        if not isinstance(self.dtype, DType):
            raise TypeError(f"dtype must be a DType, got {self.dtype!r}")

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize

    def with_shape(self, shape: tuple[int, ...]) -> TensorType:
        return TensorType(tuple(shape), self.dtype)

    def with_dtype(self, dtype: DType) -> TensorType:
        return TensorType(self.shape, dtype)

    def __str__(self) -> str:
        return f"{self.dtype}[{', '.join(map(str, self.shape))}]"

    def compact(self) -> str:
        """The form used in error messages: `f32[128,256]`."""
        return f"{self.dtype}[{','.join(map(str, self.shape))}]"


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """numpy broadcasting of shapes; raises ValueError naming the clashing dims."""
    rank = max((len(s) for s in shapes), default=0)
    result = []
    for axis in range(-rank, 0):
        sizes = {s[axis] for s in shapes if len(s) >= -axis}
        sizes.discard(1)
        if len(sizes) > 1:
            raise ValueError(f"cannot broadcast sizes {sorted(sizes)} at axis {axis}")
        result.append(sizes.pop() if sizes else 1)
    return tuple(result)


def normalize_axis(axis: int, rank: int) -> int:
    """Turn a possibly negative axis into 0..rank-1; raise ValueError when out of range (a rank-0
    tensor has no axes at all)."""
    if not -rank <= axis < rank:
        raise ValueError(f"axis {axis} out of range for rank {rank}")
    return axis % rank


def parse_type(text: str) -> TensorType:
    """`f32[2, 3]` (or `f32[]` for a scalar) -> TensorType."""
    text = text.strip()
    head, bracket, rest = text.partition("[")
    if not bracket or not rest.endswith("]"):
        raise ValueError(f"expected a type like f32[2, 3], got {text!r}")
    dims = rest[:-1].strip()
    try:
        shape = tuple(int(d) for d in dims.split(",")) if dims else ()
    except ValueError:
        raise ValueError(f"expected integer dimensions in {text!r}") from None
    return TensorType(shape, DType.parse(head.strip()))
