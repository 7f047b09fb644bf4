"""`torch.autocast` regions in a captured graph: the dtype autocast casts an op's inputs to.

Dynamo captures `with torch.autocast(...)` as `_enter_autocast`/`_exit_autocast` nodes. The converter
runs them on the example inputs like any other node, so the ops in between run under autocast and
their example results carry autocast's dtypes. An op that autocast casts (matmul, linear, conv to the
low-precision dtype; fp32 ops such as softmax on CUDA back to f32; promote ops to the widest type) is
one whose result dtype changes when the same call runs with autocast off, or that is only valid under
autocast (bf16 activations into an f32 weight). Its floating-point tensor inputs are cast to the
result dtype before converting, as torch does; every other op runs in its inputs' dtypes.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
import torch.utils._pytree as pytree

from tilegraph.ir import Value

from .context import ConvertContext, ir_dtype

ENTER = torch.amp.autocast_mode._enter_autocast
EXIT = torch.amp.autocast_mode._exit_autocast
_DEVICES = ("cpu", "cuda")


def active_devices() -> tuple[str, ...]:
    """The device types autocast is on for, where the converter is now."""
    return tuple(d for d in _DEVICES if torch.is_autocast_enabled(d))


def cast_dtype(run: Callable[[], Any], args: Any, result: Any) -> torch.dtype | None:
    """The dtype autocast cast this op's floating-point tensor inputs to, or None where it cast none.

    `args`: the op's example arguments; `result`: what it computed under autocast; `run` calls the
    op again on the same example arguments (it is called with autocast off, so it must not mutate)."""
    devices = active_devices()
    if not devices:
        return None
    want = _first_float(result)
    inputs = [t for t in pytree.tree_leaves(args) if isinstance(t, torch.Tensor) and t.is_floating_point()]
    if want is None or all(t.dtype == want for t in inputs):
        return None
    try:
        with contextlib.ExitStack() as stack:
            for device in devices:
                stack.enter_context(torch.autocast(device, enabled=False))
            plain = run()
    except Exception:  # e.g. bf16 activations into an f32 weight: valid only because autocast casts both
        return want
    return want if _first_float(plain) != want else None


def cast_inputs(cx: ConvertContext, arguments: Any, dtype: torch.dtype) -> Any:
    """The converter's arguments with every floating-point Value cast to `dtype`."""
    target = ir_dtype(dtype)

    def cast(leaf: Any) -> Any:
        return cx.cast(leaf, target) if isinstance(leaf, Value) and leaf.dtype.is_float else leaf

    return pytree.tree_map(cast, arguments)


def exit_regions(regions: list[Any]) -> None:
    """Leave autocast regions the walk entered but did not leave (it stopped on an error): the
    caller's thread must not stay under autocast."""
    while regions:
        EXIT(regions.pop())


def _first_float(value: Any) -> torch.dtype | None:
    return next((t.dtype for t in pytree.tree_leaves(value)
                 if isinstance(t, torch.Tensor) and t.is_floating_point()), None)
