"""Turn a torch.fx GraphModule (from symbolic_trace, torch.export or TorchDynamo) into an IR Graph.

The converter walks the fx graph once, running every node on the example inputs (that is the shape
propagation: each node's real result gives its shape and dtype) and converting it with the
converter registered for its target. Dynamo's graphs carry each node's result as a fake tensor of
static shape: there, nodes that read an input or a weight take that instead of running (the model
does not run once more during conversion). Along the way:

- Python-level values (`x.size(1)`, `n // 2`, shapes) stay Python values: shapes are static.
- A node that depends on no input and no parameter (`torch.arange(n)`, a causal mask built from
  it) is folded: its result on the example inputs becomes a constant parameter.
- An in-place op (`out += identity`, `relu_`, `nn.ReLU(inplace=True)`) rebinds the mutated tensor,
  so later readers see the new value. Under torch.compile (`write_back`) a graph input updated in
  place is an extra output, copied back into the caller's tensor after each call; module state
  updated in place, or an input written through a view of it, is reported as unsupported.
- Every node that cannot be converted is recorded; the error lists all of them at the end, each
  with its fx node name and the user's source line.
"""
from __future__ import annotations

import inspect
import linecache
import operator
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx
import torch.utils._pytree as pytree
from torch._subclasses.fake_tensor import FakeTensor

from tilegraph.ir import Graph, GraphBuilder, ShapeError, SourceLocation, TilegraphError, Value
from tilegraph.ir.verifier import verify

from . import ops_autocast, ops_einsum, ops_grad, ops_index, ops_nn, ops_tensor  # noqa: F401  (registration)
from .context import ConvertContext, Missing, Unsupported, tensor_type, to_numpy, torch_dtype
from .errors import ConversionError, Offender, UnsupportedOpsError
from .registry import METHODS, describe_target, function_converter, module_converter, register_inplace_aten_variants

register_inplace_aten_variants()

_RANDOM_WORDS = ("rand", "dropout", "bernoulli", "normal", "multinomial", "uniform", "poisson")
_INPLACE_OPERATORS = {operator.iadd, operator.isub, operator.imul, operator.itruediv, operator.iand, operator.ior,
                      operator.ixor, operator.imatmul, operator.ipow, operator.setitem}


@dataclass
class Conversion:
    """A converted graph plus how to call it with the fx graph's own arguments (for torch.compile)."""

    graph: Graph
    input_positions: list[int]  # graph.inputs[i] is fx placeholder input_positions[i]
    state_positions: list[int]  # placeholders that became parameters (Dynamo passes weights as inputs)
    scalar_positions: list[int]  # 0-d tensors read only by .item(): the graph is specialised to their value
    output_spec: Any  # pytree spec of the fx output
    output_leaves: list[Any]  # per leaf: an int (index into graph.outputs) or ("const", value)
    output_dtypes: list[torch.dtype] = field(default_factory=list)  # torch dtype per graph output
    # IR parameter name -> the torch tensor it was converted from, for backends that can read the
    # module's own tensors at run time instead of a copy (the Triton path under torch.compile)
    param_tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    # (placeholder position, graph output index): an input the graph updates in place, and the output holding
    # its new value, which the caller copies back into the input after each call (`write_back`)
    written_back: list[tuple[int, int]] = field(default_factory=list)


class _Lazy:
    """A constant tensor (folded node, buffer) that becomes a parameter only if something uses it."""

    def __init__(self, tensor: torch.Tensor, name: str) -> None:
        self.tensor = tensor
        self.name = name


@dataclass(frozen=True)
class _Placeholder:
    kind: str  # "param" (trainable: kept as a parameter) or "const" (buffer/constant: may be folded)
    tensor: torch.Tensor
    name: str


