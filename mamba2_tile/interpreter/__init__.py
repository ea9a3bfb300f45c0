"""A CPU interpreter for cuTile kernels (cuTile itself has no interpreter mode).

    from mamba2_tile.interpreter import launch
    launch(grid, kernel, args)     # like ct.launch(stream, grid, kernel, args)

The kernel is the unmodified `@ct.kernel` function; it runs once per block of the grid
on NumPy tiles (see launch.py), with cuTile's semantics for loads, stores, dtypes and
errors. `SUPPORTED_OPS` names the parts of `cuda.tile` it implements; every other name
raises NotImplementedError when a kernel uses it.

Modules, in reading order: errors, dtypes, printing, tile, ops, memory, grid, api
(the interpreter's `ct`), syntax (refuse what cuTile's front end refuses), rebind (swap `ct`
inside a kernel), launch.
"""
from .api import _SUPPORTED as SUPPORTED_OPS
from .errors import (TileInterpreterError, TileStaticAssertionError, TileSyntaxError,
                     TileTypeError, TileUnsupportedFeatureError, TileValueError)
from .launch import launch

__all__ = ["launch", "SUPPORTED_OPS", "TileInterpreterError", "TileSyntaxError",
           "TileTypeError", "TileValueError", "TileStaticAssertionError",
           "TileUnsupportedFeatureError"]
