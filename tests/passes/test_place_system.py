"""System descriptions: presets, units, roofline costs, and clear errors."""
import pytest

from tilegraph.ir.system import (
    Device, Link, System, SystemSpecError, load_system, parse_quantity, presets, system_from_dict)
from tilegraph.ir.types import DType


def test_presets_load():
    assert {"cpu-gpu-pcie", "cpu-gpu-npu", "4-core-npu"} <= set(presets())
    for name in presets():
        system = load_system(name)
        assert system.name == name
        assert system.home in system.device_names
        assert str(system).startswith(f"system {name}")


def test_npu_supports_only_its_kinds():
    npu = load_system("cpu-gpu-npu").device("npu")
    assert npu.supports({"contraction", "elementwise"})
    assert not npu.supports({"contraction", "reduction"})
    assert npu.supports(set())  # pure constants run anywhere


@pytest.mark.parametrize("text,unit,value", [
    ("80 GiB", "B", 80 * 2 ** 30), ("25 GB/s", "B/s", 25e9), ("19.5 TFLOP/s", "FLOP/s", 19.5e12),
    ("10 us", "s", 1e-5), (1024, "B", 1024.0), ("512MiB", "B", 512 * 2 ** 20)])
def test_quantities(text, unit, value):
    assert parse_quantity(text, "x", unit) == pytest.approx(value)


def test_bad_quantity_names_field():
    with pytest.raises(SystemSpecError, match="gpu.memory"):
        parse_quantity("lots", "gpu.memory", "B")


def test_roofline_time():
    dev = Device("d", ((DType.f32, 1e12),), 1e11, 2 ** 30, frozenset({"contraction", "elementwise"}),
                 (("contraction", 0.5),), 1e-6)
    # compute bound: 1e9 flops at 0.5 TFLOP/s = 2 ms
    assert dev.kernel_time({"contraction"}, 1e9, 1e3) == pytest.approx(1e-6 + 2e-3)
    # memory bound: 1e9 bytes at 100 GB/s = 10 ms
    assert dev.kernel_time({"elementwise"}, 1e6, 1e9) == pytest.approx(1e-6 + 1e-2)
    # f16 falls back to the f32 rate when not listed
    assert dev.flop_rate(DType.f16) == 1e12


def test_link_channels():
    duplex = Link("pcie", ("a", "b"), 1e9, 1e-6, duplex=True)
    assert duplex.channels() == ("pcie:a>b", "pcie:b>a")
    assert Link("bus", ("a", "b", "c"), 1e9).channels() == ("bus",)
    assert duplex.transfer_time(1e9) == pytest.approx(1 + 1e-6)


def test_missing_link_is_an_error():
    data = {"name": "s", "home": "a", "devices": [
        {"name": n, "kinds": ["elementwise"], "memory": "1 GiB", "memory_bandwidth": "1 GB/s",
         "peak_flops": {"f32": "1 TFLOP/s"}} for n in ("a", "b", "c")],
            "links": [{"name": "l", "devices": ["a", "b"], "bandwidth": "1 GB/s"}]}
    with pytest.raises(SystemSpecError, match="no link joins a and c"):
        system_from_dict(data)


def test_unknown_system_lists_presets():
    with pytest.raises(SystemSpecError, match="cpu-gpu-npu"):
        load_system("no-such-system")


def test_with_memory():
    system = load_system("cpu-gpu-pcie").with_memory(gpu=2 ** 20)
    assert system.device("gpu").memory == 2 ** 20
    assert system.device("cpu").memory == load_system("cpu-gpu-pcie").device("cpu").memory
    with pytest.raises(SystemSpecError):
        system.with_memory(tpu=1)


def test_system_is_hashable_value():
    a, b = load_system("4-core-npu"), load_system("4-core-npu")
    assert a == b
    assert isinstance(a, System)
