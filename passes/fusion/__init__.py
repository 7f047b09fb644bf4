"""The fuse pass and its analyses: loop alignment (domain), attention recognition, decisions.

    from tilegraph.passes.fusion import fuse_graph, format_fusion_decisions, kernel_domain_of
"""
from .attention import (AttentionLayout, AttentionMatch, attention_domain, attention_layout, match_attention,
                        match_kernel)
from .decisions import FusionDecision, format_fusion_decisions, fusion_decisions
from .domain import FULL, Access, KernelDomain, Loop, Misaligned, aligned_domain, kernel_domain
from .fuse import FuseOptions, fuse, fuse_graph, io_bytes, io_bytes_unfused, kernel_domain_of, recompute

__all__ = [
    "fuse", "FuseOptions", "fuse_graph", "FusionDecision", "format_fusion_decisions", "fusion_decisions",
    "KernelDomain", "Loop", "Access", "Misaligned", "kernel_domain", "aligned_domain", "kernel_domain_of",
    "AttentionMatch", "AttentionLayout", "attention_layout", "match_attention", "match_kernel", "attention_domain",
    "io_bytes", "io_bytes_unfused", "recompute", "FULL",
]

