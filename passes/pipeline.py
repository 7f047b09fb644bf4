"""Pipelines: an ordered list of (pass, options) steps, built in Python or parsed from a string.

    Pipeline.parse("canonicalize,fuse,tile{target=accel-small},memplan{time_limit=10}")
    Pipeline.of("canonicalize", "fuse", step("tile", target="accel-small"), ("memplan", {"time_limit": 10}))

Both give equal objects. Option values in strings are converted to the options dataclass's field
types: int, float, bool (true/false), str, `X | None` (`none`), Literal choices and Enums; a value
may be quoted ("..." or '...', backslash escapes) to hold `,{}=` or spaces, or to mean the string
"none". `str(pipeline)` prints the canonical string, showing options that differ from defaults.
Mistakes raise PipelineError with the column of the bad token.
"""
from __future__ import annotations

import dataclasses
import enum
import re
import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from tilegraph.ir.errors import SourceLocation, TilegraphError

from .registry import PassSpec, get_pass

__all__ = ["Pipeline", "PipelineStep", "PipelineError", "step", "parse_pipeline"]


class PipelineError(TilegraphError):
    """A malformed pipeline: unknown pass or option, a value of the wrong type, bad syntax."""


class PipelineStep(NamedTuple):
    """One pass with its options (an instance of the pass's options dataclass)."""

    spec: PassSpec
    options: Any

    @property
    def name(self) -> str:
        return self.spec.name

    def __str__(self) -> str:
        shown = [f"{f.name}={_format(getattr(self.options, f.name), _field_types(self.spec)[f.name])}"
                 for f in dataclasses.fields(self.options) if f.init and not _is_default(self.options, f)]
        return f"{self.spec.name}{{{','.join(shown)}}}" if shown else self.spec.name


@dataclass(frozen=True)
class Pipeline:
    """An ordered sequence of steps; `str()` gives the pipeline string that parses back to it."""

    steps: tuple[PipelineStep, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "steps", tuple(self.steps))

    @staticmethod
    def parse(text: str) -> Pipeline:
        return parse_pipeline(text)

    @staticmethod
    def of(*items: str | PipelineStep | tuple[str, Mapping[str, Any]]) -> Pipeline:
        """Steps from pass names, `step(...)` results, or `(name, {option: value})` pairs."""
        steps = []
        for item in items:
            if isinstance(item, PipelineStep):
                steps.append(item)
            elif isinstance(item, str):
                steps.append(step(item))
            elif isinstance(item, tuple) and len(item) == 2:
                steps.append(step(item[0], **dict(item[1])))
            else:
                raise PipelineError(f"cannot make a pipeline step from {item!r}")
        return Pipeline(tuple(steps))

    def then(self, name: str, **options: Any) -> Pipeline:
        """This pipeline with one more step at the end."""
        return Pipeline(self.steps + (step(name, **options),))

    def __iter__(self) -> Iterator[PipelineStep]:
        return iter(self.steps)

    def __len__(self) -> int:
        return len(self.steps)

    def __str__(self) -> str:
        return ",".join(str(s) for s in self.steps)


def step(name: str | PassSpec, options: Any = None, /, **values: Any) -> PipelineStep:
    """A step for pass `name`, with an options instance or option values (checked against field types)."""
    try:
        spec = name if isinstance(name, PassSpec) else get_pass(name)
    except ValueError as e:
        raise PipelineError(str(e)) from None
    if options is not None:
        if values:
            raise PipelineError(f"pass {spec.name}: give an options object or option values, not both")
        if not isinstance(options, spec.options):
            raise PipelineError(f"pass {spec.name}: options must be a {spec.options.__name__}, "
                                f"got {type(options).__name__}")
        return PipelineStep(spec, options)
    fields = _field_types(spec)
    converted = {}
    for key, value in values.items():
        if key not in fields:
            raise PipelineError(_unknown_option(spec, key))
        try:
            converted[key] = _check_python(value, fields[key])
        except ValueError as e:
            raise PipelineError(f"pass {spec.name}: option {key}: {e}") from None
    return PipelineStep(spec, _make_options(spec, converted))


