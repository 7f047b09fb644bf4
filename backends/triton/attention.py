"""The attention kernel kind: FlashAttention's online softmax over key/value tiles.

A mixin of the kernel emitter (`kernel.KernelEmitter`). Per program (a tile of query rows, per
batch), for each key/value tile: the score nodes (q k^T, scale, masks) as generic nodes, then the
running max `m_i`, running sum `l_i` and rescaled accumulator `o_i`; the output is `o_i / l_i`,
written once (through the copies that move it into the kernel's output, when they joined the kernel). The
same recurrence as the tiled reference executor's `attention()`. Where p @ v is one 2-D tl.dot over one
row loop, `o_i` stays the dot's [rows, width] accumulator (`tl.dot(p, v, o_i * scale)`), as FlashAttention
kernels keep it: no reshape of the product into the kernel's rank-R blocks per key/value tile.
"""
from __future__ import annotations

from tilegraph.ir.templates.attention import attention_layout

from .dot import FMA_K, FMA_WIDE
from .scalar import Expr, cast, tl_type


class AttentionMixin:
    """Attention code generation for KernelEmitter."""

    def attention(self) -> None:
        domain = self.domain
        layout = attention_layout(domain, self.kernel.nodes)
        match, scores, kv, mx, pv = layout.match, layout.scores, layout.kv, layout.max, layout.pv
        out = match.output
        rows = self.region(mx) - {kv}
        acc_loops = self.region(pv) - {kv}
        self.header()
        plan = self.dot_plan(pv)
        # o_i as the dot's own accumulator: the row loops (the query tile; grouped-query attention's heads of a
        # group with it, which share k and v) are the dot's rows, no batch loop in the dot
        flat = plan is not None and not plan.bs and {d for d in rows if self.loops[d].block > 1} == set(plan.ms)
        m, n = (self.numel(plan.ms), self.numel(plan.ns)) if flat else (0, 0)
        self.line(f"m_i = tl.full({self.shape(rows)}, float('-inf'), tl.float32)")
        self.line(f"l_i = tl.zeros({self.shape(rows)}, dtype=tl.float32)")
        self.line(f"o_i = tl.zeros({f'({m}, {n})' if flat else self.shape(acc_loops)}, dtype=tl.float32)")
        opened = self.reduction_loops((kv,))
        for i in scores:
            self.whole(i)
        s, _ = self.read(match.score, domain.compose_map(mx, domain.spaces[mx].inputs[0]))
        self.check_size(mx, self.region(mx))
        self.line(f"s = tl.broadcast_to({cast(s, 'float32').code}, {self.shape(self.region(mx))})")
        if self.masks.get(kv):
            self.line(f"s = tl.where({self.masks[kv]}, s, float('-inf'))")
        self.line(f"m_new = tl.maximum(m_i, tl.max(s, axis={kv}, keep_dims=True))")
        self.line("shift = tl.where(m_new == float('-inf'), 0.0, m_new)")
        self.line("p = tl.exp(s - shift)")
        self.line("scale = tl.exp(m_i - shift)")
        self.line(f"l_i = l_i * scale + tl.sum(p, axis={kv}, keep_dims=True)")
        # p @ v through the pv node's own operand maps: `p` stands for its first operand (softmax's
        # numerator, unnormalised), in v's type so that the dot runs on tensor cores for f16/bf16
        p_value, v_value = match.pv.inputs
        v_type = tl_type(v_value.type.dtype)
        if v_type != "float32":
            self.line(f"p = p.to(tl.{v_type})")
        self.env[p_value] = Expr("p", v_type)
        self.shape_of[p_value] = self.region(mx)
        if flat:
            self.line(f"o_i = {self.dot_product(pv, plan, acc=f'o_i * tl.reshape(scale, ({m}, 1))')}")
        elif plan is not None:
            step = self.dot_block(pv, plan)
        else:
            v, _ = self.read(v_value, domain.compose_map(pv, domain.spaces[pv].inputs[1]))
            self.check_size(pv, self.region(pv))
            self.line(f"pv = tl.broadcast_to(p.to(tl.float32) * {cast(v, 'float32').code}, "
                      f"{self.shape(self.region(pv))})")
            if self.masks.get(kv):
                self.line(f"pv = tl.where({self.masks[kv]}, pv, 0.0)")
            step = f"tl.sum(pv, axis={kv}, keep_dims=True)"
        if not flat:
            self.line(f"o_i = o_i * scale + {step}")
        self.line("m_i = m_new")
        self.close_loops(opened)
        self.env.pop(p_value, None)
        t = tl_type(out.type.dtype)
        if flat:
            self.line(f"o_i = o_i / tl.reshape(l_i, ({m}, 1))")
            self.as_block("o_i", plan)
            self.line(f"res = tl.broadcast_to(o_i.to(tl.{t}), {self.shape(acc_loops)})")
        else:
            self.line(f"res = tl.broadcast_to((o_i / l_i).to(tl.{t}), {self.shape(acc_loops)})")
        self.store(out, "res", acc_loops, layout.output_map(domain))

    def walk_keys_for_fma(self) -> None:
        """On FMA units (IEEE f32) a tl.dot holds its whole K block in each thread's registers: p @ v over a tile of
        128 keys compiled to 32 registers and a 12 KB stack frame on sm_90 (HF Llama's attention: 3.07 of its
        layer's 5.56 ms on an H100). Keys are then walked FMA_K a step, or half that where the scores and output
        blocks, live together, would pass FMA_WIDE / 2 elements (head width 128 at 64 rows: 520 B spilled at 32)."""
        layout = attention_layout(self.domain, self.kernel.nodes)
        pv, kv = layout.pv, layout.kv
        plan = self.dot_plan(pv)
        if plan is None or not self.on_fma(pv, plan):
            return
        rows, width = self.numel(plan.ms) * self.numel(plan.bs), self.numel(plan.ns)
        step = FMA_K if rows * (FMA_K + width) <= FMA_WIDE // 2 else FMA_K // 2
        if self.loops[kv].block > step:
            self.step_loop(kv, step)


__all__ = ["AttentionMixin"]
