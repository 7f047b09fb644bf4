"""The conversion tables: one small function per torch target, registered by what it converts.

Three tables, looked up by fx node kind:
- `FUNCTIONS`: `call_function` targets: torch functions, `torch.nn.functional`, `operator` and builtins,
  and ATen ops from `torch.export` (registered by overload packet, so `aten.add` covers
  `aten.add.Tensor` and `aten.add.Scalar`);
- `METHODS`: `call_method` targets, by tensor method name (`"view"`, `"softmax"`);
- `MODULES`: `call_module` targets, by module class (`nn.Linear`); a subclass that keeps the
  class's `forward` uses the same converter.

A converter is called as `fn(cx, *args, **kwargs)` with the node's arguments, where tensors are
IR `Value`s and everything else is the concrete Python value seen on the example inputs; module
converters get the module first: `fn(cx, module, *args, **kwargs)`. See `context.ConvertContext`.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

Converter = Callable[..., Any]

FUNCTIONS: dict[Any, Converter] = {}
METHODS: dict[str, Converter] = {}
MODULES: dict[type, Converter] = {}


def converts(*targets: Any) -> Callable[[Converter], Converter]:
    """Register the decorated converter for every target given; `None` targets (absent in this
    torch version) are skipped. Strings are tensor methods, module classes go to MODULES."""

    def register(fn: Converter) -> Converter:
        for target in targets:
            if target is None:
                continue
            if isinstance(target, str):
                METHODS[target] = fn
            elif isinstance(target, type) and issubclass(target, torch.nn.Module):
                MODULES[target] = fn
            else:
                FUNCTIONS[target] = fn
        return fn

    return register


def optional(owner: Any, *path: str) -> Any:
    """`owner.a.b` or None when this torch version lacks it (for registering optional targets)."""
    for name in path:
        owner = getattr(owner, name, None)
        if owner is None:
            return None
    return owner


def function_converter(target: Any) -> Converter | None:
    try:
        found = FUNCTIONS.get(target)
    except TypeError:  # an unhashable target
        return None
    if found is None and isinstance(target, torch._ops.OpOverload):
        found = FUNCTIONS.get(target.overloadpacket)
    return found


def module_converter(module: torch.nn.Module) -> Converter | None:
    """The converter for a module's class or the nearest base class whose forward it keeps."""
    for cls in type(module).__mro__:
        if cls in MODULES:
            return MODULES[cls] if type(module).forward is cls.forward else None
    return None


def describe_target(op: str, target: Any, module: torch.nn.Module | None = None) -> str:
    """How an error names what a node calls: `torch.cumsum`, `Tensor.cumsum`, `module act (torch.nn.ELU)`."""
    if op == "call_method":
        return f"Tensor.{target}"
    if op == "call_module":
        cls = type(module) if module is not None else None
        kind = f"{cls.__module__.split('.modules')[0]}.{cls.__qualname__}" if cls is not None else "?"
        return f"module {target} ({kind})"
    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return str(target)
    module_name = getattr(target, "__module__", None) or ""
    name = getattr(target, "__name__", None) or repr(target)
    if module_name in ("_operator", "operator"):
        module_name = "operator"
    elif module_name in ("torch._C._nn", "torch._C._VariableFunctions", "torch.nn.functional"):
        module_name = "torch.nn.functional" if module_name != "torch._C._VariableFunctions" else "torch"
    elif module_name == "builtins":
        return name
    elif not module_name and getattr(target, "__self__", None) is not None:
        module_name = "torch"
    return f"{module_name}.{name}" if module_name else name


def register_inplace_aten_variants() -> None:
    """`aten.add_` converts like `aten.add` (the converter rebinds the mutated tensor afterwards)."""
    for target, fn in list(FUNCTIONS.items()):
        if isinstance(target, torch._ops.OpOverloadPacket):
            inplace = optional(torch.ops.aten, target.__name__ + "_")
            if inplace is not None and inplace not in FUNCTIONS:
                FUNCTIONS[inplace] = fn