# ----- types of options ------------------------------------------------------------------------
def _field_types(spec: PassSpec) -> dict[str, Any]:
    """Option name -> resolved type (annotations may be strings under `from __future__ import annotations`)."""
    try:
        hints = typing.get_type_hints(spec.options)
    except Exception:  # an annotation that cannot be resolved: fall back to the raw one
        hints = {}
    return {f.name: hints.get(f.name, f.type) for f in dataclasses.fields(spec.options) if f.init}


def _is_default(options: Any, f: dataclasses.Field) -> bool:
    if f.default is not dataclasses.MISSING:
        return getattr(options, f.name) == f.default
    if f.default_factory is not dataclasses.MISSING:
        return getattr(options, f.name) == f.default_factory()
    return False


def _split_optional(tp: Any) -> tuple[Any, bool]:
    """`X | None` -> (X, True); anything else -> (tp, False)."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(tp)) == 2:
            return args[0], True
    return tp, False


def _type_name(tp: Any) -> str:
    inner, optional = _split_optional(tp)
    if typing.get_origin(inner) is typing.Literal:
        name = "one of " + ", ".join(map(str, typing.get_args(inner)))
    elif isinstance(inner, type) and issubclass(inner, enum.Enum):
        name = "one of " + ", ".join(str(m.value) for m in inner)
    else:
        name = getattr(inner, "__name__", str(inner))
    return f"{name} or none" if optional else name


def _check_python(value: Any, tp: Any) -> Any:
    """A Python value for a field of type `tp`: checked, and ints widened to float for float fields."""
    inner, optional = _split_optional(tp)
    if value is None:
        if optional:
            return None
        raise ValueError(f"expected {_type_name(tp)}, got None")
    if inner is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if inner in (int, float) and isinstance(value, bool):
        raise ValueError(f"expected {_type_name(tp)}, got {value!r}")
    if typing.get_origin(inner) is typing.Literal:
        if value not in typing.get_args(inner):
            raise ValueError(f"expected {_type_name(tp)}, got {value!r}")
        return value
    if isinstance(inner, type) and issubclass(inner, enum.Enum) and not isinstance(value, inner):
        return _from_text(str(value), tp)
    if isinstance(inner, type) and inner in (int, float, bool, str) and not isinstance(value, inner):
        raise ValueError(f"expected {_type_name(tp)}, got {value!r}")
    return value


def parse_flag(value: bool | int | str) -> bool:
    """A yes/no option as given in Python (a bool, 0 or 1) or as text (true/false, 1/0, yes/no, on/off)."""
    if isinstance(value, str):
        lowered = value.lower()
        if lowered in ("true", "1", "yes", "on"):
            return True
        if lowered in ("false", "0", "no", "off"):
            return False
    elif value in (True, False):
        return bool(value)
    raise ValueError(f"expected true or false, got {value!r}")


def _from_text(text: str, tp: Any, quoted: bool = False) -> Any:
    """Convert the text of a pipeline-string value to a field of type `tp`; ValueError says what was expected."""
    inner, optional = _split_optional(tp)
    if optional and not quoted and text.lower() == "none":
        return None
    if inner is str:
        return text
    if typing.get_origin(inner) is typing.Literal:
        for choice in typing.get_args(inner):
            if str(choice) == text:
                return choice
        raise ValueError(f"expected {_type_name(tp)}, got {text!r}")
    if isinstance(inner, type) and issubclass(inner, enum.Enum):
        for member in inner:
            if text in (str(member.value), member.name):
                return member
        raise ValueError(f"expected {_type_name(tp)}, got {text!r}")
    if inner is bool:
        return parse_flag(text)
    if inner is int:
        if not re.fullmatch(r"[+-]?[0-9][0-9_]*", text):
            raise ValueError(f"expected an integer, got {text!r}")
        return int(text)
    if inner is float:
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"expected a number, got {text!r}") from None
    raise ValueError(f"an option of type {_type_name(tp)} cannot be set from a pipeline string")


_PLAIN = re.compile(r"[A-Za-z0-9_.+\-/:@%]+")


def _format(value: Any, tp: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, float):
        return repr(value)
    text = str(value)
    if isinstance(value, str) and (not _PLAIN.fullmatch(text) or text.lower() == "none"):
        escaped = text.replace("\\", "\\\\").replace('"', '\\"')
        return f'"{escaped}"'
    return text


def _make_options(spec: PassSpec, values: dict[str, Any]) -> Any:
    try:
        return spec.make_options(values)
    except TilegraphError:
        raise
    except (TypeError, ValueError) as e:  # a missing required option, or the dataclass's own check
        raise PipelineError(f"pass {spec.name}: {e}") from None


def _unknown_option(spec: PassSpec, key: str) -> str:
    import difflib

    fields = list(_field_types(spec))
    close = difflib.get_close_matches(key, fields, n=1)
    hint = f"; did you mean {close[0]}?" if close else ""
    known = ", ".join(fields) or "none"
    return f"pass {spec.name} has no option {key!r}{hint} (options: {known})"


# ----- parsing ---------------------------------------------------------------------------------
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")
_BARE_VALUE = re.compile(r"[^\s,{}=\"']+")


class _Scanner:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def error(self, message: str, start: int | None = None, end: int | None = None) -> PipelineError:
        start = self.pos if start is None else start
        loc = SourceLocation("<pipeline>", 1, start + 1, self.text, (end + 1) if end is not None else None)
        return PipelineError(message, loc)

    def skip_space(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def peek(self) -> str:
        self.skip_space()
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def accept(self, char: str) -> bool:
        if self.peek() == char:
            self.pos += 1
            return True
        return False

    def found(self) -> str:
        char = self.peek()
        return f"{char!r}" if char else "the end of the pipeline"

    def word(self, what: str) -> tuple[str, int]:
        self.skip_space()
        match = _WORD.match(self.text, self.pos)
        if match is None:
            raise self.error(f"expected {what}, found {self.found()}")
        self.pos = match.end()
        return match.group(), match.start()

    def value(self) -> tuple[str, bool, int]:
        """(text, quoted, start column) of an option value."""
        self.skip_space()
        start = self.pos
        if self.peek() in ("'", '"'):
            quote, chars = self.text[self.pos], []
            self.pos += 1
            while self.pos < len(self.text) and self.text[self.pos] != quote:
                if self.text[self.pos] == "\\" and self.pos + 1 < len(self.text):
                    self.pos += 1
                chars.append(self.text[self.pos])
                self.pos += 1
            if self.pos >= len(self.text):
                raise self.error(f"unterminated string (missing {quote})", start)
            self.pos += 1
            return "".join(chars), True, start
        match = _BARE_VALUE.match(self.text, self.pos)
        if match is None:
            raise self.error(f"expected an option value, found {self.found()}")
        self.pos = match.end()
        return match.group(), False, start


def parse_pipeline(text: str) -> Pipeline:
    """`name{key=value,...},name,...` -> Pipeline; errors give the column of the bad token."""
    scan = _Scanner(text)
    steps: list[PipelineStep] = []
    if not scan.peek():
        return Pipeline(())
    while True:
        steps.append(_parse_step(scan))
        if not scan.peek():
            return Pipeline(tuple(steps))
        if not scan.accept(","):
            raise scan.error(f"expected ',' between passes, found {scan.found()}")


def _parse_step(scan: _Scanner) -> PipelineStep:
    name, start = scan.word("a pass name")
    try:
        spec = get_pass(name)
    except ValueError as e:
        raise scan.error(str(e), start, start + len(name)) from None
    fields = _field_types(spec)
    values: dict[str, Any] = {}
    if scan.accept("{"):
        if not scan.accept("}"):
            while True:
                key, key_start = scan.word("an option name")
                field = key.replace("-", "_")
                if field not in fields:
                    raise scan.error(_unknown_option(spec, key), key_start, key_start + len(key))
                if field in values:
                    raise scan.error(f"pass {name}: option {key} is given twice", key_start, key_start + len(key))
                if not scan.accept("="):
                    raise scan.error(f"expected '=' after option {key}, found {scan.found()}")
                text, quoted, value_start = scan.value()
                try:
                    values[field] = _from_text(text, fields[field], quoted)
                except ValueError as e:
                    raise scan.error(f"pass {name}: option {key}: {e}", value_start, scan.pos) from None
                if scan.accept("}"):
                    break
                if not scan.accept(","):
                    raise scan.error(f"expected ',' or '}}' after option {key}, found {scan.found()}")
    try:
        options = _make_options(spec, values)
    except PipelineError as e:
        raise scan.error(e.message, start, start + len(name)) from None
    return PipelineStep(spec, options)
