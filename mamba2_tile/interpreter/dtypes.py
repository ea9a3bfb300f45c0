"""cuTile dtypes on top of NumPy: storage, rounding and promotion.

Every cuTile dtype is stored in a NumPy array of a *storage* dtype. Most map one to one
(`float16` -> `np.float16`, ...). Two have no NumPy equivalent and are stored in float32
arrays whose values are kept rounded (round to nearest even) to the narrower format:

* `bfloat16`: 8 exponent bits, 7 mantissa bits (the top half of a float32);
* `tfloat32`: 8 exponent bits, 10 mantissa bits (what tensor cores read of a float32).

The fp8/fp4 dtypes exist as names but any tile of them raises NotImplementedError.

Promotion follows the table in cuTile's data model (docs/source/data.rst, "Arithmetic
Promotion"): it is NumPy-like, except that mixing signed and unsigned integers, float16
with bfloat16, or any "restricted" float (tf32, fp8, fp4) with another dtype is an error.
"""
import numpy as np

from .errors import TileTypeError, unsupported


class DType:
    """A cuTile data type: `ct.float32` etc. Calling it makes a strictly typed scalar."""

    def __init__(self, name, bitwidth, kind, storage, rank=0, restricted=False):
        self.name = name
        self.bitwidth = bitwidth
        self.kind = kind            # 'b' bool, 'u' unsigned, 'i' signed, 'f' float
        self.storage = storage      # NumPy dtype holding the values, None if unsupported
        self.rank = rank            # order among floats of one family, for promotion
        self.restricted = restricted

    def __repr__(self):
        return f"<DType '{self.name}'>"

    def __str__(self):
        return self.name

    def __call__(self, value, /):
        from .tile import make_tile
        return make_tile(np.asarray(value), self)


bool_ = DType("bool_", 1, "b", np.dtype(np.bool_))
uint8 = DType("uint8", 8, "u", np.dtype(np.uint8))
uint16 = DType("uint16", 16, "u", np.dtype(np.uint16))
uint32 = DType("uint32", 32, "u", np.dtype(np.uint32))
uint64 = DType("uint64", 64, "u", np.dtype(np.uint64))
int8 = DType("int8", 8, "i", np.dtype(np.int8))
int16 = DType("int16", 16, "i", np.dtype(np.int16))
int32 = DType("int32", 32, "i", np.dtype(np.int32))
int64 = DType("int64", 64, "i", np.dtype(np.int64))
float16 = DType("float16", 16, "f", np.dtype(np.float16), rank=1)
bfloat16 = DType("bfloat16", 16, "f", np.dtype(np.float32), rank=1)
float32 = DType("float32", 32, "f", np.dtype(np.float32), rank=2)
float64 = DType("float64", 64, "f", np.dtype(np.float64), rank=3)
tfloat32 = DType("tfloat32", 32, "f", np.dtype(np.float32), restricted=True)
float8_e4m3fn = DType("float8_e4m3fn", 8, "f", None, restricted=True)
float8_e5m2 = DType("float8_e5m2", 8, "f", None, restricted=True)
float8_e8m0fnu = DType("float8_e8m0fnu", 8, "f", None, restricted=True)
float8_e5m3fnu = DType("float8_e5m3fnu", 8, "f", None, restricted=True)
float4_e2m1fn = DType("float4_e2m1fn", 4, "f", None, restricted=True)

ALL = (bool_, uint8, uint16, uint32, uint64, int8, int16, int32, int64,
       float16, bfloat16, float32, float64, tfloat32,
       float8_e4m3fn, float8_e5m2, float8_e8m0fnu, float8_e5m3fnu, float4_e2m1fn)
BY_NAME = {d.name: d for d in ALL}

# The dtype an array of this NumPy dtype has inside a kernel (bf16 torch tensors are
# handled in memory.py, since NumPy cannot hold them).
_FROM_NUMPY = {d.storage: d for d in ALL if d.storage is not None and d.name not in
               ("bfloat16", "tfloat32")}


def as_dtype(obj) -> DType:
    """Our DType for `ct.float32`, a real `cuda.tile` DType, or a NumPy dtype."""
    if isinstance(obj, DType):
        return obj
    name = getattr(obj, "name", None)
    if isinstance(name, str) and name in BY_NAME and not isinstance(obj, np.dtype):
        return BY_NAME[name]
    try:
        return _FROM_NUMPY[np.dtype(obj)]
    except (TypeError, KeyError):
        raise TileTypeError(f"expected a cuTile dtype such as ct.float32, got {obj!r}") from None


def storage_of(dtype: DType) -> np.dtype:
    if dtype.storage is None:
        raise unsupported(dtype.name)
    return dtype.storage


def _round_float32_bits(values, dropped_bits: int) -> np.ndarray:
    """Round float32 values to a format that keeps the top (32 - dropped_bits) bits."""
    x = np.ascontiguousarray(values, dtype=np.float32)
    bits = x.view(np.uint32).astype(np.uint64)
    half = (1 << (dropped_bits - 1)) - 1
    lsb = (bits >> dropped_bits) & 1
    mask = ~np.uint64((1 << dropped_bits) - 1) & np.uint64(0xFFFFFFFF)
    rounded = ((bits + half + lsb) & mask).astype(np.uint32).view(np.float32)
    return np.where(np.isnan(x), x, rounded)


def round_to(values, dtype: DType) -> np.ndarray:
    """Convert `values` to the storage of `dtype`, rounding to nearest even.

    Float to integer conversion truncates toward zero, as a C cast does on the GPU.
    """
    storage = storage_of(dtype)
    values = np.asarray(values)
    if dtype is bfloat16:
        return _round_float32_bits(values, 16)
    if dtype is tfloat32:
        return _round_float32_bits(values, 13)
    if dtype is bool_:
        return values != 0
    with np.errstate(invalid="ignore", over="ignore"):
        return values.astype(storage, copy=False)


def category(dtype: DType) -> int:
    """bool < integral < floating point: the order cuTile promotes along."""
    return {"b": 0, "u": 1, "i": 1, "f": 2}[dtype.kind]


def promote(a: DType, b: DType) -> DType:
    """The common dtype of two strictly typed operands (cuTile's promotion table)."""
    if a is b:
        return a
    if a.restricted or b.restricted:
        raise TileTypeError(f"Implicit promotion of {a} and {b} is not supported as it involves "
                            "restricted float dtypes. Please perform an explicit cast instead.")
    if a.kind == "b" or b.kind == "b":
        return b if a.kind == "b" else a
    if category(a) != category(b):
        return a if category(a) > category(b) else b
    if a.kind == "f":
        if a.rank == b.rank:   # float16 with bfloat16
            raise TileTypeError(f"Implicit promotion of {a} and {b} is not supported. "
                                "Please perform an explicit cast instead.")
        return a if a.rank > b.rank else b
    if a.kind != b.kind:
        raise TileTypeError(f"Implicit promotion of {a} and {b} is not supported "
                            "(signed with unsigned). Please perform an explicit cast instead.")
    return a if a.bitwidth > b.bitwidth else b


def weak_dtype(value) -> DType:
    """The concrete dtype a loosely typed Python constant takes when it must have one."""
    if isinstance(value, bool):
        return bool_
    if isinstance(value, int):
        if -2**31 <= value < 2**31:
            return int32
        return int64 if value < 2**63 else uint64
    return float32
