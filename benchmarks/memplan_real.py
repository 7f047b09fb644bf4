"""The real-model tables of `benchmarks/memplan.py`: plans with weights and streaming, and minimum arenas.

    python benchmarks/memplan.py --real-models   # GPT-2 small, BERT-base, ResNet-50, MobileNetV2 with weights
    python benchmarks/memplan.py --min-arena     # smallest spill-free arena, activations only

Models come from `transformers` configs with random weights (nothing downloaded; builders shared with
`torch_models.py`), imported through `tilegraph.frontends.fx`, and the keyword-spotting DS-CNN of
MLPerf Tiny is defined here. Each table is written into its own marked section of the results file,
so the tables can be rerun separately.
"""
from __future__ import annotations

import re
import time
from pathlib import Path

TILE = "canonicalize,fuse,tile{target=accel-small}"
CAPACITIES = ("256KiB", "1MiB", "4MiB", "8MiB")
REAL_MODELS = ("gpt2_small", "bert_base", "resnet50", "mobilenetv2")
ARENA_MODELS = ("mobilenetv2", "resnet18", "resnet50", "bert_base", "gpt2_small", "ds_cnn_kws")


def _ds_cnn():
    """MLPerf Tiny's keyword-spotting DS-CNN: a 49x10 MFCC input, a 64-channel 10x4 stride-2 conv, four
    depthwise-separable blocks (3x3 depthwise, 1x1 pointwise, batch norms, ReLUs), average pool, fc 12."""
    import torch
    from torch import nn
    from zoo_models import init_weights

    def bn_relu(conv: nn.Module) -> list[nn.Module]:
        return [conv, nn.BatchNorm2d(64), nn.ReLU()]

    layers = bn_relu(nn.Conv2d(1, 64, (10, 4), stride=2, padding=(5, 1)))
    for _ in range(4):
        layers += bn_relu(nn.Conv2d(64, 64, 3, padding=1, groups=64)) + bn_relu(nn.Conv2d(64, 64, 1))
    model = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 12))
    return init_weights(model), (torch.randn(1, 1, 49, 10, generator=torch.Generator().manual_seed(3)),)


def _resnet18():
    import transformers
    from torch_models import _images
    from zoo_models import init_weights

    config = transformers.ResNetConfig(layer_type="basic", depths=[2, 2, 2, 2], hidden_sizes=[64, 128, 256, 512])
    return _images(init_weights(transformers.ResNetModel(config)), 1, 224)


def build(name: str):
    """(module, example inputs) of model `name` at batch 1 (images 224x224, text 128 tokens)."""
    if name == "ds_cnn_kws":
        return _ds_cnn()
    if name == "resnet18":
        return _resnet18()
    from torch_models import WHOLE_MODELS

    return {m.name: m for m in WHOLE_MODELS}[name].build(1, False, None)


def import_graph(name: str):
    """The model's graph through the torch frontend (parameters carry their values)."""
    import torch

    from tilegraph.frontends.fx import from_module

    module, inputs = build(name)
    with torch.no_grad():
        return from_module(module, inputs)


def _mib(n: int) -> str:
    return f"{n / 2 ** 20:,.2f}"


def real_models_table(time_limit: float, models=REAL_MODELS, capacities=CAPACITIES,
                      log=print) -> tuple[list[str], str]:
    """(rows, summary): each model fused and tiled, planned with weights and streaming at each capacity
    and replayed by the checker; a capacity that cannot be planned gives its error as the row."""
    from tilegraph.ir.errors import TilegraphError
    from tilegraph.passes import run_pipeline
    from tilegraph.passes.memplan import from_program
    from tilegraph.passes.memplan.pass_ import MemplanOptions, plan_program, plan_violations

    rows, plans, failed, invalid = [], [], 0, 0
    for name in models:
        start = time.perf_counter()
        program = run_pipeline(import_graph(name), TILE)
        log(f"{name}: imported, fused and tiled in {time.perf_counter() - start:.1f} s, {len(program.kernels)} kernels")
        tensors = from_program(program, weights=True).num_tensors
        for cap in capacities:
            head = f"| {name} | {cap} | {len(program.kernels)} | {tensors} "
            try:
                clock = time.perf_counter()
                plan = plan_program(program, MemplanOptions(capacity=cap, weights=True, stream=True,
                                                            time_limit=time_limit))
                seconds = time.perf_counter() - clock
            except TilegraphError as error:
                failed += 1
                rows.append(head + "| - | - | - | - | - | - | - | - | - | not planned: "
                            + str(error).replace("|", "/").replace("\n", " ") + " |\n")
                log(rows[-1].strip())
                continue
            bad = plan_violations(program, plan)
            invalid += bool(bad)
            plans.append(plan)
            red = "-" if not plan.baseline_traffic else f"{1 - plan.traffic / plan.baseline_traffic:.1%}"
            status = plan.status if not bad else f"INVALID: {bad[0]}"
            rows.append(head + f"| {len(plan.streamed)} | {_mib(plan.streamed_traffic)} "
                        f"| {_mib(plan.streamed_compulsory)} | {_mib(plan.traffic)} | {_mib(plan.baseline_traffic)} "
                        f"| {red} | {_mib(plan.bounds.traffic)} | {plan.gap:.1%} | {seconds:.1f} | {status} |\n")
            log(rows[-1].strip())
    spilled = [p for p in plans if p.baseline_traffic]
    summary = (f"\n- {len(plans)} of {len(plans) + failed} model/capacity pairs planned, {invalid} rejected by the "
               f"checker. With every tensor that cannot be resident whole beside the rest of a kernel's working set "
               f"streamed, the baseline spills resident tensors in {len(spilled)} of {len(plans)} rows, where ours moves {sum(p.traffic for p in spilled) / 2 ** 20:.2f} MiB against its "
               f"{sum(p.baseline_traffic for p in spilled) / 2 ** 20:.2f} MiB.\n"
               f"- Largest gap to the bound: {max((p.gap for p in plans), default=0):.1%}; proven optimal: "
               f"{sum(p.status == 'optimal' for p in plans)} of {len(plans)}.\n")
    return rows, summary


