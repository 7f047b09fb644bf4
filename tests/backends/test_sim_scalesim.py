"""The simulator's SCALE-Sim-like memory model, by hand and against the real SCALE-Sim.

The comparison runs SCALE-Sim (PyPI `scalesim`, in its own virtual environment: see
tilegraph.backends.sim.scalesim) once per test session on a few small layers, for all three
dataflows, and skips only when SCALE-Sim cannot be obtained here.
"""
from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tilegraph.backends.sim import Gemm, array_cycles, simulate
from tilegraph.simulation import prepare
from tilegraph.backends.sim.calc import active_bytes, drain_remainder
from tilegraph.backends.sim.demand import ImageGemm, filter_reads, ifmap_reads, valid_words
from tilegraph.backends.sim.footprint import read_bytes
from tilegraph.backends.sim.readbuffer import epoch_reads, repeated_reads, sweep_reads
from tilegraph.backends.sim.workload import node_gemm
from tilegraph.backends.sim.scalesim import ScaleSimUnavailable, run_scalesim, scalesim_python
from tilegraph.backends.sim.scalesim_config import (ConvLayer, ScaleSimConfig, accel_like_scalesim, out_size,
                                                     read_topology, topology_text)
from tilegraph.ir.accel import AccelError, load_accel

sys.path.insert(0, str(Path(__file__).parent))  # scalesim_oracle: a test helper (importlib mode)
import scalesim_oracle as oracle  # noqa: E402

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


def test_layers_follow_scalesims_output_size():
    # ceil((H - F + S) / S): a last window may hang over the edge (its missing words are not read)
    assert [out_size(224, 7, 2), out_size(56, 1, 2), out_size(56, 3, 2), out_size(224, 11, 4)] == [110, 29, 28, 55]
    for layer in (ConvLayer("c1", 224, 224, 7, 7, 3, 8, 2), ConvLayer("s", 56, 56, 1, 1, 4, 8, 2),
                  ConvLayer("a", 27, 31, 11, 5, 3, 8, 4), LAYERS[4]):
        (node,) = layer.graph().nodes
        assert node.results[0].type.shape[2:] == layer.out_hw and node_gemm(node) == layer.shape
        assert node.inputs[0].type.shape[2:] == (layer.ifmap_h, layer.ifmap_w)  # the same input, no more
    stride2 = ConvLayer("s", 56, 56, 1, 1, 4, 8, 2).graph()
    program = prepare(stride2, load_accel("edge-npu"), solver="heuristic")
    assert read_bytes(program)["x"] == 28 * 28 * 4 * 4  # it reads every other row and column


def test_read_topology(tmp_path):
    conv = tmp_path / "net.csv"
    conv.write_text("Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, Num Filter, "
                    "Strides,\n\nConv1, 224, 224, 7, 7, 3, 64, 2,\nFC,1,1,1,1,512,1000,1,")
    assert read_topology(conv) == (ConvLayer("Conv1", 224, 224, 7, 7, 3, 64, 2), ConvLayer("FC", 1, 1, 1, 1, 512, 1000))
    gemm = tmp_path / "mnk.csv"
    gemm.write_text("Layer,M,N,K,\nQKT,1024,1024,64,\n")
    assert read_topology(gemm) == (ConvLayer.gemm("QKT", 1024, 64, 1024),)


# ----- SCALE-Sim's read buffers: by hand and against a word-by-word oracle -----------------------
@given(st.lists(st.integers(0, 30), min_size=1, max_size=300), st.lists(st.integers(1, 12), min_size=31,
                                                                           max_size=31), st.integers(1, 120))
def test_read_buffer_counts_what_a_word_by_word_buffer_fetches(stream, weights, capacity):
    units = np.array(stream)
    starts = np.concatenate([[0], np.cumsum(weights)])
    words = np.concatenate([np.arange(starts[u], starts[u + 1]) for u in stream])
    assert epoch_reads(units, np.array(weights), capacity) == oracle.buffer_reads(words, capacity)


