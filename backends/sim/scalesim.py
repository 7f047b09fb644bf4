"""Run the real SCALE-Sim (PyPI `scalesim`) in its own interpreter and read back its reports.

SCALE-Sim needs numpy < 2.3, so it lives in its own virtual environment: TILEGRAPH_SCALESIM_PYTHON
names an interpreter that has it, else `scalesim_python()` creates one (once, under a file lock,
built in a temporary folder and renamed into place, so concurrent test workers are safe) at
$XDG_CACHE_HOME/tilegraph/scalesim-venv with `pip install scalesim "numpy<2.3"`. When that is
impossible (no network, no venv module) `ScaleSimUnavailable` says why.
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from .scalesim_config import ConvLayer, ScaleSimConfig, topology_text

PACKAGES = ("scalesim", "numpy<2.3")


class ScaleSimUnavailable(RuntimeError):
    """SCALE-Sim cannot be obtained here (the message says why)."""


@dataclass(frozen=True)
class ScaleSimLayer:
    """SCALE-Sim's numbers for one layer: cycles (COMPUTE_REPORT) and DRAM words (DETAILED_ACCESS_REPORT)."""

    compute_cycles: int  # "Total Cycles": stall-free compute in CALC mode
    total_cycles: int  # "Total Cycles (incl. prefetch)": first DRAM read to last DRAM write
    stall_cycles: int
    dram_ifmap_reads: int
    dram_filter_reads: int
    dram_ofmap_writes: int

    @property
    def dram_reads(self) -> int:
        return self.dram_ifmap_reads + self.dram_filter_reads


@dataclass(frozen=True)
class ScaleSimRun:
    """SCALE-Sim's results per layer (topology order) for one dataflow, and its wall seconds."""

    dataflow: str
    layers: tuple[ScaleSimLayer, ...]
    wall_s: float


def venv_dir() -> Path:
    """Where the SCALE-Sim virtual environment is cached."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tilegraph" / "scalesim-venv"


def _has_scalesim(python: Path) -> bool:
    done = subprocess.run([str(python), "-c", "import scalesim.scale_sim"], capture_output=True)
    return done.returncode == 0


def scalesim_python() -> Path:
    """An interpreter that imports scalesim: TILEGRAPH_SCALESIM_PYTHON, else the cached venv (created once)."""
    given = os.environ.get("TILEGRAPH_SCALESIM_PYTHON")
    if given:
        if not _has_scalesim(Path(given)):
            raise ScaleSimUnavailable(f"TILEGRAPH_SCALESIM_PYTHON={given} cannot import scalesim")
        return Path(given)
    venv = venv_dir()
    python = venv / "bin" / "python"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / "scalesim-venv.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one creator at a time; the others find it done
        if python.exists() and _has_scalesim(python):
            return python
        shutil.rmtree(venv, ignore_errors=True)
        staging = Path(tempfile.mkdtemp(prefix="scalesim-venv.", dir=venv.parent))
        try:
            steps = ([sys.executable, "-m", "venv", str(staging)],
                     [str(staging / "bin" / "python"), "-m", "pip", "install", "-q", *PACKAGES])
            for step in steps:
                done = subprocess.run(step, capture_output=True, text=True)
                if done.returncode != 0:
                    raise ScaleSimUnavailable(f"cannot create the SCALE-Sim venv ({' '.join(step[2:4])} failed): "
                                              f"{(done.stderr or done.stdout).strip()[-600:]}")
            os.rename(staging, venv)  # the venv's interpreter finds its packages relative to itself
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    if not _has_scalesim(python):
        raise ScaleSimUnavailable(f"{python} cannot import scalesim after installing it")
    return python


RUNNER = r'''
import json, sys, time
from scalesim.scale_sim import scalesim
spec = json.load(open(sys.argv[1]))
out = {}
for df, cfg_text in spec["configs"].items():
    cfg = f"{spec['dir']}/{df}.cfg"
    open(cfg, "w").write(cfg_text)
    start = time.perf_counter()
    s = scalesim(save_disk_space=True, verbose=False, config=cfg, topology=spec["topology"], layout=spec["layout"])
    s.run_scale(top_path=f"{spec['dir']}/out_{df}")
    wall = time.perf_counter() - start
    def rows(name):
        lines = open(f"{spec['dir']}/out_{df}/tg/{name}").read().strip().splitlines()[1:]
        return [[float(x) for x in line.split(",") if x.strip()] for line in lines]
    out[df] = {"wall": wall, "compute": rows("COMPUTE_REPORT.csv"), "access": rows("DETAILED_ACCESS_REPORT.csv")}
print(json.dumps(out))
'''


def _layer(compute: list[float], access: list[float]) -> ScaleSimLayer:
    # COMPUTE_REPORT: LayerID, Total Cycles (incl. prefetch), Total Cycles, Stall Cycles, ...
    # DETAILED_ACCESS_REPORT: LayerID, 3 x SRAM (start, stop, count), then DRAM ifmap, filter, ofmap
    return ScaleSimLayer(int(compute[2]), int(compute[1]), int(compute[3]), int(access[12]), int(access[15]),
                         int(access[18]))


def run_scalesim(layers: list[ConvLayer] | tuple[ConvLayer, ...], config: ScaleSimConfig,
                 dataflows: tuple[str, ...] = ("os", "ws", "is")) -> dict[str, ScaleSimRun]:
    """SCALE-Sim's reports for every layer under each dataflow (config's other fields as given)."""
    python = scalesim_python()
    with tempfile.TemporaryDirectory() as tmp:
        topo, layout, spec = Path(tmp, "topo.csv"), Path(tmp, "layout.csv"), Path(tmp, "spec.json")
        topo.write_text(topology_text(layers))
        # SCALE-Sim reads a layout file even when custom layouts are off; its values are unused then
        layout.write_text("layout,\n" + "".join(f"{layer.name}," + "1," * 20 + "\n" for layer in layers))
        spec.write_text(json.dumps({"dir": tmp, "topology": str(topo), "layout": str(layout),
                                    "configs": {df: replace(config, dataflow=df).cfg_text() for df in dataflows}}))
        runner = Path(tmp, "runner.py")
        runner.write_text(RUNNER)
        done = subprocess.run([str(python), str(runner), str(spec)], capture_output=True, text=True, cwd=tmp)
        if done.returncode != 0:
            raise RuntimeError(f"SCALE-Sim failed:\n{done.stderr[-3000:]}")
        data = json.loads(done.stdout.strip().splitlines()[-1])
    return {df: ScaleSimRun(df, tuple(_layer(c, a) for c, a in zip(data[df]["compute"], data[df]["access"])),
                            data[df]["wall"]) for df in dataflows}
