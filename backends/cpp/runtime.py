"""Running a built library: ctypes binding, argument marshalling, result assembly."""
from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tilegraph.backends.base import CompiledProgram
from tilegraph.ir import TilegraphError
from tilegraph.ir.graph import Value
from tilegraph.ir.host import usable_cpus
from tilegraph.ir.program import Program
from tilegraph.ir.types import DType
from tilegraph.ir.units import format_bytes

from .fold import evaluate_folding
from .source import Generated, trace_capacity


@dataclass(frozen=True)
class TraceRecord:
    """One entry of a traced call: a kernel (at `position` in the library's order) touched `value`
    at arena offset `offset` ("use"), or the entry point reloaded or spilled it there."""

    kind: str  # "use" | "reload" | "spill"
    position: int
    value: Value
    offset: int


class NativeProgram(CompiledProgram):
    """A Program compiled to a shared library with entry point `tg_run` (see `source.py`)."""

    backend = "cpp"

    def __init__(self, program: Program, params: Mapping, generated: Generated, library: Path | None,
                 build_info: dict) -> None:
        super().__init__(program, params, generated.source)
        self.generated = generated
        self.library_path = library
        self.build_info = build_info
        graph = program.graph
        missing = [v.name for v in graph.params if v not in self.params]
        if missing:
            raise TilegraphError(f"{self.backend} backend: no value for parameter(s) {', '.join(missing)}")
        self._params = [np.asarray(self.params[v], dtype=v.type.dtype.numpy, order="C") for v in graph.params]
        self._params += evaluate_folding(generated.folding, dict(zip(graph.params, self._params)))
        self._lock = threading.Lock()
        self._run = None
        # per call only the input and output pointers change: the pointer arrays are built once
        n_in = len(graph.inputs)
        self._in_ptrs = (ctypes.c_void_p * max(n_in + len(self._params), 1))(
            *([None] * n_in + [a.ctypes.data for a in self._params]))
        self._out_ptrs = (ctypes.c_void_p * max(len(generated.outputs), 1))()
        self._out_specs = [(v.type.shape, v.type.dtype.numpy) for v in generated.outputs]
        self._in_specs = [(v.type.shape, np.dtype(v.type.dtype.numpy)) for v in graph.inputs]
        self._fast_inputs = all(v.type.dtype is not DType.bf16 for v in graph.inputs)
        self._direct = list(graph.outputs) == list(generated.outputs)  # each written once, in order
        self.threads = usable_cpus()
        if library is not None:
            # Idle OpenMP threads sleep instead of spinning (unless the user chose): spinning
            # threads steal the cores of the caller's other work between kernels. Read by libgomp
            # when it is first loaded, i.e. with the first library we load.
            os.environ.setdefault("OMP_WAIT_POLICY", "passive")
            self._lib = ctypes.CDLL(str(library))
            self._run = self._lib.tg_run
            self._run.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
            self._run.restype = ctypes.c_int

    @property
    def threads(self) -> int:
        """The most threads a kernel runs on (fewer where OpenMP allows fewer: OMP_NUM_THREADS, or
        `torch.set_num_threads` where torch shares this process's OpenMP runtime). The working block holds one
        scratch block per thread, so setting it sizes the block again."""
        return self._threads

    @threads.setter
    def threads(self, count: int) -> None:
        if int(count) < 1:
            raise TilegraphError(f"{self.backend} backend: threads must be at least 1, got {count}")
        with self._lock:
            self._threads = int(count)
            self._arena = np.empty(self.working_bytes + 64, dtype=np.uint8)
            self._arena_ptr = self._arena_pointer()

    @property
    def working_bytes(self) -> int:
        """The one block the library works in: the arena (with the far pool) and the threads' scratch."""
        return self.generated.arena.end + self.threads * self.generated.scratch

    def write(self, directory) -> list:
        """The generated source and (when built) the library, as `write_build` writes them."""
        from . import write_build

        return write_build(self, directory)

    def _arena_pointer(self) -> int:
        address = self._arena.ctypes.data
        return address + (-address % 64)

    def __call__(self, *inputs) -> list[np.ndarray]:
        """Arrays already of the graph's shapes and dtypes (C order) go straight to `execute`; the
        others through the checks and conversions of `CompiledProgram.__call__`."""
        specs = self._in_specs
        if (self._fast_inputs and len(inputs) == len(specs)
                and all(type(a) is np.ndarray and a.dtype == dtype and a.shape == shape and a.flags.c_contiguous
                        for a, (shape, dtype) in zip(inputs, specs))):
            return self.execute(inputs)
        return super().__call__(*inputs)

    def execute(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        graph = self.program.graph
        ins = [np.asarray(a, dtype=v.type.dtype.numpy, order="C") for a, v in zip(inputs, graph.inputs)]
        outs = [np.empty(shape, dtype=dtype) for shape, dtype in self._out_specs]
        self.run_addresses([a.ctypes.data for a in ins], [a.ctypes.data for a in outs])
        if self._direct:
            return outs
        ins += self._params
        written = dict(zip(self.generated.outputs, outs))
        given = dict(zip(list(graph.inputs) + list(graph.params), ins))
        results, used = [], set()
        for v in graph.outputs:
            if v in written and v not in used:
                results.append(written[v])
                used.add(v)
            else:
                results.append(np.array(written[v] if v in written else given[v], copy=True))
        return results

    def run_addresses(self, inputs: Sequence[int], outputs: Sequence[int]) -> None:
        """One call of the library on raw addresses: the graph's inputs, then the generated outputs
        (`generated.outputs`), each C-ordered memory of its value's shape and dtype, which the caller
        vouches for. The torch.compile runner passes tensors' memory this way, with no array between."""
        if self._run is None:
            raise TilegraphError(f"{self.backend} backend: {self.build_info.get('reason', 'the code was not built')}")
        with self._lock:
            in_ptrs, out_ptrs = self._in_ptrs, self._out_ptrs
            for n, address in enumerate(inputs):
                in_ptrs[n] = address
            for n, address in enumerate(outputs):
                out_ptrs[n] = address
            status = self._run(in_ptrs, out_ptrs, self._arena_ptr, self._threads)
        if status:
            raise IndexError("gather: index out of range")

    @property
    def writes_outputs_directly(self) -> bool:
        """Whether the library writes every graph output itself, each once, in order (no output is an
        input, a parameter or another output again), so `run_addresses` alone produces the results."""
        return self._direct

    def plan_trace(self) -> list[TraceRecord]:
        """What the last call did, from a library built with `trace=True`: per kernel position, the
        arena offset of every arena tensor it touched, and every reload and spill, in order."""
        if self._run is None or not self.generated.trace:
            raise TilegraphError(f"{self.backend} backend: no trace; build with trace=True")
        if not self.generated.traced:
            return []  # no tensor lives in the arena
        read = self._lib.tg_trace_read
        read.argtypes, read.restype = [ctypes.c_void_p], ctypes.c_int64
        log = np.zeros(4 * trace_capacity(self.generated.arena, self.generated.order), np.int64)
        count = read(log.ctypes.data)
        kinds = ("use", "reload", "spill")
        return [TraceRecord(kinds[k], int(p), self.generated.traced[i], int(o))
                for k, p, i, o in log[:4 * count].reshape(-1, 4)]

    def backend_report(self) -> str:
        arena = self.generated.arena
        far = f", far pool {arena.far_size} bytes" if arena.far else ""
        packs = self.generated.folding.packs
        lines = [f"  arena: {arena.size} bytes, offsets from {arena.source}{far}",
                 f"  scratch: {self.generated.scratch} bytes per thread, {self.threads} threads",
                 f"  packed weights: {len(packs)} load-time copies, {format_bytes(sum(p.nbytes for p in packs))} "
                 f"beside the weights (limit {format_bytes(self.generated.packed_weight_limit)})",
                 f"  kernels: {len(self.generated.order)} functions, source {len(self.source.splitlines())} lines"]
        for key in ("compiler", "flags", "units", "library", "cached", "reason"):
            if key in self.build_info:
                lines.append(f"  {key}: {self.build_info[key]}")
        return "\n".join(lines)
