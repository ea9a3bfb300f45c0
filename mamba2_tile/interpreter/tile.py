"""The Tile value: a NumPy array plus a cuTile dtype, and how tiles combine elementwise.

A tile's shape is fixed when it is made and every dimension must be a power of two, as
cuTile requires; the check lives in the constructor so that every op gets it for free.

Elementwise ops follow cuTile's data model:

* shapes broadcast like NumPy;
* Python numbers are *loosely typed* constants: they take the dtype of the tile they are
  combined with, unless they are of a higher category (bool < integral < float), in which
  case they become int32/int64 or float32 (a float constant times an int32 tile is float32);
* two tiles promote through the table in `dtypes.promote`;
* the result is rounded to its dtype (this is where bfloat16 math gets its precision).
"""
import numpy as np

from . import printing
from .dtypes import (DType, as_dtype, bool_, category, float32, promote, round_to, storage_of,
                     weak_dtype)
from .errors import TileTypeError, TileUnsupportedFeatureError, TileValueError


def is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


class Tile:
    """An immutable block of values living in one block's registers."""

    __slots__ = ("data", "dtype")
    __hash__ = None             # `==` builds a tile, so tiles cannot be dict keys
    __array_ufunc__ = None      # make `ndarray + tile` fail loudly instead of looping

    def __init__(self, data: np.ndarray, dtype: DType):
        if not all(is_power_of_two(n) for n in data.shape):
            raise TileTypeError(f"tile shape {tuple(data.shape)} is not allowed: every "
                                 "dimension of a tile must be a power of two")
        self.data = data
        self.dtype = dtype

    @property
    def shape(self) -> tuple:
        return tuple(self.data.shape)

    @property
    def ndim(self) -> int:
        return self.data.ndim

    def __repr__(self):
        return f"Tile(shape={self.shape}, dtype={self.dtype}, data={self.data.tolist()})"

    # Printing goes through the same formatter as the GPU's printf lowering.
    def __format__(self, spec):
        return printing.format_tile(self, spec)

    def __str__(self):
        return printing.format_tile(self, "")

    # -- a 0-d tile is a scalar: it can drive Python control flow and `range` --

    def _scalar(self, what):
        if self.ndim != 0:
            raise TileTypeError(f"{what} needs a scalar (0-d tile), got a tile of shape "
                                f"{self.shape}")
        return self.data.item()

    def __index__(self):
        if self.dtype.kind not in "biu":
            raise TileTypeError(f"cannot use a {self.dtype} tile as an index")
        return int(self._scalar("an index"))

    def __int__(self):
        return int(self._scalar("int()"))

    def __float__(self):
        return float(self._scalar("float()"))

    def __bool__(self):
        return bool(self._scalar("a condition"))

    # -- indexing: only `:` and `None` (insert an axis), like cuTile --

    def __getitem__(self, index):
        index = index if isinstance(index, tuple) else (index,)
        for item in index:
            if item is not None and item is not Ellipsis and item != slice(None):
                raise TileUnsupportedFeatureError(
                    f"tile[{index}]: only ':' and 'None' are supported in tile indexing")
        return Tile(self.data[index], self.dtype)

    # -- operators --

    def __add__(self, other): return binary(np.add, self, other)
    def __radd__(self, other): return binary(np.add, other, self)
    def __sub__(self, other): return binary(np.subtract, self, other)
    def __rsub__(self, other): return binary(np.subtract, other, self)
    def __mul__(self, other): return binary(np.multiply, self, other)
    def __rmul__(self, other): return binary(np.multiply, other, self)
    def __truediv__(self, other): return binary(np.true_divide, self, other, force_float=True)
    def __rtruediv__(self, other): return binary(np.true_divide, other, self, force_float=True)
    def __floordiv__(self, other): return binary(np.floor_divide, self, other)
    def __rfloordiv__(self, other): return binary(np.floor_divide, other, self)
    def __mod__(self, other): return binary(np.mod, self, other)
    def __rmod__(self, other): return binary(np.mod, other, self)
    def __pow__(self, other): return binary(np.power, self, other)
    def __rpow__(self, other): return binary(np.power, other, self)
    def __and__(self, other): return binary(np.bitwise_and, self, other, integral=True)
    def __rand__(self, other): return binary(np.bitwise_and, other, self, integral=True)
    def __or__(self, other): return binary(np.bitwise_or, self, other, integral=True)
    def __ror__(self, other): return binary(np.bitwise_or, other, self, integral=True)
    def __xor__(self, other): return binary(np.bitwise_xor, self, other, integral=True)
    def __rxor__(self, other): return binary(np.bitwise_xor, other, self, integral=True)
    def __lt__(self, other): return binary(np.less, self, other, result=bool_)
    def __le__(self, other): return binary(np.less_equal, self, other, result=bool_)
    def __gt__(self, other): return binary(np.greater, self, other, result=bool_)
    def __ge__(self, other): return binary(np.greater_equal, self, other, result=bool_)
    def __eq__(self, other): return binary(np.equal, self, other, result=bool_)
    def __ne__(self, other): return binary(np.not_equal, self, other, result=bool_)
    def __neg__(self): return make_tile(-self.data, self.dtype)

    def __invert__(self):
        if self.dtype.kind not in "biu":
            raise TileTypeError(f"~ needs an integer or bool tile, got {self.dtype}")
        return Tile(~self.data, self.dtype)


