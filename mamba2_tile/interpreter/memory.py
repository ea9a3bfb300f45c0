"""Global arrays and the ops that move data between them and tiles.

An `Array` wraps the NumPy array a kernel argument lives in. NumPy arrays are used in
place; CPU torch tensors are viewed through `.numpy()` (shared memory, so stores land in
the tensor; any strides, stride 0 included), except bfloat16 tensors, which NumPy cannot hold: they are copied into a
float32 working array and copied back when the launch ends (`Array.write_back`), and only
if the kernel stored to it: an argument a kernel only reads is never written, so its
`_version` (which autograd checks) does not move.

`load`/`store` address the array's *tile space*: index `(i, j)` with tile shape `(tm, tn)`
means elements `[i*tm:(i+1)*tm, j*tn:(j+1)*tn]` of the array with its axes permuted by
`order`. Tiles that stick out of the array are padded on load (`padding_mode`) and clipped
on store. A tile entirely outside the array is undefined behaviour in cuTile; here it is
an error. cuTile leaves the padding of `PaddingMode.UNDETERMINED` (the default) unspecified,
so we fill it with NaN (floats) or the dtype's minimum (integers): code that reads it gets
visibly wrong answers here instead of lucky zeros.
"""
import operator
import sys

import numpy as np

from .dtypes import as_dtype, bfloat16, int32, promote, round_to, storage_of
from .errors import TileTypeError, TileValueError, unsupported
from .tile import Tile, as_tile, constant_tile, is_weak


