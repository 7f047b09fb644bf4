"""The simulator's SCALE-Sim-like memory model, by hand and against the real SCALE-Sim.

The comparison runs SCALE-Sim (PyPI `scalesim`, in its own virtual environment: see
tilegraph.backends.sim.scalesim) once per test session on a few small layers, for all three
dataflows, and skips only when SCALE-Sim cannot be obtained here.
"""
from __future__ import annotations

import dataclasses
import sys

import pytest

from tilegraph.backends.sim import Gemm, array_cycles, simulate
from tilegraph.simulation import prepare
from tilegraph.backends.sim.array import operand_reads
from tilegraph.backends.sim.calc import active_bytes, conv_fold_halo, drain_remainder
from tilegraph.backends.sim.scalesim import ScaleSimUnavailable, run_scalesim, scalesim_python
from tilegraph.backends.sim.scalesim_config import ConvLayer, ScaleSimConfig, accel_like_scalesim, topology_text
from tilegraph.ir.accel import AccelError, load_accel

# an 8x8 array with 4 KiB SRAMs: small enough that operands overflow their SRAM (re-reads), partial
# sums fold (K > 8) and the ofmap SRAM drains during compute
SMALL = ScaleSimConfig(rows=8, cols=8, ifmap_sram_kb=4, filter_sram_kb=4, ofmap_sram_kb=4)
LAYERS = (
    ConvLayer.gemm("gemm_20x10x7", 20, 10, 7),
    ConvLayer("conv3x3_c8", 10, 10, 3, 3, 8, 12),
    ConvLayer.gemm("gemm_ifmap_rereads", 64, 48, 40),  # 3,072-word ifmap > the 2,040-word active half
    ConvLayer.gemm("gemm_filter_rereads", 40, 96, 64),  # 6,144-word filter > the active half
    ConvLayer("conv3x3_s2", 9, 9, 3, 3, 4, 6, 2),
    ConvLayer("conv3x3_c32_rereads", 12, 12, 3, 3, 32, 16),  # 4,608-word ifmap: im2col and halo re-reads
)
DATAFLOWS = ("os", "ws", "is")


# ----- the configuration helper and preset -------------------------------------------------------
def test_accel_like_scalesim_scales_words_to_our_bytes():
    accel = accel_like_scalesim(dataclasses.replace(SMALL, dataflow="ws"))
    assert (accel.pe_rows, accel.pe_cols, accel.dataflow) == (8, 8, "ws")
    assert accel.operand_sram_bytes == 4096 * 4 and accel.dram_bytes_per_cycle == 40.0
    assert accel.dma_burst_bytes == 40 * 4  # a set: 1% of an SRAM's 4,096 words
    assert accel.drain_bytes_per_cycle == 8 * 4  # a word per column per cycle
    assert (accel.dram_model, accel.psum_writeback) == ("calc", True)
    assert active_bytes(accel) == 51 * 160  # half the SRAM in whole sets
    preset = load_accel("scalesim-calc")
    default = accel_like_scalesim(ScaleSimConfig(), name="scalesim-calc")
    assert dataclasses.replace(preset, description="") == dataclasses.replace(default, description="")


def test_accel_like_scalesim_refuses_what_it_cannot_model():
    with pytest.raises(AccelError, match="equal ifmap, filter and ofmap"):
        accel_like_scalesim(dataclasses.replace(SMALL, filter_sram_kb=8))
    with pytest.raises(AccelError, match="only InterfaceBandwidth CALC"):
        accel_like_scalesim(dataclasses.replace(SMALL, interface="USER"))
    with pytest.raises(AccelError, match="dram_model"):
        dataclasses.replace(load_accel("edge-npu"), dram_model="ramulator")


def test_topology_and_layer_graphs():
    text = topology_text(LAYERS[:2])
    assert text.splitlines()[1] == "gemm_20x10x7,1,20,1,1,10,7,1," and "conv3x3_c8,10,10,3,3,8,12,1," in text
    assert LAYERS[0].shape == Gemm(20, 7, 10) and LAYERS[1].shape == Gemm(64, 12, 72)
    assert [n.op for n in LAYERS[0].graph().nodes] == ["matmul"]
    assert [n.op for n in LAYERS[4].graph().nodes] == ["conv2d"] and LAYERS[4].shape == Gemm(16, 6, 36)


# ----- the memory model by hand ------------------------------------------------------------------
def test_operand_reads_follow_the_fold_order():
    g = Gemm(64, 40, 48)  # M, N, K on an 8x8 array; ifmap 64x48, filter 48x40 (in words here)
    a, b = 64 * 48, 48 * 40
    assert operand_reads(g, 8, 8, "os", a, b, capacity=10 ** 6) == (a, b)
    # os: the ifmap is swept once per column fold (N / 8 = 5) when it exceeds the buffer
    assert operand_reads(g, 8, 8, "os", a, b, capacity=a - 1) == (5 * a, b)
    # os: a filter column slice (48 x 8) bigger than the buffer is re-read per row fold (64 / 8)
    assert operand_reads(g, 8, 8, "os", a, b, capacity=48 * 8 - 1) == (5 * a, 8 * b)
    assert operand_reads(g, 8, 8, "ws", a, b, capacity=100, word_bytes=1) == (5 * a, b)  # filter blocks once
    assert operand_reads(g, 8, 8, "is", a, b, capacity=100) == (a, 8 * b)  # M / 8 column folds
    # a conv's ifmap is smaller than its im2col matrix: a ws sweep reads the im2col matrix (M x K
    # words), an os sweep the ifmap plus the halo once per buffer swap (ceil(a / capacity) - 1)
    conv = Gemm(64, 12, 72)  # 10x10x8 input, 3x3 filters, 12 of them
    a, b = 10 * 10 * 8, 72 * 12
    assert operand_reads(conv, 8, 8, "ws", a, b, capacity=500, word_bytes=1) == (2 * 64 * 72, b)
    assert operand_reads(conv, 8, 8, "os", a, b, capacity=500, word_bytes=1, halo_bytes=160) == (2 * (a + 160), b)
    assert operand_reads(conv, 8, 8, "os", a, b, capacity=300, word_bytes=1, halo_bytes=160) == (
        2 * (a + 2 * 160), 8 * b)  # two buffer swaps per sweep; a 432-word filter slice re-read per row fold


