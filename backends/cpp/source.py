"""A whole Program as one translation unit: prelude, one function per kernel, the entry point.

The entry point `tg_run(ins, outs, arena, threads)` takes the graph inputs, the parameters (in
`graph.params` order) and the folded values (`fold.py`) in `ins`, the kernel-produced graph
outputs in `outs`, and one block of working memory: the arena that holds every tensor passed
between kernels (`tg_arena_bytes()`: with an executed memory plan, the plan's scratchpad and the
far pool of spilled and streamed tensors behind it), then `threads` per-thread scratch blocks of
`tg_scratch_bytes()` each. It allocates nothing, and returns 0, or 1 when a gather index was out
of range. With `trace`, it also logs the arena offset of every tensor each kernel reads or writes
and every copy (`tg_trace_read`), to check that the library does what the memory plan says.

Names follow the IR (`ProgramNames`): one identifier per tensor for the whole translation unit
(kernel parameters, the tile buffers of intermediates, the entry point's pointers), and one
function per kernel, `kernel_<kernel name>`. Helpers of the prelude appear only where used.
Generated text depends only on the Program and the options, so it is byte-identical across runs.
"""
from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from tilegraph.backends.arena import Arena, align, plan_arena
from tilegraph.ir.graph import Value
from tilegraph.ir.program import Kernel, Program
from tilegraph.ir.templates import lowering_for

from .attention import AttentionEmitter
from .code import Code
from .dialect import Dialect
from .emit import KernelEmitter, MicroKernel
from .fold import NO_FOLDING, Folding, plan_folding
from .layout import emit_layout
from .names import NameTable, c_type, cpp_reserved, identifier, kernel_functions, mangle, nbytes
from .prelude import HIDDEN, HIDDEN_END, prelude


@dataclass
class Generated:
    """The source and what the runtime needs to call it."""

    source: str
    arena: Arena
    order: tuple[Kernel, ...]
    outputs: tuple[Value, ...]  # graph outputs the code writes, in `outs` order
    folding: Folding = NO_FOLDING  # computed at load time, passed after the parameters in `ins`
    notes: list[str] = field(default_factory=list)
    scratch: int = 0  # bytes of kernel scratch per thread, after the arena
    units: tuple[str, ...] = ()  # the same code as translation units that compile apart (none: one unit)
    trace: bool = False  # a debug build that logs what the entry point does
    traced: tuple[Value, ...] = ()  # with `trace`: the tensors the log's ids name
    packed_weight_limit: int = MicroKernel.packed_weight_limit  # what `folding.packs` was held to


def execution_order(program: Program) -> tuple[Kernel, ...]:
    """The memory plan's kernel order when it has one covering every kernel, else program order."""
    plan = program.memory_plan
    by_name = {k.name: k for k in program.kernels}
    if plan is not None and sorted(plan.order) == sorted(by_name) and len(by_name) == len(program.kernels):
        return tuple(by_name[name] for name in plan.order)
    return program.kernels


def written_outputs(program: Program) -> tuple[Value, ...]:
    produced = {v for k in program.kernels for v in k.outputs}
    seen: dict[Value, None] = {}
    for v in program.graph.outputs:
        if v in produced:
            seen.setdefault(v)
    return tuple(seen)


def kernel_operands(kernel: Kernel, folding: Folding) -> tuple[list[Value], list[Value]]:
    """(read, written) tensors of a kernel's function: its inputs that a node it runs reads, plus
    the folded values its nodes would have computed, and its outputs less those folded values."""
    folded = folding.node_set
    runs = [n for n in kernel.nodes if n not in folded]
    inputs = [v for v in kernel.inputs if any(v in n.inputs for n in runs)]
    inside = [v for n in kernel.nodes for v in n.results if v in folding.inputs]
    return inputs + inside, [v for v in kernel.outputs if v not in folding.values]


TEMPLATE_EMITTERS = {"attention": AttentionEmitter}  # kernel template -> its emitter (C++ and SYCL)


@dataclass(frozen=True)
class ProgramNames:
    """The identifiers of one translation unit: a tensor name per Value (graph inputs and
    parameters first, then every node result in graph order) and a function name per kernel."""

    values: MappingProxyType
    functions: MappingProxyType  # kernel name -> function
    table: NameTable  # every name above taken: `table.child()` is a kernel's scope for more

    @staticmethod
    def of(program: Program) -> ProgramNames:
        table = NameTable(cpp_reserved)
        values: dict[Value, str] = {}
        graph = program.graph
        for value in [*graph.inputs, *graph.params, *(v for n in graph.nodes for v in n.results)]:
            if value not in values:
                values[value] = table.take(identifier(value.name))
        return ProgramNames(MappingProxyType(values), MappingProxyType(kernel_functions(program)), table)


