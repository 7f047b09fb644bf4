"""The ops of a kernel after the node a library call computes (a convolution by cuDNN, a matmul by cuBLAS), as one
generated Triton kernel over that node's result: one pass where torch ops in place would take one each.

The epilogue kernel is the Program's own kernel without the nodes up to that one: the same ops, emitted by the
same `KernelEmitter`, reading the library's result as an input, and tiled as the Program tiled the kernel's
parallel loops (so it runs on the kernel's own grid). Each op computes in f32 registers and rounds to its own
dtype, as eager rounds it (the generated kernels' rule).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from tilegraph.ir.graph import Value
from tilegraph.ir.program import Kernel
from tilegraph.ir.structured import PARALLEL

from .autotune import DEFAULT
from .options import TritonOptions


@dataclass(frozen=True)
class Epilogue:
    """The kernel's ops after the library's node as one generated Triton function `fn` (source `text`), launched on
    `grid` programs of `warps` warps with the kernel's arguments at `args` (None: the library's result, which it
    reads stored with its axes in `order`: for a convolution, the order of its input, which torch's convolution
    follows; None: row-major)."""

    fn: object
    text: str
    grid: int
    args: tuple[int | None, ...]
    order: tuple[int, ...] | None = None
    warps: int = DEFAULT[0]
    # compiled binaries by their pointers' 16-byte alignment (what Triton specialises them on), bound on first use
    _bound: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    def __call__(self, result, args) -> None:
        # as the kernel addresses it (a copy only where torch picked another layout)
        result = result.contiguous() if self.order is None else result.permute(*self.order).contiguous()
        tensors = [result if n is None else args[n] for n in self.args]
        if not result.is_cuda:  # the Triton interpreter
            self.fn[(self.grid,)](*tensors, num_warps=self.warps)
            return
        key = tuple(t.data_ptr() % 16 == 0 for t in tensors)
        run = self._bound.get(key)
        if run is None:
            from .launch import Compiling, compiled_runner

            run = compiled_runner(self.fn, self.grid, tensors, self.warps, 1)
            self._bound[key] = run = run.result() if isinstance(run, Compiling) else run
        run(*tensors)


def epilogue_kernel(kernel: Kernel, head: int, position: dict[Value, int], layouts: dict[Value, tuple[int, ...]],
                    options: TritonOptions, function: str, names: dict[Value, str] | None = None,
                    interpreter: bool = False, order: tuple[int, ...] | None = None) -> Epilogue | None:
    """`kernel`'s nodes after node `head` (the one a library computes, its result stored in `order`), generated and
    loaded as `function`; None where a loop of them is not one of the kernel's parallel loops, they have a tl.dot,
    or they read a tensor that is neither head's result nor a kernel argument (at `position`)."""
    from .kernel import KernelEmitter
    from .module import kernel_module
    from .runtime import load_module

    result = kernel.nodes[head].result
    part = Kernel(f"{kernel.name}_epilogue", kernel.nodes[head + 1:])
    tiles = _parallel_tiles(kernel, part)
    if tiles is None:
        return None
    part = part.with_tiles(tiles)
    stored = layouts if order is None else {**layouts, result: order}
    source = KernelEmitter(part, part.domain, function, interpreter, names, options, stored).emit()
    if source.uses_dot or any(v is not result and v not in position for v in source.args):
        return None
    module = load_module(kernel_module(source.text))
    return Epilogue(getattr(module, source.function), source.text, source.grid,
                    tuple(None if v is result else position[v] for v in source.args), order)


def _parallel_tiles(kernel: Kernel, part: Kernel) -> tuple[tuple[str, int], ...] | None:
    """`part`'s tiles (part: some of kernel's nodes): each of its loops tiled as the kernel's loop it is, which
    must be parallel in both; None otherwise."""
    whole, domain = kernel.domain, part.domain
    if not domain.structured:
        return None
    sizes = dict(kernel.tiles)
    of: dict[int, int] = {}  # part's loop -> kernel's loop
    for i, node in enumerate(domain.nodes):
        for own, loop in enumerate(domain.node_loops[i]):
            if loop is not None:
                of.setdefault(loop, whole.node_loops[whole.index(node)][own])
    tiles = []
    for k, loop in enumerate(domain.loops):
        outer = of.get(k)
        if loop.kind != PARALLEL or outer is None or whole.loops[outer].kind != PARALLEL:
            return None
        tiles.append((loop.name, sizes.get(whole.loops[outer].name, loop.extent)))
    return tuple(tiles)


__all__ = ["Epilogue", "epilogue_kernel"]
