"""Program text: the `.tgir` function followed by annotation sections, so one dump shows every decision.

    func @main(%x: f32[4, 8]) -> f32[4, 8] {
      %0 = exp(%x) : f32[4, 8]
      %1 = relu(%0) : f32[4, 8]
      return %1
    }
    kernels {
      k0 = [%0, %1] tiles {d0 = 4, d1 = 8}
    }
    properties [canonical, fused]

Nodes are named by their first result. A section is printed only when it says something: a plain
graph file (no sections) parses to `Program.unfused(graph)` with no properties.

Every decision has a section: `kernels` (with `tiles` and `kind` clauses), `layouts`
(`layouts { %h = [0, 2, 3, 1] }`: a tensor's axes in storage order), `target`, `memory_plan`,
`placement`, `properties`. A record section is `keyword { field = value ... }`
(`print_record`/`read_record`). Extension point: a new decision adds its section with
`register_section(AnnotationSection(...))`, and per-kernel facts with `register_kernel_clause(...)`.
A section's parser reads tokens through `AnnotationReader` (identifiers, %names, numbers, strings,
lists, `{ key = value }` maps), so every error names file, line and column like the rest of the format.
print -> parse -> print is byte-identical.
"""
from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from .errors import ParseError, SourceLocation
from .graph import Graph, Node, Value
from .memory_plan import PLAN_FIELDS, PLAN_OPTIONAL, plan_from_record, plan_record
from .placement import PLACEMENT_FIELDS, placement_from_record, placement_record
from .program import Kernel, Program
from .target import TARGET_FIELDS, TargetError, target_from_record, target_record
from .templates import get_template
from .text import format_value, parse_graph, print_graph

__all__ = [
    "print_program", "parse_program", "parse_program_file", "AnnotationSection", "KernelClause",
    "AnnotationReader", "Token", "register_section", "register_kernel_clause", "sections", "format_name",
]


# ----- registries ------------------------------------------------------------------------------
@dataclass(frozen=True)
class AnnotationSection:
    """One top-level annotation: `keyword <body>` after the function.

    `print(program)` returns the whole section text (starting with `keyword`) or None to omit it;
    `parse(reader, program)` is called with the keyword already read and returns the updated Program.
    `field` names the Program attribute the section carries (so unprinted decisions can be flagged);
    sections print in increasing `order`.
    """

    keyword: str
    print: Callable[[Program], str | None]
    parse: Callable[[AnnotationReader, Program], Program]
    order: int = 50
    field: str | None = None


@dataclass(frozen=True)
class KernelClause:
    """One optional clause after a kernel's node list, e.g. `tiles {d0 = 32}`.

    `print(kernel)` returns the clause text (starting with `keyword`) or None; `parse(reader, kernel)`
    is called with the keyword already read and returns the updated Kernel.
    """

    keyword: str
    print: Callable[[Kernel], str | None]
    parse: Callable[[AnnotationReader, Kernel], Kernel]
    order: int = 50


_SECTIONS: dict[str, AnnotationSection] = {}
_KERNEL_CLAUSES: dict[str, KernelClause] = {}


def register_section(section: AnnotationSection) -> AnnotationSection:
    if section.keyword in _SECTIONS:
        raise ValueError(f"annotation section {section.keyword} registered twice")
    _SECTIONS[section.keyword] = section
    return section


def register_kernel_clause(clause: KernelClause) -> KernelClause:
    if clause.keyword in _KERNEL_CLAUSES:
        raise ValueError(f"kernel clause {clause.keyword} registered twice")
    _KERNEL_CLAUSES[clause.keyword] = clause
    return clause


def sections() -> list[AnnotationSection]:
    """The registered sections in printing order."""
    return sorted(_SECTIONS.values(), key=lambda s: (s.order, s.keyword))


def _kernel_clauses() -> list[KernelClause]:
    return sorted(_KERNEL_CLAUSES.values(), key=lambda c: (c.order, c.keyword))


# ----- printing --------------------------------------------------------------------------------
_BARE = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")


def format_name(name: str) -> str:
    """A kernel, loop or property name: bare when it is an identifier, else a quoted string."""
    return name if _BARE.fullmatch(name) else format_value(name)