def _kernel_function(kernel: Kernel, name: str, dialect: Dialect, micro: MicroKernel,
                     folding: Folding = NO_FOLDING, names: ProgramNames | None = None,
                     packs: dict | None = None) -> str:
    """The text of one kernel's function `name`; the inputs it reads repacked (conv.py) go
    into `packs` (value -> WeightPack)."""
    reads, writes = kernel_operands(kernel, folding)
    values = reads + writes
    tensor = names.values if names is not None else {v: f"p{n}" for n, v in enumerate(values)}
    params = {v: tensor[v] for v in values}
    signature = dialect.signature(name, [(c_type(v.type.dtype, _op_of(v, kernel)), params[v], n >= len(reads))
                                         for n, v in enumerate(values)])
    code = Code()
    domain = kernel.domain
    if not domain.structured:
        (node,) = kernel.nodes
        code.line(f"// kernel {mangle(kernel.name)}: {node.op} (layout)")
        with code.block(signature):
            dialect.flag_begin(code)
            emit_layout(code, node, dialect, params)
            dialect.flag_end(code)
        return code.text()
    if kernel.template is None:
        emitter = KernelEmitter(kernel, domain, dialect, params, micro, folding.node_set, names=names)
        if packs is not None:
            packs.update(emitter.packs)
    else:
        emitter = lowering_for(dialect.name, kernel.kind, TEMPLATE_EMITTERS)(kernel, domain, dialect, params, micro,
                                                                            names=names)
    emitter.header_comment(code)
    with code.block(signature):
        emitter.emit_body(code)
        code.line("return 0;")
    return code.text()


_COMMENT = re.compile(r"//[^\n]*")


def _canonical_names(kernel: Kernel) -> ProgramNames:
    """Names for `kernel` that owe nothing to the IR's (its values are t0, t1, ... in order of use), so
    that kernels equal up to names emit equal text: the test for emitting one function for both."""
    table = NameTable(cpp_reserved)
    values: dict[Value, str] = {}
    for node in kernel.nodes:
        for value in (*node.inputs, *node.results):
            if value not in values:
                values[value] = table.take(f"t{len(values)}")
    return ProgramNames(MappingProxyType(values), MappingProxyType({kernel.name: "kernel"}), table)


def _op_of(value: Value, kernel: Kernel) -> str:
    node = value.producer if value.producer in kernel.node_set else next(n for n in kernel.nodes if value in n.inputs)
    return node.op


_SCRATCH = re.compile(r"\btg_scratch \+ .*? \* (\d+);")  # a kernel's per-thread scratch block (dialect.parallel)


