"""`launch(grid, kernel, args)`: run a cuTile kernel on the CPU, one block at a time.

Same arguments as `ct.launch(stream, grid, kernel, args)` without the stream. Arguments
become what a kernel sees on the GPU:

* NumPy arrays and CPU torch tensors -> `Array` (results are written in place);
* parameters annotated `ct.Constant[...]` -> the Python value itself (compile-time constant);
* other numbers -> runtime scalars: bool -> bool_, int -> int32 (int64 when it does not fit),
  float -> float32.

Blocks run in order with bid(0) varying fastest. When an interpreter error escapes a
block, its message gets the kernel source location that raised it and the block index.
"""
import inspect
import itertools
import linecache
import operator
import traceback

import numpy as np

from . import grid as grid_state
from .dtypes import as_dtype, bool_, float32, weak_dtype
from .errors import TileInterpreterError, TileTypeError, TileValueError
from .memory import Array, to_array
from .rebind import TILE_CODE, rebind, translate
from .tile import Tile, constant_tile


def kernel_function(kernel):
    """The Python function behind a `@ct.kernel` object (real cuTile's or the fallback's)."""
    function = getattr(kernel, "_pyfunc", None)
    if function is None:
        raise TypeError(f"expected a @ct.kernel object, got {kernel!r}")
    return function


def _is_constant(annotation) -> bool:
    if isinstance(annotation, str):      # `from __future__ import annotations`
        return "Constant" in annotation
    return any(type(m).__name__ == "ConstantAnnotation"
               for m in getattr(annotation, "__metadata__", ()))


def _kernel_argument(value, constant):
    if constant:
        return translate(value)
    if isinstance(value, (Array, Tile)):
        return value
    if isinstance(value, np.generic):
        return constant_tile(value.item(), as_dtype(value.dtype))
    if isinstance(value, bool):
        return constant_tile(value, bool_)
    if isinstance(value, int):
        return constant_tile(value, weak_dtype(value))
    if isinstance(value, float):
        return constant_tile(value, float32)
    return to_array(value)


def _grid(grid):
    grid = tuple(grid) if isinstance(grid, (tuple, list)) else (grid,)
    if not 1 <= len(grid) <= 3:
        raise TileValueError(f"grid must have 1 to 3 dimensions, got {grid!r}")
    grid = tuple(operator.index(n) for n in grid)
    if any(n < 1 for n in grid):
        raise TileValueError(f"grid sizes must be positive, got {grid!r}")
    return grid + (1,) * (3 - len(grid))


def locate(error: TileInterpreterError, block) -> None:
    """Append the innermost kernel source line in the traceback to the error message."""
    frames = [(f, line) for f, line in traceback.walk_tb(error.__traceback__)
              if f.f_code in TILE_CODE]
    where = ""
    if frames:
        frame, line = frames[-1]
        source = linecache.getline(frame.f_code.co_filename, line).strip()
        where = (f"\n  File \"{frame.f_code.co_filename}\", line {line}, in "
                 f"{frame.f_code.co_name}\n    {source}")
    error.args = (f"{error.args[0] if error.args else ''}{where}\n  (in block {block})",)


def launch(grid, kernel, args):
    """Run `kernel` over `grid` on the CPU; array arguments are updated in place.

    Returns the positions in `args` of the arrays the kernel stored to (the others were
    only read, and are untouched), so a caller that copied its arguments knows which
    copies to bring back.
    """
    function = kernel_function(kernel)
    grid = _grid(grid)
    parameters = list(inspect.signature(function).parameters.values())
    if len(parameters) != len(args):
        raise TileTypeError(f"kernel {function.__name__} takes {len(parameters)} arguments, "
                            f"got {len(args)}")
    values = [_kernel_argument(a, _is_constant(p.annotation))
              for p, a in zip(parameters, args)]
    runnable = rebind(function)
    block = None
    try:
        # GPU arithmetic is IEEE and raises no flags: inf - inf is a silent NaN there, so NumPy
        # must not warn about it here either (errstate is per thread / context).
        with np.errstate(all="ignore"):
            for z, y, x in itertools.product(*(range(n) for n in reversed(grid))):
                block = (x, y, z)
                with grid_state.running(block, grid):
                    runnable(*values)
    except TileInterpreterError as error:
        locate(error, block)
        raise
    finally:
        for value in values:
            if isinstance(value, Array):
                value.write_back()
    return tuple(i for i, value in enumerate(values) if isinstance(value, Array) and value.stored)
