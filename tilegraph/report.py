"""The human-readable account of a compiled Program: what each pass decided."""
from __future__ import annotations

from tilegraph.ir.program import Program


def program_report(program: Program, explain_fusion: bool = False) -> str:
    """Kernels formed, tiles and traffic against bounds, and (where run) memory plan and placement."""
    from tilegraph.passes.fusion import format_fusion_decisions
    from tilegraph.passes.tiling import format_tiling

    graph = program.graph
    lines = [f"@{graph.name}: {len(graph.nodes)} nodes in {len(program.kernels)} kernels; "
             f"passes run: {', '.join(sorted(program.properties)) or 'none'}"]
    fusion = format_fusion_decisions(program)
    if not explain_fusion:
        fusion = fusion.split("\ndecisions:")[0]
    lines.append(fusion)
    if "tiled" in program.properties:
        lines.append(format_tiling(program))
    for section in _plan_sections(program):
        lines.append(section)
    return "\n".join(lines)


def _plan_sections(program: Program) -> list[str]:
    """Reports of the memory plan and placement, from their own formatters when those exist."""
    sections = []
    if program.memory_plan is not None:
        from tilegraph.passes.memplan import format_report

        sections.append(format_report(program.memory_plan))
    if program.placement is not None:
        from tilegraph.passes.place import format_report as format_placement

        sections.append(format_placement(program.placement))
    return sections
