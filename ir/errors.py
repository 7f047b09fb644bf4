"""Errors a user can cause, each able to say where: file, line, column, and the source line with a caret."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SourceLocation:
    file: str
    line: int  # 1-based
    column: int  # 1-based
    source_line: str | None = None
    end_column: int | None = None  # exclusive; underline from column to end_column

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"

    def snippet(self) -> str:
        """The source line and a caret (or underline) under the offending span."""
        if self.source_line is None:
            return ""
        text = self.source_line.rstrip("\n").expandtabs(1)
        width = max(1, (self.end_column or self.column + 1) - self.column)
        width = min(width, max(1, len(text) - self.column + 1))
        return f"  {text}\n  {' ' * (self.column - 1)}{'^' * width}"


def location_in(source: str, file: str, line: int, column: int, end_column: int | None = None) -> SourceLocation:
    """A SourceLocation carrying the text of `line` from `source`."""
    lines = source.split("\n")  # only \n ends a line, as for the parsers' line counts
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    return SourceLocation(file, line, column, text, end_column)


class TilegraphError(Exception):
    """Base of every error caused by user input; the CLI prints these without a traceback."""

    exit_code = 2

    def __init__(self, message: str, loc: SourceLocation | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.loc = loc

    def __str__(self) -> str:
        if self.loc is None:
            return self.message
        text = f"{self.loc}: error: {self.message}"
        snippet = self.loc.snippet()
        return f"{text}\n{snippet}" if snippet else text


class ShapeError(TilegraphError, ValueError):
    """An op applied to operands or attributes it cannot take; the message names op and shapes."""


class ParseError(TilegraphError):
    """Malformed source text (the .tgir format or the DSL)."""


class VerifyError(TilegraphError):
    """A graph that breaks an IR invariant; the message names the node."""


class InputError(TilegraphError):
    """Run-time inputs that do not match the graph (missing, extra, wrong shape or dtype)."""
