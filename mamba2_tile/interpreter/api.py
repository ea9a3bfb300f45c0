"""The interpreter's `cuda.tile`: every public name of cuTile, implemented or refused.

Kernels run by the interpreter see this module wherever their source says `ct` (see
rebind.py). Without cuda-tile installed, `mamba2_tile.tile.ct` *is* this module, so
`@ct.kernel`, `ct.Constant[int]`, `ct.float32`, ... work when a kernel is defined; only
`ct.launch` needs the real package and a GPU.

Public names we do not interpret still exist, as placeholders that raise
NotImplementedError("ct.<name> is not supported ...") when used. `_SUPPORTED` lists the
implemented ones. The public names are exactly cuda.tile's (its `__all__`), no more: modules
and helpers this file needs are imported under a leading underscore, so a kernel cannot use a
name here that the GPU would not resolve (tests/interpreter/test_api_names.py).
"""
import enum as _enum
import functools as _functools
import typing as _typing

from . import errors as _errors, grid as _grid, ops as _ops, printing as _printing
from .dtypes import (DType, bfloat16,  # noqa: F401  (re-exported as ct.<dtype>)
                     bool_, float4_e2m1fn, float8_e4m3fn, float8_e5m2,
                     float8_e5m3fnu, float8_e8m0fnu, float16, float32, float64, int8, int16,
                     int32, int64, tfloat32, uint8, uint16, uint32, uint64)
from .errors import (TileStaticAssertionError, TileSyntaxError, TileTypeError,  # noqa: F401
                     TileUnsupportedFeatureError, TileValueError)
from .memory import (Array, atomic_add, atomic_and, atomic_cas, atomic_max,  # noqa: F401
                     atomic_min, atomic_or, atomic_xchg, atomic_xor, gather, load, num_tiles,
                     scatter, store)
from .tile import Tile, as_tile as _as_tile  # noqa: F401

bid = _grid.bid
num_blocks = _grid.num_blocks
print = _printing.tile_print


def printf(format, *args):
    """ct.printf: C format string, one conversion per tile (numbers become 0-d tiles)."""
    _printing.printf(format, *(_as_tile(a) for a in args))


# Every public name of cuda.tile 1.7 (its __all__), so code written for cuTile resolves.
_PUBLIC_NAMES = (
    "launch", "ByTarget", "MemoryOrder", "MemoryScope", "PaddingMode", "RoundingMode",
    "DType", "bfloat16", "bool_", "float4_e2m1fn", "float8_e4m3fn", "float8_e5m2",
    "float8_e8m0fnu", "float8_e5m3fnu", "float16", "float32", "float64",
    "foreign_pointer_dtype", "int8", "int16", "int32", "int64", "tfloat32", "uint8", "uint16",
    "uint32", "uint64", "TileCompilerExecutionError", "TileCompilerTimeoutError", "TileError",
    "TileInternalError", "TileRecursionError", "TileStaticAssertionError",
    "TileStaticEvalError", "TileSyntaxError", "TileTypeError", "TileUnsupportedFeatureError",
    "TileValueError", "StaticException", "Array", "ArrayAnnotation", "Constant",
    "ConstantAnnotation", "IndexedWithInt64", "ListAnnotation", "Scalar", "ScalarInt64",
    "Slice", "Tile", "TiledView", "abs", "add", "arange", "argmax", "argmin", "assert_",
    "assume_divisible_by", "astile", "astype", "atan2", "atomic_add", "atomic_and",
    "atomic_cas", "atomic_max", "atomic_min", "atomic_or", "atomic_xchg", "atomic_xor",
    "bitwise_and", "bitwise_lshift", "bitwise_not", "bitwise_or", "bitwise_rshift",
    "bitwise_xor", "bid", "bitcast", "broadcast_to", "cat", "cdiv", "ceil", "cos", "cosh",
    "cumprod", "cumsum", "divmod", "ensure_constant", "equal", "exp", "exp2", "expand_dims",
    "extract", "floor", "floordiv", "full", "gather", "greater", "greater_equal", "insert",
    "less", "less_equal", "load", "load_advanced_indexing", "log", "log2", "matmul", "max",
    "maximum", "min", "minimum", "mma", "mma_scaled", "mod", "mul", "negative", "isnan",
    "not_equal", "num_blocks", "num_tiles", "ones", "pack_to_bytes", "permute", "pow",
    "printf", "print", "prod", "reduce", "reshape", "rsqrt", "scan", "scatter", "sin", "sinh",
    "sqrt", "static_assert", "static_eval", "static_exception", "static_iter", "store",
    "store_advanced_indexing", "sub", "sum", "tan", "tanh", "transpose", "truediv",
    "unpack_from_bytes", "where", "zeros", "grid_dependency_control_wait",
    "grid_dependency_control_launch_dependents", "compiler_timeout", "tune", "function",
    "kernel", "compilation",
)


