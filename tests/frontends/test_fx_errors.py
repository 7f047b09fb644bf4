"""PyTorch frontend errors: every unsupported op listed with its node and source line; capture
fallbacks; and `import_module_file`, the function behind `tilegraph import-torch`."""
import inspect
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the PyTorch frontend needs the optional torch extra")
nn = torch.nn
F = torch.nn.functional

from tilegraph.backends.reference import run  # noqa: E402
from tilegraph.frontends.fx import ConversionError, UnsupportedOpsError, from_module, import_module_file  # noqa: E402
from tilegraph.frontends.fx.loader import parse_shape  # noqa: E402
from tilegraph.ir import TilegraphError  # noqa: E402
from tilegraph.ir.verifier import verify  # noqa: E402


def line_of(fragment, obj):
    """The file line number of the first source line of `obj` containing `fragment`."""
    lines, start = inspect.getsourcelines(obj)
    return start + next(i for i, line in enumerate(lines) if fragment in line)


class TwoUnsupported(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)

    def forward(self, x):
        y = torch.logcumsumexp(self.fc(x), dim=1)
        z = torch.lgamma(y) + torch.relu(x)
        return z.kthvalue(2, dim=-1).values


def test_every_unsupported_op_is_listed_with_node_and_source_line():
    with pytest.raises(UnsupportedOpsError) as caught:
        from_module(TwoUnsupported().eval(), (torch.randn(2, 6),))
    error = caught.value
    assert isinstance(error, TilegraphError)
    # the ops after a failed one are still checked for converters: lgamma and kthvalue are listed too
    assert [o.node for o in error.offenders] == ["logcumsumexp", "lgamma", "kthvalue"]
    assert [o.target for o in error.offenders] == ["torch.logcumsumexp", "torch.lgamma", "Tensor.kthvalue"]
    for offender, fragment in zip(error.offenders, ("torch.logcumsumexp(", "torch.lgamma(", "z.kthvalue(")):
        assert offender.loc.file == __file__
        assert offender.loc.line == line_of(fragment, TwoUnsupported.forward)
        assert fragment in offender.loc.source_line
    message = str(error)
    assert "3 unsupported ops" in message
    assert "logcumsumexp: torch.logcumsumexp: no converter" in message and "lgamma: torch.lgamma" in message
    assert f"{__file__}:{line_of('torch.lgamma(', TwoUnsupported.forward)}" in message


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.act = nn.Softshrink()
        self.shuffle = nn.PixelShuffle(2)

    def forward(self, x):
        return self.shuffle(self.act(x))


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()

    def forward(self, x):
        return self.block(x) * 2


def test_unsupported_modules_are_named_by_path_and_class():
    with pytest.raises(UnsupportedOpsError) as caught:
        from_module(Outer().eval(), (torch.randn(1, 4, 3, 3),))
    targets = [o.target for o in caught.value.offenders]
    assert targets == ["module block.act (torch.nn.Softshrink)", "module block.shuffle (torch.nn.PixelShuffle)"]
    assert caught.value.offenders[0].loc.line == line_of("self.shuffle(self.act(x))", Block.forward)


def test_training_mode_layers_are_reported_not_silently_converted():
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Dropout(0.5)).train()
    with pytest.raises(UnsupportedOpsError) as caught:
        from_module(model, (torch.randn(3, 4),))
    reasons = " ".join(o.reason for o in caught.value.offenders)
    assert "training mode" in reasons and "model.eval()" in reasons

    class Functional(nn.Module):
        def forward(self, x):
            return F.dropout(x, 0.1)  # training=True by default: random even in eval mode

    with pytest.raises(UnsupportedOpsError, match="training=self.training"):
        from_module(Functional().eval(), (torch.randn(3, 4),))


def test_data_dependent_python_values_are_reported():
    class ItemUser(nn.Module):
        def forward(self, x):
            return x * x.max().item()

    with pytest.raises(TilegraphError, match="Python value|could not capture"):
        from_module(ItemUser(), (torch.randn(3),))


def test_falls_back_to_torch_export_when_symbolic_trace_fails():
    class Loop(nn.Module):  # range(x.shape[0]) cannot be traced symbolically
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            total = x[0]
            for i in range(1, x.shape[0]):
                total = self.fc(total) + x[i]
            return total

    model = Loop().eval()
    x = torch.randn(3, 4)
    graph = from_module(model, (x,))
    verify(graph)
    assert np.abs(run(graph, [x.numpy()])[0] - model(x).detach().numpy()).max() < 1e-5
    assert {p.name for p in graph.params} == {"fc.weight", "fc.bias"}