def generate(program: Program, dialect: Dialect, micro: MicroKernel = MicroKernel(), fold: bool = True,
             trace: bool = False, cores: int | None = None) -> Generated:
    """The translation unit of `program` in `dialect`; `fold`: compute parameter-only nodes at
    load time (fold.py) instead of on every call; `trace`: log what the entry point does; `cores`
    (default: this machine's) the units to split a large program into (`Generated.units`)."""
    folding = plan_folding(program) if fold else NO_FOLDING
    folded = folding.node_set
    order = tuple(k for k in execution_order(program) if not all(n in folded for n in k.nodes))
    arena = plan_arena(program, order, size_of=nbytes, exclude=folding.values, copies=dialect.copies)
    outputs = written_outputs(program)
    graph = program.graph
    names = ProgramNames.of(program)
    code = Code()
    code.line(f"// generated by tilegraph ({dialect.name} backend) for graph {mangle(graph.name)}; do not edit")
    code.line(f"// {len(order)} kernels, arena {arena.size} bytes ({arena.source})")
    packed: dict[str, dict] = {}  # kernel name -> the inputs it reads repacked
    first: dict[str, str] = {}  # kernel text up to names -> the function emitted for it
    functions = dict(names.functions)
    bodies = []
    held: set = set()  # the load-time weight copies so far (`MicroKernel.packed_weight_limit`)
    for kernel in order:
        kernel_micro = micro
        canonical = _kernel_function(kernel, "kernel", dialect, micro, folding, _canonical_names(kernel),
                                     packed.setdefault(kernel.name, {}))
        new = set(packed[kernel.name].values()) - held
        if new and sum(p.nbytes for p in held | new) > micro.packed_weight_limit:
            kernel_micro = replace(micro, pack_weights=False)  # past the limit: weights read as stored
            packed[kernel.name] = {}
            canonical = _kernel_function(kernel, "kernel", dialect, kernel_micro, folding, _canonical_names(kernel))
        held |= set(packed[kernel.name].values())
        same = first.setdefault(_COMMENT.sub("", canonical), functions[kernel.name])
        if same != functions[kernel.name]:  # a repeated layer: the compiler builds its function once
            functions[kernel.name] = same
            continue
        bodies.append(_kernel_function(kernel, functions[kernel.name], dialect, kernel_micro, folding, names))
    names = replace(names, functions=MappingProxyType(functions))
    packs = tuple(dict.fromkeys(p for by_value in packed.values() for p in by_value.values()))
    folding = replace(folding, packs=packs)
    scratch = align(max((int(n) for body in bodies for n in _SCRATCH.findall(body)), default=0))
    traced = (*arena.offsets, *(v for v in arena.far if v not in arena.offsets)) if trace else ()
    threaded = any(re.search(r"\btg_threads\b", body) for body in bodies)
    bodies.append(_entry(program, order, names, arena, outputs, dialect, folding, packed, scratch, threaded, traced))
    def head(used: str, comment: str = code.text()) -> list[str]:
        helpers = prelude(dialect.math_namespace, dialect.fast_float, used, dialect.helpers())
        return [comment, dialect.includes(helpers + used), helpers]

    cores = cores or os.cpu_count() or 1
    units = split_units(head, bodies[:-1], bodies[-1], cores) if dialect.splits else ()
    return Generated("\n".join(head("\n".join(bodies)) + bodies), arena, order, outputs, folding, scratch=scratch,
                     trace=trace, traced=traced, units=units, packed_weight_limit=micro.packed_weight_limit)


SPLIT_LINES = 1000  # kernel code below this compiles faster as one unit than as several
_STATIC = re.compile(r"^static (int \w+\(.*\)) \{$", re.M)


