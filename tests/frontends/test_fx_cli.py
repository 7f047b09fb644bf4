"""`tilegraph import-torch`: IR text plus a weights sidecar that `run` and `compile` pick up."""
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch frontend needs PyTorch (pip install 'tilegraph[torch]')")

from tilegraph.cli import main  # noqa: E402

MODEL = textwrap.dedent("""
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
            self.fc = torch.nn.Linear(4 * 8 * 8, 5)

        def forward(self, x):
            return torch.log_softmax(self.fc(torch.relu(self.conv(x)).flatten(1)), -1)
""")


def cli(capsys, *args):
    with pytest.raises(SystemExit) as exit_info:
        main(list(map(str, args)))
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def test_imported_model_runs_with_its_own_weights(capsys, tmp_path):
    (tmp_path / "model.py").write_text(MODEL)
    out_file = tmp_path / "net.tgir"
    code, out, err = cli(capsys, "import-torch", f"{tmp_path / 'model.py'}:Net", "--input-shape", "1,3,8,8",
                         "-o", out_file)
    assert code == 0, err
    assert (tmp_path / "net.params.npz").exists()

    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.savez(tmp_path / "x.npz", x=x)
    code, out, err = cli(capsys, "run", out_file, "--inputs", tmp_path / "x.npz", "-o", tmp_path / "y.npz")
    assert code == 0, err
    (got,) = np.load(tmp_path / "y.npz").values()

    import importlib.util
    spec = importlib.util.spec_from_file_location("user_model", tmp_path / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.Net().eval()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in _torch_names(tmp_path, model).items()})
    with torch.no_grad():
        want = model(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def _torch_names(tmp_path, model):
    """The sidecar's arrays under the module's state-dict names (the IR keeps the dotted names)."""
    saved = dict(np.load(tmp_path / "net.params.npz"))
    names = {k: k for k in model.state_dict()}
    assert set(saved) == set(names), (sorted(saved), sorted(names))
    return saved


def test_printing_to_stdout_and_clean_errors(capsys, tmp_path):
    (tmp_path / "model.py").write_text(MODEL)
    code, out, _ = cli(capsys, "import-torch", f"{tmp_path / 'model.py'}:Net", "--input-shape", "1,3,8,8")
    assert code == 0 and out.startswith("func @Net(")
    code, _, err = cli(capsys, "import-torch", f"{tmp_path / 'model.py'}:Missing", "--input-shape", "1,3,8,8")
    assert code == 2 and "no class Missing" in err and "Traceback" not in err