def print_program(program: Program) -> str:
    """The canonical text of `program` (no trailing newline); parse_program reads it back exactly."""
    parts = [print_graph(program.graph)]
    for section in sections():
        text = section.print(program)
        if text is not None:
            parts.append(text)
    return "\n".join(parts)


def print_record(keyword: str, fields: list[tuple[str, Any]]) -> str:
    """`keyword { name = value ... }`, one field a line; a list of rows prints one row a line."""
    lines = [f"{keyword} {{"]
    for name, value in fields:
        if isinstance(value, (list, tuple)) and value and all(isinstance(r, (list, tuple)) for r in value):
            rows = ",\n".join(f"    {format_value(list(r))}" for r in value)
            lines.append(f"  {name} = [\n{rows}\n  ]")
        else:
            lines.append(f"  {name} = {format_value(value)}")
    lines.append("}")
    return "\n".join(lines)


def _print_kernels(program: Program) -> str | None:
    if program.kernels == Program.unfused(program.graph).kernels:
        return None
    lines = ["kernels {"]
    for kernel in program.kernels:
        nodes = ", ".join(f"%{node.name}" for node in kernel.nodes)
        clauses = [c.print(kernel) for c in _kernel_clauses()]
        extra = "".join(f" {text}" for text in clauses if text is not None)
        lines.append(f"  {format_name(kernel.name)} = [{nodes}]{extra}")
    lines.append("}")
    return "\n".join(lines)


def _print_tiles(kernel: Kernel) -> str | None:
    if not kernel.tiles:
        return None
    return "tiles {" + ", ".join(f"{format_name(loop)} = {size}" for loop, size in kernel.tiles) + "}"


def _print_properties(program: Program) -> str | None:
    if not program.properties:
        return None
    return "properties [" + ", ".join(format_name(p) for p in sorted(program.properties)) + "]"


# ----- tokens ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Token:
    kind: str  # ident, name (%x), int, float, string, punct, end
    text: str
    line: int
    column: int

    @property
    def end_column(self) -> int:
        return self.column + max(1, len(self.text))


_TOKENS = re.compile(r"""
    (?P<skip>[ \t\f\r\n]+|\#[^\n]*)
  | (?P<name>%[A-Za-z0-9_.]+)
  | (?P<float>-?[0-9]+(?:\.[0-9]*(?:[eE][+-]?[0-9]+)?|[eE][+-]?[0-9]+))
  | (?P<int>-?[0-9]+)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_.]*)
  | (?P<string>"(?:[^"\\\x00-\x1f\x7f]|\\[\\"ntr]|\\x[0-9a-fA-F]{2}|\\u[0-9a-fA-F]{4}|\\U[0-9a-fA-F]{8})*")
  | (?P<punct>[{}\[\]=,:()])
""", re.VERBOSE)

_UNESCAPES = {"\\": "\\", '"': '"', "n": "\n", "t": "\t", "r": "\r"}
_WORDS: dict[str, Any] = {"true": True, "false": False, "none": None, "inf": float("inf"), "nan": float("nan")}


def _unquote(token: str) -> str:
    def one(match: re.Match) -> str:
        escape = match.group(1)
        return _UNESCAPES[escape] if escape in _UNESCAPES else chr(int(escape[1:], 16))

    return re.sub(r"\\(x..|u....|U........|.)", one, token[1:-1])