def split_units(head: Callable[..., list[str]], kernels: list[str], entry: str, cores: int) -> tuple[str, ...]:
    """The translation unit as one unit per core that compile apart (in parallel, each cached by
    content): the kernel functions dealt out by size, hidden instead of static, the entry point and
    their declarations in the lightest unit; () when one core or too little code to pay (every unit
    parses the headers again, 0.1 s)."""
    lines = [k.count("\n") + 1 for k in kernels]
    parts = min(cores, 8, len(kernels), sum(lines) // (SPLIT_LINES // 2))
    if sum(lines) < SPLIT_LINES or parts < 2:
        return ()
    # by name, not position, so that a new kernel order (a memory plan) leaves the kernels' units as they were
    name = [_STATIC.search(k).group(1) for k in kernels]
    groups: list[list[int]] = [[] for _ in range(parts)]
    for n in sorted(range(len(kernels)), key=lambda n: (-lines[n], name[n])):  # longest first, to the lightest
        min(groups, key=lambda g: sum(lines[m] for m in g)).append(n)
    texts = [[HIDDEN, *(_STATIC.sub(r"\1 {", kernels[n]) for n in sorted(group, key=name.__getitem__)), HIDDEN_END]
             for group in groups]
    declarations = "".join([HIDDEN, *(f"{signature};\n" for signature in sorted(name)), HIDDEN_END])
    lightest = min(range(parts), key=lambda g: (sum(lines[m] for m in groups[g]), g))
    texts[lightest] += [declarations, entry]
    first_line = head("")[0].splitlines()[0]  # a kernel unit's text owes nothing to the arena or the order
    return tuple("\n".join(head("\n".join(unit), *(() if g == lightest else (first_line,))) + unit)
                 for g, unit in enumerate(texts))


def _entry(program: Program, order, names: ProgramNames, arena: Arena, outputs, dialect: Dialect,
           folding: Folding, packed: dict[str, dict], scratch: int, threaded: bool, traced: tuple[Value, ...]) -> str:
    graph = program.graph
    ptr: dict[Value, str] = {}
    code = Code()
    code.line(f'extern "C" int64_t tg_arena_bytes() {{ return {arena.total}; }}')
    code.line(f'extern "C" int64_t tg_scratch_bytes() {{ return {scratch}; }}')
    if traced:
        _trace_functions(code, arena, order, traced)
    code.line("")
    with code.block('extern "C" int tg_run(void* const* ins, void* const* outs, char* arena, int threads)'):
        if threaded:
            code.line("tg_threads = threads < tg_max_threads() ? threads : tg_max_threads();")
        if scratch:
            code.line(f"tg_scratch = arena + {arena.end};")
        if traced:
            code.line("tg_trace_len = 0;")
        slots = list(graph.inputs) + list(graph.params) + list(folding.inputs)
        bindings: list[tuple[Value, str, str]] = []  # value, pointer name, where
        for n, v in enumerate(slots):
            if v not in ptr:
                ptr[v] = names.values[v]
                bindings.append((v, ptr[v], f"ins[{n}]"))
        pack_ptr = {}
        for n, pack in enumerate(folding.packs, start=len(slots)):
            pack_ptr[pack] = names.table.take(f"{names.values[pack.source]}_packed")
            code.line(f"const float* {pack_ptr[pack]} = reinterpret_cast<const float*>(ins[{n}]);")
        for n, v in enumerate(outputs):
            ptr[v] = names.values[v]
            bindings.append((v, ptr[v], f"outs[{n}]"))
        if arena.far:
            code.line(f"char* far = arena + {arena.far_base};  // the far pool: spilled and streamed tensors")
        for v, offset in arena.offsets.items():
            ptr[v] = names.values[v]
            bindings.append((v, ptr[v], f"arena + {offset}"))
        for v in sorted(arena.streamed, key=lambda v: arena.far[v]):
            ptr[v] = names.values[v]
            bindings.append((v, ptr[v], f"far + {arena.far[v]}"))
        dialect.bind(code, bindings, arena.size)
        code.line("int err = 0;")
        ids = {v: n for n, v in enumerate(traced)}
        copies: dict[tuple[int, str], list] = {}
        for c in arena.copies:
            copies.setdefault((c.step, c.kind), []).append(c)
        for position, kernel in enumerate(order):
            for c in copies.get((position, "load"), ()):
                name, ctype = ptr[c.value], c_type(c.value.type.dtype)
                code.line(f"std::memcpy(arena + {c.near}, far + {c.far}, {c.bytes});  // reload")
                code.line(f"{name} = reinterpret_cast<{ctype}*>(arena + {c.near});")
                if traced:
                    code.line(f"tg_trace(1, {position}, {ids[c.value]}, {name}, arena);")
            reads, writes = kernel_operands(kernel, folding)
            repacked = packed.get(kernel.name, {})
            args = [pack_ptr[repacked[v]] if v in repacked else ptr[v] for v in reads + writes]
            function = names.functions[kernel.name]
            note = f"  // kernel {mangle(kernel.name)}" if function != f"kernel_{kernel.name}" else ""
            code.line(f"if (!err) err = {dialect.call(function, args)};{note}")
            for v in dict.fromkeys(reads + writes):
                if v in ids:
                    code.line(f"tg_trace(0, {position}, {ids[v]}, {ptr[v]}, arena);")
            for c in copies.get((position, "store"), ()):
                code.line(f"std::memcpy(far + {c.far}, {ptr[c.value]}, {c.bytes});  // spill")
                if traced:
                    code.line(f"tg_trace(2, {position}, {ids[c.value]}, {ptr[c.value]}, arena);")
        dialect.unbind(code, bindings, len(slots), len(outputs))
        code.line("return err;")
    return code.text()


def trace_capacity(arena: Arena, order) -> int:
    """Records a traced call can log at most: one per copy and per operand of every kernel."""
    return max(1, len(arena.copies) + sum(len(k.inputs) + len(k.outputs) for k in order))


def _trace_functions(code: Code, arena: Arena, order, traced: tuple[Value, ...]) -> None:
    """The trace log of a debug build: one (kind, kernel position, tensor id, arena offset) record
    per tensor a kernel touches (kind 0) and per reload (1) and spill (2), rewritten by each call."""
    code.line(f"static int64_t tg_trace_log[4 * {trace_capacity(arena, order)}];")
    code.line("static int64_t tg_trace_len = 0;")
    with code.block("static void tg_trace(int64_t kind, int64_t position, int64_t id, const void* at, "
                    "const char* arena)"):
        code.line("int64_t* r = tg_trace_log + 4 * tg_trace_len++;")
        code.line("r[0] = kind; r[1] = position; r[2] = id; r[3] = static_cast<const char*>(at) - arena;")
    with code.block('extern "C" int64_t tg_trace_read(int64_t* out)'):
        code.line("std::memcpy(out, tg_trace_log, sizeof(int64_t) * 4 * tg_trace_len);")
        code.line("return tg_trace_len;")
