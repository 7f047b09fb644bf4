"""FlashAttention kernels: the score nodes per key/value tile, then the online softmax.

Per parallel tile (batch and query rows) the kernel keeps, per row, the running max `m`, the
running sum `l` and the output accumulator `o` (one row of the value width), all in scratch.
Per key/value tile it computes the scores (the matmul and the elementwise chain, as ordinary
nodes into a tile-sized buffer) and folds them in: m' = max(m, rowmax(s)), scale = exp(m - m'),
l' = l * scale + sum exp(s - m'), o' = o * scale + exp(s - m') @ v. The score matrix never exists
beyond one tile, and the output is divided by `l` once at the end.
"""
from __future__ import annotations

import math

from tilegraph.ir import TilegraphError
from tilegraph.ir.templates.attention import attention_layout

from .buffers import row_major_strides
from .code import Code
from .emit import KernelEmitter, store


LANES = 16  # partial sums of the softmax denominator (one f32 vector)
UNROLL = 4  # key/value rows folded into the output row per pass


class AttentionEmitter(KernelEmitter):
    """A kernel of kind "attention" (see `ir/templates/attention.py` for its loop kinds)."""

    def unbuffered(self) -> set[int]:
        if len(self.reduction) != 1:
            raise TilegraphError(f"cpp backend: attention kernel {self.kernel.name} needs one key/value loop")
        self.layout = attention_layout(self.domain, self.kernel.nodes)
        self.match, self.kv = self.layout.match, self.layout.kv
        return set(self.layout.core) | {self.domain.index(n) for n in self.match.epilogue}

    def _state(self) -> None:
        domain, match = self.domain, self.match
        pv, mx = self.layout.pv, self.layout.max
        if not match.pv.result.type.dtype.is_float:
            raise TilegraphError("cpp backend: attention on non-float values")
        self.e_loops = sorted(domain.iterates(pv) - domain.iterates(mx) - {self.kv})
        self.rows = sorted(domain.iterates(pv) - {self.kv} - set(self.e_loops))
        self.row_sizes = [self.tile[k] for k in self.rows]
        self.row_count = math.prod(self.row_sizes)
        self.width = math.prod(self.extents[k] for k in self.e_loops)
        base = super().scratch_bytes
        floats = [("m_", self.row_count), ("l_", self.row_count), ("o_", self.row_count * self.width),
                  ("p_", self.tile[self.kv] * self.dialect.group_items)]
        self.state = []
        for name, n in floats:
            self.state.append((name, base, n))
            base += (4 * n + 63) // 64 * 64
        self._scratch = base

    @property
    def scratch_bytes(self) -> int:
        if not hasattr(self, "_scratch"):
            self._state()
        return self._scratch

    def _row_index(self) -> str:
        strides = row_major_strides(tuple(self.row_sizes))
        parts = [f"(i{k} - {self.base[k]}) * {s}" if self.base[k] != "0" else f"i{k} * {s}"
                 for k, s in zip(self.rows, strides)]
        return " + ".join(parts) or "0"

    def _e_index(self) -> str:
        strides = row_major_strides(tuple(self.extents[k] for k in self.e_loops))
        return " + ".join(f"i{k} * {s}" for k, s in zip(self.e_loops, strides)) or "0"

    def _open(self, code: Code, loops, shared: bool = True) -> int:
        """Loops over kernel loops in the tile; `shared`: split the rows among work-items."""
        if shared:
            depth = self._loops(code, [(f"i{k}", self._lo(k), self._hi(k), 1) for k in loops])
            if code.depth == depth:  # no row loop (nor guard): a scope of its own for the row's locals
                code.line("{")
                code.depth += 1
            return depth
        depth = code.depth
        for k in loops:
            lo, hi = self._lo(k), self._hi(k)
            code.line(f"for (int64_t i{k} = {lo}; i{k} < {hi}; ++i{k}) {{")
            code.depth += 1
        return depth

    def tile_body(self, code: Code) -> None:
        self.scratch_bytes  # noqa: B018  (lays out the state)
        self.tile_bounds(code)
        for name, offset, _ in self.state:
            code.line(f"float* __restrict__ {name} = reinterpret_cast<float*>(scratch + {offset});")
        if self.dialect.group_items > 1:  # each work-item its own row of probabilities
            code.line(f"p_ += lid * {self.tile[self.kv]};")
        domain, match, kv = self.domain, self.match, self.kv
        pv, mx = self.layout.pv, self.layout.max
        var = lambda k: f"i{k}"  # noqa: E731
        width = self.width
        depth = self._open(code, self.rows)
        code.line(f"const int64_t r = {self._row_index()};")
        code.line("m_[r] = -INFINITY; l_[r] = 0.0f;")
        code.line(f"for (int64_t e = 0; e < {width}; ++e) o_[r * {width} + e] = 0.0f;")
        self._close(code, depth)
        self.barrier(code)
        scores = self.layout.scores
        single = self._single(kv)
        head = None if single else f"for (int64_t rlo{kv} = 0; rlo{kv} < {self.extents[kv]}; rlo{kv} += {self.tile[kv]})"
        outer = code.depth
        if head:
            code.line(head + " {")
            code.depth += 1
            t, e = self.tile[kv], self.extents[kv]
            code.line(f"const int64_t rhi{kv} = {f'rlo{kv} + {t}' if e % t == 0 else f'tg_lmin(rlo{kv} + {t}, {e})'};")
        for i in scores:
            self.emit_node(code, i, self.ranges(i, streamed=True), first=None)
            self.barrier(code)
        score = self.buffers[match.score].element(domain.compose_map(mx, domain.spaces[mx].inputs[0]), var,
                                                  self.extents)
        value_map = domain.compose_map(pv, domain.spaces[pv].inputs[1])
        value_buf = self.buffers[match.pv.inputs[1]]

        def value(step: int) -> str:
            """The value element `step` key/value rows further on."""
            at = (lambda k: f"(i{k} + {step})" if k == kv else f"i{k}") if step else var  # noqa: E731
            return value_buf.element(value_map, at, self.extents)

        lo, hi = self._lo(kv), self._hi(kv)
        depth = self._open(code, self.rows)
        code.line(f"const int64_t r = {self._row_index()};")
        code.line("float mx = m_[r];")
        code.line(f"for (int64_t i{kv} = {lo}; i{kv} < {hi}; ++i{kv}) mx = tg_max(mx, (float){score});")
        code.line("const float shift = (mx == -INFINITY) ? 0.0f : mx;")
        code.line("const float scale = tg_exp(m_[r] - shift);")
        # the exponentials in a loop of their own (it vectorises), summed in LANES partial sums
        code.line(f"for (int64_t i{kv} = {lo}; i{kv} < {hi}; ++i{kv}) p_[i{kv} - {lo}] = tg_exp((float){score} - shift);")
        code.line(f"const int64_t n_ = {hi} - {lo};")
        code.line(f"float part[{LANES}] = {{}};")
        code.line("int64_t j_ = 0;")
        code.line(f"for (; j_ + {LANES} <= n_; j_ += {LANES}) for (int64_t q = 0; q < {LANES}; ++q) part[q] += p_[j_ + q];")
        code.line("for (; j_ < n_; ++j_) part[0] += p_[j_];")
        code.line("float total = 0.0f;")
        code.line(f"for (int64_t q = 0; q < {LANES}; ++q) total += part[q];")
        code.line("l_[r] = l_[r] * scale + total;")
        code.line(f"float* __restrict__ o = o_ + r * {width};")
        code.line(f"for (int64_t e = 0; e < {width}; ++e) o[e] *= scale;")
        # o += p @ v, UNROLL key/value rows per pass over the row of o: a quarter of its loads/stores
        code.line(f"int64_t i{kv} = {lo};")
        with code.block(f"for (; i{kv} + {UNROLL} <= {hi}; i{kv} += {UNROLL})"):
            for step in range(UNROLL):
                code.line(f"const float w{step} = p_[i{kv} - {lo} + {step}];")
            inner = self._open(code, self.e_loops, shared=False)
            terms = " + ".join(f"w{step} * (float){value(step)}" for step in range(UNROLL))
            code.line(f"o[{self._e_index()}] += {terms};")
            self._close(code, inner)
        with code.block(f"for (; i{kv} < {hi}; ++i{kv})"):
            code.line(f"const float p = p_[i{kv} - {lo}];")
            inner = self._open(code, self.e_loops, shared=False)
            code.line(f"o[{self._e_index()}] += p * (float){value(0)};")
            self._close(code, inner)
        code.line("m_[r] = mx;")
        self._close(code, depth)
        self.barrier(code)
        self._close(code, outer)
        out = match.output  # o, or the copies of it that joined the kernel (written through their maps)
        target = self.buffers[out].lvalue(self.layout.output_map(domain), var)
        depth = self._open(code, self.rows)
        code.line(f"const int64_t r = {self._row_index()};")
        inner = self._open(code, self.e_loops, shared=False)
        code.line(f"{target} = {store(out, f'o_[r * {width} + {self._e_index()}] / l_[r]')};")
        self._close(code, depth)
