"""A tiny indented-text writer for generated source."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class Code:
    """Lines of source with two-space indentation; `block` opens a `{ ... }` scope."""

    def __init__(self, depth: int = 0) -> None:
        self.lines: list[str] = []
        self.depth = depth

    def line(self, text: str = "") -> None:
        self.lines.append(("  " * self.depth + text) if text else "")

    def raw(self, text: str) -> None:
        """A line at column 0 (preprocessor directives)."""
        self.lines.append(text)

    @contextmanager
    def block(self, head: str = "", tail: str = "") -> Iterator[None]:
        self.line(f"{head} {{" if head else "{")
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1
            self.line("}" + tail)

    def extend(self, other: Code) -> None:
        self.lines.extend(other.lines)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"
