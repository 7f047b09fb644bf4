"""Kernel templates: kernel shapes that a plain fused loop nest does not express, as registered data.

A template says how it is recognised (`match`, at one node of the graph), what loop nest its
kernels have (`domain`), and what off-chip traffic it cannot avoid (`lower_bound`). A kernel that
follows a template carries its name in `Kernel.kind`; each backend registers how it lowers the
template (see `lowering_for`). Attention (FlashAttention's online softmax) is the first template.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from tilegraph.ir.domain import KernelDomain
from tilegraph.ir.errors import TilegraphError
from tilegraph.ir.graph import Node, Value

__all__ = ["KernelTemplate", "TemplateMatch", "register_template", "get_template", "templates", "GENERIC",
           "kernel_kinds", "lowering_for", "UnknownKindError"]

GENERIC = "generic"  # the kind of a kernel that is its nodes' loop nests, fused


class TemplateMatch(Protocol):
    """What a template's `match` returns: the nodes it covers (graph order) and the value it produces."""

    nodes: tuple[Node, ...]

    @property
    def output(self) -> Value: ...


@dataclass(frozen=True)
class KernelTemplate:
    """One registered kernel shape.

    match(node, moves=True): a TemplateMatch anchored at `node`, a string saying why the pattern is there
    but cannot be used, or None; `moves`: whether it takes in the copies around the pattern (the fuse
    pass's `template_moves`). domain(match): the kernel's loop nest (raises `Misaligned`).
    describe(match, domain): one line for the fusion report. lower_bound(domain, onchip_words):
    the kernel's off-chip traffic lower bound in words, or None for the generic bounds.
    """

    name: str
    summary: str
    match: Callable[[Node], TemplateMatch | str | None]
    domain: Callable[[Any], KernelDomain]
    describe: Callable[[Any, KernelDomain], str]
    lower_bound: Callable[[KernelDomain, float], float | None] | None = None

    def match_kernel(self, nodes: tuple[Node, ...]) -> TemplateMatch:
        """The match that covers exactly `nodes` (a kernel of this kind), anchored at its last node that matches,
        with or without the copies around the pattern, as the fuse pass made it."""
        for node in reversed(nodes):
            for moves in (True, False):
                found = self.match(node, moves=moves)
                if found is None or isinstance(found, str):
                    break  # no pattern here, with the copies or without
                if set(found.nodes) == set(nodes):
                    return found
            else:
                raise ValueError(f"{self.name} kernel holds nodes outside its pattern")
        raise ValueError(f"kernel of kind {self.name} holds no {self.name} pattern")

    def kernel_domain(self, nodes: tuple[Node, ...]) -> KernelDomain:
        return self.domain(self.match_kernel(nodes))


class UnknownKindError(TilegraphError, ValueError):
    """A kernel kind that is neither generic nor a registered template."""


_TEMPLATES: dict[str, KernelTemplate] = {}


def register_template(template: KernelTemplate) -> KernelTemplate:
    if template.name in _TEMPLATES or template.name == GENERIC:
        raise ValueError(f"kernel template {template.name} registered twice")
    _TEMPLATES[template.name] = template
    return template


def templates() -> tuple[KernelTemplate, ...]:
    """Every registered template, in registration order (the order fusion tries them)."""
    return tuple(_TEMPLATES.values())


def get_template(kind: str) -> KernelTemplate | None:
    """The template of kernel kind `kind`; None for generic kernels; ValueError for an unknown kind."""
    if kind == GENERIC:
        return None
    try:
        return _TEMPLATES[kind]
    except KeyError:
        raise UnknownKindError(f"unknown kernel kind {kind!r}; kinds: {', '.join(kernel_kinds())}") from None


def kernel_kinds() -> tuple[str, ...]:
    return (GENERIC, *_TEMPLATES)


L = TypeVar("L")


def lowering_for(backend: str, kind: str, lowerings: Mapping[str, L]) -> L:
    """A backend's lowering of template `kind`, with a clear error when the backend has none."""
    try:
        return lowerings[kind]
    except KeyError:
        raise TilegraphError(f"backend {backend} cannot lower kernels of kind {kind}; it lowers "
                             f"{', '.join(sorted(lowerings)) or 'no templates'}") from None


from . import attention  # noqa: E402,F401  (registers the attention template)