class Array:
    """A kernel's view of a global array argument."""

    def __init__(self, data: np.ndarray, dtype, write_back=None):
        self.data = data
        self.dtype = dtype
        self._write_back = write_back
        self.stored = False     # set by every store/scatter: write_back skips read-only arrays

    @property
    def shape(self):
        # Runtime int32 scalars on the GPU, not compile-time constants.
        return tuple(constant_tile(n, int32) for n in self.data.shape)

    @property
    def strides(self):
        return tuple(constant_tile(s // self.data.itemsize, int32) for s in self.data.strides)

    @property
    def ndim(self) -> int:
        return self.data.ndim

    def write_back(self):
        if self._write_back is not None and self.stored:
            self._write_back(self.data)

    def slice(self, *args, **kwargs):
        raise unsupported("Array.slice")

    def tiled_view(self, *args, **kwargs):
        raise unsupported("Array.tiled_view")


def to_array(obj) -> Array:
    """Wrap a NumPy array or CPU torch tensor kernel argument."""
    if isinstance(obj, np.ndarray):
        return Array(obj, as_dtype(obj.dtype))
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(obj, torch.Tensor):
        raise TileTypeError(f"expected an array argument, got {type(obj).__name__}")
    if obj.device.type != "cpu":
        raise TileValueError(f"the CPU interpreter needs CPU tensors, got one on {obj.device}; "
                             "use ct.launch for GPU tensors")
    tensor = obj.detach()
    if tensor.dtype == torch.bfloat16:
        return Array(tensor.float().numpy(), bfloat16,
                     write_back=lambda data: tensor.copy_(torch.from_numpy(data)))
    array = tensor.numpy()
    return Array(array, as_dtype(array.dtype))


def _require_array(array, op):
    if not isinstance(array, Array):
        raise TileTypeError(f"ct.{op} expects an array argument, got {type(array).__name__}")


def _constant_shape(shape, op):
    shape = (shape,) if isinstance(shape, int) else shape
    if not isinstance(shape, tuple) or not all(type(n) is int for n in shape):
        raise TileTypeError(f"ct.{op}: shape must be a tuple of compile-time constant ints, "
                            f"got {shape!r}")
    return shape


def _axis_order(order, ndim):
    if order == "C":
        return tuple(range(ndim))
    if order == "F":
        return tuple(reversed(range(ndim)))
    if not isinstance(order, tuple) or sorted(order) != list(range(ndim)):
        raise TileTypeError(f"order must be 'C', 'F' or a permutation of {ndim} axes, "
                            f"got {order!r}")
    return order


def _tile_region(array, index, tile_shape, order, op):
    """The (possibly clipped) slice of the permuted array that a tile index covers."""
    index = index if isinstance(index, tuple) else (index,)
    if len(index) != array.ndim:
        raise TileTypeError(f"ct.{op}: index size {len(index)} does not match the array "
                            f"rank {array.ndim}")
    index = tuple(operator.index(i) for i in index)
    view = array.data.transpose(_axis_order(order, array.ndim))
    grid = tuple(-(-n // t) for n, t in zip(view.shape, tile_shape))
    if any(not 0 <= i < g for i, g in zip(index, grid)):
        raise TileValueError(f"ct.{op}: tile index {index} is outside the tile grid {grid} "
                             f"of an array of shape {view.shape} cut into tiles of "
                             f"shape {tile_shape}")
    region = tuple(slice(i * t, min((i + 1) * t, n))
                   for i, t, n in zip(index, tile_shape, view.shape))
    return view, region


def _require_inside(inside, tile_shape, index, shape, op):
    """``check_bounds=False`` promises the tile lies wholly inside the array; on a GPU a tile
    that sticks out is then undefined behaviour, so the interpreter refuses it."""
    if tuple(inside) != tuple(tile_shape):
        raise TileValueError(f"ct.{op}: check_bounds=False, but the tile {tuple(tile_shape)} at "
                             f"index {index} sticks out of an array of shape {shape} (undefined "
                             f"behaviour on a GPU)")


def _padding_value(mode, dtype):
    mode = getattr(mode, "value", mode)
    if dtype.kind == "f":
        return {"undetermined": np.nan, "zero": 0.0, "neg_zero": -0.0, "nan": np.nan,
                "pos_inf": np.inf, "neg_inf": -np.inf}[mode]
    if mode in ("nan", "pos_inf", "neg_inf", "neg_zero"):
        raise TileTypeError(f"padding_mode {mode} needs a floating-point array, "
                            f"got {dtype}")
    if mode == "zero":
        return 0
    return True if dtype.kind == "b" else np.iinfo(storage_of(dtype)).min


def load(array, index, shape, *, order="C", padding_mode="undetermined", check_bounds=True,
         latency=None, allow_tma=None, memory_order=None, memory_scope=None):
    """ct.load: one tile of the array's tile space, padded where it sticks out."""
    _require_array(array, "load")
    shape = _constant_shape(shape, "load")
    tile_shape = shape if shape else (1,) * array.ndim
    if len(tile_shape) != array.ndim:
        raise TileTypeError(f"ct.load: tile shape {shape} does not match the array rank "
                            f"{array.ndim}")
    view, region = _tile_region(array, index, tile_shape, order, "load")
    values = view[region]
    if not check_bounds:
        _require_inside(values.shape, tile_shape, index, view.shape, "load")
    if values.shape != tile_shape:
        padded = np.full(tile_shape, _padding_value(padding_mode, array.dtype),
                         dtype=values.dtype)
        padded[tuple(slice(0, n) for n in values.shape)] = values
        values = padded
    return Tile(np.array(values.reshape(shape)), array.dtype)


def _cast_for_store(value, array, op):
    """Stores convert implicitly only when no precision is lost (cuTile's implicit cast)."""
    if is_weak(value):
        return as_tile(value, array.dtype)
    if not isinstance(value, Tile):
        raise TileTypeError(f"ct.{op} expects a tile to store, got {type(value).__name__}")
    try:
        ok = promote(value.dtype, array.dtype) is array.dtype
    except TileTypeError:
        ok = False
    if not ok:
        raise TileTypeError(f"ct.{op}: stored tile is incompatible with array's dtype: cannot "
                            f"implicitly cast {value.dtype} to {array.dtype}; use "
                            f"ct.astype(tile, {array.dtype}) first")
    return value


def store(array, index, tile, *, order="C", check_bounds=True, latency=None, allow_tma=None,
          memory_order=None, memory_scope=None):
    """ct.store: write a tile at a tile-space index, dropping what sticks out."""
    _require_array(array, "store")
    tile = _cast_for_store(tile, array, "store")
    if tile.ndim == 0:
        values = tile.data.reshape((1,) * array.ndim)
    elif tile.ndim == array.ndim:
        values = tile.data
    else:
        raise TileTypeError(f"ct.store: a tile of shape {tile.shape} (rank {tile.ndim}) cannot "
                            f"be stored into an array of rank {array.ndim}")
    view, region = _tile_region(array, index, values.shape, order, "store")
    if not check_bounds:
        _require_inside(view[region].shape, values.shape, index, view.shape, "store")
    array.stored = True
    inside = tuple(slice(0, s.stop - s.start) for s in region)
    view[region] = round_to(values[inside], array.dtype)


def num_tiles(array, /, axis, shape, order="C"):
    """ct.num_tiles: the size of the tile grid along one axis."""
    _require_array(array, "num_tiles")
    shape = _constant_shape(shape, "num_tiles")
    view = array.data.transpose(_axis_order(order, array.ndim))
    return constant_tile(-(-view.shape[axis] // shape[axis]), int32)


def _element_indices(array, indices, op):
    """Broadcast gather/scatter indices; return them with the in-bounds mask."""
    indices = indices if isinstance(indices, tuple) else (indices,)
    if len(indices) != array.ndim:
        raise TileTypeError(f"ct.{op}: {len(indices)} index tiles for an array of rank "
                            f"{array.ndim}")
    tiles = [as_tile(i) for i in indices]
    if any(t.dtype.kind not in "iu" for t in tiles):
        raise TileTypeError(f"ct.{op}: indices must be integer tiles")
    try:
        arrays = np.broadcast_arrays(*(t.data.astype(np.int64) for t in tiles))
    except ValueError:
        raise TileTypeError(f"ct.{op}: index shapes {[t.shape for t in tiles]} do not "
                            "broadcast") from None
    valid = np.ones(arrays[0].shape, dtype=bool)
    for idx, n in zip(arrays, array.data.shape):
        valid &= (idx >= 0) & (idx < n)
    return arrays, valid


def _mask(mask, shape):
    return np.ones(shape, bool) if mask is None else np.broadcast_to(as_tile(mask).data, shape)


def gather(array, indices, /, *, mask=None, padding_value=0, check_bounds=True, latency=None):
    """ct.gather: element-wise loads; out-of-bounds or masked elements get padding_value."""
    _require_array(array, "gather")
    arrays, valid = _element_indices(array, indices, "gather")
    valid &= _mask(mask, valid.shape)
    safe = tuple(np.where(valid, idx, 0) for idx in arrays)
    values = array.data[safe] if array.data.size else np.zeros(valid.shape, array.data.dtype)
    padding = _cast_for_store(padding_value, array, "gather").data
    return Tile(np.where(valid, values, padding).astype(array.data.dtype), array.dtype)


def scatter(array, indices, value, /, *, mask=None, check_bounds=True, latency=None):
    """ct.scatter: element-wise stores; out-of-bounds or masked elements are skipped."""
    _require_array(array, "scatter")
    arrays, valid = _element_indices(array, indices, "scatter")
    valid &= _mask(mask, valid.shape)
    value = _cast_for_store(value, array, "scatter")
    values = np.broadcast_to(value.data, valid.shape)
    array.stored = True
    array.data[tuple(idx[valid] for idx in arrays)] = round_to(values[valid], array.dtype)


def _atomic(op, array, indices, update, combine, expected=None):
    """The atomics: each element read, combined with its update and written back, one element
    at a time in index order (so repeated indices see each other's updates, as on the GPU in
    some order); returns the values read. Blocks run one at a time here, so every memory order
    holds. Out-of-bounds elements are left alone and read as 0."""
    _require_array(array, op)
    arrays, valid = _element_indices(array, indices, op)     # indices broadcast to valid.shape

    def per_element(value):
        return np.broadcast_to(_cast_for_store(value, array, op).data, valid.shape).reshape(-1)
    update = per_element(update)
    expected = None if expected is None else per_element(expected)
    targets = [idx.reshape(-1) for idx in arrays]
    old = np.zeros(valid.size, array.data.dtype)
    array.stored = True
    for i in np.flatnonzero(valid):
        target = tuple(int(idx[i]) for idx in targets)
        old[i] = array.data[target]
        if expected is None or old[i] == expected[i]:
            array.data[target] = round_to(np.asarray(combine(old[i], update[i])), array.dtype)
    return Tile(old.reshape(valid.shape), array.dtype)


def _replace(old, new):
    """The combine of exchange and compare-and-swap: the new value."""
    return new


def _atomic_op(name, combine):
    def atomic(array, indices, update, /, *, check_bounds=True, memory_order=None,
               memory_scope=None):
        return _atomic(name, array, indices, update, combine)
    atomic.__name__ = name
    atomic.__doc__ = f"ct.{name}: element-wise, returning the old values (see _atomic)."
    return atomic


atomic_add = _atomic_op("atomic_add", operator.add)
atomic_max = _atomic_op("atomic_max", max)
atomic_min = _atomic_op("atomic_min", min)
atomic_and = _atomic_op("atomic_and", operator.and_)
atomic_or = _atomic_op("atomic_or", operator.or_)
atomic_xor = _atomic_op("atomic_xor", operator.xor)
atomic_xchg = _atomic_op("atomic_xchg", _replace)


def atomic_cas(array, indices, expected, desired, /, *, check_bounds=True, memory_order=None,
               memory_scope=None):
    """ct.atomic_cas: where an element equals ``expected``, write ``desired``; returns the old
    values (see _atomic)."""
    return _atomic("atomic_cas", array, indices, desired, _replace, expected)
