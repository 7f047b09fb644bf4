"""The `tilegraph` command line. Errors print as `file:line:col: error: ...`, exit 2, no traceback."""
from __future__ import annotations

import sys
import traceback
from pathlib import Path
from typing import Annotated, Optional

import numpy as np
import typer
from typer.core import TyperCommand

from tilegraph.backends.base import backends, get_backend, with_capability
from tilegraph.ir import TilegraphError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="tilegraph: compile, schedule and run deep-learning graphs.")

ModelFile = Annotated[Path, typer.Argument(help="model file: .tg (DSL) or .tgir (IR text)", show_default=False)]
Entry = Annotated[Optional[str], typer.Option(help="function to compile in a .tg file (default: main, else the last)")]


def _registry_words() -> dict[str, str]:
    """What the help placeholders stand for, read from the backend registry and the target presets."""
    from tilegraph.ir.target import presets

    described = {b.name: f"{b.name} ({b.summary})" for b in backends()}
    return {"{backends}": ", ".join(described.values()),
            "{compiled}": ", ".join(text for name, text in described.items() if name != "reference"),
            "{presets}": ", ".join(presets()),
            "{source}": ", ".join(with_capability("source")),
            "{aot}": " or ".join(with_capability("aot")),
            "{limited}": " or ".join(with_capability("memory-limit"))}


