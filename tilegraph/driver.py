"""The driver: default pipelines per target, and compiling a model file or graph to a Program."""
from __future__ import annotations

from pathlib import Path

from tilegraph.ir import Graph, TilegraphError
from tilegraph.ir.program import Program

DEFAULT_TARGET = "accel-small"


CHANNELS_LAST = "TILEGRAPH_CHANNELS_LAST"  # "0": a GPU pipeline stores every tensor row-major (NCHW)


def default_pipeline(target: str = DEFAULT_TARGET, channels_last: bool | None = None) -> str:
    """The pipeline `tilegraph compile` runs when none is given: canonicalize, fuse, tile. On a CPU target
    attention runs as generic kernels, its scores materialised (`FuseOptions.attention`): the C++ backend's
    FlashAttention kernel is slower there (`python benchmarks/cpu_attention.py`). On a GPU target the layout
    pass stores convolutions' activations channels-last before tiling (`passes/layout.py`), unless
    `channels_last` is False (None: on unless $TILEGRAPH_CHANNELS_LAST is 0)."""
    from tilegraph.ir.switches import switched_on
    from tilegraph.ir.target import TargetError, load_target

    try:
        kind = load_target(target).kind
    except TargetError:  # the tile pass says what is wrong with it
        kind = None
    if channels_last is None:
        channels_last = switched_on(CHANNELS_LAST)
    fuse = "fuse{attention=false}" if kind == "cpu" else "fuse"
    layout = ",layout" if kind == "gpu" and channels_last else ""
    return f"canonicalize,{fuse}{layout},tile{{target={target}}}"


def memory_limited_pipeline(pipeline: str | None, target: str, limit: str | int) -> str:
    """`pipeline` (default: the target's) and then a memory plan within `limit` bytes for the
    tensors between kernels, in the arena's alignment so an executing backend takes its offsets as
    they are; tensors too big to keep whole are streamed (they live in the far pool)."""
    from tilegraph.backends.arena import ALIGN
    from tilegraph.ir import TilegraphError
    from tilegraph.ir.units import parse_bytes

    try:
        capacity = parse_bytes(str(limit))
    except ValueError as error:
        raise TilegraphError(f"memory limit: {error}") from None
    return f"{pipeline or default_pipeline(target)},memplan{{capacity={capacity},stream=true,align={ALIGN}}}"


def load_program(path: str | Path, entry: str | None = None) -> Program:
    """A Program from a file: `.tgir` keeps its kernel annotations, `.tg` starts unfused."""
    from tilegraph.loading import load_graph, load_tgir

    path = Path(path)
    if path.suffix == ".tgir":
        return load_tgir(path, entry)
    return Program.unfused(load_graph(path, entry))


def compile_program(source: Graph | Program, pipeline: str | None = None, target: str = DEFAULT_TARGET,
                    **manager_options) -> tuple[Program, object]:
    """Run `pipeline` (default: the target's) over `source`; returns the Program and the PassManager."""
    from tilegraph.passes import PassManager

    manager = PassManager(pipeline or default_pipeline(target), **manager_options)
    program = source if isinstance(source, Program) else Program.unfused(source)
    _refuse_empty_tensors(program.graph)
    return manager.run(program), manager


def _refuse_empty_tensors(graph: Graph) -> None:
    """A TilegraphError naming the first tensor with a zero-size axis: loops of extent 0 are not modelled (a
    kernel domain reads them as extent 1, and the C++ library then wrote past an empty output)."""
    values = [*graph.inputs, *graph.params, *(v for node in graph.nodes for v in node.results)]
    empty = next((v for v in values if v.type.numel == 0), None)
    if empty is not None:
        where = f" ({empty.producer.op})" if empty.producer is not None else ""
        raise TilegraphError(f"@{graph.name}: %{empty.name}{where} is empty ({empty.type}): tilegraph compiles "
                             "tensors without zero-size axes only")
