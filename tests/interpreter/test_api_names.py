"""The interpreter's `ct` has exactly cuda.tile's public names (issue #15, item 6).

It used to expose ~25 more (`np`, `item`, `make_tile`, ... through `from .ops import *`), so a
kernel using one ran on a laptop and failed to compile on the GPU.
"""
import pytest

from mamba2_tile.interpreter import SUPPORTED_OPS
from mamba2_tile.interpreter import api

# cuda.tile 1.7's __all__, pinned: a new cuTile name is added here and in api.py together.
CUDA_TILE_NAMES = frozenset("""
    Array ArrayAnnotation ByTarget Constant ConstantAnnotation DType IndexedWithInt64
    ListAnnotation MemoryOrder MemoryScope PaddingMode RoundingMode Scalar ScalarInt64
    Slice StaticException Tile TileCompilerExecutionError TileCompilerTimeoutError
    TileError TileInternalError TileRecursionError TileStaticAssertionError
    TileStaticEvalError TileSyntaxError TileTypeError TileUnsupportedFeatureError
    TileValueError TiledView abs add arange argmax argmin assert_ assume_divisible_by
    astile astype atan2 atomic_add atomic_and atomic_cas atomic_max atomic_min atomic_or
    atomic_xchg atomic_xor bfloat16 bid bitcast bitwise_and bitwise_lshift bitwise_not
    bitwise_or bitwise_rshift bitwise_xor bool_ broadcast_to cat cdiv ceil compilation
    compiler_timeout cos cosh cumprod cumsum divmod ensure_constant equal exp exp2
    expand_dims extract float16 float32 float4_e2m1fn float64 float8_e4m3fn float8_e5m2
    float8_e5m3fnu float8_e8m0fnu floor floordiv foreign_pointer_dtype full function
    gather greater greater_equal grid_dependency_control_launch_dependents
    grid_dependency_control_wait insert int16 int32 int64 int8 isnan kernel launch less
    less_equal load load_advanced_indexing log log2 matmul max maximum min minimum mma
    mma_scaled mod mul negative not_equal num_blocks num_tiles ones pack_to_bytes
    permute pow print printf prod reduce reshape rsqrt scan scatter sin sinh sqrt
    static_assert static_eval static_exception static_iter store store_advanced_indexing
    sub sum tan tanh tfloat32 transpose truediv tune uint16 uint32 uint64 uint8
    unpack_from_bytes where zeros
""".split())


def public(module):
    return {name for name in dir(module) if not name.startswith("_")}


def test_public_names_are_cutile_all():
    assert public(api) == set(api.__all__) == CUDA_TILE_NAMES
    assert len(api.__all__) == len(CUDA_TILE_NAMES)
    for helper in ("np", "item", "make_tile", "as_tile", "promote", "binary", "enum"):
        assert not hasattr(api, helper), helper


def test_same_names_as_the_installed_cuda_tile():
    real = pytest.importorskip("cuda.tile")
    assert public(api) == public(real) == set(real.__all__) == CUDA_TILE_NAMES


def test_supported_ops_are_a_part_of_them():
    assert SUPPORTED_OPS <= set(api.__all__)
    assert {"load", "store", "mma", "bid", "cumsum", "where", "RoundingMode"} <= SUPPORTED_OPS