REAL_HEADER = ("| model | capacity | kernels | tensors | streamed tensors | streamed re-reads (MiB) "
               "| streamed compulsory (MiB) | resident traffic (MiB) | best baseline (MiB) | reduction "
               "| bound (MiB) | gap | solve s | status |\n"
               "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")


def min_arena_table(time_limit: float, models=ARENA_MODELS, log=print) -> tuple[list[str], str]:
    """(rows, summary): the smallest spill-free arena (order and offsets together) against TFLite
    Micro's greedy-by-size arena and the peak live bytes in the framework's order, activations only."""
    from tilegraph.passes import run_pipeline
    from tilegraph.passes.memplan import check_plan, from_program
    from tilegraph.passes.memplan.footprint import min_footprint

    rows, found_all = [], []
    for name in models:
        start = time.perf_counter()
        program = run_pipeline(import_graph(name), "canonicalize,fuse")
        problem = from_program(program, weights=False)
        log(f"{name}: {len(program.kernels)} kernels, {problem.num_tensors} tensors "
            f"({time.perf_counter() - start:.1f} s to import and fuse)")
        found = min_footprint(problem, time_limit=time_limit)
        check_plan(problem, found.plan)
        found_all.append((name, found, problem.max_working_set()[0]))
        red = f"{1 - found.arena / found.framework_greedy:.1%}" if found.framework_greedy else "-"
        rows.append(f"| {name} | {problem.num_kernels} | {problem.num_tensors} | {found.arena:,} | {found.bound:,} "
                    f"| {found.gap:.1%} | {found.framework_greedy:,} | {found.framework_peak:,} | {red} "
                    f"| {found.plan.solve_time:.1f} | {found.plan.solver} |\n")
        log(rows[-1].strip())
    met = [name for name, f, ws in found_all if f.framework_greedy <= ws]
    better = [f"{name} ({1 - f.arena / f.framework_greedy:.1%})" for name, f, _ in found_all
              if f.arena < f.framework_greedy]
    summary = (f"\n- Greedy-by-size in the framework's order already meets the lower bound (the largest kernel "
               f"working set, which no order or placement goes below) for {len(met)} of {len(found_all)} models "
               f"({', '.join(met) or 'none'}): on these mostly sequential fused graphs no order or placement can "
               f"do better. Smaller than greedy: {', '.join(better) or 'none'}. Proven optimal: "
               f"{sum(f.bound >= f.arena for _, f, _ in found_all)} of {len(found_all)}.\n")
    return rows, summary


ARENA_HEADER = ("| model | kernels | tensors | ours (B) | bound (B) | gap | greedy-by-size, framework order (B) "
                "| framework peak live (B) | reduction vs greedy | solve s | found by |\n"
                "|---|---|---|---|---|---|---|---|---|---|---|\n")


def write_section(path: Path, key: str, text: str) -> None:
    """Replace (or append) the section marked `key` in the results file, keeping the rest."""
    begin, end = f"<!-- {key} -->", f"<!-- /{key} -->"
    body = f"{begin}\n{text.rstrip()}\n{end}\n"
    old = path.read_text() if path.exists() else ""
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end) + r"\n?", re.S)
    new = pattern.sub(lambda _: body, old) if pattern.search(old) else old.rstrip("\n") + "\n\n" + body
    path.write_text(new)


def sections(path: Path) -> str:
    """The marked sections of the results file (kept when the main table is rewritten)."""
    text = path.read_text() if path.exists() else ""
    return "".join("\n" + m.group(0) for m in re.finditer(r"<!-- ([\w-]+) -->.*?<!-- /\1 -->\n?", text, re.S))
