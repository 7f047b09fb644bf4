"""Pass registration: a pass is a function Program -> Program with typed options and a contract.

    @register_pass("fuse", FuseOptions, requires={"canonical"}, ensures={"fused"})
    def fuse(program: Program, options: FuseOptions, ctx: PassContext) -> Program: ...

`requires`/`ensures`/`preserves` are names of Program properties (`Program.properties`). The pass
manager checks `requires` before running a pass; after it, the program keeps only the properties
the pass `preserves` (plus those it establishes) and gains `ensures`. A decision whose property
is dropped is cleared from the Program (see `PassManager`), so nothing stale is left behind.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tilegraph.ir.program import Program


@dataclass(frozen=True)
class NoOptions:
    """For passes without options."""


@dataclass
class PassContext:
    """What every pass may consult or report to: the target, diagnostics and statistics."""

    target: Any = None
    diagnostics: list[str] = field(default_factory=list)
    statistics: dict[str, dict[str, Any]] = field(default_factory=dict)

    def stat(self, pass_name: str, key: str, value: Any) -> None:
        self.statistics.setdefault(pass_name, {})[key] = value

    def note(self, message: str) -> None:
        self.diagnostics.append(message)


@dataclass(frozen=True)
class PassSpec:
    name: str
    run: Callable[[Program, Any, PassContext], Program]
    options: type = NoOptions
    requires: frozenset[str] = frozenset()
    ensures: frozenset[str] = frozenset()
    preserves: frozenset[str] = frozenset()
    doc: str = ""

    def make_options(self, values: dict[str, Any]) -> Any:
        """Build the options dataclass from strings or values, with a clear error for bad keys."""
        fields = {f.name: f for f in dataclasses.fields(self.options)}
        unknown = sorted(set(values) - set(fields))
        if unknown:
            known = ", ".join(fields) or "none"
            raise ValueError(f"pass {self.name}: unknown option(s) {', '.join(unknown)} (options: {known})")
        return self.options(**values)


_PASSES: dict[str, PassSpec] = {}


def register_pass(name: str, options: type = NoOptions, *, requires=(), ensures=(), preserves=()):
    """Decorator registering `fn(program, options, ctx) -> Program` as pass `name`.

    `preserves` lists the properties of its input that stay true after it; any other is dropped."""
    def decorate(fn):
        if name in _PASSES:
            raise ValueError(f"pass {name} registered twice")
        _PASSES[name] = PassSpec(name, fn, options, frozenset(requires), frozenset(ensures), frozenset(preserves),
                                 (fn.__doc__ or "").strip().splitlines()[0] if fn.__doc__ else "")
        return fn
    return decorate


def get_pass(name: str) -> PassSpec:
    try:
        return _PASSES[name]
    except KeyError:
        import difflib

        close = difflib.get_close_matches(name, _PASSES, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise ValueError(f"unknown pass {name!r}{hint} (passes: {', '.join(sorted(_PASSES))})") from None


def all_passes() -> dict[str, PassSpec]:
    return dict(_PASSES)
