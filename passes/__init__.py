"""tilegraph.passes: the pass registry, pipelines, the pass manager, and the passes themselves.

    from tilegraph.passes import PassManager, Pipeline, step
    program = PassManager("canonicalize,fuse,tile{target=accel-small}").run(graph)
    program = PassManager(Pipeline.of("canonicalize", step("tile", target="accel-small"))).run(graph)
"""
from importlib import import_module
from importlib.util import find_spec

from .manager import (PassError, PassManager, PassRecord, find_program_problems, format_statistics,
                      register_property_check, verify_program)
from .pipeline import Pipeline, PipelineError, PipelineStep, parse_pipeline, step
from .registry import NoOptions, PassContext, PassSpec, all_passes, get_pass, register_pass

__all__ = [
    "PassManager", "PassError", "PassRecord", "verify_program", "find_program_problems", "format_statistics",
    "register_property_check", "Pipeline", "PipelineStep", "PipelineError", "parse_pipeline", "step",
    "PassContext", "PassSpec", "NoOptions", "register_pass", "get_pass", "all_passes", "run_pipeline",
]


def run_pipeline(program, pipeline, ctx=None, **manager_options):
    """PassManager(pipeline, **manager_options).run(program, ctx): one call for the common case."""
    return PassManager(pipeline, **manager_options).run(program, ctx)


# The pass modules register themselves on import; they come last so that they can import the names
# above. Modules not written yet are skipped (a missing pass is then an "unknown pass" error).
for _module in ("canonicalize", "fusion", "layout", "tiling", "memplan", "place"):
    if find_spec(f"{__name__}.{_module}") is not None:
        import_module(f"{__name__}.{_module}")
del _module
