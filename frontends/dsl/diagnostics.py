"""Error reporting for the DSL: source locations, syntax-error messages, and 'did you mean' hints.

Every error the DSL raises is a `TilegraphError` carrying a `SourceLocation`, so `str(err)` reads

    model.tg:4:9: error: matmul: inner dims differ: f32[128,256] @ f32[128,1024]
      h = x @ w1
          ^^^^^^
"""
from __future__ import annotations

import difflib
from collections.abc import Iterable

from lark import Token, Tree, UnexpectedCharacters, UnexpectedInput, UnexpectedToken

from tilegraph.ir.errors import ParseError, SourceLocation


class Source:
    """One source text and its file name; turns lark positions into SourceLocations."""

    def __init__(self, text: str, filename: str) -> None:
        self.text = text
        self.filename = filename
        self.lines = text.splitlines()

    def at(self, line: int, column: int, end_column: int | None = None) -> SourceLocation:
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        return SourceLocation(self.filename, line, column, text, end_column)

    def loc(self, item: Tree | Token) -> SourceLocation:
        """The span of a parse-tree node or token (a multi-line span is underlined to its line's end)."""
        if isinstance(item, Token):
            line, column, end_line, end_column = item.line, item.column, item.end_line, item.end_column
        else:
            meta = item.meta
            if meta.empty:
                return self.at(1, 1)
            line, column, end_line, end_column = meta.line, meta.column, meta.end_line, meta.end_column
        if end_line != line:
            end_column = len(self.lines[line - 1]) + 1 if 0 < line <= len(self.lines) else None
        return self.at(line, column, end_column)

    def end(self) -> SourceLocation:
        """Just past the last non-blank character (where 'unexpected end of file' points)."""
        for number in range(len(self.lines), 0, -1):
            stripped = self.lines[number - 1].split("#", 1)[0].rstrip()
            if stripped:
                return self.at(number, len(stripped) + 1)
        return self.at(1, 1)


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """'; did you mean X?' for the closest candidate, or ''."""
    close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


# ----- syntax errors ----------------------------------------------------------------------------
_EXPRESSION_START = {"NAME", "NUMBER", "LPAR", "MINUS", "TRUE", "FALSE", "INF", "NAN"}
_STATEMENT_START = {"PARAM", "LET", "RETURN"}
_OPERATORS = {"+", "-", "*", "/", "@", "**", "<", "<=", ">", ">=", "==", "!="}
_NAMED = {"NAME": "a name", "NUMBER": "a number", "STRING": "a string", "$END": "end of file"}


def syntax_error(error: UnexpectedInput, source: Source, terminals: dict[str, str]) -> ParseError:
    """A one-line ParseError ('unexpected X; expected Y') from a lark error.

    `terminals` maps lark terminal names to their literal text (for '}' rather than RBRACE).
    """
    if isinstance(error, UnexpectedCharacters):
        char = source.text[error.pos_in_stream] if error.pos_in_stream < len(source.text) else "?"
        return ParseError(f"syntax error: unexpected character {char!r}",
                          source.at(error.line, error.column, error.column + 1))
    if isinstance(error, UnexpectedToken):
        token = error.token
        if token.type == "$END":
            loc, found = source.end(), "end of file"
        else:
            loc, found = source.loc(token), _describe_token(token, terminals)
        try:
            expected = set(error.interactive_parser.accepts()) if error.interactive_parser else set(error.expected)
        except Exception:  # accepts() replays the parser; fall back to lark's own (wider) set
            expected = set(error.expected)
        wanted = _describe_expected(expected, terminals)
        return ParseError(f"syntax error: unexpected {found}" + (f"; expected {wanted}" if wanted else ""), loc)
    line = getattr(error, "line", 1)
    column = getattr(error, "column", 1)
    if not isinstance(line, int) or line < 1:
        return ParseError("syntax error: unexpected end of file", source.end())
    return ParseError("syntax error", source.at(line, column))


def _describe_token(token: Token, terminals: dict[str, str]) -> str:
    if token.type == "NAME":
        return f"name {token.value!r}"
    if token.type == "NUMBER":
        return f"number {token.value}"
    if token.type == "STRING":
        return f"string {token.value}"
    return f"'{terminals.get(token.type, token.value)}'"


def _describe_expected(expected: set[str], terminals: dict[str, str]) -> str:
    items: list[str] = []
    expected = set(expected)
    if {"NAME", "NUMBER", "LPAR"} <= expected:
        items.append("an expression")
        expected -= _EXPRESSION_START
    if _STATEMENT_START <= expected:
        items.append("a statement")
        expected -= _STATEMENT_START | {"NAME"}
    rest = sorted(expected, key=lambda name: terminals.get(name, name))
    # after a complete operand every operator (and '(' of a call) could follow; name the closers instead
    closers = [name for name in rest if terminals.get(name) not in _OPERATORS | {"("}]
    if items or closers:
        rest = closers
    items += [_NAMED.get(name, f"'{terminals.get(name, name)}'") for name in rest]
    if len(items) > 6:
        items = items[:6] + ["..."]
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " or " + items[-1]
