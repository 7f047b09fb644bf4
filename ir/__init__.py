"""tilegraph.ir: types, values, nodes, graphs, the op library, text format and verifier."""
from .builder import GraphBuilder, as_type
from .errors import InputError, ParseError, ShapeError, SourceLocation, TilegraphError, VerifyError
from .graph import Graph, Node, Value, ValueKind
from .ops import AttrSpec, OpDef, all_ops, get_op, register
from .structured import AffineExpr, AffineMap, IterationSpace, run_loops
from .types import DType, TensorType, parse_type

__all__ = [
    "DType", "TensorType", "parse_type", "Graph", "Node", "Value", "ValueKind", "GraphBuilder", "as_type",
    "OpDef", "AttrSpec", "all_ops", "get_op", "register", "AffineExpr", "AffineMap", "IterationSpace", "run_loops",
    "TilegraphError", "ShapeError", "ParseError", "VerifyError", "InputError", "SourceLocation",
]
