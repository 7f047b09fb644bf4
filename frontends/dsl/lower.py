"""Lowering: a DSL parse tree -> a Graph, checking names, types and shapes expression by expression.

The entry function's arguments become graph inputs and its `param`s graph parameters. Calls to
other functions of the file are inlined: each call gets its own copy of the callee's params, named
`callee.w` (`callee_1.w` for the second call, and so on). Every node carries the SourceLocation
of the expression that made it, and the first error stops lowering.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from lark import Token, Tree

from tilegraph.ir.builder import GraphBuilder
from tilegraph.ir.errors import ParseError, ShapeError
from tilegraph.ir.graph import Graph, Value
from tilegraph.ir.ops import all_ops, get_op
from tilegraph.ir.types import DType, TensorType

from .diagnostics import Source, did_you_mean

KEYWORDS = frozenset({"def", "param", "let", "return", "true", "false", "inf", "nan"})

# Infix and prefix operators -> ops of the library.
BINARY_OPS = {"add": "add", "sub": "sub", "mul": "mul", "div": "div", "matmul": "matmul", "pow": "pow",
              "lt": "lt", "le": "le", "gt": "gt", "ge": "ge", "eq": "eq", "ne": "ne"}

_KIND_TEXT = {"int": "an integer", "float": "a number", "bool": "true or false", "ints": "a list of integers",
              "axes": "an integer or a list of integers", "shape": "a list of integers",
              "pair": "an integer or a pair of integers", "dtype": "a dtype", "str": "a string",
              "scalar": "a number"}

Literal = bool | int | float  # a numeric literal: it takes the dtype (and shape) its context needs


def _show(value: Literal) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass
class Function:
    """One `def` of the file, with its signature already type-checked."""

    name: str
    token: Token
    args: list[tuple[Token, TensorType]]
    results: list[TensorType]
    body: list[Tree]
    tree: Tree


@dataclass
class _Frame:
    """One function being inlined: its names, the prefix for its params/values, the call stack."""

    function: Function
    prefix: str
    stack: tuple[str, ...]
    scope: dict[str, tuple[Value | Literal, Token]] = field(default_factory=dict)


class Lowering:
    def __init__(self, source: Source) -> None:
        self.src = source
        self.functions: dict[str, Function] = {}
        self.used: set[str] = set()
        self.graph = Graph()
        self.builder = GraphBuilder(self.graph)
        self.instances: dict[str, int] = {}

    # ----- the file ----------------------------------------------------------------------------
    def collect(self, tree: Tree) -> list[Function]:
        """Read every `def` (signatures, duplicates, clashes with op names) in source order."""
        ops = all_ops()
        order = []
        for node in tree.children:
            name_tok, args_tree, results_tree, *body = node.children
            name = name_tok.value
            if name in self.functions:
                first = self.functions[name].token
                raise ParseError(f"duplicate function '{name}' (first defined at {first.line}:{first.column})",
                                 self.src.loc(name_tok))
            if name in ops:
                raise ParseError(f"function name '{name}' is taken by the library op {name}; choose another",
                                 self.src.loc(name_tok))
            arg_trees = args_tree.children if args_tree is not None else []
            args = [(arg.children[0], self.type(arg.children[1])) for arg in arg_trees]
            results = [self.type(t) for t in results_tree.children]
            function = Function(name, name_tok, args, results, body, node)
            self.functions[name] = function
            order.append(function)
        return order

    def type(self, tree: Tree) -> TensorType:
        dtype_tok, dims = tree.children
        try:
            dtype = DType.parse(dtype_tok.value)
        except ValueError:
            known = ", ".join(d.value for d in DType)
            hint = did_you_mean(dtype_tok.value, [d.value for d in DType])
            raise ParseError(f"unknown dtype '{dtype_tok.value}'{hint} (dtypes: {known})",
                             self.src.loc(dtype_tok)) from None
        shape = []
        for tok in dims.children if dims is not None else []:
            if not tok.value.isdigit():
                raise ParseError(f"dimension must be a non-negative integer, found {tok.value}", self.src.loc(tok))
            shape.append(int(tok.value))
        return TensorType(tuple(shape), dtype)

    def lower(self, function: Function) -> Graph:
        """A new Graph for `function`: its arguments are the inputs, its results the outputs."""
        self.graph = Graph(function.name)
        self.builder = GraphBuilder(self.graph)
        self.instances = {}
        inputs = [self.graph.add_input(tok.value, t) for tok, t in function.args]
        self.graph.set_outputs(self.inline(function, inputs, "", (function.name,)))
        return self.graph

    # ----- functions and statements ------------------------------------------------------------
    def inline(self, function: Function, args: list[Value], prefix: str, stack: tuple[str, ...],
               hints: tuple[str, ...] = ()) -> list[Value]:
        """Lower `function`'s body on `args`; `hints` name its results (the caller's binding names)."""
        self.used.add(function.name)
        frame = _Frame(function, prefix, stack)
        for (tok, _), value in zip(function.args, args):
            self.bind(frame, tok, value)
        returned: list[Value] | None = None
        for stmt in function.body:
            if returned is not None:
                raise ParseError(f"statement after return in '{function.name}'; return must come last",
                                 self.src.loc(stmt))
            if stmt.data == "param":
                tok, type_tree = stmt.children
                param_type = self.type(type_tree)
                self.check_new(frame, tok)
                self.bind(frame, tok, self.graph.add_param(prefix + tok.value, param_type))
            elif stmt.data == "assign":
                *targets, rhs = stmt.children
                for i, tok in enumerate(targets):
                    self.check_new(frame, tok)
                    if any(t.value == tok.value for t in targets[:i]):
                        raise ParseError(f"name '{tok.value}' appears twice on the left of =", self.src.loc(tok))
                names = tuple(prefix + tok.value for tok in targets)
                value = self.expr(rhs, frame, names[0] if len(names) == 1 else names)
                if len(targets) == 1:
                    self.bind(frame, targets[0], self.single(value, rhs))
                else:
                    count = len(value) if isinstance(value, tuple) else 1
                    if count != len(targets):
                        raise ParseError(f"{len(targets)} names on the left of =, but the right gives "
                                         f"{count} value{'s' * (count != 1)}", self.src.loc(rhs))
                    for tok, v in zip(targets, value):
                        self.bind(frame, tok, v)
            else:  # return_
                returned = self.returns(frame, stmt, hints)
        if returned is None:
            meta = function.tree.meta
            raise ParseError(f"function '{function.name}' ends without a return statement; "
                             f"expected `return ...` before '}}'",
                             self.src.at(meta.end_line, meta.end_column - 1, meta.end_column))
        return returned

    def returns(self, frame: _Frame, stmt: Tree, hints: tuple[str, ...]) -> list[Value]:
        function = frame.function
        declared = function.results
        if len(stmt.children) != len(declared):
            shown = ", ".join(t.compact() for t in declared)
            raise ShapeError(f"'{function.name}' returns {len(stmt.children)} value"
                             f"{'s' * (len(stmt.children) != 1)}, but its signature declares "
                             f"{len(declared)} ({shown})", self.src.loc(stmt))
        values = []
        for i, (tree, want) in enumerate(zip(stmt.children, declared)):
            hint = hints[i] if len(hints) == len(declared) else None
            value = self.single(self.expr(tree, frame, hint), tree)
            if not isinstance(value, Value):
                value = self.constant(value, want, tree)
            if value.type != want:
                which = f" {i + 1}" if len(declared) > 1 else ""
                raise ShapeError(f"return type mismatch: '{function.name}' declares result{which} as "
                                 f"{want.compact()}, found {value.type.compact()}", self.src.loc(tree))
            values.append(value)
        return values

    # ----- names -------------------------------------------------------------------------------
    def check_new(self, frame: _Frame, tok: Token) -> None:
        if tok.value in frame.scope:
            first = frame.scope[tok.value][1]
            raise ParseError(f"duplicate name '{tok.value}' (first defined at {first.line}:{first.column}); "
                             f"names are defined once per function", self.src.loc(tok))

    def bind(self, frame: _Frame, tok: Token, value: Value | Literal) -> None:
        self.check_new(frame, tok)
        frame.scope[tok.value] = (value, tok)

    def lookup(self, frame: _Frame, tok: Token) -> Value | Literal:
        name = tok.value
        if name in frame.scope:
            return frame.scope[name][0]
        if name in self.functions or name in all_ops():
            raise ParseError(f"'{name}' is a function, not a value; call it as {name}(...)", self.src.loc(tok))
        hint = did_you_mean(name, frame.scope) or did_you_mean(name, list(all_ops()) + list(self.functions))
        raise ParseError(f"unknown name '{name}'{hint}", self.src.loc(tok))

    # ----- expressions -------------------------------------------------------------------------
    def single(self, value, tree: Tree) -> Value | Literal:
        if isinstance(value, tuple):
            raise ShapeError(f"this call gives {len(value)} values; bind them with "
                             f"{', '.join('abcdefgh'[:min(len(value), 8)])} = ...", self.src.loc(tree))
        return value

    def expr(self, tree: Tree, frame: _Frame, hint: str | tuple[str, ...] | None = None):
        """A value, a literal, or (for a call with several results) a tuple of values.

        `hint` names the value the expression makes (a tuple of names for several results).
        """
        data = tree.data
        if data == "var":
            return self.lookup(frame, tree.children[0])
        if data in ("literal", "inf", "nan", "true", "false"):
            return self.literal(tree)
        if data == "neg":
            operand = self.single(self.expr(tree.children[0], frame), tree.children[0])
            if isinstance(operand, bool):
                raise ShapeError(f"cannot negate {_show(operand)}", self.src.loc(tree))
            if isinstance(operand, (int, float)):
                return -operand
            return self.build(tree, "neg", [operand], {}, hint)
        if data in BINARY_OPS:
            # walk the left spine of `a + b - c * d ...` in a loop: long chains do not recurse
            spine = [tree]
            while isinstance(spine[-1].children[0], Tree) and spine[-1].children[0].data in BINARY_OPS:
                spine.append(spine[-1].children[0])
            left_tree = spine[-1].children[0]
            left = self.single(self.expr(left_tree, frame), left_tree)
            for node in reversed(spine):
                right_tree = node.children[1]
                right = self.single(self.expr(right_tree, frame), right_tree)
                operands = self.scalars([left, right], [left_tree, right_tree])
                left = self.build(node, BINARY_OPS[node.data], operands, {}, hint if node is tree else None)
                left_tree = node
            return left
        if data == "call":
            return self.call(tree, frame, hint)
        raise AssertionError(f"unexpected parse tree {data}")  # pragma: no cover - grammar and lowering agree

    def literal(self, tree: Tree) -> Literal:
        data = tree.data
        if data == "literal":
            text = tree.children[0].value
            return float(text) if any(c in text for c in ".eE") else int(text)
        return {"inf": math.inf, "nan": math.nan, "true": True, "false": False}[data]

    def build(self, tree: Tree, op: str, operands: list, attrs: dict, hint):
        """One op through the GraphBuilder; its errors come back pointing at `tree`."""
        loc = self.src.loc(tree)
        self.builder.loc = loc
        try:
            return self.builder.op(op, *operands, name=hint if isinstance(hint, str) else None, **attrs)
        except ShapeError as e:
            raise ShapeError(e.message, loc) from None
        except (ValueError, TypeError, ArithmeticError, IndexError, KeyError) as e:
            raise ShapeError(f"{op}: {e}", loc) from None

    def scalars(self, operands: list, trees: list[Tree]) -> list:
        """Literal operands of an op -> scalar constants of the other operands' dtype.

        The same rule as GraphBuilder.op (the first non-bool tensor operand's dtype), done here so
        that a literal that does not fit (1.5 next to an i64) is reported at the literal.
        """
        values = [v for v in operands if isinstance(v, Value)]
        if not values or len(values) == len(operands):
            return operands
        dtype = next((v.dtype for v in values if v.dtype is not DType.bool), values[0].dtype)
        result = []
        for value, tree in zip(operands, trees):
            if not isinstance(value, Value):
                try:
                    value = self.build(tree, "constant", [], {"value": value, "dtype": dtype}, None)
                except ShapeError:
                    raise ShapeError(f"literal {_show(value)} is not a valid {dtype} scalar (the dtype of "
                                     f"the other operands)", self.src.loc(tree)) from None
            result.append(value)
        return result

    def constant(self, value: Literal, type: TensorType, tree: Tree) -> Value:
        """A literal where a tensor of `type` is expected: a constant of that type."""
        return self.build(tree, "constant", [], {"value": value, "dtype": type.dtype, "shape": type.shape}, None)

    def call(self, tree: Tree, frame: _Frame, hint):
        name_tok, callargs = tree.children
        name = name_tok.value
        positional: list[Tree] = []
        keywords: dict[str, tuple[Token, Tree, Tree]] = {}
        for arg in callargs.children if callargs is not None else []:
            if arg.data == "kwarg":
                key_tok, value_tree = arg.children
                if key_tok.value in keywords:
                    raise ParseError(f"attribute '{key_tok.value}' given twice", self.src.loc(key_tok))
                keywords[key_tok.value] = (key_tok, value_tree, arg)
            elif keywords:
                raise ParseError("operand after a keyword attribute; operands come first", self.src.loc(arg))
            else:
                positional.append(arg)
        if name in self.functions:
            return self.call_function(tree, frame, self.functions[name], positional, keywords, hint)
        try:
            opdef = get_op(name)
        except ShapeError:
            if name in frame.scope:
                raise ParseError(f"'{name}' is a value, not a function", self.src.loc(name_tok)) from None
            hint_text = did_you_mean(name, list(all_ops()) + list(self.functions))
            raise ParseError(f"unknown function '{name}'{hint_text}", self.src.loc(name_tok)) from None
        operands = self.scalars([self.single(self.expr(arg, frame), arg) for arg in positional], positional)
        low, high = opdef.arity
        if not low <= len(operands) <= high:
            expected = str(low) if low == high else f"{low} to {high}"
            raise ShapeError(f"{name} takes {expected} operand{'s' * (high != 1)}, got {len(operands)}",
                             self.src.loc(tree))
        attrs = {}
        for key, (key_tok, value_tree, arg) in keywords.items():
            spec = opdef.attr_index.get(key)
            if spec is None:
                known = ", ".join(opdef.attr_index) or "none"
                raise ShapeError(f"{name}: unknown attribute '{key}'{did_you_mean(key, opdef.attr_index)} "
                                 f"(attributes: {known})", self.src.loc(key_tok))
            value = self.attr(value_tree, name, key, spec.kind)
            try:
                spec.check(name, value)
            except ShapeError as e:
                raise ShapeError(e.message, self.src.loc(arg)) from None
            attrs[key] = value
        try:
            return self.build(tree, name, operands, attrs, hint)
        except ShapeError as e:
            blamed = self.blame_attr(opdef, operands, attrs)
            if blamed is None:
                raise
            raise ShapeError(e.message, self.src.loc(keywords[blamed][2])) from None

    @staticmethod
    def blame_attr(opdef, operands: list, attrs: dict) -> str | None:
        """The one attribute whose removal makes the op check (to point the error at it), or None."""
        if not attrs or not all(isinstance(v, Value) for v in operands):
            return None
        types = [v.type for v in operands]
        for key in attrs:
            trial = {k: v for k, v in attrs.items() if k != key}
            try:
                opdef.infer(types, opdef.normalize_attrs(types, trial))
            except Exception:
                continue
            return key
        return None

    def call_function(self, tree: Tree, frame: _Frame, function: Function, positional: list[Tree],
                      keywords: dict, hint=None) -> Value | tuple[Value, ...]:
        name = function.name
        if keywords:
            key_tok = next(iter(keywords.values()))[0]
            raise ParseError(f"'{name}' is a function of this file and takes no keyword arguments",
                             self.src.loc(key_tok))
        if name in frame.stack:
            cycle = " -> ".join(frame.stack[frame.stack.index(name):] + (name,))
            raise ParseError(f"recursive call {cycle}; functions are inlined, so they cannot recurse",
                             self.src.loc(tree.children[0]))
        operands = [self.single(self.expr(arg, frame), arg) for arg in positional]
        if len(operands) != len(function.args):
            want = len(function.args)
            raise ShapeError(f"'{name}' takes {want} argument{'s' * (want != 1)}, got {len(operands)}",
                             self.src.loc(tree))
        values = []
        for (arg_tok, want), arg_tree, value in zip(function.args, positional, operands):
            if not isinstance(value, Value):
                value = self.constant(value, want, arg_tree)
            elif value.type != want:
                raise ShapeError(f"argument '{arg_tok.value}' of '{name}' must be {want.compact()}, "
                                 f"found {value.type.compact()}", self.src.loc(arg_tree))
            values.append(value)
        key = frame.prefix + name
        count = self.instances.get(key, 0)
        self.instances[key] = count + 1
        prefix = key + (f"_{count}" if count else "") + "."
        hints = (hint,) if isinstance(hint, str) else tuple(hint or ())
        results = self.inline(function, values, prefix, frame.stack + (name,), hints)
        return results[0] if len(results) == 1 else tuple(results)

    # ----- attributes --------------------------------------------------------------------------
    def attr(self, tree: Tree, op: str, key: str, kind: str):
        data = tree.data
        if data in ("literal", "inf", "nan", "true", "false"):
            return self.literal(tree)
        if data == "neg":
            value = self.attr(tree.children[0], op, key, kind)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ShapeError(f"{op}: attribute {key}: only numbers can be negated", self.src.loc(tree))
            return -value
        if data == "string":
            try:
                return json.loads(tree.children[0].value)
            except ValueError:
                raise ParseError(f"bad escape in string {tree.children[0].value}", self.src.loc(tree)) from None
        if data == "list":
            return tuple(self.attr(child, op, key, kind) for child in tree.children if child is not None)
        # a bare name: a dtype (cast(x, dtype=f16)) or a string choice (gelu(x, approximate=tanh))
        tok = tree.children[0]
        if kind == "dtype":
            try:
                return DType.parse(tok.value)
            except ValueError:
                hint = did_you_mean(tok.value, [d.value for d in DType])
                known = ", ".join(d.value for d in DType)
                raise ShapeError(f"{op}: unknown dtype '{tok.value}'{hint} (dtypes: {known})",
                                 self.src.loc(tok)) from None
        if kind == "str":
            return tok.value
        raise ShapeError(f"{op}: attribute {key} must be {_KIND_TEXT.get(kind, kind)}, found name '{tok.value}'",
                         self.src.loc(tok))
