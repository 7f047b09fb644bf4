"""The .tgir text format: `print_graph` writes a Graph in its one canonical form, `parse_graph` reads it back.

print -> parse -> print is byte-identical. The parser rebuilds the graph through `Graph.create_node`,
so attributes are normalised and every type annotation is checked against type inference; every
mistake in the text, down to random garbage, is a ParseError naming file, line and column.
The grammar lives in tgir.lark next to this file.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from os import PathLike
from pathlib import Path
from typing import Any

import numpy as np
from lark import Lark, Token, Transformer
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken

from .errors import ParseError, ShapeError, SourceLocation
from .graph import Graph, Node, Value, sanitize_name
from .ops import get_op
from .ops.registry import REQUIRED
from .types import DType, TensorType

__all__ = ["print_graph", "parse_graph", "parse_file", "format_value"]


# ----- printing -------------------------------------------------------------------------------
def print_graph(graph: Graph) -> str:
    """The canonical text of `graph` (no trailing newline); parse_graph reads it back exactly."""
    inputs = ", ".join(f"%{v.name}: {v.type}" for v in graph.inputs)
    lines = [f"func @{graph.name}({inputs}) -> {_format_result_types(graph.outputs)} {{"]
    lines += [f"  param %{v.name}: {v.type}" for v in graph.params]
    lines += [f"  {_format_node(node)}" for node in graph.nodes]
    outputs = ", ".join(f"%{v.name}" for v in graph.outputs)
    lines.append(f"  return {outputs}" if outputs else "  return")
    lines.append("}")
    return "\n".join(lines)


def format_value(value: Any) -> str:
    """One attribute value as text: `1`, `1e-05`, `inf`, `true`, `none`, `f32`, `"tanh"`, `[1, 2]`."""
    if value is None:
        return "none"
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return repr(float(value))
    if isinstance(value, DType):
        return value.value
    if isinstance(value, str):
        return _quote(value)
    if isinstance(value, (list, tuple)):
        return f"[{', '.join(format_value(v) for v in value)}]"
    raise TypeError(f"cannot write attribute value {value!r} of type {type(value).__name__} as text")


def _format_result_types(outputs: list[Value]) -> str:
    if len(outputs) == 1:
        return str(outputs[0].type)
    return f"({', '.join(str(v.type) for v in outputs)})"


def _format_node(node: Node) -> str:
    names = ", ".join(f"%{v.name}" for v in node.results)
    operands = ", ".join(f"%{v.name}" for v in node.inputs)
    attrs = ", ".join(f"{key} = {format_value(value)}" for key, value in _shown_attrs(node))
    types = ", ".join(str(v.type) for v in node.results)
    return f"{names} = {node.op}({operands}){f' {{{attrs}}}' if attrs else ''} : {types}"


def _shown_attrs(node: Node) -> list[tuple[str, Any]]:
    """The attributes worth writing: those that differ from the op's default, in the op's order.

    Attributes the op does not declare (an invalid graph) are written too, last, so a dump of a
    broken graph shows everything it holds.
    """
    try:
        opdef = get_op(node.op)
        specs = opdef.attrs
    except ShapeError:
        specs = ()
    defaults = _normalized_defaults(node, specs)
    shown = []
    for spec in specs:
        if spec.name in node.attrs:
            value = node.attrs[spec.name]
            if spec.default is REQUIRED or format_value(value) != format_value(defaults.get(spec.name, spec.default)):
                shown.append((spec.name, value))
    declared = {spec.name for spec in specs}
    shown += [(key, value) for key, value in node.attrs.items() if key not in declared]
    return shown


def _normalized_defaults(node: Node, specs) -> dict[str, Any]:
    """Default attributes as the op normalises them for this node's operands (softmax's axis=-1 is
    stored as rank-1), so a default is omitted however it was written."""
    required = {spec.name: node.attrs[spec.name] for spec in specs
                if spec.default is REQUIRED and spec.name in node.attrs}
    try:
        return get_op(node.op).normalize_attrs(node.input_types, required)
    except (ShapeError, ValueError):
        return {}


_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r"}
_UNESCAPES = {"\\": "\\", '"': '"', "n": "\n", "t": "\t", "r": "\r"}


def _quote(text: str) -> str:
    """A double-quoted string; non-printable characters become \\xHH, \\uHHHH or \\UHHHHHHHH."""
    parts = []
    for ch in text:
        code = ord(ch)
        if ch in _ESCAPES:
            parts.append(_ESCAPES[ch])
        elif ch.isprintable():
            parts.append(ch)
        elif code < 0x100:
            parts.append(f"\\x{code:02x}")
        elif code < 0x10000:
            parts.append(f"\\u{code:04x}")
        else:
            parts.append(f"\\U{code:08x}")
    return f'"{"".join(parts)}"'


def _unquote(token: str) -> str:
    """Inverse of _quote; the grammar has already checked that every escape is well formed."""
    def replace(match: re.Match) -> str:
        escape = match.group(0)[1:]
        if escape[0] in _UNESCAPES:
            return _UNESCAPES[escape[0]]
        return chr(int(escape[1:], 16))  # ValueError past U+10FFFF; the caller reports it

    return re.sub(r"\\(x..|u....|U........|.)", replace, token[1:-1])


# ----- parsing: text -> syntax tree -------------------------------------------------------------
@dataclass
class _Type:
    type: TensorType
    start: Token  # the dtype word
    end: Token  # the closing bracket


@dataclass
class _Node:
    names: list[Token]
    op: Token
    operands: list[Token]
    attrs: list[tuple[Token, Any]]
    types: list[_Type]


@dataclass
class _Func:
    name: Token
    inputs: list[tuple[Token, _Type]]
    results: list[_Type]
    params: list[tuple[Token, _Type]]
    nodes: list[_Node]
    ret: Token
    outputs: list[Token]


class _Problem(Exception):
    """A mistake found while building the syntax tree: the token at fault and what is wrong."""

    def __init__(self, token: Token, message: str) -> None:
        super().__init__(message)
        self.token = token
        self.message = message


_WORDS: dict[str, Any] = {"true": True, "false": False, "none": None, "inf": float("inf"), "nan": float("nan")}


def _to_int(token: Token) -> int:
    try:
        return int(token)
    except ValueError:  # Python refuses to convert integers of more than 4300 digits
        raise _Problem(token, f"integer {token[:20]}... is too long") from None


class _ToSyntaxTree(Transformer):
    """Runs inside the LALR parser as rules are reduced (bottom-up, so deep nesting cannot overflow
    the Python stack) and turns them into the small dataclasses above."""

    def start(self, children: list) -> _Func:
        name, inputs, results, *body, (ret, outputs) = children
        params = [item for item in body if isinstance(item, tuple)]
        nodes = [item for item in body if isinstance(item, _Node)]
        return _Func(name, inputs, results, params, nodes, ret, outputs)

    def _list(self, children: list) -> list:
        return children

    inputs = one_result = result_list = names = operands = types = attrs = _list

    def typed_name(self, children: list) -> tuple[Token, _Type]:
        return children[0], children[1]

    param = typed_name

    def node(self, children: list) -> _Node:
        names, op, operands, *attrs, types = children
        return _Node(names, op, operands, attrs[0] if attrs else [], types)

    def attr(self, children: list) -> tuple[Token, Any]:
        return children[0], children[1]

    def int_value(self, children: list) -> int:
        return _to_int(children[0])

    def float_value(self, children: list) -> float:
        return float(children[0])

    def string_value(self, children: list) -> str:
        try:
            return _unquote(children[0])
        except ValueError:
            raise _Problem(children[0], "string holds an escape past U+10FFFF") from None

    def word_value(self, children: list) -> Any:
        word = children[0]
        if word in _WORDS:
            return _WORDS[word]
        try:
            return DType(str(word))
        except ValueError:
            raise _Problem(word, f"unknown word '{word}' as attribute value; expected a number, true, false, "
                                 f"none, inf, nan, a dtype, a list, or a string in double quotes") from None

    def negative_word_value(self, children: list) -> float:
        word = children[0]
        if word != "inf":
            raise _Problem(word, f"'-{word}' is not a number; the only negative word is -inf")
        return float("-inf")

    def list_value(self, children: list) -> tuple:
        return tuple(children)

    def ret(self, children: list) -> tuple[Token, list[Token]]:
        return children[0], children[1:]

    def type(self, children: list) -> _Type:
        dtype_word, *dims, end = children
        try:
            dtype = DType.parse(str(dtype_word))
        except ValueError as e:
            raise _Problem(dtype_word, str(e)) from None
        sizes = [_to_int(d) for d in dims]
        for token, size in zip(dims, sizes):
            if size < 0:
                raise _Problem(token, f"negative dimension {size} in a type")
        return _Type(TensorType(tuple(sizes), dtype), dtype_word, end)


_PARSER = Lark(resources.files(__package__).joinpath("tgir.lark").read_text(encoding="utf-8"),
               parser="lalr", propagate_positions=True, maybe_placeholders=False, transformer=_ToSyntaxTree())

# What each terminal looks like, for syntax error messages ("expected a value name like %x or '}'").
_READABLE = {
    "PERCENT_NAME": "a value name like %x",
    "FUNC_NAME": "a function name like @main",
    "IDENT": "a name like add or f32",
    "INT": "an integer",
    "FLOAT": "a number",
    "STRING": 'a string like "tanh"',
    "$END": "the end of the text",
}
for _terminal in _PARSER.terminals:
    if _terminal.name not in _READABLE and _terminal.pattern.type == "str":
        _READABLE[_terminal.name] = f"'{_terminal.pattern.value}'"


# ----- parsing: syntax tree -> Graph -------------------------------------------------------------
def parse_graph(text: str, filename: str = "<string>") -> Graph:
    """Read one `func` in .tgir text; any mistake is a ParseError with file, line and column."""
    reader = _Reader(text, filename)
    try:
        func = _PARSER.parse(text)
    except UnexpectedInput as e:
        raise reader.syntax_error(e) from None
    except _Problem as problem:
        raise reader.error(problem.token, problem.message) from None
    return reader.build(func)


def parse_file(path: str | PathLike) -> Graph:
    """parse_graph on a UTF-8 file; errors name the file as given (a missing file is an OSError)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ParseError(f"{path}: not UTF-8 text (byte {e.start})") from None
    return parse_graph(text, filename=str(path))


