"""The tile pass and its cost model.

    from tilegraph.passes.tiling import tile_program, format_tiling, TileReport
"""
from tilegraph.ir.tile_model import Costs, LowerBound, compulsory_bytes, evaluate, footprint, lower_bound
from .search import Tiling, cost_of, search
from .tile import TileOptions, TileReport, TilingError, format_tiling, split_stages, tile, tile_kernel, tile_program

__all__ = [
    "tile", "TileOptions", "TileReport", "TilingError", "tile_kernel", "tile_program", "format_tiling",
    "split_stages", "Tiling", "search", "cost_of", "evaluate", "footprint", "lower_bound", "LowerBound",
    "compulsory_bytes", "Costs",
]
