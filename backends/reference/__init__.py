"""The numpy reference backend: runs a Graph op by op. It is the oracle every other test compares with."""
from .run import bind_inputs, random_inputs, random_params, run

__all__ = ["run", "bind_inputs", "random_inputs", "random_params"]