class RegistryHelpCommand(TyperCommand):
    """A command whose option help may say {backends}, {compiled}, {presets}, {source} or {aot}: filled
    in whenever the app builds the command, so a backend registered after import is listed too."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        words = _registry_words()
        for param in self.params:
            for placeholder, text in words.items():
                if getattr(param, "help", None):  # options have help; click arguments have none
                    param.help = param.help.replace(placeholder, text)


@app.callback()
def _global(debug: Annotated[bool, typer.Option("--debug", help="show Python tracebacks on errors")] = False):
    """Global options (handled in main)."""


@app.command()
def check(model: ModelFile, entry: Entry = None) -> None:
    """Parse and verify a model; print its ops, params, flops and bytes."""
    from tilegraph.ir.verifier import verify
    from tilegraph.loading import load_graph
    from tilegraph.summary import GraphSummary

    graph = load_graph(model, entry)
    verify(graph)
    typer.echo("\n".join(GraphSummary.of(graph).lines()))


@app.command(cls=RegistryHelpCommand)
def run(
    model: ModelFile,
    backend: Annotated[str, typer.Option(help="reference (the numpy oracle, op by op), or a compiled backend: "
                                         "{compiled}")] = "reference",
    inputs: Annotated[Optional[Path], typer.Option(help=".npz with one array per graph input, by name")] = None,
    params: Annotated[Optional[Path], typer.Option(help=".npz with parameter values, by name")] = None,
    seed: Annotated[int, typer.Option(help="seed for random inputs and parameters not given")] = 0,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="write outputs to this .npz")] = None,
    entry: Entry = None,
) -> None:
    """Run a model and print its outputs (random inputs from --seed unless --inputs is given)."""
    from tilegraph.backends import reference
    from tilegraph.ir.verifier import verify
    from tilegraph.loading import load_graph, load_npz

    if backend != "reference":
        get_backend(backend)  # an unknown name fails before any work
    graph = load_graph(model, entry)
    verify(graph)
    args = load_npz(inputs, "inputs") if inputs else reference.random_inputs(graph, seed)
    given = load_npz(params, "params") if params else None
    if backend == "reference":
        results = reference.run(graph, args, params=given, seed=seed)
    else:
        import tilegraph

        results = tilegraph.compile(graph, target=backend, params=given, seed=seed)(
            *(reference.bind_inputs(graph, args)[v] for v in graph.inputs))
    for value, array in zip(graph.outputs, results):
        typer.echo(f"%{value.name}: {value.type}")
        with np.printoptions(precision=5, threshold=20, edgeitems=3, linewidth=100):
            typer.echo(f"  {array}".replace("\n", "\n  "))
    if output is not None:
        np.savez(output, **{v.name: a for v, a in zip(graph.outputs, results)})
        typer.echo(f"wrote {output}")


@app.command(name="compile", cls=RegistryHelpCommand)
def compile_command(
    model: ModelFile,
    target: Annotated[str, typer.Option(help="a backend to build for: {backends}; or a tiling preset "
                                        "({presets}) to stop at the Program")] = "accel-small",
    pipeline: Annotated[Optional[str], typer.Option(help="pass pipeline, e.g. 'canonicalize,fuse,tile{target=cpu}'")] = None,
    emit: Annotated[str, typer.Option(help="what to print: report (decisions), tgir (the Program), source "
                                      "(generated code of {source})")] = "report",
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="write the Program's .tgir here; with a "
                                                   "backend target, a directory for it and the built files")] = None,
    explain_fusion: Annotated[bool, typer.Option(help="print every fusion decision with its reason")] = False,
    print_ir_after_all: Annotated[bool, typer.Option(help="print the IR after every pass (stderr)")] = False,
    print_ir_after: Annotated[Optional[list[str]], typer.Option(help="print the IR after this pass (repeatable)")] = None,
    dump_dir: Annotated[Optional[Path], typer.Option(help="write NN_pass.tgir after each pass that changed the IR")] = None,
    time_passes: Annotated[bool, typer.Option(help="print a per-pass timing table (stderr)")] = False,
    aot_arch: Annotated[Optional[int], typer.Option(help="with --target {aot}: also compile every kernel for "
                                                    "CUDA sm_ARCH (e.g. 90; no GPU needed) and report its shared "
                                                    "memory, registers and spills")] = None,
    memory_limit: Annotated[Optional[str], typer.Option(help="with --target {limited}: plan the tensors between "
                                                        "kernels into this many bytes (e.g. 256KiB) and build a "
                                                        "library that executes the plan, spilling the rest to a "
                                                        "far pool")] = None,
    entry: Entry = None,
) -> None:
    """Compile a model through the pass pipeline; print what was decided, the Program or the code."""
    from tilegraph.compiler import build_program, limit_memory
    from tilegraph.driver import compile_program, load_program
    from tilegraph.ir.program_text import print_program
    from tilegraph.report import program_report

    if emit not in ("report", "tgir", "source"):
        raise TilegraphError(f"unknown --emit {emit!r}; choose report, tgir or source")
    backend = next((b for b in backends() if b.name == target), None)  # else a tiling preset
    if backend is None:
        check_tiling_target(target)
    sources = ", ".join(with_capability("source"))
    if emit == "source" and backend is None:
        raise TilegraphError(f"--emit source needs a backend target ({sources}), not {target!r}")
    if emit == "source" and "source" not in backend.capabilities:
        raise TilegraphError(f"backend {target} generates no source; --emit source applies to {sources}")
    if aot_arch is not None and (backend is None or "aot" not in backend.capabilities):
        raise TilegraphError(f"--aot-arch applies to --target {' or '.join(with_capability('aot'))}, not {target!r}")
    tile_target = backend.tile_target if backend else target
    options = {} if aot_arch is None else {"aot_arch": aot_arch}
    if memory_limit is not None:
        if backend is None:
            raise TilegraphError(f"--memory-limit needs a backend target ({', '.join(with_capability('memory-limit'))})")
        pipeline, options = limit_memory(backend, pipeline, {**options, "memory_limit": memory_limit})
    program, _ = compile_program(
        load_program(model, entry), pipeline, tile_target,
        print_ir_after="all" if print_ir_after_all else set(print_ir_after or ()),
        dump_dir=dump_dir, time_passes=time_passes)
    compiled = build_program(program, backend.name, **options) if backend else None
    text = print_program(program)
    if output is not None:
        written = [output] if compiled is None else [output / "program.tgir", *compiled.write(output)]
        written[0].parent.mkdir(parents=True, exist_ok=True)
        written[0].write_text(text + "\n", encoding="utf-8")
        typer.echo("wrote " + ", ".join(map(str, written)), err=True)
    if emit == "tgir":
        typer.echo(text)
    elif emit == "source":
        typer.echo(compiled.source)
    else:
        report = program_report(program, explain_fusion=explain_fusion)
        extra = compiled.backend_report() if compiled is not None else ""
        typer.echo(report + (f"\nbackend {backend.name}:\n{extra}" if extra else ""))


def check_tiling_target(target: str) -> None:
    """A --target that is no backend must name a tiling preset or a .toml file; else say what would do."""
    import difflib

    from tilegraph.ir.target import presets

    if target in presets() or Path(target).suffix == ".toml" or Path(target).exists():
        return
    names = [b.name for b in backends()]
    close = difflib.get_close_matches(target, names + presets(), n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    raise TilegraphError(f"unknown --target {target!r}{hint}; choose a backend ({', '.join(names)}) or a tiling "
                         f"preset ({', '.join(presets())})")


@app.command(name="import-torch")
def import_torch(
    spec: Annotated[str, typer.Argument(help="path/to/model.py:ClassName (constructible with no arguments)")],
    input_shape: Annotated[list[str], typer.Option(help="shape of one input, e.g. 1,3,32,32 (repeat per input)")],
    dtype: Annotated[Optional[list[str]], typer.Option(help="dtype per input (default f32; i64 for token ids)")] = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="write the .tgir here (weights go "
                                                   "beside it as NAME.params.npz)")] = None,
) -> None:
    """Trace a PyTorch model with torch.fx and write its IR text (and its weights)."""
    try:
        from tilegraph.frontends.fx import import_module_file
        from tilegraph.frontends.fx.loader import parse_shape
    except ModuleNotFoundError as error:
        raise TilegraphError(f"import-torch needs PyTorch ({error.name} is missing): "
                             "pip install 'tilegraph[torch]'") from None
    from tilegraph.ir.text import print_graph
    from tilegraph.loading import params_sidecar

    graph = import_module_file(spec, [parse_shape(s) for s in input_shape], dtype or "f32")
    text = print_graph(graph)
    if output is None:
        typer.echo(text)
        return
    output.write_text(text + "\n", encoding="utf-8")
    weights = {v.name: v.data for v in graph.params if v.data is not None}
    typer.echo(f"wrote {output}: {len(graph.nodes)} nodes, {len(graph.params)} params")
    if weights:
        np.savez(params_sidecar(output), **weights)
        typer.echo(f"wrote {params_sidecar(output)}")


from tilegraph import cli_plans  # noqa: E402,F401  (registers memplan and place on the app)
from tilegraph import cli_sweep  # noqa: E402,F401  (registers sweep on the app)


def format_error(error: TilegraphError) -> str:
    text = str(error)
    return text if error.loc is not None else f"error: {text}"


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app, turning every failure into a message and an exit status."""
    args = sys.argv[1:] if argv is None else argv
    debug = "--debug" in args
    try:
        app(args=args, prog_name="tilegraph")  # usage errors print and exit 2 inside
        code = 0
    except SystemExit:
        raise
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        code = 130
    except Exception as e:
        if debug:
            traceback.print_exc()
        message, code = describe_failure(e)
        typer.echo(message, err=True)
    sys.exit(code)


def describe_failure(error: Exception) -> tuple[str, int]:
    """The message and exit status for a failure: 2 for bad input or an unusable file, 1 for a bug."""
    if isinstance(error, TilegraphError):
        return format_error(error), error.exit_code
    if isinstance(error, OSError) and error.filename is not None:  # a file the user named
        return f"error: {error.filename}: {error.strerror or error}", 2
    return (f"internal error: {type(error).__name__}: {error}\n(re-run with --debug for the traceback, "
            "and please report it)"), 1
