"""The fuse pass: grouping nodes into kernels (kernel templates first), and its decisions.

    from tilegraph.passes.fusion import fuse_graph, format_fusion_decisions

The analyses it rests on live in the IR: loop alignment in `tilegraph.ir.domain`, kernel
templates (attention) in `tilegraph.ir.templates`; a kernel's loop nest is `kernel.domain`.
"""
from .decisions import RULES, FusionDecision, format_fusion_decisions, fusion_decisions
from .fuse import FuseOptions, fuse, fuse_graph, io_bytes, io_bytes_unfused, recompute

__all__ = [
    "fuse", "FuseOptions", "fuse_graph", "FusionDecision", "format_fusion_decisions", "fusion_decisions", "RULES",
    "io_bytes", "io_bytes_unfused", "recompute",
]
