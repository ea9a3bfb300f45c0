"""Which block of the launch grid is running: the state behind `ct.bid`/`ct.num_blocks`.

Blocks of one launch run one after another, so one "current block" per launch is enough.
It lives in a context variable, not a module global: two threads launching kernels at once
(a data loader and a model, say) each see their own block, never the other's.
"""
import contextlib
import contextvars

from .dtypes import int32
from .errors import TileInterpreterError, TileTypeError
from .tile import constant_tile

# (block index, grid size), both 3-tuples, while a kernel runs in this thread / task.
_current = contextvars.ContextVar("mamba2_tile_interpreter_block", default=None)


@contextlib.contextmanager
def running(block, grid):
    token = _current.set((block, grid))
    try:
        yield
    finally:
        _current.reset(token)


def _lookup(axis, which, op):
    current = _current.get()
    if current is None:
        raise TileInterpreterError(f"ct.{op} can only be called inside a launched kernel")
    if type(axis) is not int or axis not in (0, 1, 2):
        raise TileTypeError(f"ct.{op}: axis must be the constant 0, 1 or 2, got {axis!r}")
    return constant_tile(current[which][axis], int32)


def bid(axis):
    """The index of the running block along `axis` (an int32 scalar)."""
    return _lookup(axis, 0, "bid")


def num_blocks(axis):
    """The grid size along `axis` (an int32 scalar)."""
    return _lookup(axis, 1, "num_blocks")
