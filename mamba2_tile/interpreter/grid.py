"""Which block of the launch grid is running: the state behind `ct.bid`/`ct.num_blocks`.

Blocks run one after another, so a single "current block" is enough.
"""
import contextlib

from .dtypes import int32
from .errors import TileInterpreterError, TileTypeError
from .tile import constant_tile

_current = None   # (block index, grid size), both 3-tuples, while a kernel runs


@contextlib.contextmanager
def running(block, grid):
    global _current
    previous, _current = _current, (block, grid)
    try:
        yield
    finally:
        _current = previous


def _lookup(axis, which, op):
    if _current is None:
        raise TileInterpreterError(f"ct.{op} can only be called inside a launched kernel")
    if type(axis) is not int or axis not in (0, 1, 2):
        raise TileTypeError(f"ct.{op}: axis must be the constant 0, 1 or 2, got {axis!r}")
    return constant_tile(_current[which][axis], int32)


def bid(axis):
    """The index of the running block along `axis` (an int32 scalar)."""
    return _lookup(axis, 0, "bid")


def num_blocks(axis):
    """The grid size along `axis` (an int32 scalar)."""
    return _lookup(axis, 1, "num_blocks")