class _Reader:
    """Turns the syntax tree into a Graph, tracking which %names are defined where."""

    def __init__(self, text: str, filename: str) -> None:
        self.filename = filename
        self.lines = text.split("\n")
        self.values: dict[str, tuple[Value, Token]] = {}  # name -> (value, where it is defined)

    # ----- locations and errors ---------------------------------------------------------------
    def location(self, line: int, column: int, end_column: int | None = None) -> SourceLocation:
        source = self.lines[line - 1].rstrip("\r") if 0 < line <= len(self.lines) else None
        return SourceLocation(self.filename, line, column, source, end_column)

    def token_location(self, token: Token, end: Token | None = None) -> SourceLocation:
        """Where `token` is, underlined up to the end of `end` (or of itself) when on the same line."""
        end = end or token
        end_column = end.end_column if end.end_line == token.line else None
        return self.location(token.line, token.column, end_column)

    def error(self, token: Token, message: str, end: Token | None = None) -> ParseError:
        return ParseError(message, self.token_location(token, end))

    def syntax_error(self, e: UnexpectedInput) -> ParseError:
        """A lark error in plain words: what was found, where, and what could have come instead."""
        if isinstance(e, UnexpectedCharacters):
            found, line, column = f"character {e.char!r}", e.line, e.column
            expected = e.allowed or set()
        elif isinstance(e, UnexpectedToken) and e.token.type != "$END":
            token = e.token
            shown = token if len(token) <= 20 else token[:17] + "..."
            found, line, column = f"'{shown}'", token.line, token.column
            expected = e.expected or set()
        else:  # the text stopped early: point just past the last token
            token = getattr(e, "token", None)
            line, column = (token.end_line, token.end_column) if token is not None and token.end_line else (1, 1)
            found, expected = "end of text", getattr(e, "expected", None) or set()
        wanted = sorted({_READABLE.get(name, name) for name in expected})
        message = f"unexpected {found}"
        if wanted:
            listed = wanted[0] if len(wanted) == 1 else f"{', '.join(wanted[:-1])} or {wanted[-1]}"
            message += f"; expected {listed}"
        return ParseError(message, self.location(line, column))

    # ----- names ------------------------------------------------------------------------------
    def new_name(self, token: Token) -> str:
        """The name a definition introduces, checked to be canonical and not yet taken."""
        name = token[1:]
        if sanitize_name(name) != name:
            raise self.error(token, f"bad value name {token}: a name is all digits, or starts with a letter "
                                    f"and does not end with '_' or '.'")
        if name in self.values:
            first = self.values[name][1]
            raise self.error(token, f"{token} is defined twice (first at line {first.line}, column {first.column})")
        return name

    def define(self, token: Token, value: Value) -> None:
        self.values[token[1:]] = (value, token)

    def lookup(self, token: Token) -> Value:
        if token[1:] not in self.values:
            raise self.error(token, f"undefined value {token}")
        return self.values[token[1:]][0]

    # ----- building ---------------------------------------------------------------------------
    def build(self, func: _Func) -> Graph:
        graph_name = func.name[1:]
        if sanitize_name(graph_name) != graph_name:
            raise self.error(func.name, f"bad function name {func.name}: a name is all digits, or starts with "
                                        f"a letter and does not end with '_' or '.'")
        graph = Graph(graph_name)
        for token, annotation in func.inputs:
            self.define(token, graph.add_input(self.new_name(token), annotation.type))
        for token, annotation in func.params:
            self.define(token, graph.add_param(self.new_name(token), annotation.type))
        for node in func.nodes:
            self.add_node(graph, node)
        graph.set_outputs(self.outputs(func))
        return graph

    def add_node(self, graph: Graph, node: _Node) -> None:
        names = []
        for token in node.names:
            name = self.new_name(token)
            if name in names:
                raise self.error(token, f"{token} is defined twice in one node")
            names.append(name)
        operands = [self.lookup(token) for token in node.operands]
        attrs: dict[str, Any] = {}
        for key, value in node.attrs:
            if key in attrs:
                raise self.error(key, f"attribute {key} is given twice")
            attrs[str(key)] = value
        loc = self.token_location(node.op)
        op = str(node.op)
        try:
            created = graph.create_node(op, operands, attrs, name=names[0] if len(names) == 1 else None, loc=loc)
        except ShapeError as e:
            raise ParseError(e.message, loc) from None
        except Exception as e:  # a bug in the op's own checks; still the user's text should get a clean error
            raise ParseError(f"{op}: cannot build this node ({type(e).__name__}: {e})", loc) from None
        if len(created.results) != len(names):
            raise ParseError(f"{op} has {len(created.results)} result(s) but {len(names)} name(s) are given", loc)
        annotated = tuple(t.type for t in node.types)
        if annotated != created.result_types:
            shown = ", ".join(map(str, annotated))
            inferred = ", ".join(map(str, created.result_types))
            raise self.error(node.types[0].start, f"type annotation {shown} does not match inferred {inferred} "
                                                  f"for {op}", end=node.types[-1].end)
        for token, name, value in zip(node.names, names, created.results):
            graph.rename_value(value, name)
            self.define(token, value)

    def outputs(self, func: _Func) -> list[Value]:
        values = [self.lookup(token) for token in func.outputs]
        if len(values) != len(func.results):
            raise self.error(func.ret, f"@{func.name[1:]} declares {len(func.results)} result(s) "
                                       f"but returns {len(values)}")
        for token, value, declared in zip(func.outputs, values, func.results):
            if value.type != declared.type:
                raise self.error(token, f"{token} has type {value.type} but the signature declares {declared.type}")
        return values