@given(st.lists(st.integers(0, 30), min_size=1, max_size=200), st.integers(1, 60), st.integers(1, 4), st.data())
def test_read_buffer_checkpoints_and_repeated_sweeps(stream, capacity, sweeps, data):
    units, weights = np.array(stream), np.arange(1, 32) % 7 + 1
    cut = data.draw(st.integers(1, len(stream)))
    assert epoch_reads(units, weights, capacity, checkpoint=cut) == (epoch_reads(units[:cut], weights, capacity),
                                                                     epoch_reads(units, weights, capacity))
    tiled = epoch_reads(np.tile(units, sweeps), weights, capacity)
    if sweeps <= 2:  # run as they are; beyond, each later sweep costs what the second did
        assert repeated_reads(units, weights, capacity, sweeps) == tiled


@given(st.lists(st.tuples(st.integers(1, 200), st.integers(1, 4)), min_size=1, max_size=5), st.integers(1, 300))
def test_sweeps_over_disjoint_sets_in_closed_form(sweeps, capacity):
    words, start = [], 0
    for size, repeats in sweeps:
        words += list(range(start, start + size)) * repeats
        start += size
    assert sweep_reads(sweeps, capacity) == oracle.buffer_reads(np.array(words), capacity)
    assert sweep_reads([(100, 3)], 101) == 100 and sweep_reads([(100, 3)], 100) == 300
    assert sweep_reads([(60, 1), (60, 2)], 100) == 60 + 60 + 40  # the second set's head is read again


GEOMETRY = st.builds(
    lambda h, w, kh, kw, s, p, c, n, b: ImageGemm(b, h, w, c, (h + 2 * p - kh) // s + 1, (w + 2 * p - kw) // s + 1,
                                                  (kh, kw), (s, s), (p, p), (1, 1), n),
    st.integers(3, 12), st.integers(3, 12), st.integers(1, 3), st.integers(1, 3), st.integers(1, 2),
    st.integers(0, 1), st.sampled_from([1, 3, 4, 8, 16]), st.integers(1, 20), st.integers(1, 2))


@settings(max_examples=60)
@given(GEOMETRY, st.sampled_from([2, 4, 8]), st.sampled_from([2, 4, 8]), st.sampled_from(DATAFLOWS),
       st.integers(16, 64))
def test_demand_follows_scalesims_order_word_by_word(geo, rows, cols, dataflow, per_window):
    # the oracle replays SCALE-Sim's demand matrices and buffer word by word; the model counts
    # filters and windows that share no words exactly, shared windows in units of an input pixel
    # (exact when an epoch is many windows long, as on SCALE-Sim's 32K-word halves)
    assume(min(geo.out_h, geo.out_w) >= 1)
    capacity = per_window * geo.k
    ifmap, filters = oracle.operand_reads(geo, rows, cols, dataflow, capacity)
    assert filter_reads(geo, rows, cols, dataflow, capacity) == filters
    ours = ifmap_reads(geo, rows, cols, dataflow, capacity)
    if not geo.overlapping:
        assert ours == ifmap
        if valid_words(geo) >= capacity:  # every sweep misses on every word
            assert ours == valid_words(geo) * (1 if dataflow == "is" else math.ceil(geo.filters / cols))
    assert ours == pytest.approx(ifmap, rel=0.15)


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


def scalesim_geometry(layer: ConvLayer) -> ImageGemm:
    """The layer exactly as SCALE-Sim lays it out: no padding, the last window over the edge."""
    return ImageGemm(1, layer.ifmap_h, layer.ifmap_w, layer.channels, *layer.out_hw,
                     (layer.filter_h, layer.filter_w), (layer.stride, layer.stride), filters=layer.filters)


@pytest.mark.parametrize("dataflow", DATAFLOWS)
def test_the_oracle_is_scalesim_word_for_word(scalesim_small, dataflow):
    capacity = 50 * (SMALL.ifmap_sram_kb * 1024 // 100)  # the active half: 50 sets of 1% of the SRAM
    for layer, theirs in zip(LAYERS, scalesim_small[dataflow].layers):
        geo = scalesim_geometry(layer)
        assert oracle.operand_reads(geo, SMALL.rows, SMALL.cols, dataflow, capacity) == \
            (theirs.dram_ifmap_reads, theirs.dram_filter_reads), layer.name
