"""The op library: every op is one OpDef registered by name. Importing this package registers them all."""
from . import composite, elementwise, layout, linalg, reduction  # noqa: F401  (registration)
from .registry import (COMPOSITE, CONTRACTION, ELEMENTWISE, LAYOUT, REDUCTION, SOURCE, WINDOW, AttrSpec, OpDef,
                       all_ops, get_op, register)

__all__ = ["OpDef", "AttrSpec", "register", "get_op", "all_ops", "ELEMENTWISE", "REDUCTION", "CONTRACTION",
           "WINDOW", "LAYOUT", "COMPOSITE", "SOURCE"]
