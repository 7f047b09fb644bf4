"""Run the real SCALE-Sim (PyPI `scalesim`) in its own interpreter and read back its reports.

SCALE-Sim needs numpy < 2.3, so it lives in its own virtual environment: TILEGRAPH_SCALESIM_PYTHON
names an interpreter that has it, else `scalesim_python()` creates one (once, under a file lock,
built in a temporary folder and renamed into place, so concurrent test workers are safe) at
$XDG_CACHE_HOME/tilegraph/scalesim-venv with `pip install scalesim "numpy<2.3"`. When that is
impossible (no network, no venv module) `ScaleSimUnavailable` says why.
"""
from __future__ import annotations

import dataclasses
import fcntl
import hashlib
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
    wall_s: float = 0.0  # SCALE-Sim's wall seconds for this layer (when it ran)

    @property
    def dram_reads(self) -> int:
        return self.dram_ifmap_reads + self.dram_filter_reads


@dataclass(frozen=True)
class ScaleSimRun:
    """SCALE-Sim's results per layer (topology order) for one dataflow, and its wall seconds (their sum)."""

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


RUNNER = r"""
import json, os, sys, time
from scalesim.scale_sim import scalesim
spec = json.load(open(sys.argv[1]))
for job in spec["jobs"]:
    work = job["dir"]
    os.makedirs(work, exist_ok=True)
    cfg, topo, layout = (os.path.join(work, name) for name in ("scale.cfg", "topo.csv", "layout.csv"))
    open(cfg, "w").write(job["cfg"])
    open(topo, "w").write(job["topology"])
    # SCALE-Sim reads a layout file even when custom layouts are off; its values are unused then
    open(layout, "w").write("layout,\nL," + "1," * 20 + "\n")
    start = time.perf_counter()
    s = scalesim(save_disk_space=True, verbose=False, config=cfg, topology=topo, layout=layout)
    s.run_scale(top_path=os.path.join(work, "out"))
    wall = time.perf_counter() - start
    def row(name):
        line = open(os.path.join(work, "out", "tg", name)).read().strip().splitlines()[1]
        return [float(x) for x in line.split(",") if x.strip()]
    result = {"wall": wall, "compute": row("COMPUTE_REPORT.csv"), "access": row("DETAILED_ACCESS_REPORT.csv")}
    tmp = job["result"] + ".tmp"
    json.dump(result, open(tmp, "w"))
    os.replace(tmp, job["result"])
"""


def _layer(result: dict) -> ScaleSimLayer:
    compute, access = result["compute"], result["access"]
    # COMPUTE_REPORT: LayerID, Total Cycles (incl. prefetch), Total Cycles, Stall Cycles, ...
    # DETAILED_ACCESS_REPORT: LayerID, 3 x SRAM (start, stop, count), then DRAM ifmap, filter, ofmap
    return ScaleSimLayer(int(compute[2]), int(compute[1]), int(compute[3]), int(access[12]), int(access[15]),
                         int(access[18]), float(result["wall"]))


def results_dir() -> Path:
    """Where SCALE-Sim's per-layer results are cached (TILEGRAPH_SCALESIM_RESULTS, else the user cache)."""
    given = os.environ.get("TILEGRAPH_SCALESIM_RESULTS")
    return Path(given) if given else venv_dir().parent / "scalesim-results"


def job_key(layer: ConvLayer, config: ScaleSimConfig) -> str:
    """A layer's cache key: its topology row (without its name) and the whole config text."""
    text = PACKAGES[0] + "\n" + ConvLayer("L", *dataclasses.astuple(layer)[1:]).topology_row() + config.cfg_text()
    return hashlib.sha1(text.encode()).hexdigest()


def run_scalesim(layers: list[ConvLayer] | tuple[ConvLayer, ...], config: ScaleSimConfig,
                 dataflows: tuple[str, ...] = ("os", "ws", "is"), workers: int = 1,
                 cache: bool = True) -> dict[str, ScaleSimRun]:
    """SCALE-Sim's reports for every layer under each dataflow (config's other fields as given).

    Each layer runs alone (its own topology file), so every layer has its own wall time; with
    `cache`, a finished layer's result is kept in `results_dir()` and not run again (its wall time
    is the one measured when it ran); without, every layer runs now and the cache is left alone.
    `workers` SCALE-Sim processes share the layers.
    """
    with tempfile.TemporaryDirectory() as tmp:
        store = results_dir() if cache else Path(tmp, "results")
        store.mkdir(parents=True, exist_ok=True)
        jobs: dict[tuple[str, int], Path] = {}
        todo = []
        for df in dataflows:
            cfg = replace(config, dataflow=df)
            for i, layer in enumerate(layers):
                path = store / f"{job_key(layer, cfg)}.json"
                jobs[df, i] = path
                if not path.exists():
                    todo.append({"dir": str(Path(tmp, f"{df}{i}")), "cfg": cfg.cfg_text(), "result": str(path),
                                 "topology": topology_text([ConvLayer("L", *dataclasses.astuple(layer)[1:])])})
        if todo:
            python = scalesim_python()
            runner = Path(tmp, "runner.py")
            runner.write_text(RUNNER)
            count = max(1, min(workers, len(todo)))
            procs = []
            for w in range(count):
                spec = Path(tmp, f"spec{w}.json")
                spec.write_text(json.dumps({"jobs": todo[w::count]}))
                procs.append(subprocess.Popen([str(python), str(runner), str(spec)], cwd=tmp, text=True,
                                              stdout=subprocess.PIPE, stderr=subprocess.PIPE))
            errors = [p.communicate()[1] for p in procs if p.wait() != 0]
            if errors:
                raise RuntimeError(f"SCALE-Sim failed:\n{errors[0][-3000:]}")
        out = {}
        for df in dataflows:
            found = tuple(_layer(json.loads(jobs[df, i].read_text())) for i in range(len(layers)))
            out[df] = ScaleSimRun(df, found, sum(layer.wall_s for layer in found))
    return out
