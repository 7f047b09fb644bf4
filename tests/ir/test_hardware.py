"""One hardware description: tiling, placement and the simulator read views of the same presets,
which reproduce the older target, accelerator and system files exactly."""
from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tilegraph.ir.accel import AccelError, accel_from_dict, load_accel
from tilegraph.ir.hardware import DeviceSpec, HardwareError, device_from_dict, load_hardware, presets
from tilegraph.ir.system import SystemSpecError, load_system, system_from_dict
from tilegraph.ir.target import TargetError, load_target, target_from_dict

LEGACY = Path(__file__).parent / "legacy_presets"
OLD_FORMATS = [("targets", load_target, target_from_dict), ("accels", load_accel, accel_from_dict),
               ("systems", load_system, system_from_dict)]


SRAM_PJ = {f"{o}_{rw}_pj_per_byte": 2.5 for o in ("ifmap", "filter", "ofmap") for rw in ("read", "write")}
# Deliberate changes since the older files: scratchpad energies per operand (and edge-npu's static
# power) in the energy tables; scalesim-default's sizes and rates in bytes of f32 words (SCALE-Sim's
# words are one byte, our tensors four: the older file's 1-byte words held a quarter of its words); gpu-h100's
# matrix_block (the dot width its tiles prefer).
CHANGED = {
    ("accels", "edge-npu"): {**SRAM_PJ, "leakage_mw": 10.0},
    ("accels", "tpu-like"): SRAM_PJ,
    ("accels", "scalesim-default"): {"word_bytes": 4, "scratchpad_bytes": 4 * 196608, "dram_bytes_per_cycle": 40.0,
                                     "dma_burst_bytes": 40, "description": "SCALE-Sim default for f32: 32x32 OS "
                                     "array, 3 x 64K-word SRAMs, 10 words/cycle DRAM"},
    ("targets", "gpu-h100"): {"matrix_block": 64},
}


@pytest.mark.parametrize("folder,load,legacy", OLD_FORMATS, ids=[f for f, *_ in OLD_FORMATS])
def test_presets_reproduce_the_older_files_which_still_load_by_path(folder, load, legacy):
    files = sorted((LEGACY / folder).glob("*.toml"))
    assert files
    for path in files:
        old = legacy(tomllib.loads(path.read_text(encoding="utf-8")), path.stem)
        assert load(path) == old  # the old file itself
        intended = dataclasses.replace(old, **CHANGED.get((folder, path.stem), {}))
        assert load(path.stem) == intended, path.stem  # the migrated preset, with the changes stated above


def test_every_preset_gives_the_views_it_should():
    for name in presets():
        spec = load_hardware(name)
        system = load_system(name)  # a device alone is a system of one
        if isinstance(spec, DeviceSpec):
            target = load_target(name)
            assert target.onchip_bytes == spec.tile.bytes and system.device_names == (name,)
            assert system.devices[0].memory == spec.offchip.bytes
            if spec.array is not None:
                accel = load_accel(name)
                assert accel.scratchpad_bytes == target.onchip_bytes and accel.pe_rows == target.pe_rows
                tiling = accel.tiling_target()  # what the simulator tiles for agrees with the preset's target
                assert (tiling.onchip_bytes, tiling.double_buffer, tiling.line_bytes, tiling.pe_cols) == \
                    (target.onchip_bytes, target.double_buffer, target.line_bytes, target.pe_cols)
        else:
            assert system.device_names == tuple(d.name for d in spec.devices)


def test_views_a_device_cannot_give_are_clear_errors():
    with pytest.raises(AccelError, match="device cpu has no PE array"):
        load_accel("cpu")
    with pytest.raises(TargetError, match="cpu-gpu-npu is a system of 3 devices, not a target"):
        load_target("cpu-gpu-npu")
    with pytest.raises(SystemSpecError, match="unknown system 'nope'; presets: .*cpu-gpu-npu"):
        load_system("nope")
    with pytest.raises(AccelError, match="unknown accelerator 'cpu2'; presets: .*edge-npu"):
        load_accel("cpu2")
    with pytest.raises(AccelError, match="; did you mean edge-npu\\?$"):
        load_accel("edge-npo")


