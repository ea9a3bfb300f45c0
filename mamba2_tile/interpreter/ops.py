"""cuTile's tile operations on the CPU, one NumPy expression per op (no per-element loops).

Signatures follow cuda/tile/_stub.py. Arguments that only tune precision of special
functions (`flush_to_zero`, approximate modes) or speed are accepted and ignored;
a `rounding_mode` other than round-to-nearest-even raises NotImplementedError.
"""
import builtins
import enum

import numpy as np

from . import dtypes as dt
from .dtypes import as_dtype, promote, round_to, storage_of, weak_dtype
from .errors import TileTypeError, TileValueError, TileStaticAssertionError, unsupported
from .tile import Tile, as_tile, binary, common_dtype, is_weak, make_tile, unary_float


class RoundingMode(enum.Enum):
    RN = "nearest_even"
    RZ = "zero"
    RM = "negative_inf"
    RP = "positive_inf"
    RA = "nearest_away"
    FULL = "full"
    APPROX = "approx"
    RZI = "nearest_int_to_zero"


def _check_rounding(rounding_mode, op):
    """Only the default rounding is modelled; FULL/APPROX only change special functions."""
    value = getattr(rounding_mode, "value", rounding_mode)
    if value not in (None, "nearest_even", "full", "approx"):
        raise unsupported(f"{op}(rounding_mode={rounding_mode})")


def _constant_shape(shape, op):
    shape = (shape,) if isinstance(shape, int) else shape
    if not isinstance(shape, tuple) or not all(type(n) is int for n in shape):
        raise TileTypeError(f"ct.{op}: shape must be compile-time constant ints, got {shape!r}")
    return shape


# -- creating tiles --------------------------------------------------------------------

def full(shape, fill_value, dtype):
    dtype = as_dtype(dtype)
    value = as_tile(fill_value, dtype) if is_weak(fill_value) else as_tile(fill_value)
    return make_tile(np.full(_constant_shape(shape, "full"), value.data), dtype)


def zeros(shape, dtype):
    return full(shape, 0, dtype)


def ones(shape, dtype):
    return full(shape, 1, dtype)


def arange(size, /, *, dtype, start=0, step=1):
    if type(size) is not int:
        raise TileTypeError(f"ct.arange: size must be a compile-time constant int, got {size!r}")
    start, step = as_tile(start).data, as_tile(step).data
    return make_tile(start + step * np.arange(size), as_dtype(dtype))


def astile(value, /, *, dtype):
    return make_tile(np.array(value), as_dtype(dtype))


# -- elementwise arithmetic --------------------------------------------------------------

def add(x, y, /, *, rounding_mode=None, flush_to_zero=False):
    _check_rounding(rounding_mode, "add")
    return binary(np.add, x, y)


def sub(x, y, /, *, rounding_mode=None, flush_to_zero=False):
    _check_rounding(rounding_mode, "sub")
    return binary(np.subtract, x, y)


def mul(x, y, /, *, rounding_mode=None, flush_to_zero=False):
    _check_rounding(rounding_mode, "mul")
    return binary(np.multiply, x, y)


def truediv(x, y, /, *, rounding_mode=None, flush_to_zero=False):
    _check_rounding(rounding_mode, "truediv")
    return binary(np.true_divide, x, y, force_float=True)


def floordiv(x, y, /):
    return binary(np.floor_divide, x, y)


def mod(x, y, /):
    return binary(np.mod, x, y)


def divmod(x, y, /):
    return floordiv(x, y), mod(x, y)


def pow(x, y, /):
    return binary(np.power, x, y)


