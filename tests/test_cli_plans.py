"""`tilegraph compile`, `memplan` and `place` on the examples: reports, checked plans, plots, clean errors."""
from pathlib import Path

import pytest

from tilegraph.cli import main

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
BLOCK = EXAMPLES / "transformer_block.tg"


def cli(capsys, *args):
    with pytest.raises(SystemExit) as exit_info:
        main(list(map(str, args)))
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def test_compile_reports_kernels_tiles_and_fusion_decisions(capsys):
    code, out, _ = cli(capsys, "compile", BLOCK, "--explain-fusion")
    assert code == 0
    assert "<attention>" in out and "tiling for target accel-small" in out
    assert "decisions:" in out and "FlashAttention" in out


def test_compile_emits_a_program_that_parses_back(capsys, tmp_path):
    from tilegraph.ir.program_text import parse_program

    code, out, _ = cli(capsys, "compile", BLOCK, "--emit", "tgir", "--dump-dir", tmp_path / "dump")
    assert code == 0
    program = parse_program(out)
    assert len(program.kernels) == 8 and "tiled" in program.properties  # the head split and merge inside attention
    assert [p.name for p in sorted((tmp_path / "dump").iterdir())][:2] == ["00_input.tgir", "01_canonicalize.tgir"]


def test_every_command_reads_the_program_that_compile_writes(capsys, tmp_path):
    program_file = tmp_path / "block.tgir"
    code, _, err = cli(capsys, "compile", BLOCK, "--emit", "tgir", "-o", program_file)
    assert code == 0, err
    assert "kernels {" in program_file.read_text()
    code, out, err = cli(capsys, "check", program_file)
    assert code == 0 and "@main: valid" in out, err
    code, _, err = cli(capsys, "run", program_file, "--seed", "1", "-o", tmp_path / "y.npz")
    assert code == 0 and (tmp_path / "y.npz").exists(), err
    code, _, err = cli(capsys, "check", program_file, "--entry", "main")
    assert code == 2 and "--entry applies to .tg files only" in err


def test_memplan_pipeline_takes_the_tiling_targets_capacity(capsys):
    code, out, _ = cli(capsys, "compile", BLOCK, "--pipeline", "canonicalize,fuse,tile{target=accel-small},memplan")
    assert code == 0
    assert "capacity 256.00 KiB" in out and "status: optimal" in out


def test_memplan_prints_traffic_bound_and_a_checked_plan(capsys, tmp_path):
    plot = tmp_path / "map.png"
    code, out, _ = cli(capsys, "memplan", BLOCK, "--capacity", "460000", "--weights", "--time-limit", "2",
                       "--plot", plot)
    assert code == 0, out
    assert "non-compulsory traffic: 64.00 KiB" in out and "gap 0.0%" in out
    assert "checked: valid" in out and plot.stat().st_size > 1000


def test_memplan_min_footprint_reports_the_arena_beside_the_framework_order(capsys):
    code, out, _ = cli(capsys, "memplan", BLOCK, "--min-footprint", "--weights", "--time-limit", "2")
    assert code == 0, out
    assert "minimum footprint: 450.00 KiB arena with no spill" in out
    assert "framework order: peak live 450.00 KiB, greedy-by-size arena 450.00 KiB" in out and "checked: valid" in out


def test_memplan_below_the_largest_working_set_names_the_kernel(capsys):
    code, _, err = cli(capsys, "memplan", BLOCK, "--capacity", "200KiB", "--weights")
    assert code == 2
    assert "working set of kernel k7" in err and "smallest feasible capacity is 459264 B" in err
    assert "Traceback" not in err


def test_memplan_stream_plans_below_the_largest_working_set_and_counts_the_tiles(capsys):
    code, out, err = cli(capsys, "memplan", BLOCK, "--capacity", "200KiB", "--weights", "--stream",
                         "--time-limit", "2")
    assert code == 0, err
    assert "streamed by tiles:" in out and "tile re-reads" in out
    assert "checked: valid" in out and "streamed tile traffic" in out
    code, _, err = cli(capsys, "memplan", BLOCK, "--capacity", "64", "--weights", "--stream")
    assert code == 2 and "even with every tensor streamed by tiles" in err and "Traceback" not in err


