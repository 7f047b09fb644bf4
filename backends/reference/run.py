"""Run a Graph with numpy, op by op, using each OpDef's reference semantics."""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from tilegraph.ir import DType, Graph, InputError, Value
from tilegraph.ir.types import to_dtype


def run(graph: Graph, inputs: Sequence[np.ndarray] | Mapping[str, np.ndarray] = (), *,
        params: Mapping[str, np.ndarray] | None = None, seed: int = 0,
        return_all: bool = False) -> list[np.ndarray] | dict[str, np.ndarray]:
    """Evaluate `graph` on `inputs` (in graph-input order, or by name).

    Parameters take their values from the graph, then `params` (by name), then random values drawn
    from `seed`. With `return_all`, returns every value by name (inputs, params, intermediates).
    """
    env = bind_inputs(graph, inputs)
    env.update(random_params(graph, seed, params))
    for node in graph.nodes:
        outs = node.opdef.reference([env[v] for v in node.inputs], node.attrs, node.result_types)
        env.update(zip(node.results, outs))
    if return_all:
        return {value.name: array for value, array in env.items()}
    return [env[v] for v in graph.outputs]


def bind_inputs(graph: Graph, inputs: Sequence[np.ndarray] | Mapping[str, np.ndarray]) -> dict[Value, np.ndarray]:
    """Check run-time inputs against the graph's signature; errors name the input at fault."""
    if isinstance(inputs, Mapping):
        unknown = sorted(set(inputs) - {v.name for v in graph.inputs})
        if unknown:
            raise InputError(f"unknown input(s) {', '.join(unknown)}; graph inputs: "
                             f"{', '.join(v.name for v in graph.inputs) or 'none'}")
        missing = [v.name for v in graph.inputs if v.name not in inputs]
        if missing:
            raise InputError(f"missing input(s): {', '.join(missing)}")
        arrays = [inputs[v.name] for v in graph.inputs]
    else:
        arrays = list(inputs)
        if len(arrays) != len(graph.inputs):
            raise InputError(f"@{graph.name} takes {len(graph.inputs)} input(s) "
                             f"({', '.join(v.name for v in graph.inputs)}), got {len(arrays)}")
    return {value: _check_array(value, array, "input") for value, array in zip(graph.inputs, arrays)}


def _check_array(value: Value, array, role: str) -> np.ndarray:
    array = np.asarray(array)
    if tuple(array.shape) != value.type.shape:
        raise InputError(f"{role} {value.name}: expected {value.type}, got shape {list(array.shape)}")
    wanted = value.type.dtype
    kind_ok = {"f": wanted.is_float, "i": wanted.is_int, "u": wanted.is_int, "b": wanted is DType.bool}
    if not kind_ok.get(array.dtype.kind, False):
        raise InputError(f"{role} {value.name}: expected {value.type}, got dtype {array.dtype}")
    return to_dtype(array, wanted)


def random_params(graph: Graph, seed: int = 0, given: Mapping[str, np.ndarray] | None = None) -> dict[Value, np.ndarray]:
    """Values for every parameter: carried data, then `given`, then seeded random values."""
    given = dict(given or {})
    unknown = sorted(set(given) - {v.name for v in graph.params})
    if unknown:
        raise InputError(f"unknown parameter(s) {', '.join(unknown)}")
    rng = np.random.default_rng(seed)
    values = {}
    for value in graph.params:
        if value.data is not None:
            values[value] = to_dtype(value.data, value.type.dtype)
        elif value.name in given:
            values[value] = _check_array(value, given[value.name], "parameter")
        else:
            values[value] = random_value(value, rng)
    return values


def random_inputs(graph: Graph, seed: int = 0) -> list[np.ndarray]:
    """Seeded random inputs that are valid for the graph (indices in range, variances positive)."""
    rng = np.random.default_rng(seed + 1_000_003)
    return [random_value(v, rng) for v in graph.inputs]


def random_value(value: Value, rng: np.random.Generator) -> np.ndarray:
    """A random tensor for `value`, shaped by how it is used: gather indices stay in range,
    batch-norm variances stay positive, attention masks keep a key in every row."""
    t = value.type
    if t.dtype is DType.bool:
        mask = rng.random(t.shape) < 0.5
        if t.rank and any(user.op == "attention" and user.inputs[3:] == (value,) for user in value.users):
            mask[..., 0] = True  # every query keeps at least one key, so no row is all -inf
        return mask
    if t.dtype.is_int:
        high = 8
        for user in value.users:
            if user.op == "gather" and user.inputs[1] is value:
                high = user.inputs[0].type.shape[user.attrs["axis"]]
        return rng.integers(0, max(high, 1), size=t.shape).astype(t.dtype.numpy)
    if any(user.op == "batch_norm" and user.inputs[2] is value for user in value.users):
        return to_dtype(rng.uniform(0.5, 1.5, size=t.shape), t.dtype)
    return to_dtype(rng.uniform(-1.0, 1.0, size=t.shape), t.dtype)
