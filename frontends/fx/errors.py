"""Errors of the PyTorch frontend. None of them needs torch to be importable."""
from __future__ import annotations

from dataclasses import dataclass

from tilegraph.ir.errors import SourceLocation, TilegraphError


@dataclass(frozen=True)
class Offender:
    """One fx node the frontend could not convert."""

    node: str  # the fx node name, e.g. `cumsum_1`
    target: str  # what it calls, e.g. `torch.cumsum`, `tensor.cumsum`, `module fc (torch.nn.ELU)`
    reason: str  # why: `no converter`, or what about the arguments is not supported
    loc: SourceLocation | None = None

    def describe(self) -> str:
        text = f"{self.node}: {self.target}: {self.reason}"
        if self.loc is not None:
            text += f"\n      at {self.loc}"
            if self.loc.source_line:
                text += f"\n        {self.loc.source_line.strip()}"
        return text


class UnsupportedOpsError(TilegraphError):
    """A model uses ops the frontend cannot convert; lists every one of them, not just the first."""

    def __init__(self, offenders: list[Offender], model: str = "model") -> None:
        self.offenders = list(offenders)
        listed = "\n".join(f"  - {o.describe()}" for o in self.offenders)
        count = len(self.offenders)
        super().__init__(f"{model} uses {count} unsupported op{'s' if count != 1 else ''}:\n{listed}")


class ConversionError(TilegraphError):
    """The model could not be traced or loaded, or a converted node disagrees with torch."""


class TorchNotInstalledError(TilegraphError):
    """PyTorch (an optional extra) is needed and not installed."""

    def __init__(self) -> None:
        super().__init__("the PyTorch frontend needs torch: pip install -e '.[torch]' (torch==2.13.0, CPU build)")


class TilegraphFallbackWarning(UserWarning):
    """torch.compile(backend="tilegraph") runs a graph eagerly in PyTorch because it could not be converted."""


class TilegraphRecompileWarning(UserWarning):
    """torch.compile(backend="tilegraph") has compiled one graph for its `max_shapes` argument shapes (shapes are
    static); calls with further new shapes run eagerly."""