def test_mistakes_in_a_description_name_the_device_and_field(tmp_path):
    base = {"name": "d", "tile_memory": "sram", "compute": {"clock_ghz": 1.0},
            "memories": [{"name": "dram", "bandwidth": "8 B/cycle"}, {"name": "sram", "bytes": 1024}]}
    assert device_from_dict(base).offchip.bandwidth == 8e9
    with pytest.raises(HardwareError, match="device d: unknown field.*speed in a \\[\\[memories\\]\\] entry"):
        device_from_dict({**base, "memories": [{"name": "dram", "speed": 1}]})
    with pytest.raises(HardwareError, match="device d: tile_memory 'l2' is not one of its memories"):
        device_from_dict({**base, "tile_memory": "l2"})
    with pytest.raises(HardwareError, match="per cycle needs compute.clock_ghz"):
        device_from_dict({**base, "compute": {}})
    path = tmp_path / "bad.toml"
    path.write_text('name = "bad"\n[[memories]]\nname = "dram"\nbytes = "lots"\n')
    with pytest.raises(TargetError, match="cannot read 'lots'"):
        load_target(path)


@given(clock=st.sampled_from([0.5, 0.7, 0.94, 1.0, 1.83, 2.5]), per_cycle=st.integers(1, 4096),
       cycles=st.integers(0, 10_000))
def test_per_cycle_rates_survive_the_device_and_accelerator_views_exactly(clock, per_cycle, cycles):
    spec = device_from_dict({
        "name": "npu", "tile_memory": "sram", "compute": {"clock_ghz": clock},
        "array": {"rows": 4, "cols": 4, "dataflow": "ws"},
        "memories": [{"name": "dram", "bandwidth": f"{per_cycle} B/cycle", "latency": f"{cycles} cycles"},
                     {"name": "sram", "bytes": 4096}]})
    accel = spec.accelerator()
    assert accel.dram_bytes_per_cycle == per_cycle and accel.dram_latency == cycles


def test_energy_tables_take_shorthands_and_reach_the_simulator():
    base = {"name": "npu", "tile_memory": "sram", "compute": {"clock_ghz": 1.0},
            "array": {"rows": 4, "cols": 4, "dataflow": "ws"},
            "memories": [{"name": "dram", "bandwidth": "8 B/cycle"}, {"name": "sram", "bytes": 4096}]}
    spec = device_from_dict({**base, "energy": {"mac_pj": 1.0, "dram_pj_per_byte": 50.0, "dram_write_pj_per_byte": 70.0,
                                                "sram_read_pj_per_byte": 2.0, "filter_read_pj_per_byte": 1.0,
                                                "leakage_mw": 5.0}})
    accel = spec.accelerator()
    assert (accel.dram_read_pj_per_byte, accel.dram_write_pj_per_byte) == (50.0, 70.0)  # a field given wins
    reads = (accel.ifmap_read_pj_per_byte, accel.filter_read_pj_per_byte, accel.ofmap_read_pj_per_byte)
    assert reads == (2.0, 1.0, 2.0)
    assert accel.ifmap_write_pj_per_byte == 0.0 and accel.leakage_mw == 5.0 and accel.dram_pj_per_byte == 50.0
    with pytest.raises(HardwareError, match="unknown field.*dram_pj in \\[energy\\]"):
        device_from_dict({**base, "energy": {"dram_pj": 1.0}})
    flat = accel_from_dict({"pe_rows": 2, "pe_cols": 2, "dataflow": "os", "scratchpad_bytes": 64,
                            "dram_bytes_per_cycle": 1.0, "energy": {"dram_pj_per_byte": 9.0}})
    assert (flat.dram_read_pj_per_byte, flat.dram_write_pj_per_byte) == (9.0, 9.0)
