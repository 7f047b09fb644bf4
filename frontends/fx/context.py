"""What a converter sees: the builder, the node being converted, its result on the example
inputs, and helpers to turn Python numbers and torch tensors into IR values."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from tilegraph.ir import DType, GraphBuilder, TensorType, Value

_DTYPES = {
    torch.float32: DType.f32,
    torch.float16: DType.f16,
    torch.bfloat16: DType.bf16,
    torch.int32: DType.i32,
    torch.int64: DType.i64,
    torch.bool: DType.bool,
}
_TORCH_DTYPES = {v: k for k, v in _DTYPES.items()}


class Unsupported(Exception):
    """Raised by a converter: this call (or these arguments) cannot be expressed in the IR."""


class Missing:
    """A result the IR does not compute (e.g. max-pool indices); an error only if something uses it."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __repr__(self) -> str:
        return f"<missing: {self.reason}>"


def ir_dtype(dtype: torch.dtype) -> DType:
    try:
        return _DTYPES[dtype]
    except KeyError:
        known = ", ".join(str(d).replace("torch.", "") for d in _DTYPES)
        raise Unsupported(f"dtype {str(dtype).replace('torch.', '')} is not supported (supported: {known})") from None


def torch_dtype(dtype: DType) -> torch.dtype:
    return _TORCH_DTYPES[dtype]


def tensor_type(tensor: torch.Tensor) -> TensorType:
    return TensorType(tuple(tensor.shape), ir_dtype(tensor.dtype))


def to_numpy(tensor: torch.Tensor, copy: bool = True) -> np.ndarray:
    """A private numpy copy of a tensor (bf16 is stored as float32, as the IR does); with copy=False
    a CPU tensor's own memory where it has a numpy dtype (the caller then notices in-place updates)."""
    tensor = tensor.detach().cpu()
    if tensor.dtype is torch.bfloat16:
        tensor = tensor.float()
    return tensor.clone().numpy() if copy else tensor.numpy()


class ConvertContext:
    """Passed to every converter as `cx`.

    - `cx.b`: the GraphBuilder appending IR nodes (`cx.b.matmul(a, w)`);
    - `cx.expected`: the node's result on the example inputs (a torch tensor, or a tuple of them),
      so converters can read the output shape and dtype instead of re-deriving torch's rules;
    - `cx.node`, `cx.module_path` (for call_module): where we are, for names and messages.
    """

    def __init__(self, builder: GraphBuilder, converter) -> None:
        self.b = builder
        self._converter = converter
        self.node = None
        self.expected: Any = None
        self.module_path = ""

    # ----- the expected result ------------------------------------------------------------
    @property
    def primary(self) -> torch.Tensor:
        """The expected result, or its first tensor for ops giving several (values, indices)."""
        expected = self.expected
        while isinstance(expected, (tuple, list)):
            expected = expected[0]
        return expected

    @property
    def out_shape(self) -> tuple[int, ...]:
        return tuple(self.primary.shape)

    @property
    def out_dtype(self) -> DType:
        return ir_dtype(self.primary.dtype)

    # ----- making values --------------------------------------------------------------------
    def param(self, name: str, tensor: torch.Tensor) -> Value:
        """An IR parameter carrying the tensor's data (one per tensor, however often it is used)."""
        return self._converter.param_for(tensor, name)

    def module_param(self, module: torch.nn.Module, attr: str) -> Value | None:
        """The parameter or buffer `attr` of the module being converted, named by its path."""
        tensor = getattr(module, attr, None)
        if tensor is None:
            return None
        prefix = f"{self.module_path}." if self.module_path else ""
        return self.param(prefix + attr, tensor)

    def value(self, x: Any, dtype: DType | None = None) -> Value:
        """A Value for an operand: Values pass through (cast to `dtype` if given), Python numbers
        become constants, torch tensors become parameters."""
        if isinstance(x, Value):
            return self.cast(x, dtype) if dtype is not None else x
        if isinstance(x, Missing):
            raise Unsupported(x.reason)
        if isinstance(x, torch.Tensor):
            return self.value(self.param(f"{self.node.name}_const", x), dtype)
        if isinstance(x, (bool, int, float)):
            if dtype is None:
                dtype = DType.bool if isinstance(x, bool) else DType.i64 if isinstance(x, int) else DType.f32
            if dtype.is_int and isinstance(x, float) and not float(x).is_integer():
                raise Unsupported(f"non-integer scalar {x} used with an integer tensor")
            if x in (float("inf"), float("-inf")) and not dtype.is_float:
                raise Unsupported(f"scalar {x} used with a {dtype} tensor")
            return self.b.constant(x, dtype)
        raise Unsupported(f"cannot use {type(x).__name__} {x!r} as a tensor operand")

    def cast(self, x: Value, dtype: DType) -> Value:
        return x if x.dtype is dtype else self.b.cast(x, dtype=dtype)

    def reshape(self, x: Value, shape: Sequence[int]) -> Value:
        shape = tuple(shape)
        return x if x.shape == shape else self.b.reshape(x, shape=shape)

    def transpose(self, x: Value, perm: Sequence[int]) -> Value:
        perm = tuple(p % x.type.rank for p in perm) if x.type.rank else ()
        return x if perm == tuple(range(x.type.rank)) else self.b.transpose(x, perm=perm)

    def broadcast(self, x: Value, shape: Sequence[int]) -> Value:
        shape = tuple(shape)
        return x if x.shape == shape else self.b.broadcast_to(x, shape=shape)