def test_conv_fold_halo():
    # output row 0 reads input rows 0-2, output row 1 rows 1-3: rows 1-2 x 10 columns x 8 channels
    (node,) = LAYERS[1].graph().nodes
    assert conv_fold_halo(node, 8) == 2 * 10 * 8
    (stride2,) = LAYERS[4].graph().nodes  # 9x9 input, stride 2: 4x4 output, folds of 8 = 2 rows
    assert conv_fold_halo(stride2, 8) == 1 * 9 * 4  # input row 4 is shared
    (gemm,) = LAYERS[0].graph().nodes
    assert conv_fold_halo(gemm, 8) == 0


def test_drain_remainder():
    assert [drain_remainder(w, 100) for w in (0, 1, 100, 101, 250, 300)] == [0, 1, 100, 1, 50, 100]


def test_calc_layer_timeline_by_hand():
    # os 8x8: fills x (800 B = 5 sets) and w (280 B = 2 sets) on their own ports at 40 B/cycle,
    # latency 1; then the array; then the 560 B of outputs drain at 32 B/cycle, latency 1
    accel = accel_like_scalesim(SMALL)
    report = simulate(prepare(LAYERS[0].graph(), accel, solver="heuristic"), accel)
    array = array_cycles(Gemm(20, 7, 10), 8, 8, "os")
    assert report.cycles == (20 + 1) + array + (18 + 1)
    fills = [t for t in report.timeline if t.command.kind == "load" and t.command.timed]
    assert sorted((t.command.unit, t.bus_end - t.bus_start) for t in fills) == [("rd0", 20), ("rd1", 8)]
    assert report.memory_bound == 20 and report.dram_read_bytes == 270 * 4


def test_partial_sums_are_written_per_fold_of_k():
    ws = accel_like_scalesim(dataclasses.replace(SMALL, dataflow="ws"))
    layer = LAYERS[1]  # K = 72: 9 folds of 8 rows
    report = simulate(prepare(layer.graph(), ws, solver="heuristic"), ws)
    out = 64 * 12 * 4
    assert report.write_compulsory == out and report.write_psum == 8 * out
    program = prepare(layer.graph(), ws, solver="heuristic")
    on_chip = simulate(program, dataclasses.replace(ws, psum_writeback=False))
    assert on_chip.write_psum == 0 and on_chip.cycles <= report.cycles  # CALC drains psums during compute
    dma = dataclasses.replace(ws, dram_model="dma")  # one shared interface: the psum bytes take time
    assert simulate(program, dma).cycles > simulate(program, dataclasses.replace(dma, psum_writeback=False)).cycles
    os_ = accel_like_scalesim(SMALL)
    assert simulate(prepare(layer.graph(), os_, solver="heuristic"), os_).write_psum == 0


def test_an_interpreter_without_scalesim_is_reported(monkeypatch):
    monkeypatch.setenv("TILEGRAPH_SCALESIM_PYTHON", sys.executable)
    with pytest.raises(ScaleSimUnavailable, match="cannot import scalesim"):
        scalesim_python()


# ----- against the real SCALE-Sim ----------------------------------------------------------------
@pytest.fixture(scope="session")
def scalesim_small():
    """SCALE-Sim's reports for LAYERS on SMALL under each dataflow (its venv is created once, locked)."""
    try:
        return run_scalesim(LAYERS, SMALL, DATAFLOWS)
    except ScaleSimUnavailable as err:
        pytest.skip(f"SCALE-Sim is not available: {err}")


@pytest.mark.parametrize("dataflow", DATAFLOWS)
def test_matches_scalesim(scalesim_small, dataflow):
    accel = accel_like_scalesim(dataclasses.replace(SMALL, dataflow=dataflow))
    for layer, theirs in zip(LAYERS, scalesim_small[dataflow].layers):
        ours = simulate(prepare(layer.graph(), accel, solver="heuristic"), accel)
        where = f"{layer.name} {dataflow}"
        assert ours.array_cycles == theirs.compute_cycles, where
        assert theirs.stall_cycles == 0, where
        assert ours.cycles == pytest.approx(theirs.total_cycles, rel=0.10), where
        assert ours.dram_read_bytes / 4 == pytest.approx(theirs.dram_reads, rel=0.10), where
        assert ours.dram_write_bytes / 4 == pytest.approx(theirs.dram_ofmap_writes, rel=0.10), where