class FxConverter:
    """Converts one fx GraphModule; `placeholders` overrides how named placeholders are bound
    (torch.export passes parameters and buffers as placeholders). `share_weights`: parameters read
    the torch tensors' memory instead of a copy (torch.compile, which notices in-place updates)."""

    def __init__(self, gm: fx.GraphModule, name: str = "main",
                 placeholders: dict[str, _Placeholder] | None = None, model: str | None = None,
                 share_weights: bool = False, write_back: bool = False) -> None:
        self.gm = gm
        self.share_weights = share_weights
        # inputs updated in place come back as extra outputs (`Conversion.written_back`); module state updated in
        # place, or anything written through a view of an input, cannot, and is reported as unsupported
        self.write_back = write_back
        self.written: dict[fx.Node, list[fx.Node]] = {}  # placeholder -> the in-place ops on it or on views of it
        self.propagated = False  # whether Dynamo's example values stand in for running live nodes
        self.model = model or name
        self.b = GraphBuilder(name)
        self.graph = self.b.graph
        self.cx = ConvertContext(self.b, self)
        self.placeholders = placeholders or {}
        self.examples: dict[fx.Node, Any] = {}
        self.env: dict[fx.Node, Any] = {}
        self.live: set[fx.Node] = set()  # nodes that depend on an input or a parameter
        self.failed: set[fx.Node] = set()
        self.offenders: list[Offender] = []
        self._params: dict[int, tuple[torch.Tensor, Value]] = {}
        self.input_positions: list[int] = []
        self.state_positions: list[int] = []
        self.scalar_positions: list[int] = []
        self.autocast_regions: list[Any] = []  # autocast contexts entered by the walk, not left yet

    # ----- the walk -------------------------------------------------------------------------
    def convert(self, args: Sequence[Any]) -> Conversion:
        position = 0
        result = None
        self.propagated = _propagated_statically(self.gm, args)
        try:
            for node in self.gm.graph.nodes:
                try:
                    if node.op == "placeholder":
                        self._placeholder(node, position, args)
                        position += 1
                    elif node.op == "get_attr":
                        self._get_attr(node)
                    elif node.op in ("call_function", "call_method", "call_module"):
                        self._call(node)
                    elif node.op == "output":
                        result = self._output(node)
                except Unsupported as e:  # e.g. a parameter of an unsupported dtype
                    module = self.gm.get_submodule(node.target) if node.op == "call_module" else None
                    self._offend(node, module, str(e))
        finally:
            ops_autocast.exit_regions(self.autocast_regions)
        if position < len(args):
            raise ConversionError(f"{self.model} takes {position} input(s) but {len(args)} example inputs were given")
        if self.offenders:
            raise UnsupportedOpsError(self.offenders, self.model)
        if result is None:
            raise ConversionError(f"{self.model}: the traced graph has no output")
        self.graph.dead_code_elimination()
        for value in list(self.graph.params):
            if not value.users and value not in self.graph.outputs:
                self.graph.remove_param(value)
        verify(self.graph)
        return result

    # ----- placeholders, attributes, parameters ------------------------------------------------
    def _placeholder(self, node: fx.Node, position: int, args: Sequence[Any]) -> None:
        special = self.placeholders.get(node.name)
        if special is not None:
            self.examples[node] = special.tensor
            if special.kind == "param":
                self.env[node] = self.param_for(special.tensor, special.name)
                self.live.add(node)
            else:
                self.env[node] = _Lazy(special.tensor, special.name)
            return
        if position < len(args):
            value = args[position]
        elif node.args:  # a default value of forward()
            value = node.args[0]
        else:
            raise ConversionError(f"{self.model} takes an input {node.target!r} (#{position + 1}) but only "
                                  f"{len(args)} example input(s) were given")
        if not isinstance(value, torch.Tensor):
            self.examples[node] = self.env[node] = value
            return
        state_name = _dynamo_state_name(node)
        if state_name is not None or isinstance(value, torch.nn.Parameter):
            self.examples[node] = value
            self.env[node] = self.param_for(value, state_name or node.name)
            self.live.add(node)
            self.state_positions.append(position)
            return
        if value.dim() == 0 and node.users and all(_is_item(u) for u in node.users):
            # a Python number passed as a 0-d tensor (Dynamo does this for float module attributes): the
            # graph is specialised to its value, like to the shapes
            self.examples[node] = value
            self.env[node] = _Lazy(value, node.name)
            self.scalar_positions.append(position)
            return
        try:
            type_ = tensor_type(value)
        except Unsupported as e:
            raise ConversionError(f"{self.model}: input {node.name}: {e}") from None
        self.examples[node] = value.detach().clone()  # the model may update its inputs in place
        self.env[node] = self.b.input(_input_name(node), type_)
        self.live.add(node)
        self.input_positions.append(position)

    def _get_attr(self, node: fx.Node) -> None:
        value = _fetch_attr(self.gm, node.target)
        self.examples[node] = value
        if isinstance(value, torch.nn.Parameter):
            self.env[node] = self.param_for(value, node.target)
            self.live.add(node)
        elif isinstance(value, torch.Tensor):
            self.env[node] = _Lazy(value, node.target)
        else:
            self.env[node] = value

    def param_for(self, tensor: torch.Tensor, name: str) -> Value:
        """One IR parameter per torch tensor, carrying a copy of its data."""
        known = self._params.get(id(tensor))
        if known is not None and known[0] is tensor:
            return known[1]
        try:
            type_ = tensor_type(tensor)
        except Unsupported as e:
            raise Unsupported(f"parameter {name}: {e}") from None
        value = self.graph.add_param(name, type_, to_numpy(tensor, copy=not self.share_weights))
        self._params[id(tensor)] = (tensor, value)
        return value

    def _lift(self, item: Any) -> Any:
        """An env entry as a converter sees it: lazy constants become parameters."""
        if isinstance(item, _Lazy):
            return self.param_for(item.tensor, item.name)
        if isinstance(item, (tuple, list, dict)) and any(isinstance(i, _Lazy) for i in pytree.tree_leaves(item)):
            return pytree.tree_map(self._lift, item)
        return item

    # ----- calls ----------------------------------------------------------------------------
    def _call(self, node: fx.Node) -> None:
        module = self.gm.get_submodule(node.target) if node.op == "call_module" else None
        inputs = node.all_input_nodes
        after_failure = any(n in self.failed for n in inputs)  # still run, to report ops with no converter
        result = self._example(node, module)
        self._track_autocast(node, result)
        if _is_setitem(node):  # `x[i] = v` returns None: what it makes is the updated x
            result = self.examples[node.args[0]]
        self.examples[node] = result
        live_inputs = [n for n in inputs if n in self.live]

        if not _has_tensor(result):
            if not live_inputs or self._reads_metadata_only(node):
                self.env[node] = result
            elif after_failure:
                self.failed.add(node)
            else:
                self._offend(node, module, "turns tensor data into a Python value (data-dependent control flow "
                                           "or .item()/.tolist()), which a static graph cannot express")
            return
        if (not live_inputs and self._foldable(node, module)) or self._depends_on_shape_only(node, live_inputs):
            generated = self._generate(node, module, result)
            self.env[node] = generated if generated is not None else _fold(result, node.name)
            self._rebind_inplace(node, module, self.env[node])
            return

        self.live.add(node)
        converter = self._converter(node, module)
        if converter is None:
            self._offend(node, module, "no converter for this op")
            return
        if after_failure:  # an input could not be converted; that input is reported already
            self.failed.add(node)
            return
        lifted_args = fx.node.map_arg(node.args, lambda n: self._lift(self.env[n]))
        lifted_kwargs = fx.node.map_arg(node.kwargs, lambda n: self._lift(self.env[n]))
        missing = next((leaf for leaf in pytree.tree_leaves((lifted_args, lifted_kwargs)) if isinstance(leaf, Missing)),
                       None)
        if missing is not None and converter is not ops_index.getitem:  # picking another result is fine
            self._offend(node, module, missing.reason)
            return
        call_args = (module, *lifted_args) if module is not None else tuple(lifted_args)
        try:
            inspect.signature(converter).bind(self.cx, *call_args, **lifted_kwargs)
        except TypeError as e:
            self._offend(node, module, f"arguments not understood ({e})")
            return
        self.cx.node, self.cx.expected = node, result
        self.cx.module_path = node.target if module is not None else ""
        self.b.loc = self._location(node)
        before = len(self.graph)
        try:
            autocast = self._autocast_dtype(node, module, result)
            if autocast is not None:  # inside a torch.autocast region: the inputs in autocast's dtype
                call_args, lifted_kwargs = ops_autocast.cast_inputs(self.cx, (call_args, lifted_kwargs), autocast)
            produced = converter(self.cx, *call_args, **lifted_kwargs)
            self._check(node, module, produced, result)
        except Unsupported as e:
            self._offend(node, module, str(e))
            return
        except ShapeError as e:
            self._offend(node, module, f"not expressible in the IR: {e.message}")
            return
        finally:
            self.b.loc = None
        self._name_results(node, produced, before)
        self.env[node] = produced
        self._rebind_inplace(node, module, produced)

    def _generate(self, node: fx.Node, module: torch.nn.Module | None, result: Any) -> Value | None:
        """A tensor built from shapes alone (arange, full, zeros_like) as an IR op rather than a folded
        parameter; None where it has no such converter or the converter declines (then it is folded)."""
        converter = self._converter(node, module)
        if converter not in ops_tensor.SOURCES or not isinstance(result, torch.Tensor):
            return None
        if any(n not in self.env for n in node.all_input_nodes):  # one not converted (reported): fold
            return None
        args = fx.node.map_arg(node.args, lambda n: self._lift(self.env[n]))
        kwargs = fx.node.map_arg(node.kwargs, lambda n: self._lift(self.env[n]))
        self.cx.node, self.cx.expected, self.cx.module_path = node, result, ""
        before = len(self.graph)
        try:
            produced = converter(self.cx, *args, **kwargs)
            self._check(node, module, produced, result)
        except (Unsupported, ShapeError, TypeError, ConversionError):
            return None
        self._name_results(node, produced, before)
        return produced

    def _example(self, node: fx.Node, module: torch.nn.Module | None) -> Any:
        """The node's result on the example inputs. Where Dynamo propagated static example values, a node
        reading an input or a parameter takes its (fake) value instead of running: converters read only
        shapes and dtypes, so conversion does not run the model once more. What gets folded (nodes on
        constants, and those that read only a live input's shape, on zeros of that shape) still runs."""
        live_inputs = [n for n in node.all_input_nodes if n in self.live]
        if not self.propagated or not live_inputs:
            return self._execute(node, module)
        if self._depends_on_shape_only(node, live_inputs):
            return self._execute(node, module, stand_ins=True)
        return node.meta["example_value"]

    def _execute(self, node: fx.Node, module: torch.nn.Module | None, stand_ins: bool = False) -> Any:
        def example(n: fx.Node) -> Any:
            value = self.examples[n]
            if stand_ins and isinstance(value, FakeTensor):
                return torch.zeros(value.shape, dtype=value.dtype, device=value.device)
            return value

        args, kwargs = fx.node.map_arg((node.args, node.kwargs), example)
        try:
            with torch.no_grad():
                if node.op == "call_function":
                    return node.target(*args, **kwargs)
                if node.op == "call_method":
                    receiver, *rest = args
                    return getattr(receiver, node.target)(*rest, **kwargs)
                return module(*args, **kwargs)
        except Exception as e:
            what = describe_target(node.op, node.target, module)
            raise ConversionError(f"{self.model}: running the traced graph on the example inputs failed at node "
                                  f"{node.name} ({what}): {type(e).__name__}: {e}") from e

    def _track_autocast(self, node: fx.Node, result: Any) -> None:
        """Running `_enter_autocast` entered the region (the ops after it run under autocast); remember
        it until `_exit_autocast`, so that an error part-way leaves no autocast on."""
        if node.op != "call_function":
            return
        if node.target is ops_autocast.ENTER:
            self.autocast_regions.append(result)
        elif node.target is ops_autocast.EXIT and self.autocast_regions:
            self.autocast_regions.pop()

    def _autocast_dtype(self, node: fx.Node, module: torch.nn.Module | None, result: Any) -> torch.dtype | None:
        """The dtype torch.autocast cast this op's floating-point inputs to (None outside a region, for
        ops autocast leaves alone, for in-place ops and for whole modules)."""
        if module is not None or _is_inplace(node, module):
            return None
        args = fx.node.map_arg((node.args, node.kwargs), lambda n: self.examples[n])
        return ops_autocast.cast_dtype(lambda: self._execute(node, module), args, result)

    def _converter(self, node: fx.Node, module: torch.nn.Module | None):
        if node.op == "call_function":
            return function_converter(node.target)
        if node.op == "call_method":
            return METHODS.get(node.target)
        return module_converter(module)

    def _reads_metadata_only(self, node: fx.Node) -> bool:
        if node.op == "call_method":
            return node.target in ops_tensor.METADATA_METHODS
        if node.op != "call_function":
            return False
        target = node.target
        if target is operator.getitem and not isinstance(self.examples.get(node.args[0]), torch.Tensor):
            return True  # picking a non-tensor out of a tuple of results
        if target is getattr and len(node.args) > 1:
            return node.args[1] in ops_tensor.METADATA_ATTRIBUTES
        if isinstance(target, torch._ops.OpOverload):
            target = target.overloadpacket
        try:
            return target in ops_tensor.METADATA_FUNCTIONS
        except TypeError:
            return False

    def _depends_on_shape_only(self, node: fx.Node, live_inputs: list[fx.Node]) -> bool:
        """zeros_like(x), x.new_ones(...): the result depends on x's shape, not its data."""
        first = node.args[0] if node.args else None
        if not live_inputs or live_inputs != [first]:
            return False
        if node.op == "call_method":
            return node.target in ops_tensor.SHAPE_ONLY_METHODS
        target = node.target.overloadpacket if isinstance(node.target, torch._ops.OpOverload) else node.target
        try:
            return node.op == "call_function" and target in ops_tensor.SHAPE_ONLY_FUNCTIONS
        except TypeError:
            return False

    def _foldable(self, node: fx.Node, module: torch.nn.Module | None) -> bool:
        """A node with no live input is computed once, here, unless it is random or has weights."""
        if module is not None and any(True for _ in module.parameters()):
            return False
        name = str(node.target if node.op != "call_module" else type(module).__name__).lower()
        return not any(word in name for word in _RANDOM_WORDS)

    def _rebind_inplace(self, node: fx.Node, module, produced) -> None:
        """After `x.add_(y)` (or `x += y`), later readers of x read the result. Which placeholder it writes (x
        itself, or x through views) is noted for `write_back`."""
        first = node.args[0] if node.args else None
        if isinstance(first, fx.Node) and _is_inplace(node, module):
            root = _view_root(first)
            if root is not None:
                self.written.setdefault(root, []).append(node)
            if isinstance(produced, (Value, _Lazy)):
                self.env[first] = produced
                if node in self.live:
                    self.live.add(first)

    def _check(self, node: fx.Node, module, produced: Any, expected: Any) -> None:
        """The converted result must have the shapes and dtypes torch produced."""
        if isinstance(expected, torch.Tensor):
            if isinstance(produced, Missing):
                return
            if not isinstance(produced, Value):
                raise ConversionError(f"internal error: converting {node.name} gave {type(produced).__name__}, "
                                      "not a tensor value")
            want = tensor_type(expected)
            if produced.type != want:
                what = describe_target(node.op, node.target, module)
                raise ConversionError(f"internal error: {node.name} ({what}) converted to {produced.type}, but "
                                      f"torch computes {want}")
        elif isinstance(expected, (tuple, list)) and _has_tensor(expected):
            if not isinstance(produced, (tuple, list)) or len(produced) != len(expected):
                raise ConversionError(f"internal error: converting {node.name} gave {produced!r}, torch gives "
                                      f"{len(expected)} results")
            for p, e in zip(produced, expected):
                self._check(node, module, p, e)

    def _name_results(self, node: fx.Node, produced: Any, before: int) -> None:
        """Give the IR values a node created the fx node's name (`linear_1`, `split.0`)."""
        created = {v for n in self.graph.nodes[before:] for v in n.results}
        leaves = [produced] if isinstance(produced, Value) else [p for p in produced if isinstance(p, Value)] \
            if isinstance(produced, (tuple, list)) else []
        for i, value in enumerate(leaves):
            if value in created:
                self.graph.rename_value(value, node.name if len(leaves) == 1 else f"{node.name}.{i}")

    # ----- output ---------------------------------------------------------------------------
    def _output(self, node: fx.Node) -> Conversion | None:
        if any(n in self.failed for n in node.all_input_nodes):
            return None
        lifted = fx.node.map_arg(node.args[0], lambda n: self._lift(self.env[n]))
        leaves, spec = pytree.tree_flatten(lifted)
        outputs, template, dtypes = [], [], []
        for leaf in leaves:
            if isinstance(leaf, Missing):
                self._offend(node, None, f"the model returns {leaf.reason}")
                return None
            if isinstance(leaf, Value):
                template.append(len(outputs))
                outputs.append(leaf)
            else:
                template.append(("const", leaf))
        if not outputs:
            raise ConversionError(f"{self.model} returns no tensors")
        written_back = self._written_back(outputs) if self.write_back else []
        if written_back is None:
            return None
        self.graph.set_outputs(outputs)
        dtypes = [_torch_dtype_of(v) for v in outputs]
        tensors = {value.name: tensor for tensor, value in self._params.values()}
        return Conversion(self.graph, self.input_positions, self.state_positions, self.scalar_positions, spec,
                          template, dtypes, tensors, written_back)

    def _written_back(self, outputs: list[Value]) -> list[tuple[int, int]] | None:
        """For each input the graph updates in place, its new value appended to `outputs`: (position, index).
        None, with the offenders reported, where module state or a view of an input is updated in place."""
        placeholders = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        written_back = []
        for root, writers in self.written.items():
            position = placeholders.index(root)
            through_view = next((w for w in writers if w.args[0] is not root), None)
            new = self._lift(self.env[root])
            if position in self.state_positions or root.name in self.placeholders:
                self._offend(writers[0], None, f"updates the module's state {root.name} in place, which a compiled "
                                               "graph does not write back (batch-norm statistics: call model.eval())")
            elif through_view is not None:
                self._offend(through_view, None, f"updates input {root.name} in place through a view or alias of it")
            elif position not in self.input_positions or not isinstance(new, Value):
                self._offend(writers[0], None,
                             f"updates {root.name} in place, which a compiled graph cannot write back")
            else:
                written_back.append((position, len(outputs)))
                outputs.append(new)
        return None if self.offenders else written_back

    # ----- errors ---------------------------------------------------------------------------
    def _offend(self, node: fx.Node, module, reason: str) -> None:
        self.failed.add(node)
        self.offenders.append(Offender(node.name, describe_target(node.op, node.target, module), reason,
                                       self._location(node)))

    def _location(self, node: fx.Node) -> SourceLocation | None:
        return source_location(node.stack_trace or node.meta.get("stack_trace"))


