"""The `tilegraph` command line. Errors print as `file:line:col: error: ...`, exit 2, no traceback."""
from __future__ import annotations

import sys
import traceback
from pathlib import Path
from typing import Annotated, Optional

import numpy as np
import typer

from tilegraph.ir import TilegraphError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="tilegraph: compile, schedule and run deep-learning graphs.")

ModelFile = Annotated[Path, typer.Argument(help="model file: .tg (DSL) or .tgir (IR text)", show_default=False)]
Entry = Annotated[Optional[str], typer.Option(help="function to compile in a .tg file (default: main, else the last)")]


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


@app.command()
def run(
    model: ModelFile,
    backend: Annotated[str, typer.Option(help="backend to run on")] = "reference",
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
        raise TilegraphError(f"unknown backend {backend!r}; available: reference")
    graph = load_graph(model, entry)
    verify(graph)
    args = load_npz(inputs, "inputs") if inputs else reference.random_inputs(graph, seed)
    given = load_npz(params, "params") if params else None
    results = reference.run(graph, args, params=given, seed=seed)
    for value, array in zip(graph.outputs, results):
        typer.echo(f"%{value.name}: {value.type}")
        with np.printoptions(precision=5, threshold=20, edgeitems=3, linewidth=100):
            typer.echo(f"  {array}".replace("\n", "\n  "))
    if output is not None:
        np.savez(output, **{v.name: a for v, a in zip(graph.outputs, results)})
        typer.echo(f"wrote {output}")


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
    except TilegraphError as e:
        if debug:
            traceback.print_exc()
        typer.echo(format_error(e), err=True)
        code = e.exit_code
    except Exception as e:  # a bug in tilegraph, not in the user's input
        if debug:
            traceback.print_exc()
        typer.echo(f"internal error: {type(e).__name__}: {e}\n(re-run with --debug for the traceback, "
                   "and please report it)", err=True)
        code = 1
    sys.exit(code)
