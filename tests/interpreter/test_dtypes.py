"""Dtypes: rounding to bf16/fp16/tf32 and cuTile's promotion table."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mamba2_tile.interpreter import TileTypeError
from mamba2_tile.interpreter import api as ict
from mamba2_tile.interpreter.dtypes import ALL, as_dtype, promote, round_to

torch = pytest.importorskip("torch")
try:
    import cuda.tile  # noqa: F401
    HAS_CUTILE = True
except ImportError:
    HAS_CUTILE = False

finite_floats = st.floats(allow_nan=False, allow_infinity=False, width=32)


@settings(max_examples=300, deadline=None)
@given(st.lists(finite_floats, min_size=1, max_size=64))
def test_bfloat16_rounding_matches_torch(values):
    x = np.array(values, dtype=np.float32)
    expected = torch.from_numpy(x).to(torch.bfloat16).float().numpy()
    np.testing.assert_array_equal(round_to(x, ict.bfloat16), expected)


def test_bfloat16_ties_round_to_even_and_specials():
    # 1 + 2**-8 is halfway between two bf16 numbers: ties go to the even one (1.0).
    x = np.array([1 + 2**-8, 1 + 3 * 2**-8, np.inf, -np.inf, np.nan], dtype=np.float32)
    out = round_to(x, ict.bfloat16)
    assert out[0] == 1.0 and out[1] == 1 + 2**-6
    assert np.isposinf(out[2]) and np.isneginf(out[3]) and np.isnan(out[4])


def test_tfloat32_keeps_ten_mantissa_bits():
    x = np.array([1 + 2**-10, 1 + 2**-11, 1 + 3 * 2**-11], dtype=np.float32)
    np.testing.assert_array_equal(round_to(x, ict.tfloat32), [1 + 2**-10, 1.0, 1 + 2**-9])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-65504, 65504, width=32), min_size=1, max_size=64))
def test_float16_rounding_matches_numpy(values):
    x = np.array(values, dtype=np.float32)
    np.testing.assert_array_equal(round_to(x, ict.float16), x.astype(np.float16))


@pytest.mark.skipif(not HAS_CUTILE, reason="needs cuda-tile's promotion table")
def test_promotion_table_matches_cutile():
    from cuda.tile._datatype import _promote_dtypes
    import cuda.tile as ct
    for a in ALL:
        for b in ALL:
            expected = _promote_dtypes(getattr(ct, a.name), getattr(ct, b.name))
            try:
                got = promote(a, b).name
            except TileTypeError:
                got = None
            assert got == (expected.name if expected is not None else None), (a, b)


def test_promotion_examples():
    assert promote(ict.int8, ict.int32) is ict.int32
    assert promote(ict.int32, ict.float16) is ict.float16
    assert promote(ict.bfloat16, ict.float32) is ict.float32
    for a, b in [(ict.float16, ict.bfloat16), (ict.int8, ict.uint8), (ict.tfloat32, ict.float32)]:
        with pytest.raises(TileTypeError):
            promote(a, b)


def test_as_dtype_accepts_numpy_and_names():
    assert as_dtype(np.float16) is ict.float16
    assert as_dtype(np.dtype("int32")) is ict.int32
    if HAS_CUTILE:
        import cuda.tile as ct
        assert as_dtype(ct.bfloat16) is ict.bfloat16


def test_dtype_constructor_makes_strict_scalar():
    x = ict.int16(5) + 2
    assert x.dtype is ict.int16 and int(x) == 7
    assert str(ict.float32) == "float32" and repr(ict.float32) == "<DType 'float32'>"
