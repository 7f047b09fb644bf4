"""tilegraph: a compiler IR and scheduler for deep-learning graphs."""
__version__ = "0.1.0"

from tilegraph.compiler import CompiledProgram, compile  # noqa: E402

__all__ = ["compile", "CompiledProgram", "__version__"]