# ----- helpers ------------------------------------------------------------------------------------
_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in [^\n]*(?:\n(?P<code>    [^\n]*))?')
_TORCH_DIR = os.path.dirname(torch.__file__)
_OWN_DIR = os.path.dirname(os.path.abspath(__file__))


def source_location(stack_trace: str | None) -> SourceLocation | None:
    """The innermost frame of a node's stack trace that is user code (not torch, not this frontend)."""
    if not stack_trace:
        return None
    frames = [m for m in _FRAME.finditer(stack_trace)
              if not os.path.abspath(m["file"]).startswith((_TORCH_DIR, _OWN_DIR))]
    if not frames:
        return None
    frame = frames[-1]
    file, line = frame["file"], int(frame["line"])
    text = frame["code"] or linecache.getline(file, line) or None
    column = 1
    if text:
        column = len(text) - len(text.lstrip()) + 1
    return SourceLocation(file, line, column, text.rstrip("\n") if text else None)


def _propagated_statically(gm: fx.GraphModule, args: Sequence[Any]) -> bool:
    """Whether every call node of a Dynamo graph carries an example value with static shapes, for
    placeholders of the arguments' own shapes and dtypes, outside autocast (whose dtype rules re-run ops)."""
    for node in gm.graph.nodes:
        if node.op in ("call_function", "call_method", "call_module"):
            if node.target in (ops_autocast.ENTER, ops_autocast.EXIT) or "example_value" not in node.meta:
                return False
            if not all(_static(leaf) for leaf in pytree.tree_leaves(node.meta["example_value"])):
                return False
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(args):
        return False
    for node, arg in zip(placeholders, args):
        example = node.meta.get("example_value")
        if isinstance(arg, torch.Tensor):
            if not isinstance(example, FakeTensor) or tuple(example.shape) != tuple(arg.shape) \
                    or example.dtype != arg.dtype or not _static(example):
                return False
    return True


