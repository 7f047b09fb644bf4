"""Capture a torch.nn.Module as a graph: torch.fx.symbolic_trace first, torch.export where that fails."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.fx as fx

from tilegraph.ir import Graph

from .convert import Conversion, _as_inputs, convert_exported_program, convert_graph_module
from .errors import ConversionError, UnsupportedOpsError
from .registry import module_converter


class Tracer(fx.Tracer):
    """symbolic_trace's tracer, recording source lines, keeping modules we convert whole as leaves."""

    def __init__(self) -> None:
        super().__init__()
        self.record_stack_traces = True

    def is_leaf_module(self, m: torch.nn.Module, module_qualified_name: str) -> bool:
        return module_converter(m) is not None or super().is_leaf_module(m, module_qualified_name)


def symbolic_trace(module: torch.nn.Module) -> fx.GraphModule:
    tracer = Tracer()
    graph = tracer.trace(module)
    return fx.GraphModule(tracer.root, graph, type(module).__name__)


def convert_module(module: torch.nn.Module, example_inputs: Sequence[Any] | torch.Tensor, *,
                   name: str | None = None) -> Conversion:
    """Trace and convert; the unsupported-op error of the first capture that traced is the one raised."""
    if not isinstance(module, torch.nn.Module):
        raise ConversionError(f"expected a torch.nn.Module, got {type(module).__name__}")
    inputs = _as_inputs(example_inputs)
    name = name or type(module).__name__
    first_error: Exception | None = None
    trace_errors = []
    try:
        gm = symbolic_trace(module)
    except Exception as e:  # symbolic tracing fails on data-dependent Python control flow and more
        trace_errors.append(f"torch.fx.symbolic_trace: {type(e).__name__}: {e}")
    else:
        try:
            return convert_graph_module(gm, inputs, name=name)
        except (UnsupportedOpsError, ConversionError) as e:
            first_error = e
    try:
        program = torch.export.export(module, tuple(inputs), strict=False)
    except Exception as e:
        if first_error is not None:
            raise first_error from None
        trace_errors.append(f"torch.export: {type(e).__name__}: {_first_line(e)}")
        raise ConversionError(f"could not capture {name} as a graph:\n" +
                              "\n".join(f"  - {t}" for t in trace_errors)) from None
    try:
        return convert_exported_program(program, inputs, name=name)
    except (UnsupportedOpsError, ConversionError):
        if first_error is not None:
            raise first_error from None
        raise


def from_module(module: torch.nn.Module, example_inputs: Sequence[Any] | torch.Tensor, *,
                name: str | None = None) -> Graph:
    """Convert a module for these example inputs (static shapes): parameters and buffers become graph
    parameters carrying their values; the graph is named after the module's class."""
    return convert_module(module, example_inputs, name=name).graph


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