class AnnotationReader:
    """Reads the annotation sections token by token; errors carry file, line and column."""

    def __init__(self, text: str, filename: str, start: int, graph: Graph) -> None:
        self.text = text
        self.filename = filename
        self.graph = graph
        self._line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self._tokens = self._lex(start)
        self._pos = 0
        self._values = {value.name: value for value in graph.values()}

    # ----- lexing and locations ----------------------------------------------------------------
    def _where(self, offset: int) -> tuple[int, int]:
        line = bisect.bisect_right(self._line_starts, offset)
        return line, offset - self._line_starts[line - 1] + 1

    def _lex(self, start: int) -> list[Token]:
        tokens, offset = [], start
        while offset < len(self.text):
            match = _TOKENS.match(self.text, offset)
            if match is None:
                line, column = self._where(offset)
                raise ParseError(f"unexpected character {self.text[offset]!r}", self.location(line, column))
            if match.lastgroup != "skip":
                tokens.append(Token(match.lastgroup, match.group(), *self._where(offset)))
            offset = match.end()
        tokens.append(Token("end", "", *self._where(len(self.text))))
        return tokens

    def location(self, line: int, column: int, end_column: int | None = None) -> SourceLocation:
        lines = self.text.split("\n")
        source = lines[line - 1].rstrip("\r") if 0 < line <= len(lines) else None
        return SourceLocation(self.filename, line, column, source, end_column)

    def error(self, token: Token, message: str) -> ParseError:
        return ParseError(message, self.location(token.line, token.column, token.end_column))

    # ----- cursor ------------------------------------------------------------------------------
    def peek(self, ahead: int = 0) -> Token:
        return self._tokens[min(self._pos + ahead, len(self._tokens) - 1)]

    def next(self) -> Token:
        token = self._tokens[self._pos]
        if token.kind != "end":
            self._pos += 1
        return token

    def at(self, text: str) -> bool:
        token = self.peek()
        return token.kind in ("punct", "ident") and token.text == text

    def accept(self, text: str) -> Token | None:
        return self.next() if self.at(text) else None

    def expect(self, text: str) -> Token:
        if not self.at(text):
            raise self._unexpected(f"'{text}'")
        return self.next()

    def _unexpected(self, wanted: str) -> ParseError:
        token = self.peek()
        found = "end of text" if token.kind == "end" else f"'{token.text}'"
        return self.error(token, f"unexpected {found}; expected {wanted}")

    def at_end(self) -> bool:
        return self.peek().kind == "end"

    # ----- values ------------------------------------------------------------------------------
    def name(self) -> tuple[str, Token]:
        """An identifier or a quoted string (kernel, loop and property names)."""
        token = self.peek()
        if token.kind == "ident":
            return self.next().text, token
        if token.kind == "string":
            return _unquote(self.next().text), token
        raise self._unexpected("a name")

    def integer(self) -> tuple[int, Token]:
        token = self.peek()
        if token.kind != "int":
            raise self._unexpected("an integer")
        return int(self.next().text), token

    def value(self) -> Any:
        """A value as in node attributes: number, true/false/none/inf/nan, dtype word, string, list."""
        token = self.peek()
        if token.kind == "int":
            return int(self.next().text)
        if token.kind == "float":
            return float(self.next().text)
        if token.kind == "string":
            return _unquote(self.next().text)
        if token.kind == "ident":
            self.next()
            return _WORDS.get(token.text, token.text)
        if self.accept("["):
            items = self.separated(self.value, "]")
            return tuple(items)
        raise self._unexpected("a value")

    def separated(self, item: Callable[[], Any], close: str) -> list[Any]:
        """`item, item, ... close` (the opening bracket already read; a trailing comma is not allowed)."""
        items = []
        if self.accept(close):
            return items
        while True:
            items.append(item())
            if self.accept(close):
                return items
            if not self.accept(","):
                raise self._unexpected(f"',' or '{close}'")

    def value_ref(self) -> Value:
        """`%name`: a value of the graph."""
        token = self.peek()
        if token.kind != "name":
            raise self._unexpected("a value name like %0")
        self.next()
        if token.text[1:] not in self._values:
            raise self.error(token, f"undefined value {token.text}")
        return self._values[token.text[1:]]

    def node_ref(self) -> Node:
        """`%name` naming a node by its first result."""
        token = self.peek()
        value = self.value_ref()
        if value.producer is None or value.index != 0:
            raise self.error(token, f"{token.text} is not the first result of a node, so it does not name one")
        return value.producer

    def kernel_ref(self, program: Program) -> Kernel:
        name, token = self.name()
        for kernel in program.kernels:
            if kernel.name == name:
                return kernel
        raise self.error(token, f"no kernel named {name}")


# ----- parsing ---------------------------------------------------------------------------------
_SCAN = re.compile(r'"(?:[^"\\\n]|\\.)*"|#[^\n]*|[{}]')


