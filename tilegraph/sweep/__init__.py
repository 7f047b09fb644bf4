"""Design-space exploration: a spec of models x accelerator axes, run on a process pool or Ray, Pareto fronts.

    spec = load_spec("spec.toml")
    outcome = run_sweep(spec, Path("out"), pool_executor(2))   # or ray_executor()
    write_report(Path("out"))                                   # pareto.png, report.html

`tilegraph sweep spec.toml -o out` does the same; modules: spec (parsing, sampling, hashing), run
(the point function, executors, resume), table (journal and Parquet), pareto, report (plots, HTML).
Parquet and Ray come with the `dse` extra.
"""
from .pareto import dominates, pareto_front
from .run import SweepOutcome, pool_executor, ray_executor, run_point, run_sweep
from .spec import SpecError, SweepSpec, load_spec

__all__ = ["load_spec", "SweepSpec", "SpecError", "run_sweep", "run_point", "SweepOutcome", "pool_executor",
           "ray_executor", "pareto_front", "dominates"]
