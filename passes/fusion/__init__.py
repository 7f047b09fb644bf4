"""The fuse pass and its analyses: loop alignment (domain), attention recognition, decisions.

    from tilegraph.passes.fusion import fuse_graph, format_fusion_decisions, kernel_domain_of
"""
from dataclasses import replace

from tilegraph.ir.program_text import KernelClause, register_kernel_clause

from .attention import AttentionMatch, attention_domain, match_attention, match_kernel
from .decisions import FusionDecision, format_fusion_decisions, fusion_decisions
from .domain import FULL, Access, KernelDomain, Loop, Misaligned, aligned_domain, kernel_domain
from .fuse import FuseOptions, fuse, fuse_graph, io_bytes, io_bytes_unfused, kernel_domain_of, recompute

__all__ = [
    "fuse", "FuseOptions", "fuse_graph", "FusionDecision", "format_fusion_decisions", "fusion_decisions",
    "KernelDomain", "Loop", "Access", "Misaligned", "kernel_domain", "aligned_domain", "kernel_domain_of",
    "AttentionMatch", "match_attention", "match_kernel", "attention_domain", "io_bytes", "io_bytes_unfused",
    "recompute", "FULL",
]


def _print_kind(kernel):
    return None if kernel.kind == "generic" else f"kind {kernel.kind}"


def _parse_kind(reader, kernel):
    kind, token = reader.name()
    if kind not in ("generic", "attention"):
        raise reader.error(token, f"unknown kernel kind {kind!r}; kinds: generic, attention")
    return replace(kernel, kind=kind)


try:  # `k3 = [...] kind attention` in program text
    register_kernel_clause(KernelClause("kind", _print_kind, _parse_kind, order=10))
except ValueError:  # registered by ir.program_text itself
    pass