def cdiv(x, y, /):
    """ceil(x / y) for integers; also usable on the host with plain ints."""
    if is_weak(x) and is_weak(y):
        return -(-x // y)
    return -floordiv(-as_tile(x), y)


def maximum(x, y, /, *, flush_to_zero=False, propagate_nan=False):
    return binary(np.maximum if propagate_nan else np.fmax, x, y)


def minimum(x, y, /, *, flush_to_zero=False, propagate_nan=False):
    return binary(np.minimum if propagate_nan else np.fmin, x, y)


def atan2(x1, x2, /):
    return binary(np.arctan2, x1, x2, force_float=True)


def bitwise_and(x, y, /):
    return binary(np.bitwise_and, x, y, integral=True)


def bitwise_or(x, y, /):
    return binary(np.bitwise_or, x, y, integral=True)


def bitwise_xor(x, y, /):
    return binary(np.bitwise_xor, x, y, integral=True)


def bitwise_lshift(x, y, /):
    return binary(np.left_shift, x, y, integral=True)


def bitwise_rshift(x, y, /):
    return binary(np.right_shift, x, y, integral=True)


def bitwise_not(x, /):
    return ~as_tile(x)


def negative(x, /):
    return -as_tile(x)


def abs(x, /):
    x = as_tile(x)
    return make_tile(np.abs(x.data), x.dtype)


def greater(x, y, /):
    return binary(np.greater, x, y, result=dt.bool_)


def greater_equal(x, y, /):
    return binary(np.greater_equal, x, y, result=dt.bool_)


def less(x, y, /):
    return binary(np.less, x, y, result=dt.bool_)


def less_equal(x, y, /):
    return binary(np.less_equal, x, y, result=dt.bool_)


def equal(x, y, /):
    return binary(np.equal, x, y, result=dt.bool_)


def not_equal(x, y, /):
    return binary(np.not_equal, x, y, result=dt.bool_)


def where(cond, x, y, /):
    cond = as_tile(cond)
    dtype = common_dtype((x, y)) or promote(weak_dtype(x), weak_dtype(y))
    x, y = as_tile(x, dtype), as_tile(y, dtype)
    return make_tile(np.where(cond.data.astype(bool), x.data, y.data), dtype)


# -- math functions (float tiles only) -------------------------------------------------------

def exp(x, /, *, rounding_mode=None):
    return unary_float(np.exp, x, "exp")


def exp2(x, /, *, flush_to_zero=False):
    return unary_float(np.exp2, x, "exp2")


def log(x, /):
    return unary_float(np.log, x, "log")


def log2(x, /):
    return unary_float(np.log2, x, "log2")


def sqrt(x, /, *, rounding_mode=None, flush_to_zero=False):
    return unary_float(np.sqrt, x, "sqrt")


def rsqrt(x, /, *, flush_to_zero=False):
    return unary_float(lambda v: 1 / np.sqrt(v), x, "rsqrt")


def sin(x, /):
    return unary_float(np.sin, x, "sin")


def cos(x, /):
    return unary_float(np.cos, x, "cos")


def tan(x, /):
    return unary_float(np.tan, x, "tan")


def sinh(x, /):
    return unary_float(np.sinh, x, "sinh")


def cosh(x, /):
    return unary_float(np.cosh, x, "cosh")


def tanh(x, /, *, rounding_mode=None):
    return unary_float(np.tanh, x, "tanh")


def floor(x, /):
    return unary_float(np.floor, x, "floor")


def ceil(x, /):
    return unary_float(np.ceil, x, "ceil")


def isnan(x, /):
    x = as_tile(x)
    return make_tile(np.isnan(x.data) if x.dtype.kind == "f" else np.zeros(x.shape, bool),
                     dt.bool_)


# -- reductions and scans -----------------------------------------------------------------
# Half-precision inputs are accumulated in float32 and rounded once at the end.

def _accumulator(x):
    return x.data.astype(np.float32) if x.dtype.kind == "f" and x.dtype.bitwidth < 32 \
        else x.data


def _axes(x, axis):
    if axis is None:
        return tuple(range(x.ndim))
    axes = axis if isinstance(axis, tuple) else (axis,)
    if not all(type(a) is int and -x.ndim <= a < builtins.max(x.ndim, 1) for a in axes):
        raise TileTypeError(f"axis {axis!r} is not a constant axis of a rank-{x.ndim} tile")
    return tuple(a % x.ndim for a in axes)


def _reduce(fn, x, axis, keepdims):
    x = as_tile(x)
    return make_tile(fn(_accumulator(x), axis=_axes(x, axis), keepdims=keepdims), x.dtype)


def _float_aware(float_fn, int_fn):
    return lambda data, **kw: (float_fn if data.dtype.kind == "f" else int_fn)(data, **kw)


def sum(x, /, axis=None, *, keepdims=False, rounding_mode=None, flush_to_zero=False):
    _check_rounding(rounding_mode, "sum")
    return _reduce(np.sum, x, axis, keepdims)


def prod(x, /, axis=None, *, keepdims=False, rounding_mode=None, flush_to_zero=False):
    _check_rounding(rounding_mode, "prod")
    return _reduce(np.prod, x, axis, keepdims)


def max(x, /, axis=None, *, keepdims=False, flush_to_zero=False, propagate_nan=False):
    return _reduce(np.max if propagate_nan else _float_aware(np.fmax.reduce, np.max),
                   x, axis, keepdims)


def min(x, /, axis=None, *, keepdims=False, flush_to_zero=False, propagate_nan=False):
    return _reduce(np.min if propagate_nan else _float_aware(np.fmin.reduce, np.min),
                   x, axis, keepdims)


def _arg(fn, x, axis, keepdims):
    x = as_tile(x)
    data = x.data.reshape(-1) if axis is None else x.data
    result = fn(data, axis=0 if axis is None else _axes(x, axis)[0])
    if keepdims:
        result = np.reshape(result, (1,) * x.ndim) if axis is None \
            else np.expand_dims(result, _axes(x, axis)[0])
    return make_tile(result, dt.int32)


def argmax(x, /, axis=None, *, keepdims=False, propagate_nan=False):
    return _arg(np.argmax, x, axis, keepdims)


def argmin(x, /, axis=None, *, keepdims=False, propagate_nan=False):
    return _arg(np.argmin, x, axis, keepdims)


def _scan(fn, x, axis, reverse):
    x = as_tile(x)
    (axis,) = _axes(x, axis)
    data = _accumulator(x)
    if reverse:
        data = np.flip(data, axis)
    out = fn(data, axis=axis)
    return make_tile(np.flip(out, axis) if reverse else out, x.dtype)


def cumsum(x, /, axis=0, *, reverse=False, rounding_mode=None, flush_to_zero=False):
    _check_rounding(rounding_mode, "cumsum")
    return _scan(np.cumsum, x, axis, reverse)


def cumprod(x, /, axis=0, *, reverse=False, rounding_mode=None, flush_to_zero=False):
    _check_rounding(rounding_mode, "cumprod")
    return _scan(np.cumprod, x, axis, reverse)


# -- shape manipulation ---------------------------------------------------------------------

def reshape(x, /, shape):
    x = as_tile(x)
    shape = _constant_shape(shape, "reshape")
    if int(np.prod(shape)) != x.data.size:
        raise TileTypeError(f"cannot reshape a tile of shape {x.shape} into {shape}")
    return Tile(x.data.reshape(shape), x.dtype)


def permute(x, /, axes):
    x = as_tile(x)
    if sorted(axes) != list(range(x.ndim)):
        raise TileTypeError(f"permute axes {axes!r} are not a permutation of {x.ndim} axes")
    return Tile(np.transpose(x.data, axes), x.dtype)


def transpose(x, /, axis0=None, axis1=None):
    x = as_tile(x)
    if axis0 is None and axis1 is None:
        if x.ndim != 2:
            raise TileTypeError(f"transpose without axes needs a 2-D tile, got shape {x.shape}")
        axis0, axis1 = 0, 1
    return Tile(np.swapaxes(x.data, axis0, axis1), x.dtype)


def expand_dims(x, /, axis):
    x = as_tile(x)
    return Tile(np.expand_dims(x.data, axis), x.dtype)


def broadcast_to(x, /, shape):
    x = as_tile(x)
    shape = _constant_shape(shape, "broadcast_to")
    try:
        return Tile(np.broadcast_to(x.data, shape).copy(), x.dtype)
    except ValueError:
        raise TileTypeError(f"cannot broadcast a tile of shape {x.shape} to {shape}") from None


def cat(tiles, /, axis):
    if not isinstance(tiles, tuple) or len(tiles) != 2:
        raise TileTypeError("ct.cat takes a tuple of exactly two tiles")
    a, b = tiles
    if a.dtype is not b.dtype:
        raise TileTypeError(f"ct.cat: tiles must have the same dtype: {a.dtype} != {b.dtype}")
    try:
        return Tile(np.concatenate((a.data, b.data), axis=axis), a.dtype)
    except ValueError:
        raise TileTypeError(f"ct.cat: cannot concatenate shapes {a.shape} and {b.shape} "
                            f"along axis {axis}") from None


def _subtile(x, index, shape, op):
    shape = _constant_shape(shape, op)
    index = index if isinstance(index, tuple) else (index,)
    if len(shape) != x.ndim or len(index) != x.ndim or \
            any(n % s for n, s in zip(x.shape, shape)):
        raise TileTypeError(f"ct.{op}: shape {shape} must evenly divide the tile shape "
                            f"{x.shape}, with one index per axis")
    index = tuple(int(i) for i in index)
    if any(not 0 <= i < n // s for i, n, s in zip(index, x.shape, shape)):
        raise TileValueError(f"ct.{op}: index {index} is outside the grid of {shape} "
                             f"subtiles of a {x.shape} tile")
    return tuple(slice(i * s, (i + 1) * s) for i, s in zip(index, shape))


def extract(x, /, index, shape):
    x = as_tile(x)
    return Tile(x.data[_subtile(x, index, shape, "extract")].copy(), x.dtype)


def insert(x, /, index, value):
    x, value = as_tile(x), as_tile(value)
    data = x.data.copy()
    data[_subtile(x, index, value.shape, "insert")] = round_to(value.data, x.dtype)
    return Tile(data, x.dtype)


def item(x):
    return reshape(x, ())


def astype(x, dtype, /, *, rounding_mode=None):
    _check_rounding(rounding_mode, "astype")
    x, dtype = as_tile(x), as_dtype(dtype)
    return x if x.dtype is dtype else make_tile(x.data, dtype)


def bitcast(x, /, dtype):
    x, dtype = as_tile(x), as_dtype(dtype)
    if x.dtype.bitwidth != dtype.bitwidth or dt.bool_ in (x.dtype, dtype) or \
            x.dtype.storage.itemsize * 8 != x.dtype.bitwidth or \
            storage_of(dtype).itemsize * 8 != dtype.bitwidth:
        raise unsupported(f"bitcast({x.dtype} -> {dtype})")
    return Tile(x.data.view(storage_of(dtype)), dtype)


# -- matrix multiply ------------------------------------------------------------------------

# Input dtype -> accumulator dtypes cuTile's mma accepts (the first is the default).
MMA_DTYPES = {
    dt.float16: (dt.float16, dt.float32),
    dt.bfloat16: (dt.float32,),
    dt.float32: (dt.float32,),
    dt.tfloat32: (dt.float32,),
    dt.float64: (dt.float64,),
    dt.int8: (dt.int32,),
    dt.uint8: (dt.int32,),
}


def _exact_matmul(x, y):
    """x @ y with exact products and a wide accumulator: float64 or int64."""
    wide = np.int64 if x.dtype.kind in "iu" else np.float64
    return np.matmul(x.data.astype(wide), y.data.astype(wide))


def _check_matmul_shapes(x, y, op):
    if x.ndim not in (2, 3) or y.ndim not in (2, 3) or x.shape[-1] != y.shape[-2]:
        raise TileTypeError(f"ct.{op}: shapes {x.shape} and {y.shape} cannot be multiplied: "
                            "need (..., M, K) and (..., K, N)")


def mma(x, y, /, acc, *, use_fast_acc=False):
    """acc + x @ y. fp32 inputs are multiplied in full fp32 (cast to ct.tfloat32 for TF32)."""
    x, y, acc = as_tile(x), as_tile(y), as_tile(acc)
    if x.dtype is not y.dtype and {x.dtype, y.dtype} != {dt.int8, dt.uint8}:
        raise TileTypeError(f"ct.mma: x and y must have the same dtype, got {x.dtype} and "
                            f"{y.dtype}")
    if x.dtype not in MMA_DTYPES:
        raise TileTypeError(f"ct.mma: unsupported input dtype {x.dtype}; supported: "
                            f"{', '.join(map(str, MMA_DTYPES))}")
    if acc.dtype not in MMA_DTYPES[x.dtype]:
        raise TileTypeError(f"ct.mma: unsupported accumulator dtype {acc.dtype} for {x.dtype} "
                            f"inputs; supported: {', '.join(map(str, MMA_DTYPES[x.dtype]))}")
    _check_matmul_shapes(x, y, "mma")
    product = _exact_matmul(x, y)
    if product.shape != acc.shape:
        raise TileTypeError(f"ct.mma: x @ y has shape {product.shape} but the accumulator has "
                            f"shape {acc.shape}")
    return make_tile(product + acc.data, acc.dtype)


def matmul(x, y, /):
    """x @ y in the promoted input dtype (1-D operands behave as in NumPy)."""
    x, y = as_tile(x), as_tile(y)
    dtype = promote(x.dtype, y.dtype)
    if dtype not in MMA_DTYPES:
        raise TileTypeError(f"ct.matmul: unsupported dtype {dtype}")
    x, y = astype(x, dtype), astype(y, dtype)
    if x.ndim == 1 or y.ndim == 1:
        if x.shape[-1] != y.shape[0 if y.ndim == 1 else -2]:
            raise TileTypeError(f"ct.matmul: shapes {x.shape} and {y.shape} do not match")
        return make_tile(_exact_matmul(x, y), dtype)
    _check_matmul_shapes(x, y, "matmul")
    return make_tile(_exact_matmul(x, y), dtype)


# -- compile-time helpers and assertions ------------------------------------------------------
# The compiler evaluates these while tracing; the interpreter already runs plain Python.

def static_assert(condition, message=None, /):
    if not condition:
        raise TileStaticAssertionError("" if message is None else str(message))


def static_eval(expr, /):
    return expr


def static_iter(iterable):
    return iterable


def ensure_constant(value, /):
    if isinstance(value, Tile):
        raise TileTypeError("expected a compile-time constant, got a tile")
    return value


def assume_divisible_by(x, divisor):
    return x


def assert_(cond, /, message=None):
    if not np.all(as_tile(cond).data):
        raise TileValueError(f"ct.assert_ failed: {message or ''}")


# Tile methods are the same functions as their ct.* counterparts.
Tile.reshape = reshape
Tile.permute = permute
Tile.transpose = transpose
Tile.astype = astype
Tile.extract = extract
Tile.insert = insert
Tile.item = item
Tile.__matmul__ = matmul
Tile.__rmatmul__ = lambda self, other: matmul(other, self)
Tile.__divmod__ = divmod
Tile.__rdivmod__ = lambda self, other: divmod(other, self)
Tile.__lshift__ = bitwise_lshift
Tile.__rlshift__ = lambda self, other: bitwise_lshift(other, self)
Tile.__rshift__ = bitwise_rshift
Tile.__rrshift__ = lambda self, other: bitwise_rshift(other, self)
