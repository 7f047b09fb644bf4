"""SCALE-Sim's side of a comparison: its config and conv layers, the same layers in our IR, and our
accelerator configured like its memory model.

A SCALE-Sim layer is a conv topology row (ifmap H x W, filter H x W, channels, filters, stride;
no padding). A GEMM M x K x N is the 1 x M image of K channels under N 1x1 filters. SCALE-Sim
counts one-byte words; `accel_like_scalesim` scales its SRAM sizes and bandwidth by our tensors'
element size, so that words agree: the same array and dataflow, its three SRAMs as one scratchpad,
its CALC interface (`dram_model = "calc"`), its per-fold partial-sum writes (`psum_writeback`).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tilegraph.ir import GraphBuilder
from tilegraph.ir.accel import DATAFLOWS, Accelerator, AccelError
from tilegraph.ir.graph import Graph

from .array import Gemm

# SCALE-Sim's CALC mode fills the ifmap and filter SRAMs at a fixed 10 words per cycle
# (scalesim/single_layer_sim.py) and prefetches in sets of 1% of an SRAM (read_buffer_estimate_bw.py)
CALC_FILL_WORDS_PER_CYCLE = 10
SETS_PER_SRAM = 100


@dataclass(frozen=True)
class ScaleSimConfig:
    """The architecture part of a SCALE-Sim config (sizes in KiB of one-byte words, as it counts)."""

    rows: int = 32
    cols: int = 32
    dataflow: str = "os"
    ifmap_sram_kb: int = 64
    filter_sram_kb: int = 64
    ofmap_sram_kb: int = 64
    bandwidth: int = 10  # words per cycle; unused in CALC mode
    interface: str = "CALC"  # InterfaceBandwidth: CALC (sized not to stall) or USER

    def cfg_text(self, run_name: str = "tg") -> str:
        """The config file SCALE-Sim reads."""
        return CFG_TEMPLATE.format(run=run_name, c=self)


CFG_TEMPLATE = """[general]
run_name = {run}
[architecture_presets]
ArrayHeight: {c.rows}
ArrayWidth: {c.cols}
IfmapSramSzkB: {c.ifmap_sram_kb}
FilterSramSzkB: {c.filter_sram_kb}
OfmapSramSzkB: {c.ofmap_sram_kb}
IfmapOffset: 0
FilterOffset: 10000000
OfmapOffset: 20000000
Bandwidth : {c.bandwidth}
Dataflow : {c.dataflow}
MemoryBanks: 1
ReadRequestBuffer: 512
WriteRequestBuffer: 512
[layout]
IfmapCustomLayout: False
IfmapSRAMBankBandwidth: 10
IfmapSRAMBankNum: 10
IfmapSRAMBankPort: 2
FilterCustomLayout: False
FilterSRAMBankBandwidth: 10
FilterSRAMBankNum: 10
FilterSRAMBankPort: 2
[sparsity]
SparsitySupport: false
SparseRep: ellpack_block
OptimizedMapping: false
BlockSize: 8
RandomNumberGeneratorSeed: 40
[run_presets]
InterfaceBandwidth: {c.interface}
UseRamulatorTrace: False
"""


def out_size(size: int, window: int, stride: int) -> int:
    """SCALE-Sim's output size along one axis: ceil((H - F + S) / S) (no padding; a last window may
    hang over the edge, and its missing words are never read)."""
    return -(-(size - window + stride) // stride)


def overhang_padding(size: int, window: int, stride: int) -> int:
    """The symmetric padding that gives our conv2d SCALE-Sim's output size on the same input:
    half the last window's overhang, rounded up (0 when the windows fit)."""
    overhang = (out_size(size, window, stride) - 1) * stride + window - size
    return -(-overhang // 2)


@dataclass(frozen=True)
class ConvLayer:
    """One row of a SCALE-Sim conv topology (unpadded; SCALE-Sim's output-size convention)."""

    name: str
    ifmap_h: int
    ifmap_w: int
    filter_h: int
    filter_w: int
    channels: int
    filters: int
    stride: int = 1

    @classmethod
    def gemm(cls, name: str, m: int, k: int, n: int) -> ConvLayer:
        """The GEMM (M x K) @ (K x N) as SCALE-Sim runs it: a 1 x M image, K channels, N 1x1 filters
        (the same addresses as its GEMM input mode's M x K image under 1 x K filters)."""
        return cls(name, 1, m, 1, 1, k, n, 1)

    @property
    def is_gemm(self) -> bool:
        return self.ifmap_h == 1 and self.filter_h == self.filter_w == 1 and self.stride == 1

    @property
    def out_hw(self) -> tuple[int, int]:
        return (out_size(self.ifmap_h, self.filter_h, self.stride), out_size(self.ifmap_w, self.filter_w, self.stride))

    @property
    def shape(self) -> Gemm:
        """The layer's GEMM: M output pixels, N filters, K window terms."""
        oh, ow = self.out_hw
        return Gemm(oh * ow, self.filters, self.channels * self.filter_h * self.filter_w)

    def topology_row(self) -> str:
        return ",".join(map(str, (self.name, self.ifmap_h, self.ifmap_w, self.filter_h, self.filter_w,
                                  self.channels, self.filters, self.stride))) + ",\n"

    def graph(self) -> Graph:
        """The layer in our IR (f32): a matmul for a GEMM layer, else a conv2d on the same input with
        SCALE-Sim's output size: where its last window hangs over the edge, symmetric padding of half
        the overhang (rounded up) gives the same output size and reads the same input words."""
        b = GraphBuilder(self.name)
        if self.is_gemm:
            x, w = b.input("x", (self.ifmap_w, self.channels)), b.param("w", (self.channels, self.filters))
            return b.output(b.matmul(x, w))
        x = b.input("x", (1, self.channels, self.ifmap_h, self.ifmap_w))
        w = b.param("w", (self.filters, self.channels, self.filter_h, self.filter_w))
        padding = (overhang_padding(self.ifmap_h, self.filter_h, self.stride),
                   overhang_padding(self.ifmap_w, self.filter_w, self.stride))
        return b.output(b.conv2d(x, w, stride=self.stride, padding=padding))


def read_topology(path: str | Path) -> tuple[ConvLayer, ...]:
    """SCALE-Sim's own layer table: a conv topology (name, ifmap H, W, filter H, W, channels, filters,
    stride) or, for a file whose header is `Layer,M,N,K`, a GEMM table (as `ConvLayer.gemm`)."""
    lines = [line for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    header = [c.strip().lower() for c in lines[0].split(",")]
    layers = []
    for line in lines[1:]:
        cells = [c.strip() for c in line.split(",")]
        if header[1:4] == ["m", "n", "k"]:
            m, n, k = map(int, cells[1:4])
            layers.append(ConvLayer.gemm(cells[0], m, k, n))
        else:
            layers.append(ConvLayer(cells[0], *map(int, cells[1:8])))
    return tuple(layers)


TOPOLOGY_HEADER = ("Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, Num Filter, "
                   "Strides,\n")


def topology_text(layers: list[ConvLayer] | tuple[ConvLayer, ...]) -> str:
    """The topology CSV SCALE-Sim reads."""
    return TOPOLOGY_HEADER + "".join(layer.topology_row() for layer in layers)


def accel_like_scalesim(config: ScaleSimConfig, word_bytes: int = 4, name: str | None = None) -> Accelerator:
    """Our accelerator configured like SCALE-Sim's CALC memory model, for tensors of `word_bytes`.

    The same array and dataflow; its three equal SRAMs as one scratchpad of 3 x SRAM words;
    each operand filled on its own port at SCALE-Sim's 10 words per cycle in bursts of 1% of an
    SRAM; DRAM latency 1 (its read port's); partial sums written per fold of K in ws and is.
    """
    if config.dataflow not in DATAFLOWS:
        raise AccelError(f"SCALE-Sim config: dataflow must be one of {', '.join(DATAFLOWS)}, got {config.dataflow!r}")
    sizes = {config.ifmap_sram_kb, config.filter_sram_kb, config.ofmap_sram_kb}
    if len(sizes) != 1:
        raise AccelError(f"SCALE-Sim config: the calc memory model needs equal ifmap, filter and ofmap SRAMs, "
                         f"got {config.ifmap_sram_kb}, {config.filter_sram_kb}, {config.ofmap_sram_kb} KiB")
    if config.interface.upper() != "CALC":
        raise AccelError(f"SCALE-Sim config: only InterfaceBandwidth CALC is modelled, got {config.interface!r}")
    sram_words = sizes.pop() * 1024
    return Accelerator(
        name=name or f"scalesim-{config.rows}x{config.cols}-{config.dataflow}",
        description=f"like SCALE-Sim {config.rows}x{config.cols} {config.dataflow}, "
                    f"3 x {sram_words // 1024}K-word SRAMs, CALC interface",
        pe_rows=config.rows, pe_cols=config.cols, dataflow=config.dataflow,
        scratchpad_bytes=3 * sram_words * word_bytes,
        dram_bytes_per_cycle=float(CALC_FILL_WORDS_PER_CYCLE * word_bytes), dram_latency=1, dma_engines=3,
        double_buffer=True, vector_lanes=config.cols, word_bytes=word_bytes,
        dma_burst_bytes=max(1, sram_words // SETS_PER_SRAM) * word_bytes,
        dram_model="calc", psum_writeback=True)
