"""The backend registry: every entry usable, clear errors, and a new backend needing only its module
and one registration to work through `tilegraph.compile` and the CLI."""
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tilegraph
from tilegraph.backends.base import (CAPABILITIES, Backend, backends, get_backend, register_backend,
                                     unregister_backend)
from tilegraph.cli import main
from tilegraph.compiler import backend_module
from tilegraph.frontends.dsl import parse
from tilegraph.ir import TilegraphError
from tilegraph.ir.target import load_target

BUILTIN = ["reference", "cpp", "sycl", "triton", "sim"]
MLP = """func @mlp(%x: f32[4, 8]) -> f32[4, 16] {
  param %w: f32[8, 16]
  param %b: f32[16]
  %0 = matmul(%x, %w) : f32[4, 16]
  %1 = add(%0, %b) : f32[4, 16]
  %2 = relu(%1) : f32[4, 16]
  return %2
}
"""
# A complete backend outside the package: a CompiledProgram that runs the tiled executor and
# returns some "source". Registering it is all it takes to plug it in.
TOY_MODULE = "tilegraph_test_toy_backend"
TOY_SOURCE = '''
from tilegraph.backends.base import CompiledProgram
from tilegraph.backends.reference.tiled import run_program


class ToyProgram(CompiledProgram):
    backend = "toy"

    def execute(self, inputs):
        return run_program(self.program, list(inputs), params={v.name: a for v, a in self.params.items()})


def build(program, params, **options):
    compiled = ToyProgram(program, params, source=f"// toy source for @{program.graph.name}")
    compiled.options = options
    return compiled
'''
TOY = Backend(name="toy", tile_target="gpu-h100", capabilities=frozenset({"source"}), summary="a test backend",
              module=TOY_MODULE)


@pytest.fixture
def toy_backend(tmp_path, monkeypatch):
    (tmp_path / f"{TOY_MODULE}.py").write_text(textwrap.dedent(TOY_SOURCE))
    monkeypatch.syspath_prepend(str(tmp_path))
    register_backend(TOY)
    yield TOY
    unregister_backend(TOY.name)
    sys.modules.pop(TOY_MODULE, None)


@pytest.fixture
def mlp_file(tmp_path):
    path = tmp_path / "mlp.tgir"
    path.write_text(MLP)
    return path


def cli(capsys, *args):
    with pytest.raises(SystemExit) as exit_info:
        main(list(map(str, args)))
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def flat(text: str) -> str:
    """Help text with the table borders and line wrapping taken out."""
    return " ".join(text.replace("│", " ").split())


# ----- the registry -----------------------------------------------------------------------------
def test_builtins_come_first_in_a_fixed_order():
    assert [b.name for b in backends()][:len(BUILTIN)] == BUILTIN


@pytest.mark.parametrize("name", BUILTIN)
def test_every_backend_tiles_for_a_target_preset(name):
    backend = get_backend(name)
    assert load_target(backend.tile_target).name == backend.tile_target
    assert backend.capabilities <= CAPABILITIES.keys() and backend.summary


