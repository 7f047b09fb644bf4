"""The PyTorch frontend: torch.nn.Module / torch.fx / torch.export / torch.compile -> tilegraph Graph.

    from tilegraph.frontends.fx import from_module
    graph = from_module(model.eval(), (torch.randn(1, 3, 32, 32),))

- `from_module(module, example_inputs)`: trace with torch.fx.symbolic_trace (torch.export where
  that fails), propagate shapes with the example inputs, map each node to IR ops;
- `from_graph_module(gm, example_inputs)`, `from_exported_program(program)`: from a captured graph;
- `import_module_file("model.py:Model", [(1, 3, 32, 32)])`: for `tilegraph import-torch`;
- importing this package registers the TorchDynamo backend: `torch.compile(model, backend="tilegraph")`.

torch is an optional extra (`pip install -e .[torch]`). Without it this package still imports, and
every entry point raises `TorchNotInstalledError` (a TilegraphError) saying how to install it.
"""
from __future__ import annotations

from .errors import (ConversionError, Offender, TilegraphFallbackWarning, TilegraphRecompileWarning,
                     TorchNotInstalledError, UnsupportedOpsError)

try:
    import torch  # noqa: F401
except ImportError:  # the optional extra is not installed
    HAVE_TORCH = False

    def _needs_torch(*args, **kwargs):
        raise TorchNotInstalledError()

    from_module = from_graph_module = from_exported_program = import_module_file = tilegraph_backend = _needs_torch
else:
    HAVE_TORCH = True
    from .convert import from_exported_program, from_graph_module
    from .dynamo import register_backend, tilegraph_backend
    from .loader import import_module_file
    from .trace import from_module

    register_backend()

__all__ = ["from_module", "from_graph_module", "from_exported_program", "import_module_file", "tilegraph_backend",
           "UnsupportedOpsError", "ConversionError", "Offender", "TorchNotInstalledError", "TilegraphFallbackWarning",
           "TilegraphRecompileWarning", "HAVE_TORCH"]
