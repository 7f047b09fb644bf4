"""Solver libraries, imported on first use: ortools (which imports pandas) costs 0.2-0.9 s to load,
and most pipelines (canonicalize, fuse, tile) never solve anything."""
from __future__ import annotations

import importlib
from types import ModuleType


class LazyModule:
    """Stands for the module `name`; the first attribute read imports it (then sys.modules has it)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str):
        module: ModuleType = importlib.import_module(self._name)
        return getattr(module, attr)


cp_model = LazyModule("ortools.sat.python.cp_model")
pywraplp = LazyModule("ortools.linear_solver.pywraplp")

__all__ = ["LazyModule", "cp_model", "pywraplp"]