def test_registering_imports_no_backend_module():
    code = ("import sys, tilegraph; from tilegraph.backends.base import backends; "
            "print([b.module for b in backends() if b.module in sys.modules], 'triton' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["[]", "False"]


def test_unknown_backend_names_the_choices():
    with pytest.raises(TilegraphError) as info:
        get_backend("tritn")
    assert str(info.value) == ("unknown backend 'tritn' (did you mean triton?); choose one of "
                               + ", ".join(b.name for b in backends()))
    with pytest.raises(TilegraphError, match=r"unknown backend 'fortran'; choose one of reference, cpp"):
        tilegraph.compile(parse("def f(x: f32[4]) -> f32[4] { return x * 2 }"), target="fortran")


def test_bad_registrations_are_refused():
    with pytest.raises(ValueError, match="registered twice"):
        register_backend(get_backend("cpp"))
    with pytest.raises(ValueError, match="unknown capabilities jit"):
        Backend(name="x", tile_target="cpu", capabilities=frozenset({"jit"}), summary="x", module="x")


def test_missing_modules_and_packages_are_named(tmp_path, monkeypatch):
    (tmp_path / "tilegraph_test_needs_dep.py").write_text("import tilegraph_test_absent_package\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    needs = Backend(name="needy", tile_target="cpu", summary="x", module="tilegraph_test_needs_dep", extra="needy")
    with pytest.raises(TilegraphError, match=r"^backend 'needy' needs the Python package "
                       r"'tilegraph_test_absent_package'; install it \(pip install 'tilegraph\[needy\]'\)$"):
        needs.load()
    gone = Backend(name="gone", tile_target="cpu", summary="x", module="tilegraph_test_no_such.module")
    with pytest.raises(TilegraphError, match=r"backend 'gone' cannot be loaded: no module 'tilegraph_test_no_such'"):
        gone.load()
    inside = Backend(name="inside", tile_target="cpu", summary="x", module="tilegraph.backends.no_such")
    with pytest.raises(TilegraphError, match=r"backend 'inside' is not built into this version"):
        inside.load()


# ----- a backend added by one registration --------------------------------------------------------
def test_a_registered_backend_compiles_and_runs(toy_backend):
    graph = parse("def f(x: f32[4, 8]) -> f32[4, 3] { param w: f32[8, 3]\n return relu(x @ w) }")
    w = np.linspace(-1, 1, 24, dtype=np.float32).reshape(8, 3)
    x = np.linspace(-2, 2, 32, dtype=np.float32).reshape(4, 8)
    fn = tilegraph.compile(graph, target="toy", params={"w": w}, flavour=3)
    assert fn.backend == "toy" and fn.options == {"flavour": 3}
    assert fn.program.target.name == "gpu-h100"  # the entry's tile target chose the pipeline
    np.testing.assert_allclose(fn(x)[0], np.maximum(x @ w, 0), rtol=1e-5, atol=1e-6)
    assert backend_module("toy").__name__ == TOY_MODULE
    assert [b.name for b in backends()] == BUILTIN + ["toy"]


def test_the_cli_runs_and_emits_a_registered_backend(capsys, toy_backend, mlp_file):
    code, out, _ = cli(capsys, "run", mlp_file, "--backend", "toy")
    assert code == 0 and "%2: f32[4, 16]" in out
    code, out, _ = cli(capsys, "compile", mlp_file, "--target", "toy", "--emit", "source")
    assert code == 0 and "// toy source for @mlp" in out
    code, _, err = cli(capsys, "compile", mlp_file, "--target", "sim", "--emit", "source")
    assert code == 2 and err.strip() == ("error: backend sim generates no source; --emit source applies to cpp, "
                                         "sycl, triton, toy")


@pytest.mark.parametrize("command, option", [("run", "--backend"), ("compile", "--target")])
def test_cli_help_lists_the_registered_backends(capsys, request, command, option):
    code, out, _ = cli(capsys, command, "--help")
    assert code == 0 and option in out
    listed = flat(out)
    assert all(f"{b.name} ({b.summary})" in listed for b in backends() if b.name != "reference")
    assert "toy" not in listed
    request.getfixturevalue("toy_backend")
    _, out, _ = cli(capsys, command, "--help")
    assert "toy (a test backend)" in flat(out)


@pytest.mark.parametrize("args, message", [
    (["run", "{mlp}", "--backend", "tpu"], "error: unknown backend 'tpu'; choose one of reference, cpp, sycl"),
    (["compile", "{mlp}", "--target", "tritn"], "error: unknown --target 'tritn' (did you mean triton?); choose a "
                                               "backend (reference, cpp, sycl, triton, sim) or a tiling preset"),
    (["compile", "{mlp}", "--target", "cpu", "--emit", "source"], "--emit source needs a backend target (cpp, "
                                                                   "sycl, triton), not 'cpu'"),
    (["compile", "{mlp}", "--target", "cpp", "--aot-arch", "90"], "--aot-arch applies to --target triton, not 'cpp'"),
])
def test_bad_backend_options_give_one_line_and_exit_2(capsys, mlp_file, args, message):
    code, out, err = cli(capsys, *(a.format(mlp=mlp_file) for a in args))
    assert code == 2 and message in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in out + err


@pytest.mark.parametrize("target", ["reference", "cpp"])
def test_the_report_gives_the_compile_time_of_every_phase(target):
    """Each pass of the pipeline, verification, and the backend's own phases (C++: codegen, build)."""
    compiled = tilegraph.compile(parse("def f(x: f32[4, 8]) -> f32[4, 8] { return relu(x) }"), target=target)
    phases = compiled.compile_seconds
    assert {"canonicalize", "fuse", "tile", "verify", "bind"} <= set(phases)
    if target == "cpp":
        assert "codegen" in phases and any(name.startswith("build") for name in phases)
    assert all(seconds >= 0 for seconds in phases.values())
    (line,) = [line for line in compiled.report().splitlines() if line.startswith("compile time:")]
    assert all(name in line for name in phases)
