"""What differs between the C++/OpenMP and the SYCL output: how a kernel runs its parallel tiles.

The loop-nest emitter (`emit.py`) writes the code of one parallel tile; a dialect wraps it: the
C++ dialect in an OpenMP `parallel for` over the tile indices with a per-thread scratch block, the
SYCL dialect (`tilegraph.backends.sycl`) in a `queue::parallel_for` with per-work-item scratch.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from .code import Code
from .names import c_type, nbytes
from .prelude import Helper

Body = Callable[[Code], None]

# Threads a parallel kernel uses (set by tg_run to the fewest of OpenMP's and the scratch pool's)
# and the per-thread scratch pool the caller passes in, so kernels allocate nothing on the call
# path: state all translation units of a library share (C++17 inline variables, not exported).
THREADS = "inline int tg_threads = 1;\n"
SCRATCH = "inline char* tg_scratch = nullptr;\n"
THREAD = """#ifdef _OPENMP
inline int tg_thread() { return omp_get_thread_num(); }
#else
inline int tg_thread() { return 0; }
#endif
"""
MAX_THREADS = """#ifdef _OPENMP
inline int tg_max_threads() { return omp_get_max_threads(); }
#else
inline int tg_max_threads() { return 1; }
#endif
"""

# `lanes` vectors from `src`, lanes [lo, hi) of the row loaded and the others zero, never touching
# memory outside [lo, hi): a padded or partial row of the micro-kernel without a scalar gather.
LOAD_LANES = r"""inline void tg_load_lanes(tg_vf* dst, const float* src, int64_t lo, int64_t hi, int64_t lanes) {
  for (int64_t q = 0; q < lanes; ++q) {
    const int64_t l = tg_lmax(lo - q * 16, 0), h = tg_lmin(hi - q * 16, 16);
#if defined(__AVX512F__)
    const __mmask16 m = h > l ? (__mmask16)(((1u << h) - 1u) & ~((1u << l) - 1u)) : (__mmask16)0;
    dst[q] = (tg_vf)_mm512_maskz_loadu_ps(m, src + q * 16);
#else
    float g[16];
    for (int64_t i = 0; i < 16; ++i) g[i] = (i >= l && i < h) ? src[q * 16 + i] : 0.0f;
    std::memcpy(&dst[q], g, sizeof(g));
#endif
  }
}
"""

# `lanes` vectors from `src`, lane l of vector q loaded where bit l of masks[q] is set, zero
# elsewhere (flattened blocks, flatrows.py). A full mask is a plain load, kept in a register by
# the empty asm (GCC would otherwise fold the load into every FMA that uses it).
LOAD_MASKS = r"""inline void tg_load_masks(tg_vf* dst, const float* src, const uint16_t* masks, int64_t lanes) {
  for (int64_t q = 0; q < lanes; ++q) {
#if defined(__AVX512F__)
    if (masks[q] == 0xffffu) {
      dst[q] = (tg_vf)_mm512_loadu_ps(src + q * 16);
      __asm__("" : "+v"(dst[q]));
    } else {
      dst[q] = (tg_vf)_mm512_maskz_loadu_ps((__mmask16)masks[q], src + q * 16);
    }
#else
    float g[16];
    for (int64_t i = 0; i < 16; ++i) g[i] = ((masks[q] >> i) & 1u) ? src[q * 16 + i] : 0.0f;
    std::memcpy(&dst[q], g, sizeof(g));
#endif
  }
}
"""


# `lanes` vectors of the even elements of `src` (a row read with stride 2): two loads and one
# permute per vector instead of a gather. Reads src[0, 32 * lanes - 1): never the last odd element.
LOAD_EVEN = r"""inline void tg_load_even(tg_vf* dst, const float* src, int64_t lanes) {
  for (int64_t q = 0; q < lanes; ++q) {
#if defined(__AVX512F__)
    const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512 lo = _mm512_loadu_ps(src + q * 32);
    const __m512 hi = _mm512_maskz_loadu_ps((__mmask16)0x7fff, src + q * 32 + 16);
    dst[q] = (tg_vf)_mm512_permutex2var_ps(lo, even, hi);
#else
    float g[16];
    for (int64_t i = 0; i < 16; ++i) g[i] = src[q * 32 + 2 * i];
    std::memcpy(&dst[q], g, sizeof(g));
#endif
  }
}
"""

# The same for lanes [lo, hi) only, the others `pad`; reads only the elements those lanes need.
LOAD_EVEN_LANES = r"""inline void tg_load_even_lanes(tg_vf* dst, const float* src, int64_t lo, int64_t hi,
                               int64_t lanes, float pad) {
  for (int64_t q = 0; q < lanes; ++q) {
    const int64_t l = tg_lmax(lo - q * 16, 0), h = tg_lmin(hi - q * 16, 16);
#if defined(__AVX512F__)
    const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    // elements [2l, 2h - 1) of the 32 from src + 32q: the lanes' even elements, no odd one past them
    const uint32_t elements = h > l ? ((1u << (h * 2 - 1)) - 1u) & ~((1u << (l * 2)) - 1u) : 0u;
    const __m512 a = _mm512_maskz_loadu_ps((__mmask16)(elements & 0xffffu), src + q * 32);
    const __m512 b = _mm512_maskz_loadu_ps((__mmask16)(elements >> 16), src + q * 32 + 16);
    const __mmask16 inside = h > l ? (__mmask16)(((1u << h) - 1u) & ~((1u << l) - 1u)) : (__mmask16)0;
    dst[q] = (tg_vf)_mm512_mask_blend_ps(inside, _mm512_set1_ps(pad), _mm512_permutex2var_ps(a, even, b));
#else
    float g[16];
    for (int64_t i = 0; i < 16; ++i) g[i] = (i >= l && i < h) ? src[q * 32 + 2 * i] : pad;
    std::memcpy(&dst[q], g, sizeof(g));
#endif
  }
}
"""


class Dialect:
    """Host C++17 with OpenMP."""

    name = "cpp"
    copies = True  # the entry point copies tensors between the arena and the far pool (executed memory plans)
    splits = True  # large programs build as several translation units, in parallel
    math_namespace = "std"
    vector_width = 16  # f32 lanes of the register-block vectors (GCC vector extension, 64 bytes)
    vector_type = "tg_vf"
    fast_float = True  # vectorisable f32 exp/erf/tanh (prelude.py) instead of libm calls

    def helpers(self) -> tuple[Helper, ...]:
        """The dialect's helpers after the shared prelude's (each emitted where the code uses it):
        the half type, the register-block vector and its masked loads, scratch allocation."""
        return (Helper("tg_half", "typedef _Float16 tg_half;\n"),
                Helper("tg_vf", "typedef float tg_vf __attribute__((vector_size(64)));\n"),
                Helper("tg_load_lanes", LOAD_LANES), Helper("tg_load_masks", LOAD_MASKS),
                Helper("tg_load_even", LOAD_EVEN), Helper("tg_load_even_lanes", LOAD_EVEN_LANES),
                Helper("tg_thread", THREAD), Helper("tg_max_threads", MAX_THREADS),
                Helper("tg_threads", THREADS, shared=True), Helper("tg_scratch", SCRATCH, shared=True))

    def includes(self, code: str) -> str:
        """The headers `code` (a unit's helpers and functions) needs beyond the prelude's: the
        AVX-512 intrinsics only where used (parsing them costs g++ 0.2 s per unit)."""
        simd = "#if defined(__AVX512F__)\n#include <immintrin.h>\n#endif\n" if "_mm512" in code else ""
        return simd + "#ifdef _OPENMP\n#include <omp.h>\n#endif\n"

    def flag_begin(self, code: Code) -> None:
        """Open the error flag `*err` that layout kernels set (gather index out of range)."""
        code.line("int err_ = 0;")
        code.line("int* err = &err_;")

    def flag_end(self, code: Code) -> None:
        code.line("return err_;")

    def bind(self, code: Code, bindings: Sequence[tuple], arena_bytes: int) -> None:
        """Declare one typed pointer per tensor: (value, name, where it lives)."""
        for value, name, where in bindings:
            ctype = c_type(value.type.dtype)
            code.line(f"{ctype}* {name} = reinterpret_cast<{ctype}*>({where});")

    def unbind(self, code: Code, bindings: Sequence[tuple], n_ins: int, n_outs: int) -> None:
        """Nothing to copy back on the host."""

    def signature(self, name: str, params: Sequence[tuple[str, str, bool]]) -> str:
        """`static int name(...)`; params are (C type, name, written)."""
        parts = [f"{'' if out else 'const '}{ctype}* __restrict__ {pname}" for ctype, pname, out in params]
        return f"static int {name}({', '.join(parts)})"

    def call(self, name: str, args: Sequence[str]) -> str:
        return f"{name}({', '.join(args)})"

    def unroll(self, count: int) -> str:
        """A directive to unroll the next loop fully (micro-kernel register blocks)."""
        return f"#pragma GCC unroll {count}"

    def simd(self) -> str:
        """A directive to vectorise the next loop (empty: leave it to the compiler)."""
        return "#pragma omp simd"

    @property
    def group_items(self) -> int:
        """Work-items that run one tile together (their id is `lid`)."""
        return 1

    def split_loop(self, name: str, lo: str, hi: str, step: int) -> str | None:
        """The head of a loop shared among the work-items of a group (None: not shared)."""
        return None

    def single_guard(self) -> str | None:
        """A condition for code that one work-item of a group runs (None: every thread is alone)."""
        return None

    def barrier(self) -> str | None:
        """A work-group barrier statement (None: no work-groups)."""
        return None

    def parallel(self, code: Code, tiles: Sequence[tuple[str, int]], scratch: int, body: Body,
                 threaded: bool = True) -> None:
        """Run `body` once per combination of tile indices (var, count), threads sharing the work
        (one thread when not `threaded`)."""
        with code.block():
            if tiles and threaded:
                code.raw("#pragma omp parallel num_threads(tg_threads)")
            with code.block():
                if scratch:  # this thread's block of the scratch pool the caller passed to tg_run
                    thread = "tg_thread()" if tiles and threaded else "0"
                    code.line(f"char* scratch = tg_scratch + static_cast<int64_t>({thread}) * {scratch};")
                if tiles and threaded:
                    code.raw(f"#pragma omp for collapse({len(tiles)}) schedule(static)")
                self._nest(code, tiles, body)

    def _nest(self, code: Code, tiles: Sequence[tuple[str, int]], body: Body) -> None:
        if not tiles:
            body(code)
            return
        var, count = tiles[0]
        with code.block(f"for (int64_t {var} = 0; {var} < {count}; ++{var})"):
            self._nest(code, tiles[1:], body)

    def serial(self, code: Code, scratch: int, body: Body) -> None:
        """Run `body` once (layout kernels)."""
        self.parallel(code, (), scratch, body)


class SyclDialect(Dialect):
    """SYCL 2020: one `nd_range` `parallel_for` per kernel, a work-group per parallel tile.

    The work-items of a group share each node's outermost loop (strided by the group size) and
    meet at a barrier between nodes; the tile's intermediate buffers live in work-group local
    memory (`local_accessor`) when they fit in `local_bytes`, else in a USM device block.
    """

    name = "sycl"
    copies = False  # device arenas follow the liveness plan when a memory plan moves tensors
    splits = False  # one translation unit: the SYCL compilers' device code is per unit
    math_namespace = "sycl"
    vector_width = 0  # plain scalar register blocks: the SYCL compiler vectorises across work-items
    fast_float = False  # sycl:: math functions are the device's own

    def __init__(self, group_size: int = 8, local_bytes: int = 32768) -> None:
        self.group_size = max(1, int(group_size))
        self.local_bytes = local_bytes

    def includes(self, code: str) -> str:
        return "#include <sycl/sycl.hpp>\n"

    def helpers(self) -> tuple[Helper, ...]:
        return (Helper("tg_half", "typedef sycl::half tg_half;\n"),
                Helper("tg_queue", "sycl::queue& tg_queue() { static sycl::queue q; return q; }\n"))

    def flag_begin(self, code: Code) -> None:
        code.line("int* err = sycl::malloc_shared<int>(1, q);")
        code.line("*err = 0;")

    def flag_end(self, code: Code) -> None:
        code.line("const int failed = *err;")
        code.line("sycl::free(err, q);")
        code.line("return failed;")

    def bind(self, code: Code, bindings: Sequence[tuple], arena_bytes: int) -> None:
        """Device (USM) copies of inputs and parameters, device outputs, a device arena."""
        code.line("sycl::queue& q = tg_queue();")
        code.line(f"char* dev_arena = sycl::malloc_device<char>({max(arena_bytes, 1)}, q);")
        for value, name, where in bindings:
            ctype = c_type(value.type.dtype)
            if where.startswith("arena"):
                code.line(f"{ctype}* {name} = reinterpret_cast<{ctype}*>(dev_{where});")
                continue
            code.line(f"{ctype}* {name} = sycl::malloc_device<{ctype}>({value.type.numel}, q);")
            if where.startswith("ins"):
                code.line(f"q.memcpy({name}, {where}, {nbytes(value.type)});")
        code.line("q.wait();")

    def unbind(self, code: Code, bindings: Sequence[tuple], n_ins: int, n_outs: int) -> None:
        for value, name, where in bindings:
            if where.startswith("outs"):
                code.line(f"q.memcpy({where}, {name}, {nbytes(value.type)});")
        code.line("q.wait();")
        for value, name, where in bindings:
            if not where.startswith("arena"):
                code.line(f"sycl::free({name}, q);")
        code.line("sycl::free(dev_arena, q);")

    def signature(self, name: str, params: Sequence[tuple[str, str, bool]]) -> str:
        parts = ["sycl::queue& q"] + [f"{'' if out else 'const '}{ctype}* {pname}" for ctype, pname, out in params]
        return f"static int {name}({', '.join(parts)})"

    def call(self, name: str, args: Sequence[str]) -> str:
        return f"{name}({', '.join(['q', *args])})"

    def unroll(self, count: int) -> str:
        return f"#pragma unroll {count}"

    def simd(self) -> str:
        return ""

    @property
    def group_items(self) -> int:
        return self.group_size

    def split_loop(self, name: str, lo: str, hi: str, step: int) -> str | None:
        g = self.group_size
        if g == 1:
            return None
        start = f"{lo} + lid" if step == 1 else f"{lo} + lid * {step}"
        return f"for (int64_t {name} = {start}; {name} < {hi}; {name} += {g * step})"

    def single_guard(self) -> str | None:
        return "if (lid == 0)" if self.group_size > 1 else None

    def barrier(self) -> str | None:
        if self.group_size == 1:
            return None
        return "item.barrier(sycl::access::fence_space::global_and_local);"

    def parallel(self, code: Code, tiles: Sequence[tuple[str, int]], scratch: int, body: Body,
                 threaded: bool = True) -> None:
        total = math.prod(count for _, count in tiles)
        group = self.group_size
        local = 0 < scratch <= self.local_bytes
        with code.block():
            if scratch and not local:
                code.line(f"char* scratch_all = static_cast<char*>(sycl::malloc_device({total * scratch}, q));")
            code.line("q.submit([&](sycl::handler& h) {")
            code.depth += 1
            if local:
                code.line(f"sycl::local_accessor<char, 1> lm(sycl::range<1>({scratch}), h);")
            code.line(f"h.parallel_for(sycl::nd_range<1>(sycl::range<1>({total * group}), sycl::range<1>({group})), "
                      "[=](sycl::nd_item<1> item) {")
            code.depth += 1
            code.line("const int64_t tid = static_cast<int64_t>(item.get_group_linear_id());")
            code.line("const int64_t lid = static_cast<int64_t>(item.get_local_id(0));")
            code.line("(void)lid;")
            stride = 1
            for var, count in reversed(tiles):
                code.line(f"const int64_t {var} = tid / {stride} % {count};")
                stride *= count
            if local:
                code.line("char* scratch = &lm[0];")
            elif scratch:
                code.line(f"char* scratch = scratch_all + tid * {scratch};")
            body(code)
            code.depth -= 1
            code.line("});")
            code.depth -= 1
            code.line("}).wait();")
            if scratch and not local:
                code.line("sycl::free(scratch_all, q);")

    def serial(self, code: Code, scratch: int, body: Body) -> None:
        """Layout kernels: one work-item."""
        saved = self.group_size
        self.group_size = 1
        try:
            self.parallel(code, (), scratch, body)
        finally:
            self.group_size = saved
