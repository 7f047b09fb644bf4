"""Golden DSL error messages (tests/frontends/dsl_errors.txt): each mistake gives file:line:col, a
one-line reason, the source line and a caret under the expression, as a TilegraphError."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tilegraph.frontends.dsl import parse
from tilegraph.ir.errors import ParseError, ShapeError, SourceLocation, TilegraphError

GOLDEN = Path(__file__).with_name("dsl_errors.txt")
CASE = re.compile(r"^### (\w+) \((\w+)\)\n(.*?)\n--- error\n(.*?)(?=\n\n### |\n*\Z)", re.S | re.M)


def load_cases():
    text = GOLDEN.read_text(encoding="utf-8")
    return [(name, cls, source + "\n", expected.rstrip("\n")) for name, cls, source, expected in CASE.findall(text)]


CASES = load_cases()


def raised(source: str) -> TilegraphError:
    with pytest.raises(TilegraphError) as info:
        parse(source, filename="model.tg")
    return info.value


def test_golden_file_has_many_distinct_mistakes():
    names = [c[0] for c in CASES]
    assert len(names) >= 15 and len(set(names)) == len(names)
    assert GOLDEN.read_text(encoding="utf-8").count("\n### ") == len(CASES)  # every case was read
    for required in ("syntax", "unknown_op", "op_arity", "matmul_inner_dims", "bad_attribute_value",
                     "duplicate_name", "missing_return", "wrong_return_type", "unknown_variable_suggestion",
                     "bad_dtype", "recursive_call", "call_arity"):
        assert any(n.startswith(required) for n in names), required


@pytest.mark.parametrize("name, cls, source, expected", CASES, ids=[c[0] for c in CASES])
def test_error_message(name, cls, source, expected):
    error = raised(source)
    assert type(error).__name__ == cls
    assert isinstance(error, (ParseError, ShapeError))
    assert isinstance(error.loc, SourceLocation) and error.loc.file == "model.tg"
    if os.environ.get("TILEGRAPH_UPDATE_GOLDEN"):
        _update(name, str(error))
        return
    assert str(error) == expected
    # the shape of every message: file:line:col: error: <one line>, the source line, the caret
    first, line, caret = str(error).split("\n")
    assert re.fullmatch(rf"model\.tg:{error.loc.line}:{error.loc.column}: error: \S.*", first)
    assert "\n" not in error.message
    assert line.strip() == source.splitlines()[error.loc.line - 1].strip()
    assert caret.strip() and set(caret.strip()) == {"^"}
    assert caret.index("^") == error.loc.column + 1  # two spaces of indent, 1-based column


def _update(name: str, text: str) -> None:
    golden = GOLDEN.read_text(encoding="utf-8")
    for case, cls, source, old in CASE.findall(golden):
        if case == name:
            golden = golden.replace(f"### {case} ({cls})\n{source}\n--- error\n{old}",
                                    f"### {case} ({cls})\n{source}\n--- error\n{text}")
    GOLDEN.write_text(golden, encoding="utf-8")


def test_shape_errors_from_the_builder_point_at_the_expression():
    source = "def mlp(x: f32[128, 256]) -> f32[128, 256] {\n    param w1: f32[128, 1024]\n" \
             "    h = gelu(x @ w1 + 1.0)\n    return h\n}\n"
    error = raised(source)
    assert isinstance(error, ShapeError)
    assert error.message == "matmul: inner dims differ: f32[128,256] @ f32[128,1024]"
    assert (error.loc.line, error.loc.column, error.loc.end_column) == (3, 14, 20)


def test_only_the_first_error_is_reported():
    source = "def f(x: f32[2]) -> f32[2] {\n    a = bogus1(x)\n    b = bogus2(x)\n    return a\n}\n"
    error = raised(source)
    assert "bogus1" in error.message and "bogus2" not in str(error)


def test_multi_line_expression_is_underlined_to_the_end_of_its_first_line():
    source = "def f(x: f32[2, 3]) -> f32[2, 3] {\n    return x @\n        x\n}\n"
    error = raised(source)
    assert (error.loc.line, error.loc.column) == (2, 12)
    assert str(error).splitlines()[-1] == "             ^^^"


def test_unknown_name_suggests_ops_when_no_variable_is_close():
    error = raised("def f(x: f32[2]) -> f32[2] {\n    return softmx\n}\n")
    assert error.message == "unknown name 'softmx'; did you mean softmax?"


def test_unknown_entry_is_a_parse_error_naming_the_file():
    with pytest.raises(ParseError, match=r"^m\.tg: no function named 'mian'; did you mean main\? \(functions: main\)"):
        parse("def main(x: f32[2]) -> f32[2] { return x }", filename="m.tg", entry="mian")


def test_deep_nesting_is_a_clean_error():
    source = "def f(x: f32[2]) -> f32[2] { return " + "(" * 5000 + "x" + ")" * 5000 + " }"
    try:
        parse(source)
    except TilegraphError:
        pass
