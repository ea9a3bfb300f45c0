"""Tile operations one by one against NumPy (called directly, outside a kernel)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mamba2_tile.interpreter import (SUPPORTED_OPS, TileTypeError, TileUnsupportedFeatureError,
                                     TileValueError)
from mamba2_tile.interpreter import api as ct
from mamba2_tile.interpreter.dtypes import round_to
from mamba2_tile.interpreter.tile import make_tile

rng = np.random.default_rng(0)


def tile(values, dtype=ct.float32):
    return make_tile(np.asarray(values), dtype)


def test_creation():
    assert ct.full((2, 2), 3, dtype=ct.int32).data.tolist() == [[3, 3], [3, 3]]
    assert ct.zeros((4,), ct.float16).dtype is ct.float16
    assert ct.ones((2,), ct.bfloat16).data.tolist() == [1.0, 1.0]
    assert ct.arange(8, start=7, step=-1, dtype=ct.int32).data.tolist() == list(range(7, -1, -1))
    assert ct.astile(((1, 2), (3, 4)), dtype=ct.int32).shape == (2, 2)


@pytest.mark.parametrize("shape", [(3,), (4, 6), (0,)])
def test_tile_dimensions_must_be_powers_of_two(shape):
    with pytest.raises(TileTypeError, match="power of two"):
        ct.zeros(shape, ct.float32)


BINARY = [(ct.add, np.add), (ct.sub, np.subtract), (ct.mul, np.multiply),
          (ct.truediv, np.true_divide), (ct.maximum, np.maximum), (ct.minimum, np.minimum),
          (ct.pow, np.power)]


@pytest.mark.parametrize("op,ref", BINARY)
@pytest.mark.parametrize("dtype,np_dtype", [(ct.float32, np.float32), (ct.float16, np.float16),
                                            (ct.float64, np.float64)])
def test_binary_float_ops(op, ref, dtype, np_dtype):
    a = rng.uniform(0.5, 2, (4, 8)).astype(np_dtype)
    b = rng.uniform(0.5, 2, (1, 8)).astype(np_dtype)     # broadcasts
    out = op(tile(a, dtype), tile(b, dtype))
    assert out.dtype is dtype and out.shape == (4, 8)
    np.testing.assert_array_equal(out.data, ref(a, b))


def test_bfloat16_arithmetic_is_rounded():
    a, b = tile([1.0, 3.0], ct.bfloat16), tile([2**-9, 2**-7], ct.bfloat16)
    out = a + b
    assert out.dtype is ct.bfloat16
    np.testing.assert_array_equal(out.data, round_to(np.float32([1 + 2**-9, 3 + 2**-7]),
                                                      ct.bfloat16))


def test_integer_ops_follow_python_floor_semantics():
    a, b = tile([7, -7, 7, -7], ct.int32), tile([2, 2, -2, -2], ct.int32)
    assert (a // b).data.tolist() == [3, -4, -4, 3]
    assert (a % b).data.tolist() == [1, 1, -1, -1]
    assert ct.cdiv(a, 2).data.tolist() == [4, -3, 4, -3]
    assert ct.cdiv(9, 4) == 3
    assert (a / b).dtype is ct.float32       # true division of ints gives float32


@pytest.mark.parametrize("op,ref", [(ct.greater, np.greater), (ct.less_equal, np.less_equal),
                                    (ct.equal, np.equal), (ct.not_equal, np.not_equal)])
def test_comparisons(op, ref):
    a, b = rng.integers(0, 3, 8), rng.integers(0, 3, 8)
    out = op(tile(a, ct.int32), tile(b, ct.int32))
    assert out.dtype is ct.bool_
    np.testing.assert_array_equal(out.data, ref(a, b))


def test_operators_match_named_functions():
    a, b = tile([1.0, 2.0]), tile([3.0, 4.0])
    for x, y in [(a + b, ct.add(a, b)), (a - 1, ct.sub(a, 1)), (2 * a, ct.mul(2, a)),
                 (a < b, ct.less(a, b)), (-a, ct.negative(a)), (a ** 2, ct.pow(a, 2))]:
        np.testing.assert_array_equal(x.data, y.data)


def test_python_scalars_are_loosely_typed():
    assert (tile([1, 2], ct.float16) * 3).dtype is ct.float16
    assert (tile([1, 2], ct.bfloat16) + 0.5).dtype is ct.bfloat16
    assert (tile([1, 2], ct.int8) + 1).dtype is ct.int8
    assert (tile([1, 2], ct.int32) * 0.5).dtype is ct.float32    # float constant, int tile
    assert (tile([1, 2], ct.int16) + True).dtype is ct.int16
    with pytest.raises(TileValueError):
        tile([1, 2], ct.int8) + 1000


def test_tile_promotion_and_refusals():
    assert (tile([1], ct.float16) + tile([1], ct.float32)).dtype is ct.float32
    assert (tile([1], ct.int32) + tile([1], ct.float16)).dtype is ct.float16
    with pytest.raises(TileTypeError):
        tile([1], ct.float16) + tile([1], ct.bfloat16)
    with pytest.raises(TileTypeError):
        tile([1], ct.int32) + tile([1], ct.uint32)
    with pytest.raises(TileTypeError, match="broadcast"):
        tile([1, 2]) + tile([1, 2, 3, 4])


@pytest.mark.parametrize("op,ref", [(ct.exp, np.exp), (ct.exp2, np.exp2), (ct.log, np.log),
                                    (ct.log2, np.log2), (ct.sqrt, np.sqrt),
                                    (ct.rsqrt, lambda v: 1 / np.sqrt(v)), (ct.abs, np.abs),
                                    (ct.negative, np.negative), (ct.tanh, np.tanh)])
def test_unary_math(op, ref):
    x = rng.uniform(0.1, 4, 16).astype(np.float32)
    np.testing.assert_allclose(op(tile(x)).data, ref(x), rtol=1e-6)


def test_math_needs_float():
    with pytest.raises(TileTypeError, match="floating-point"):
        ct.exp(tile([1, 2], ct.int32))


def test_where_and_isnan():
    c = tile([True, False, True, False], ct.bool_)
    out = ct.where(c, tile([1.0, 2, 3, 4]), 0.0)
    assert out.data.tolist() == [1.0, 0.0, 3.0, 0.0] and out.dtype is ct.float32
    assert ct.isnan(tile([np.nan, 1.0])).data.tolist() == [True, False]


@settings(max_examples=50, deadline=None)
@given(st.sampled_from([None, 0, 1, (0, 1)]), st.booleans())
def test_reductions(axis, keepdims):
    x = rng.normal(size=(4, 8)).astype(np.float32)
    t = tile(x)
    np_axis = axis if axis is not None else None
    for op, ref in [(ct.sum, np.sum), (ct.max, np.max), (ct.min, np.min), (ct.prod, np.prod)]:
        out = op(t, axis=axis, keepdims=keepdims)
        np.testing.assert_allclose(out.data, ref(x, axis=np_axis, keepdims=keepdims),
                                   rtol=1e-5)


def test_reduction_of_half_precision_accumulates_in_float32():
    x = np.full(1024, 1.0, np.float16)      # float16 running sums would stall at 2048
    out = ct.sum(tile(x, ct.float16))
    assert out.dtype is ct.float16 and float(out) == 1024.0


def test_argmax_argmin():
    x = np.array([[1, 5, 2, 0], [7, 1, 1, 9]], np.float32)
    assert ct.argmax(tile(x), axis=1).data.tolist() == [1, 3]
    assert ct.argmin(tile(x), axis=1, keepdims=True).shape == (2, 1)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("axis", [0, 1])
def test_scans(axis, reverse):
    x = rng.normal(size=(4, 8)).astype(np.float32)
    flip = (lambda a: np.flip(a, axis)) if reverse else (lambda a: a)
    np.testing.assert_allclose(ct.cumsum(tile(x), axis=axis, reverse=reverse).data,
                               flip(np.cumsum(flip(x), axis=axis)), rtol=1e-6)
    np.testing.assert_allclose(ct.cumprod(tile(x), axis=axis, reverse=reverse).data,
                               flip(np.cumprod(flip(x), axis=axis)), rtol=1e-5)


def test_shape_ops():
    x = rng.normal(size=(2, 4, 8)).astype(np.float32)
    t = tile(x)
    np.testing.assert_array_equal(ct.reshape(t, (8, 8)).data, x.reshape(8, 8))
    np.testing.assert_array_equal(t.permute((2, 0, 1)).data, x.transpose(2, 0, 1))
    np.testing.assert_array_equal(ct.transpose(t, 0, 2).data, np.swapaxes(x, 0, 2))
    np.testing.assert_array_equal(ct.expand_dims(t, 1).data, x[:, None])
    np.testing.assert_array_equal(t[:, None].data, x[:, None])
    np.testing.assert_array_equal(ct.broadcast_to(tile(x[0, 0]), (4, 8)).data,
                                  np.broadcast_to(x[0, 0], (4, 8)))
    np.testing.assert_array_equal(ct.extract(t, (1, 1, 0), (1, 2, 8)).data, x[1:2, 2:4, :])
    np.testing.assert_array_equal(ct.cat((t, t), axis=0).data, np.concatenate((x, x)))
    assert t.shape == (2, 4, 8) and t.ndim == 3 and t.dtype is ct.float32
    with pytest.raises(TileTypeError, match="reshape"):
        ct.reshape(t, (3, 8))
    with pytest.raises(TileUnsupportedFeatureError):
        t[0]


def test_astype_rounds_and_truncates():
    x = np.array([1.00390625, -2.7, 65519.0, 0.5], np.float32)
    np.testing.assert_array_equal(ct.astype(tile(x), ct.float16).data, x.astype(np.float16))
    assert tile(x).astype(ct.bfloat16).data[0] == 1.0
    assert ct.astype(tile(x), ct.int32).data.tolist() == [1, -2, 65519, 0]


def test_mma_dtype_rules():
    a16, b16 = tile(np.ones((4, 8)), ct.float16), tile(np.ones((8, 2)), ct.float16)
    assert ct.mma(a16, b16, ct.zeros((4, 2), ct.float32)).dtype is ct.float32
    assert ct.mma(a16, b16, ct.zeros((4, 2), ct.float16)).dtype is ct.float16
    abf = tile(np.ones((4, 8)), ct.bfloat16)
    with pytest.raises(TileTypeError, match="accumulator"):
        ct.mma(abf, tile(np.ones((8, 2)), ct.bfloat16), ct.zeros((4, 2), ct.float16))
    with pytest.raises(TileTypeError, match="same dtype"):
        ct.mma(a16, tile(np.ones((8, 2)), ct.bfloat16), ct.zeros((4, 2), ct.float32))
    with pytest.raises(TileTypeError, match="shape"):
        ct.mma(a16, b16, ct.zeros((4, 4), ct.float32))
    with pytest.raises(TileTypeError, match="cannot be multiplied"):
        ct.mma(a16, a16, ct.zeros((4, 8), ct.float32))


def test_mma_is_exact_products_with_rounded_accumulator():
    a = rng.normal(size=(2, 16, 32)).astype(np.float16)
    b = rng.normal(size=(32, 8)).astype(np.float16)
    acc = rng.normal(size=(2, 16, 8)).astype(np.float32)
    out = ct.mma(tile(a, ct.float16), tile(b, ct.float16), tile(acc))
    expected = (a.astype(np.float64) @ b.astype(np.float64) + acc).astype(np.float32)
    np.testing.assert_array_equal(out.data, expected)
    # float32 inputs are multiplied in float32, not silently as tf32
    x = np.float32([[1 + 2**-20]])
    out = ct.mma(tile(x), tile(np.float32([[1.0]])), ct.zeros((1, 1), ct.float32))
    assert out.item() == 1 + 2**-20


def test_matmul_promotes_inputs():
    a, b = tile(np.ones((2, 4)), ct.float16), tile(np.ones((4, 2)), ct.float32)
    out = a @ b
    assert out.dtype is ct.float32 and out.data.tolist() == [[4.0, 4.0], [4.0, 4.0]]
    assert float(ct.matmul(tile(np.ones(4)), tile(np.ones(4)))) == 4.0


def test_scalar_tiles_drive_python_control_flow():
    n = tile(3, ct.int32)
    assert list(range(n)) == [0, 1, 2] and int(n) == 3 and bool(n)
    with pytest.raises(TileTypeError, match="scalar"):
        bool(tile([1, 2], ct.int32))


def test_static_helpers():
    ct.static_assert(True)
    with pytest.raises(ct.TileStaticAssertionError, match="nope"):
        ct.static_assert(False, "nope")
    assert ct.static_eval(3) == 3


def test_unsupported_names_raise_not_implemented():
    with pytest.raises(NotImplementedError, match=r"ct.mma_scaled is not supported"):
        ct.mma_scaled(None, None, None, None, None)
    with pytest.raises(NotImplementedError, match="ct.reduce"):
        ct.reduce(None, 0, None, 0)
    assert "load" in SUPPORTED_OPS and "mma_scaled" not in SUPPORTED_OPS