def _function_end(text: str) -> int | None:
    """Offset just past the `}` closing the function body (strings and comments skipped), or None."""
    depth = 0
    for match in _SCAN.finditer(text):
        token = match.group()
        if token == "{":
            depth += 1
        elif token == "}":
            depth -= 1
            if depth == 0:
                return match.end()
    return None


def parse_program(text: str, filename: str = "<string>") -> Program:
    """Read a function and its annotation sections; any mistake is a ParseError with file:line:col."""
    end = _function_end(text)
    graph = parse_graph(text if end is None else text[:end], filename)
    program = Program.unfused(graph)
    if end is None:
        return program
    reader = AnnotationReader(text, filename, end, graph)
    seen: dict[str, Token] = {}
    while not reader.at_end():
        keyword = token = reader.peek()
        if keyword.kind != "ident" or keyword.text not in _SECTIONS:
            known = ", ".join(s.keyword for s in sections())
            raise reader.error(token, f"unknown annotation section '{keyword.text}'; expected one of {known}")
        if keyword.text in seen:
            first = seen[keyword.text]
            raise reader.error(token, f"section {keyword.text} is given twice (first at line {first.line})")
        seen[keyword.text] = reader.next()
        program = _SECTIONS[keyword.text].parse(reader, program)
    return program


def parse_program_file(path) -> Program:
    """parse_program on a UTF-8 file; errors name the file as given."""
    from pathlib import Path

    return parse_program(Path(path).read_text(encoding="utf-8"), filename=str(path))


def _parse_kernels(reader: AnnotationReader, program: Program) -> Program:
    reader.expect("{")
    kernels: list[Kernel] = []
    names: dict[str, Token] = {}
    owner: dict[Node, str] = {}
    while not reader.accept("}"):
        if reader.peek().text in _SECTIONS and reader.peek().kind == "ident" and reader.peek(1).text != "=":
            raise reader._unexpected("'}' to close the kernels section")
        name, token = reader.name()
        if name in names:
            raise reader.error(token, f"kernel {name} is defined twice (first at line {names[name].line})")
        names[name] = token
        reader.expect("=")
        reader.expect("[")

        def node() -> Node:
            where = reader.peek()
            found = reader.node_ref()
            if found in owner:
                raise reader.error(where, f"{where.text} is already in kernel {owner[found]}")
            owner[found] = name
            return found

        nodes = reader.separated(node, "]")
        kernel = Kernel(name, tuple(nodes))
        while reader.peek().kind == "ident" and reader.peek().text in _KERNEL_CLAUSES:
            kernel = _KERNEL_CLAUSES[reader.next().text].parse(reader, kernel)
        kernels.append(kernel)
    missing = [f"%{n.name}" for n in program.graph.nodes if n not in owner]
    if missing:
        close = reader._tokens[reader._pos - 1]
        shown = ", ".join(missing[:8]) + (", ..." if len(missing) > 8 else "")
        raise reader.error(close, f"node(s) {shown} are in no kernel; every node belongs to exactly one")
    return replace(program, kernels=tuple(kernels))


def _parse_tiles(reader: AnnotationReader, kernel: Kernel) -> Kernel:
    reader.expect("{")
    seen: set[str] = set()

    def entry() -> tuple[str, int]:
        loop, token = reader.name()
        if loop in seen:
            raise reader.error(token, f"loop {loop} is given twice")
        seen.add(loop)
        reader.expect("=")
        size, where = reader.integer()
        if size < 1:
            raise reader.error(where, f"tile size must be positive, got {size}")
        return loop, size

    return replace(kernel, tiles=tuple(reader.separated(entry, "}")))


def read_record(reader: AnnotationReader, keyword: str, names: tuple[str, ...],
                optional: tuple[str, ...] = ()) -> tuple[dict[str, Any], Token]:
    """The `{ name = value ... }` body of a record section: values by name, and the section's first token.

    Every name in `names` must appear once, except those in `optional`; unknown names are errors."""
    first = reader.expect("{")
    values: dict[str, Any] = {}
    while not reader.accept("}"):
        name, token = reader.name()
        if name not in names:
            raise reader.error(token, f"unknown {keyword} field {name}; fields: {', '.join(names)}")
        if name in values:
            raise reader.error(token, f"{keyword} field {name} is given twice")
        reader.expect("=")
        values[name] = reader.value()
    missing = [n for n in names if n not in values and n not in optional]
    if missing:
        raise reader.error(first, f"{keyword} section lacks {', '.join(missing)}")
    return values, first