def _static(leaf: Any) -> bool:
    """A fake tensor of static shape, or a plain Python value (no symbolic sizes or values)."""
    if isinstance(leaf, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return False
    if isinstance(leaf, torch.Tensor):
        return isinstance(leaf, FakeTensor) and all(isinstance(d, int) for d in leaf.shape)
    return True


def _has_tensor(value: Any) -> bool:
    return any(isinstance(leaf, torch.Tensor) for leaf in pytree.tree_leaves(value))


def _fold(value: Any, name: str) -> Any:
    if isinstance(value, torch.Tensor):
        return _Lazy(value.detach().clone(), name)
    if isinstance(value, (tuple, list)):
        return tuple(_fold(v, f"{name}.{i}") for i, v in enumerate(value))
    return value


def _is_item(node: fx.Node) -> bool:
    if node.op == "call_method":
        return node.target == "item"
    return node.op == "call_function" and str(node.target).startswith(("aten.item", "aten._local_scalar_dense"))


# ops whose result may share its input's memory (views, and conversions that return their input when there is
# nothing to convert): an in-place op on it writes the input too
_VIEWS = {"view", "view_as", "reshape", "transpose", "permute", "t", "select", "narrow", "unsqueeze", "squeeze",
          "expand", "expand_as", "flatten", "unflatten", "as_strided", "diagonal", "unbind", "split", "chunk",
          "movedim", "moveaxis", "swapaxes", "swapdims", "getitem", "__getitem__", "detach", "contiguous", "to", "type",
          "type_as", "float", "double", "half", "bfloat16", "cpu", "cuda"}


def _view_root(node: fx.Node) -> fx.Node | None:
    """The placeholder `node` is, or may be a view of (through `_VIEWS` ops on the first argument); None if none."""
    while node.op != "placeholder":
        name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
        if node.op == "call_module" or name not in _VIEWS or not node.args or not isinstance(node.args[0], fx.Node):
            return None
        node = node.args[0]
    return node


def _is_setitem(node: fx.Node) -> bool:
    return (node.op == "call_function" and node.target is operator.setitem) or \
        (node.op == "call_method" and node.target == "__setitem__")


def _is_inplace(node: fx.Node, module) -> bool:
    if _is_setitem(node):
        return True
    if node.op == "call_module":
        return getattr(module, "inplace", False) is True
    if node.kwargs.get("inplace") is True:
        return True
    if node.op == "call_method":
        name = node.target
    elif node.target in _INPLACE_OPERATORS:
        return True
    elif isinstance(node.target, torch._ops.OpOverload):
        name = node.target.overloadpacket.__name__
    else:
        name = getattr(node.target, "__name__", "")
    return name.endswith("_") and not name.startswith("_")


def _fetch_attr(gm: fx.GraphModule, target: str) -> Any:
    owner: Any = gm
    for part in target.split("."):
        owner = getattr(owner, part)
    return owner


def _input_name(node: fx.Node) -> str:
    name = str(node.target)
    match = re.fullmatch(r"L_(.+)_", name)  # Dynamo's L_x_ for the argument x
    return match.group(1) if match else name


def _dynamo_state_name(node: fx.Node) -> str | None:
    """`fc1.weight` for a Dynamo placeholder holding a module's parameter or buffer, else None."""
    source = getattr(node.meta.get("grapharg"), "source", None)
    if source is None:
        return None
    text = source.name if isinstance(source.name, str) else source.name()
    if "._parameters[" not in text and "._buffers[" not in text:
        return None
    parts = re.findall(r"\['([^']*)'\]|\.(\w+)", text)
    names = [a or b for a, b in parts][1:]  # drop the root argument (L['self'], L['fn'])
    names = [n for n in names if n not in ("_modules", "_parameters", "_buffers")]
    return ".".join(names) or None


def _torch_dtype_of(value: Value) -> torch.dtype:
    return torch_dtype(value.dtype)


# ----- entry points -------------------------------------------------------------------------------
def convert_graph_module(gm: fx.GraphModule, example_inputs: Sequence[Any], *, name: str | None = None,
                         placeholders: dict[str, _Placeholder] | None = None,
                         share_weights: bool = False, write_back: bool = False) -> Conversion:
    """Convert `gm` bound to `example_inputs` (`share_weights`, `write_back`: see FxConverter)."""
    name = name or type(gm).__name__
    converter = FxConverter(gm, name, placeholders, model=name, share_weights=share_weights, write_back=write_back)
    return converter.convert(list(example_inputs))


def from_graph_module(gm: fx.GraphModule, example_inputs: Sequence[Any] | torch.Tensor, *,
                      name: str | None = None) -> Graph:
    """Convert an fx GraphModule (placeholders bound to `example_inputs` in order)."""
    return convert_graph_module(gm, _as_inputs(example_inputs), name=name).graph


def from_exported_program(program, example_inputs: Sequence[Any] | torch.Tensor | None = None, *,
                          name: str | None = None) -> Graph:
    """Convert a `torch.export.ExportedProgram` (its ATen graph; weights become parameters)."""
    return convert_exported_program(program, example_inputs, name=name).graph


def convert_exported_program(program, example_inputs=None, *, name: str | None = None) -> Conversion:
    from torch.export.graph_signature import InputKind, OutputKind

    signature = program.graph_signature
    placeholders: dict[str, _Placeholder] = {}
    for spec in signature.input_specs:
        if spec.kind == InputKind.USER_INPUT:
            continue
        if spec.kind not in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            raise ConversionError(f"exported program input {spec.arg.name} of kind {spec.kind.name} is not supported")
        tensor = program.state_dict[spec.target] if spec.target in program.state_dict \
            else program.constants[spec.target]
        kind = "param" if spec.kind == InputKind.PARAMETER else "const"
        placeholders[spec.arg.name] = _Placeholder(kind, tensor, spec.target)
    mutations = [s.target for s in signature.output_specs if s.kind != OutputKind.USER_OUTPUT]
    if mutations:
        raise ConversionError(f"the exported model updates state ({', '.join(map(str, mutations))}); "
                              "call model.eval() before converting")
    if example_inputs is None:
        args, kwargs = program.example_inputs
        example_inputs = pytree.tree_leaves((args, kwargs))
    users = [t for t in pytree.tree_leaves(tuple(_as_inputs(example_inputs)))]
    user_iter = iter(users)
    args = []
    for node in program.graph_module.graph.nodes:
        if node.op != "placeholder":
            continue
        args.append(None if node.name in placeholders else next(user_iter, None))
    name = name or "exported"
    converter = FxConverter(program.graph_module, name, placeholders, model=name)
    return converter.convert(args)


def _as_inputs(example_inputs: Any) -> list[Any]:
    if isinstance(example_inputs, torch.Tensor):
        return [example_inputs]
    if isinstance(example_inputs, dict):
        raise TilegraphError("example inputs must be a tensor or a sequence of them, not a dict")
    return list(example_inputs)