def test_uncapturable_model_gives_a_clear_error():
    class DataDependent(nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return x * 2
            return x

    with pytest.raises(ConversionError, match="could not capture DataDependent") as caught:
        from_module(DataDependent(), (torch.randn(3),))
    assert "symbolic_trace" in str(caught.value) and "torch.export" in str(caught.value)


def test_unsupported_input_dtype():
    with pytest.raises(ConversionError, match="input input_1: dtype float64 is not supported"):
        from_module(nn.Linear(2, 2).double(), (torch.randn(1, 2, dtype=torch.float64),))


def test_wrong_number_of_example_inputs():
    with pytest.raises(ConversionError, match="example input"):
        from_module(nn.Bilinear(2, 2, 2), (torch.randn(1, 2),))


# ----- import_module_file ---------------------------------------------------------------------
MODEL_FILE = textwrap.dedent("""
    import torch
    from torch import nn


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)
            self.bn = nn.BatchNorm2d(4)
            self.fc = nn.Linear(4, 2)

        def forward(self, x):
            y = torch.relu(self.bn(self.conv(x)))
            return self.fc(y.mean((2, 3)))


    class Tokens(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(10, 4)

        def forward(self, ids):
            return self.emb(ids).sum(1)


    class NeedsArgs(nn.Module):
        def __init__(self, width):
            super().__init__()


    NOT_A_CLASS = 3
""")


@pytest.fixture
def model_file(tmp_path):
    path = tmp_path / "my_model.py"
    path.write_text(MODEL_FILE)
    return path


def test_import_module_file_converts_the_class(model_file):
    graph = import_module_file(f"{model_file}:Net", [(1, 3, 8, 8)])
    verify(graph)
    assert graph.name == "Net"
    assert graph.inputs[0].type.shape == (1, 3, 8, 8) and graph.outputs[0].type.shape == (1, 2)
    assert {"conv.weight", "bn.running_mean", "fc.bias"} <= {p.name for p in graph.params}


def test_import_module_file_with_integer_inputs(model_file):
    graph = import_module_file(f"{model_file}:Tokens", ["2,5"], dtype="i64")
    assert graph.inputs[0].type.dtype.value == "i64" and graph.outputs[0].type.shape == (2, 4)


@pytest.mark.parametrize("spec, shapes, message", [
    ("{dir}/missing.py:Net", [(1, 3, 8, 8)], "no such file"),
    ("{file}", [(1, 3, 8, 8)], "expected path/to/file.py:ClassName"),
    ("{file}:Missing", [(1, 3, 8, 8)], "no class Missing; modules defined there: NeedsArgs, Net, Tokens"),
    ("{file}:NOT_A_CLASS", [(1, 3, 8, 8)], "not a class"),
    ("{file}:NeedsArgs", [(1, 3, 8, 8)], "constructible with no arguments"),
    ("{file}:Net", [], "at least one input shape"),
    ("{file}:Net", [(1, 0, 8, 8)], "positive integers"),
    ("{file}:Net", ["1,a,3"], "bad input shape"),
    ("{file}:Net", [(1, 5, 8, 8)], "running the traced graph"),
])
def test_import_module_file_errors(model_file, spec, shapes, message):
    spec = spec.format(file=model_file, dir=model_file.parent)
    with pytest.raises(TilegraphError) as caught:
        import_module_file(spec, shapes)
    assert message in str(caught.value)


def test_import_module_file_reports_a_broken_file(tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\nclass Net(torch.nn.Module)\n    pass\n")
    with pytest.raises(TilegraphError, match=r"broken.py:2: syntax error"):
        import_module_file(f"{broken}:Net", [(1,)])
    failing = tmp_path / "failing.py"
    failing.write_text("raise RuntimeError('boom')\n")
    with pytest.raises(TilegraphError, match="importing it failed: RuntimeError: boom"):
        import_module_file(f"{failing}:Net", [(1,)])


def test_parse_shape():
    assert parse_shape("1,3,32,32") == (1, 3, 32, 32)
    assert parse_shape("2x8") == (2, 8)
    with pytest.raises(TilegraphError):
        parse_shape("")
    for bad in ("1,3,x", "1,,3", "0,3", "a"):
        with pytest.raises(TilegraphError, match="bad input shape"):
            parse_shape(bad)