class PaddingMode(_enum.Enum):
    """What `ct.load` puts where a tile sticks out of the array (see memory.py)."""
    UNDETERMINED = "undetermined"
    ZERO = "zero"
    NEG_ZERO = "neg_zero"
    NAN = "nan"
    POS_INF = "pos_inf"
    NEG_INF = "neg_inf"


class MemoryOrder(_enum.Enum):
    """Accepted and ignored: blocks run one at a time, so every order is respected."""
    WEAK = "weak"
    RELAXED = "relaxed"
    ACQUIRE = "acquire"
    RELEASE = "release"
    ACQ_REL = "acq_rel"


class MemoryScope(_enum.Enum):
    NONE = "none"
    BLOCK = "block"
    DEVICE = "device"
    SYS = "sys"


class ConstantAnnotation:
    """Marks a kernel parameter as a compile-time constant, as in cuTile."""

    def __repr__(self):
        return "ConstantAnnotation()"


_T = _typing.TypeVar("_T")
Constant = _typing.Annotated[_T, ConstantAnnotation()]


class ByTarget:
    """Per-architecture compiler options; the interpreter has no architecture to pick."""

    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs


# cuTile's other exception classes, so `except ct.TileSyntaxError:` works everywhere.
TileError = _errors.TileInterpreterError
TileRecursionError = type("TileRecursionError", (TileError,), {})
TileInternalError = type("TileInternalError", (TileError,), {})
TileStaticEvalError = type("TileStaticEvalError", (TileError,), {})
StaticException = type("StaticException", (TileStaticEvalError,), {})
TileCompilerExecutionError = type("TileCompilerExecutionError", (TileInternalError,), {})
TileCompilerTimeoutError = type("TileCompilerTimeoutError", (TileInternalError,), {})


class kernel:
    """`@ct.kernel` without cuda-tile: keeps the function where cuTile does (`_pyfunc`)."""

    def __init__(self, function=None, /, *, num_ctas=None, occupancy=None, opt_level=3,
                 num_worker_warps=None):
        self._options = dict(num_ctas=num_ctas, occupancy=occupancy, opt_level=opt_level,
                             num_worker_warps=num_worker_warps)
        self._pyfunc = function
        _functools.update_wrapper(self, function)

    def __new__(cls, function=None, /, **options):
        if function is None:    # @ct.kernel(occupancy=2) returns the decorator
            return lambda func: cls(func, **options)
        return super().__new__(cls)

    def replace_hints(self, **hints):
        return kernel(self._pyfunc, **{**self._options, **hints})

    def __call__(self, *args, **kwargs):
        raise TypeError("Tile kernels cannot be called directly. Use ct.launch() instead "
                        "(or mamba2_tile.interpreter.launch on the CPU).")


def function(func=None, /, *, host=False, tile=True):
    """`@ct.function`: tile functions are plain Python functions to the interpreter."""
    if func is None:
        return lambda f: f
    return func


def grid_dependency_control_wait():
    """ct.grid_dependency_control_wait: a no-op here, where kernels run one after the other and a
    kernel's blocks one at a time, so the kernel before has always finished."""


def grid_dependency_control_launch_dependents():
    """ct.grid_dependency_control_launch_dependents: a no-op here (see the wait above)."""


def launch(stream, grid, kernel, args, /, *, programmatic_dependent_launch=False):
    raise RuntimeError("ct.launch needs the cuda-tile package and an NVIDIA GPU, and "
                       "cuda-tile could not be imported here. Run the kernel on the CPU with "
                       "mamba2_tile.interpreter.launch(grid, kernel, args).")


class _Unsupported:
    """A cuda.tile name the interpreter does not implement: it raises when used."""

    def __init__(self, name):
        self._name = name

    def __call__(self, *args, **kwargs):
        raise _errors.unsupported(self._name)

    def __getattr__(self, attribute):
        if attribute.startswith("_"):
            raise AttributeError(attribute)
        raise _errors.unsupported(f"{self._name}.{attribute}")

    def __getitem__(self, item):     # usable in annotations such as ct.Scalar[int]
        return self

    def __repr__(self):
        return f"<unsupported ct.{self._name}>"


# The tile operations, named as in cuda.tile; ops.py's own helpers stay out of `ct`.
for _name in _PUBLIC_NAMES:
    if _name not in globals() and hasattr(_ops, _name):
        globals()[_name] = getattr(_ops, _name)
_SUPPORTED = frozenset(name for name in _PUBLIC_NAMES if name in globals())
for _name in _PUBLIC_NAMES:
    if _name not in globals():
        globals()[_name] = _Unsupported(_name)
del _name

__all__ = list(_PUBLIC_NAMES)