@pytest.mark.parametrize("args, message", [
    (("--capacity", "lots"), "cannot read 'lots' as a positive size"),
    (("--order", "sideways"), "order must be 'free' or 'fixed'"),
])
def test_memplan_bad_options_are_clear(capsys, args, message):
    code, _, err = cli(capsys, "memplan", BLOCK, *args)
    assert code == 2 and message in err


@pytest.mark.parametrize("command", [("memplan", "--capacity", "1MiB"), ("place",), ("simulate",)])
def test_a_negative_time_limit_is_refused(capsys, command):
    code, out, err = cli(capsys, command[0], BLOCK, *command[1:], "--time-limit", "-3")
    assert code == 2 and "--time-limit" in out + err and "Traceback" not in out + err


def test_place_prints_makespan_bound_and_utilisation(capsys, tmp_path):
    gantt = tmp_path / "gantt.png"
    code, out, _ = cli(capsys, "place", BLOCK, "--system", "cpu-gpu-npu", "--time-limit", "3", "--gantt", gantt)
    assert code == 0, out
    assert "makespan" in out and "lower bound" in out and "busy" in out
    assert "checked: valid" in out and gantt.stat().st_size > 1000


def test_place_unknown_system_is_a_clear_error(capsys):
    code, _, err = cli(capsys, "place", BLOCK, "--system", "quantum")
    assert code == 2 and "unknown system 'quantum'" in err


def test_simulate_prints_cycles_and_writes_trace_and_plot(capsys, tmp_path):
    import json

    trace, plot = tmp_path / "trace.json", tmp_path / "timeline.png"
    code, out, err = cli(capsys, "simulate", EXAMPLES / "mlp.tg", "--accel", "edge-npu", "--trace", trace,
                         "--plot", plot)
    assert code == 0, err
    assert "total:" in out and "PE utilisation" in out and "DRAM: read" in out
    assert json.loads(trace.read_text())["traceEvents"] and plot.stat().st_size > 1000


def test_simulate_unknown_accelerator_is_a_clear_error(capsys):
    code, _, err = cli(capsys, "simulate", EXAMPLES / "mlp.tg", "--accel", "abacus")
    assert code == 2 and "unknown accelerator 'abacus'" in err


def test_compile_for_cpp_writes_source_and_library_and_run_matches_the_reference(capsys, tmp_path):
    import numpy as np

    code, out, err = cli(capsys, "compile", EXAMPLES / "lenet.tg", "--target", "cpp", "-o", tmp_path / "build")
    assert code == 0, err
    assert "backend cpp:" in out and "tiling for target cpu" in out
    assert {p.suffix for p in (tmp_path / "build").iterdir()} == {".tgir", ".cpp", ".so"}
    results = {}
    for backend in ("reference", "cpp"):
        code, _, err = cli(capsys, "run", EXAMPLES / "lenet.tg", "--backend", backend, "-o", tmp_path / f"{backend}.npz")
        assert code == 0, err
        results[backend] = dict(np.load(tmp_path / f"{backend}.npz"))
    for name, want in results["reference"].items():
        np.testing.assert_allclose(results["cpp"][name], want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


def test_emit_source_needs_a_backend(capsys):
    code, out, _ = cli(capsys, "compile", EXAMPLES / "mlp.tg", "--target", "cpp", "--emit", "source")
    assert code == 0 and out.startswith("// generated by tilegraph (cpp backend)")
    code, _, err = cli(capsys, "compile", EXAMPLES / "mlp.tg", "--emit", "source")
    assert code == 2 and "--emit source needs a backend target" in err


def test_aot_arch_reports_gpu_resources_for_triton_only(capsys):
    pytest.importorskip("triton", reason="the triton extra is not installed")
    code, out, err = cli(capsys, "compile", EXAMPLES / "mlp.tg", "--target", "triton", "--aot-arch", "90")
    assert code == 0, err
    kernel_lines = [line for line in out.splitlines() if "tl.dot" in line]
    assert len(kernel_lines) == 2 and all("sm_90: shared" in line for line in kernel_lines)
    code, _, err = cli(capsys, "compile", EXAMPLES / "mlp.tg", "--target", "cpp", "--aot-arch", "90")
    assert code == 2 and "--aot-arch applies to --target triton" in err
