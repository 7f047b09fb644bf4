"""Energy by component: what each access costs (the accelerator's per-access energies) times how often
the simulation made it.

Counted per kernel, in bytes unless said otherwise:
- MACs on the array and operations on the vector unit;
- DRAM reads and writes: the timeline's loads and stores;
- scratchpad writes and reads per operand (ifmap: activations, filter: weights, ofmap: results):
  every byte loaded from DRAM is written into the scratchpad (a graph parameter as filter, any
  other tensor as ifmap) and every byte stored to DRAM read out of it (ofmap); the array reads
  and writes its SRAMs as SCALE-Sim's folds do (`array.sram_accesses`); the vector unit reads its
  operands and writes its results (as ifmap and ofmap);
- leakage: the static power over the kernel's share of the timeline.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tilegraph.ir.accel import OPERANDS, Accelerator
from tilegraph.ir.program import Program

from .array import sram_accesses
from .engine import Timed
from .workload import FREE_OPS, node_gemm, runs_on_array

SRAM = tuple(f"{o}_{rw}" for o in OPERANDS for rw in ("read", "write"))


@dataclass(frozen=True)
class Energy:
    """Energy in picojoules by component; `total` is their sum."""

    mac: float = 0.0
    vector: float = 0.0
    dram_read: float = 0.0
    dram_write: float = 0.0
    ifmap_read: float = 0.0
    ifmap_write: float = 0.0
    filter_read: float = 0.0
    filter_write: float = 0.0
    ofmap_read: float = 0.0
    ofmap_write: float = 0.0
    leakage: float = 0.0

    @property
    def total(self) -> float:
        return sum(self.components().values())

    def components(self) -> dict[str, float]:
        """Every component by name, in a fixed order (zeros included)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def __add__(self, other: Energy) -> Energy:
        return Energy(**{k: v + getattr(other, k) for k, v in self.components().items()})


@dataclass(frozen=True)
class Accesses:
    """What one kernel did that costs energy: MACs, vector operations, bytes per DRAM and scratchpad
    direction and operand, and its cycles."""

    macs: int = 0
    vector_ops: int = 0
    dram_read: int = 0
    dram_write: int = 0
    sram: tuple[tuple[str, int], ...] = ()  # (ifmap_read, ...) -> bytes
    cycles: int = 0

    def energy(self, accel: Accelerator) -> Energy:
        sram = dict(self.sram)
        return Energy(
            mac=self.macs * accel.mac_pj, vector=self.vector_ops * accel.vector_op_pj,
            dram_read=self.dram_read * accel.dram_read_pj_per_byte,
            dram_write=self.dram_write * accel.dram_write_pj_per_byte,
            **{k: sram.get(k, 0) * getattr(accel, f"{k}_pj_per_byte") for k in SRAM},
            leakage=self.cycles * accel.leakage_mw / accel.clock_ghz)  # mW x ns = pJ


def compute_sram(program: Program, accel: Accelerator) -> dict[str, dict[str, int]]:
    """Per kernel: scratchpad bytes the array and the vector unit read and write, by operand."""
    out: dict[str, dict[str, int]] = {}
    for kernel in program.kernels:
        counts = dict.fromkeys(SRAM, 0)
        for node in kernel.nodes:
            if runs_on_array(node):
                ifmap, weight = node.inputs[:2]
                words = sram_accesses(node_gemm(node), accel.pe_rows, accel.pe_cols, accel.dataflow)
                for key, value, count in zip(("ifmap_read", "filter_read", "ofmap_write"),
                                             (ifmap, weight, node.results[0]), words):
                    counts[key] += count * value.type.dtype.itemsize
            elif node.op not in FREE_OPS:
                counts["ifmap_read"] += sum(v.type.nbytes for v in node.inputs)
                counts["ofmap_write"] += sum(v.type.nbytes for v in node.results)
        out[kernel.name] = counts
    return out


def kernel_accesses(program: Program, accel: Accelerator, timeline: tuple[Timed, ...], windows: dict[str, int],
                    work: dict[str, tuple[int, int]]) -> dict[str, Accesses]:
    """Per kernel: its `Accesses`, from its compute (`work`: MACs, vector operations), the timeline's
    transfers and its window of cycles (`windows`)."""
    params = {v.name for v in program.graph.params}
    sram = compute_sram(program, accel)
    moved: dict[str, dict[str, int]] = {name: dict.fromkeys(("dram_read", "dram_write", *SRAM), 0) for name in sram}
    for t in timeline:
        c = t.command
        if c.kind == "load":
            moved[c.kernel]["dram_read"] += c.bytes
            moved[c.kernel]["filter_write" if c.tensor in params else "ifmap_write"] += c.bytes
        elif c.kind == "store":
            moved[c.kernel]["dram_write"] += c.bytes
            moved[c.kernel]["ofmap_read"] += c.bytes
    out = {}
    for name, counts in sram.items():
        m = moved[name]
        macs, vector_ops = work[name]
        out[name] = Accesses(macs, vector_ops, m["dram_read"], m["dram_write"],
                             tuple((k, counts[k] + m[k]) for k in SRAM), windows[name])
    return out