def make_tile(values, dtype) -> Tile:
    """A tile of `dtype` holding `values`, converted and rounded to that dtype."""
    dtype = as_dtype(dtype)
    return Tile(np.array(round_to(values, dtype), dtype=storage_of(dtype)), dtype)


def is_weak(value) -> bool:
    """Python numbers are cuTile's loosely typed constants."""
    return isinstance(value, (bool, int, float))


def as_tile(value, dtype=None) -> Tile:
    """A tile for an operand: tiles pass through, constants become 0-d tiles."""
    if isinstance(value, Tile):
        return value
    if isinstance(value, np.generic):
        value = value.item()
    if not is_weak(value):
        raise TileTypeError(f"expected a tile or a number, got {type(value).__name__}")
    return constant_tile(value, dtype or weak_dtype(value))


def constant_tile(value, dtype: DType) -> Tile:
    """A 0-d tile of `dtype` from a Python number, refusing values that do not fit."""
    storage = storage_of(dtype)
    if dtype.kind in "iu" and isinstance(value, int) and not isinstance(value, bool):
        info = np.iinfo(storage)
        if not info.min <= value <= info.max:
            raise TileValueError(f"constant {value} does not fit in {dtype}")
    return make_tile(np.asarray(value), dtype)


def common_dtype(operands, force_float=False):
    """cuTile's promotion of a mix of tiles and loosely typed constants; None if all constant."""
    tiles = [x for x in operands if isinstance(x, Tile)]
    if not tiles:
        return None
    dtype = tiles[0].dtype
    for t in tiles[1:]:
        dtype = promote(dtype, t.dtype)
    for value in operands:
        if not isinstance(value, Tile):
            if not is_weak(value):
                raise TileTypeError(f"expected a tile or a number, got {type(value).__name__}")
            loose = weak_dtype(value)
            if category(loose) > category(dtype):
                dtype = loose
    if force_float and dtype.kind != "f":
        dtype = float32
    return dtype


def binary(fn, x, y, *, result=None, force_float=False, integral=False):
    """Apply a NumPy ufunc to two operands with cuTile broadcasting and promotion.

    `result` fixes the result dtype (bool for comparisons); otherwise it is the
    promoted operand dtype.
    """
    x = x.item() if isinstance(x, np.generic) else x
    y = y.item() if isinstance(y, np.generic) else y
    dtype = common_dtype((x, y), force_float)
    if dtype is None:   # two constants: plain Python arithmetic, as the compiler folds it
        return fn(np.asarray(x), np.asarray(y)).item()
    if integral and dtype.kind not in "biu":
        raise TileTypeError(f"{fn.__name__} needs integer or bool operands, got {dtype}")
    a, b = as_tile(x, dtype).data, as_tile(y, dtype).data
    a, b = a.astype(storage_of(dtype), copy=False), b.astype(storage_of(dtype), copy=False)
    try:
        shape = np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise TileTypeError(f"cannot broadcast tile shapes {a.shape} and {b.shape}") from None
    with np.errstate(all="ignore"):
        out = fn(a, b)
    return make_tile(np.broadcast_to(out, shape), result or dtype)


def unary_float(fn, x, name):
    """Apply a NumPy math function to a float tile (cuTile's math ops take floats only)."""
    x = as_tile(x)
    if x.dtype.kind != "f":
        raise TileTypeError(f"ct.{name} needs a floating-point tile, got {x.dtype}; "
                            "cast it first with ct.astype")
    with np.errstate(all="ignore"):
        return make_tile(fn(x.data), x.dtype)
