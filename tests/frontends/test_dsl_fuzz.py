"""Fuzzing the DSL: mutated examples (tokens and characters deleted, duplicated, swapped, replaced)
and random text give either a graph that verifies or a located TilegraphError, never another
exception."""
from __future__ import annotations

import re
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tilegraph.frontends.dsl import parse
from tilegraph.ir.errors import TilegraphError
from tilegraph.ir.verifier import verify

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.tg"))
SOURCES = {p.stem: p.read_text(encoding="utf-8") for p in EXAMPLES}
TOKEN = re.compile(r"#[^\n]*|[A-Za-z_][A-Za-z0-9_.]*|\d+\.?\d*(?:[eE][+-]?\d+)?|\*\*|[<>=!]=|->|\S")
ALPHABET = "abcdefxyzw_0123456789.,:;()[]{}<>=+-*/@#!\"' \n\tfi"
MANY = settings(max_examples=max(settings.default.max_examples * 5, 50))


def check(source: str, filename: str = "fuzz.tg") -> None:
    """The property: a graph that verifies, or a TilegraphError with a location."""
    try:
        graph = parse(source, filename=filename)
    except TilegraphError as error:
        assert error.loc is not None and error.loc.file == filename, str(error)
        text = str(error)
        assert text.startswith(f"{filename}:{error.loc.line}:{error.loc.column}: error: ")
        return
    verify(graph)


@st.composite
def mutated(draw):
    name = draw(st.sampled_from(sorted(SOURCES)))
    text = SOURCES[name]
    for _ in range(draw(st.integers(1, 4))):
        spans = [m.span() for m in TOKEN.finditer(text)]
        kind = draw(st.sampled_from(["del_tok", "dup_tok", "swap_tok", "copy_tok",
                                     "del_char", "dup_char", "swap_char", "ins_char"]))
        if kind.endswith("tok") and spans:
            i, j = (draw(st.integers(0, len(spans) - 1)) for _ in range(2))
            (a, b), (c, d) = spans[i], spans[j]
            if kind == "del_tok":
                text = text[:a] + text[b:]
            elif kind == "dup_tok":
                text = text[:b] + " " + text[a:b] + text[b:]
            elif kind == "copy_tok":  # replace token i by token j
                text = text[:a] + text[c:d] + text[b:]
            elif i != j:  # swap_tok
                (a, b), (c, d) = sorted([(a, b), (c, d)])
                text = text[:a] + text[c:d] + text[b:c] + text[a:b] + text[d:]
        elif text:
            i = draw(st.integers(0, len(text) - 1))
            if kind == "del_char":
                text = text[:i] + text[i + 1:]
            elif kind == "dup_char":
                text = text[:i] + text[i] + text[i:]
            elif kind == "swap_char" and i + 1 < len(text):
                text = text[:i] + text[i + 1] + text[i] + text[i + 2:]
            elif kind == "ins_char":
                text = text[:i] + draw(st.sampled_from(ALPHABET)) + text[i:]
    return text


@MANY
@given(mutated())
def test_mutated_examples_give_a_graph_or_a_clean_error(source):
    check(source)


@MANY
@given(st.text(alphabet=ALPHABET, max_size=200))
def test_random_text_gives_a_clean_error(source):
    check(source)


@settings(max_examples=max(settings.default.max_examples, 20))
@given(st.text(max_size=80))
def test_random_unicode_inside_a_function_gives_a_clean_error(body):
    check("def f(x: f32[2, 3]) -> f32[2, 3] {\n    " + body + "\n    return x\n}\n")


def test_unmutated_examples_pass_the_property():
    assert len(SOURCES) >= 4
    for name, source in SOURCES.items():
        check(source, f"{name}.tg")