def _record_section(keyword: str, field: str, record: Callable[[Any], list[tuple[str, Any]]],
                    build: Callable[[dict], Any], names: tuple[str, ...], order: int,
                    optional: tuple[str, ...] = (), check: Callable[[Any, Program], str | None] | None = None
                    ) -> AnnotationSection:
    """A section printing Program.<field> as a record and parsing it back with `build`."""
    def print_section(program: Program) -> str | None:
        value = getattr(program, field)
        return None if value is None else print_record(keyword, record(value))

    def parse_section(reader: AnnotationReader, program: Program) -> Program:
        values, first = read_record(reader, keyword, names, optional)
        try:
            value = build(values)
        except (TypeError, ValueError, KeyError, TargetError) as e:
            raise reader.error(first, f"malformed {keyword} section: {e}") from None
        problem = check(value, program) if check else None
        if problem:
            raise reader.error(first, f"{keyword} section: {problem}")
        return replace(program, **{field: value})

    return AnnotationSection(keyword, print_section, parse_section, order=order, field=field)


def _unknown_kernels(names: Any, program: Program) -> str | None:
    known = {k.name for k in program.kernels}
    missing = [n for n in names if n not in known]
    return f"names kernel {missing[0]}, which the program lacks" if missing else None


def _parse_properties(reader: AnnotationReader, program: Program) -> Program:
    reader.expect("[")
    names = reader.separated(lambda: reader.name()[0], "]")
    return replace(program, properties=frozenset(names))


def _print_layouts(program: Program) -> str | None:
    if not program.layouts:
        return None
    rows = "".join(f"  %{value.name} = {format_value(list(order))}\n" for value, order in program.layouts)
    return f"layouts {{\n{rows}}}"


def _parse_layouts(reader: AnnotationReader, program: Program) -> Program:
    first = reader.expect("{")
    layouts = []
    while not reader.accept("}"):
        value = reader.value_ref()
        reader.expect("=")
        reader.expect("[")
        order = tuple(reader.separated(lambda: reader.integer()[0], "]"))
        layouts.append((value, order))
    laid = replace(program, layouts=tuple(layouts))
    problem = laid.layout_problem()
    if problem:
        raise reader.error(first, f"layouts section: {problem}")
    return laid


def _print_kind(kernel: Kernel) -> str | None:
    return None if kernel.template is None else f"kind {kernel.kind}"


def _parse_kind(reader: AnnotationReader, kernel: Kernel) -> Kernel:
    kind, token = reader.name()
    try:
        get_template(kind)
    except ValueError as e:
        raise reader.error(token, str(e)) from None
    return replace(kernel, kind=kind)


register_section(AnnotationSection("kernels", _print_kernels, _parse_kernels, order=10, field="kernels"))
register_section(AnnotationSection("layouts", _print_layouts, _parse_layouts, order=15, field="layouts"))
# fields added to Target after the format was first written default when absent, so older files still load
register_section(_record_section("target", "target", target_record, target_from_record, TARGET_FIELDS, order=20,
                                 optional=("matrix_block",)))
register_section(_record_section(
    "memory_plan", "memory_plan", plan_record, plan_from_record, PLAN_FIELDS, order=60, optional=PLAN_OPTIONAL,
    check=lambda plan, program: _unknown_kernels(plan.order, program)))
register_section(_record_section(
    "placement", "placement", placement_record, placement_from_record, PLACEMENT_FIELDS, order=70,
    check=lambda placement, program: _unknown_kernels([k.kernel for k in placement.kernels], program)))
register_section(AnnotationSection("properties", _print_properties, _parse_properties, order=90,
                                   field="properties"))
register_kernel_clause(KernelClause("tiles", _print_tiles, _parse_tiles, order=10))
register_kernel_clause(KernelClause("kind", _print_kind, _parse_kind, order=5))
