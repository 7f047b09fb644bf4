"""Fusion decisions: one record per merge considered, taken or refused, with its reason and costs."""
from __future__ import annotations

from dataclasses import dataclass

from tilegraph.ir.program import Program

RULES = ("elementwise", "epilogue", "prologue", "reduction", "sink", "sibling", "alone")  # plus one per kernel template


@dataclass(frozen=True)
class FusionDecision:
    """One fusion considered between two node groups (`first` feeds or shares `via` with `second`).

    `saved_bytes` is the off-chip traffic the merge removes (intermediates kept on chip, shared
    inputs read once); `recompute_flops` the extra work it causes (nodes that do not run over all
    of the kernel's parallel loops are recomputed for every tile of the others, estimated with the
    nominal tile size), `recomputed` those nodes. A merge with recompute is taken only when
    recompute_flops / flops_per_byte < saved_bytes.
    """

    rule: str
    accepted: bool
    first: tuple[str, ...]
    second: tuple[str, ...]
    via: str | None
    reason: str
    saved_bytes: int = 0
    recompute_flops: int = 0
    recomputed: tuple[str, ...] = ()

    def line(self) -> str:
        mark = "+" if self.accepted else "-"
        first = _group(self.first)
        second = _group(self.second)
        link = f" via %{self.via}" if self.via else ""
        text = f"{mark} {self.rule:<11} {first} + {second}{link}: {self.reason}"
        if self.accepted and self.recomputed:
            text += f" (recomputes {', '.join('%' + n for n in self.recomputed)}: {self.recompute_flops} flops)"
        return text


def _group(names: tuple[str, ...]) -> str:
    shown = ", ".join(f"%{n}" for n in names[:4]) + (", ..." if len(names) > 4 else "")
    return f"[{shown}]"


def fusion_decisions(program: Program) -> list[FusionDecision]:
    return list(program.notes.get("fusion", ()))


def format_fusion_decisions(program: Program) -> str:
    """The fusion report for `--explain-fusion`: kernels formed, then every decision with its reason."""
    decisions = fusion_decisions(program)
    if not decisions and "fused" not in program.properties:
        return "fusion: not run"
    nodes = len(program.graph.nodes)
    taken = sum(d.accepted for d in decisions)
    lines = [f"fusion: {nodes} nodes -> {len(program.kernels)} kernels "
             f"({taken} merges taken, {len(decisions) - taken} refused)"]
    for kernel in program.kernels:
        kind = "" if kernel.template is None else f" <{kernel.kind}>"
        ops = ", ".join(f"%{n.name} {n.op}" for n in kernel.nodes)
        lines.append(f"  {kernel.name}{kind}: {ops}")
    lines.append("decisions:")
    lines += [f"  {d.line()}" for d in decisions]
    return "\n".join(lines)
