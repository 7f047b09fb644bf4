"""Repeated layers are analysed once: fuse memoises loop nests by group structure (refusals keep the
names of their own nodes), tile memoises its figures by kernel structure, and fused kernels carry
the loop nest fusion found. Each memo must give exactly what computing afresh gives."""
from __future__ import annotations

from importlib import import_module
from pathlib import Path

import pytest

from tilegraph.frontends.dsl import parse
from tilegraph.ir import domain as domain_module
from tilegraph.ir.domain import aligned_domain
from tilegraph.ir.program_text import print_program
from tilegraph.passes import PassManager
from tilegraph.passes.fusion import FuseOptions, fuse_graph

fuse_module = import_module("tilegraph.passes.fusion.fuse")  # the package re-exports the pass function as `fuse`
tile_module = import_module("tilegraph.passes.tiling.tile")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def layers(count: int):
    """The example transformer block, `count` times in a row (each call with its own weights)."""
    text = (EXAMPLES / "transformer_block.tg").read_text()
    chain = "x"
    for _ in range(count):
        chain = f"layer({chain})"
    text = text[:text.index("def main")] + f"""
def layer(x: f32[64, 128]) -> f32[64, 128] {{
    h = x + self_attention(norm(x))
    return h + mlp(norm(h))
}}
def main(x: f32[64, 128]) -> f32[64, 128] {{
    return {chain}
}}
"""
    return PassManager("canonicalize").run(parse(text)).graph


def unmemoised(self, nodes):
    return aligned_domain(nodes, self.spaces)


def test_fusion_memo_gives_the_kernels_and_decisions_of_aligning_each_group(monkeypatch):
    graph = layers(3)
    apart = FuseOptions(template_moves=False)  # the head split stays out of attention: refusals to rename
    kernels, decisions = fuse_graph(graph, apart)
    monkeypatch.setattr(fuse_module._Domains, "aligned", unmemoised)
    fresh_kernels, fresh_decisions = fuse_graph(graph, apart)
    assert [k.nodes for k in kernels] == [k.nodes for k in fresh_kernels]
    assert decisions == fresh_decisions
    misaligned = [d for d in decisions if not d.accepted and "a tile would need data another tile" in d.reason]
    assert len({d.reason for d in misaligned}) >= 3, "each layer's refusal names its own nodes"


def test_fusion_aligns_each_layer_structure_once(monkeypatch):
    calls = []
    original = domain_module.kernel_domain

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(domain_module, "kernel_domain", counting)
    fuse_graph(layers(1))
    one = len(calls)
    calls.clear()
    fuse_graph(layers(4))
    # not 4x: layers 2-4 hit the memo, and each costs under half what the first did (only its seams are new)
    assert (len(calls) - one) / 3 < one / 2


def test_fused_kernels_carry_the_loop_nest_fusion_found():
    program = PassManager("canonicalize,fuse").run(layers(2))
    for kernel in program.kernels:
        if kernel.kind == "generic":
            assert "domain" in kernel.__dict__
            fresh = aligned_domain(kernel.nodes)
            assert (kernel.domain.loops, kernel.domain.node_loops) == (fresh.loops, fresh.node_loops)


@pytest.mark.parametrize("count", [1, 3])
def test_tile_memo_gives_the_program_of_tiling_each_kernel(monkeypatch, count):
    graph = layers(count)
    pipeline = "canonicalize,fuse,tile{target=cpu}"
    memoised = PassManager(pipeline).run(graph)
    original = tile_module.tile_kernel

    def fresh(kernel, target, options=tile_module.TileOptions(), memo=None, orders=None):
        return original(kernel, target, options, None, orders)  # shares nothing with other kernels

    monkeypatch.setattr(tile_module, "tile_kernel", fresh)
    monkeypatch.setattr(fuse_module._Domains, "aligned", unmemoised)
    unshared = PassManager(pipeline).run(graph)
    assert print_program(memoised) == print_program(unshared)
    assert memoised.notes["tiling"] == unshared.notes["tiling"]
