"""The tilegraph DSL: a small typed language for model graphs (`.tg` files), lowered to a Graph.

    from tilegraph.frontends.dsl import parse, parse_file, to_dsl
    graph = parse_file("examples/mlp.tg")

The grammar lives in `grammar.lark` (LALR, loaded once at import); `lower.py` turns the parse
tree into a Graph with the GraphBuilder, `diagnostics.py` formats errors, `printer.py` prints a
Graph back as DSL. The language is described in docs/dsl.md.
"""
from __future__ import annotations

from pathlib import Path

from lark import Lark, UnexpectedInput

from tilegraph.ir.errors import ParseError
from tilegraph.ir.graph import Graph

from .diagnostics import Source, did_you_mean, syntax_error
from .lower import KEYWORDS, Lowering
from .printer import to_dsl

__all__ = ["parse", "parse_file", "to_dsl", "GRAMMAR_FILE", "KEYWORDS"]

GRAMMAR_FILE = Path(__file__).with_name("grammar.lark")
_PARSER = Lark(GRAMMAR_FILE.read_text(encoding="utf-8"), parser="lalr", lexer="basic",
               propagate_positions=True, maybe_placeholders=True)
_TERMINALS = {t.name: t.pattern.value for t in _PARSER.terminals if t.pattern.type == "str"}


def parse(source: str, filename: str = "<string>", entry: str | None = None) -> Graph:
    """Parse DSL text into the Graph of one function (`entry`; default `main`, else the last one).

    Every function of the file is checked, not only the entry. The first error raises a
    ParseError (syntax, names, program structure) or a ShapeError (types, shapes, attributes),
    both TilegraphErrors whose text is `file:line:col: error: ...` plus the line and a caret.
    """
    src = Source(source, filename)
    try:
        tree = _PARSER.parse(source)
    except UnexpectedInput as e:
        raise syntax_error(e, src, _TERMINALS) from None
    except RecursionError:
        raise ParseError("expression nested too deeply", src.at(1, 1)) from None
    lowering = Lowering(src)
    try:
        functions = lowering.collect(tree)
        if not functions:
            raise ParseError("no functions in this file; expected `def name(args) -> type { ... }`",
                             src.end() if source.strip() else src.at(1, 1))
        chosen = _entry(functions, entry, filename)
        graph = lowering.lower(chosen)
        for function in functions:  # check the functions the entry does not call, too
            if function.name not in lowering.used:
                lowering.lower(function)
    except RecursionError:
        raise ParseError("expression nested too deeply", src.at(1, 1)) from None
    return graph


def parse_file(path: str | Path, entry: str | None = None) -> Graph:
    """Read and parse a `.tg` file; errors name the file as given."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ParseError(f"{path}: not UTF-8 text (byte {e.start})") from None
    except OSError as e:
        raise ParseError(f"{path}: cannot read: {e.strerror or e}") from None
    return parse(text, filename=str(path), entry=entry)


def _entry(functions, entry: str | None, filename: str):
    by_name = {f.name: f for f in functions}
    if entry is None:
        return by_name.get("main", functions[-1])
    if entry not in by_name:
        raise ParseError(f"{filename}: no function named '{entry}'{did_you_mean(entry, by_name)} "
                         f"(functions: {', '.join(by_name)})")
    return by_name[entry]
