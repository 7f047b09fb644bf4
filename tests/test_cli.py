"""The command line: summaries, runs, and clean errors (message, exit 2, no traceback)."""
import subprocess
import sys

import numpy as np
import pytest

from tilegraph.cli import main

MLP = """func @mlp(%x: f32[4, 8]) -> f32[4, 16] {
  param %w: f32[8, 16]
  param %b: f32[16]
  %0 = matmul(%x, %w) : f32[4, 16]
  %1 = add(%0, %b) : f32[4, 16]
  %2 = relu(%1) : f32[4, 16]
  return %2
}
"""


def cli(capsys, *args):
    with pytest.raises(SystemExit) as exit_info:
        main(list(map(str, args)))
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


@pytest.fixture
def mlp_file(tmp_path):
    path = tmp_path / "mlp.tgir"
    path.write_text(MLP)
    return path


def test_check_prints_a_summary(capsys, mlp_file):
    code, out, _ = cli(capsys, "check", mlp_file)
    assert code == 0
    assert "@mlp: valid" in out
    assert "matmul x1" in out and "relu x1" in out
    assert "144 elements" in out  # 8*16 + 16 parameters
    assert "flops:   1.15 k" in out  # matmul 4*16*8*2 = 1024, add 64, relu 64


def test_run_prints_outputs_and_writes_npz(capsys, mlp_file, tmp_path):
    out_path = tmp_path / "y.npz"
    code, out, _ = cli(capsys, "run", mlp_file, "--seed", "3", "-o", out_path)
    assert code == 0 and "%2: f32[4, 16]" in out
    with np.load(out_path) as saved:
        assert saved["2"].shape == (4, 16) and (saved["2"] >= 0).all()


def test_run_with_inputs_file_matches_the_reference(capsys, mlp_file, tmp_path):
    x = np.arange(32, dtype=np.float32).reshape(4, 8) / 10
    w = np.ones((8, 16), np.float32)
    b = np.full(16, -1.0, np.float32)
    np.savez(tmp_path / "x.npz", x=x)
    np.savez(tmp_path / "p.npz", w=w, b=b)
    code, _, _ = cli(capsys, "run", mlp_file, "--inputs", tmp_path / "x.npz", "--params", tmp_path / "p.npz",
                     "-o", tmp_path / "y.npz")
    assert code == 0
    with np.load(tmp_path / "y.npz") as saved:
        np.testing.assert_allclose(saved["2"], np.maximum(x @ w + b, 0), rtol=1e-6)


@pytest.mark.parametrize("args, message", [
    (["check", "missing.tgir"], "missing.tgir: no such file"),
    (["check", "model.onnx"], "unknown file type .onnx"),
    (["run", "{mlp}", "--backend", "tpu"], "unknown backend 'tpu'"),
    (["run", "{mlp}", "--inputs", "{bad_npz}"], "input x: expected f32[4, 8], got shape [3, 8]"),
    (["run", "{mlp}", "--inputs", "{wrong_name_npz}"], "unknown input(s) y"),
    (["run", "{mlp}", "--inputs", "{not_npz}"], "not a valid .npz archive"),
    (["check", "{broken}"], "broken.tgir:4:8: error: matmul: inner dims differ: f32[4,8] @ f32[4,16]"),
    (["run", "{mlp}", "-o", "{missing_dir}/y.npz"], "missing/y.npz: No such file or directory"),
    (["compile", "{mlp}", "--emit", "tgir", "-o", "{mlp}/program.tgir"], "mlp.tgir: File exists"),
])
def test_bad_input_gives_message_and_exit_2(capsys, tmp_path, mlp_file, args, message):
    np.savez(tmp_path / "bad.npz", x=np.zeros((3, 8), np.float32))
    np.savez(tmp_path / "wrong.npz", y=np.zeros((4, 8), np.float32))
    (tmp_path / "not.npz").write_text("hello")
    (tmp_path / "broken.tgir").write_text(MLP.replace("param %w: f32[8, 16]", "param %w: f32[4, 16]"))
    paths = {"mlp": mlp_file, "bad_npz": tmp_path / "bad.npz", "wrong_name_npz": tmp_path / "wrong.npz",
             "not_npz": tmp_path / "not.npz", "broken": tmp_path / "broken.tgir", "missing_dir": tmp_path / "missing"}
    code, out, err = cli(capsys, *(a.format(**paths) for a in args))
    assert code == 2
    assert message in err
    assert "Traceback" not in out + err


def test_syntax_error_shows_the_line_and_a_caret(capsys, tmp_path):
    path = tmp_path / "bad.tgir"
    path.write_text(MLP.replace("%1 = add(%0, %b)", "%1 = add(%0 %b)"))
    code, _, err = cli(capsys, "check", path)
    assert code == 2
    assert f"{path}:5:15: error:" in err
    assert "%1 = add(%0 %b)" in err and "^" in err


def test_installed_entry_point_reports_errors_without_traceback(tmp_path):
    result = subprocess.run([sys.executable, "-m", "tilegraph", "check", str(tmp_path / "nope.tg")],
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert "no such file" in result.stderr and "Traceback" not in result.stderr
