"""Loads, stores, gather, scatter and atomics through launched kernels, on NumPy and torch."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mamba2_tile.interpreter import TileTypeError, TileValueError, launch
from mamba2_tile.interpreter import api as ct
from mamba2_tile.interpreter.memory import Array, load, store
from mamba2_tile.interpreter.dtypes import bfloat16, round_to

from . import kernels

torch = pytest.importorskip("torch")
rng = np.random.default_rng(1)


@pytest.mark.parametrize("shape,tile", [((8, 16), (4, 8)), ((10, 13), (4, 8)), ((3, 5), (4, 4))])
def test_copy_handles_partial_edge_tiles(shape, tile):
    x = rng.normal(size=shape).astype(np.float32)
    y = np.zeros_like(x)
    grid = (-(-shape[0] // tile[0]), -(-shape[1] // tile[1]))
    launch(grid, kernels.copy_2d, (x, y, *tile))
    np.testing.assert_array_equal(y, x)


powers_of_two = st.sampled_from([1, 2, 4, 8, 16])


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 20), st.integers(1, 20), powers_of_two, powers_of_two)
def test_tiled_copy_and_transpose_match_numpy(m, n, tm, tn):
    x = rng.normal(size=(m, n)).astype(np.float32)
    y = np.zeros_like(x)
    launch((-(-m // tm), -(-n // tn)), kernels.copy_2d, (x, y, tm, tn))
    np.testing.assert_array_equal(y, x)
    yt = np.zeros((n, m), np.float32)
    launch((-(-n // tm), -(-m // tn)), kernels.transpose_copy, (x, yt, tm, tn))
    np.testing.assert_array_equal(yt, x.T)


def test_load_with_order_reads_transposed_view():
    x = rng.normal(size=(12, 6)).astype(np.float32)
    y = np.zeros((6, 12), np.float32)
    launch((2, 3), kernels.transpose_copy, (x, y, 4, 4))
    np.testing.assert_array_equal(y, x.T)


@pytest.mark.parametrize("mode,pad", [(0, 0.0), (1, -np.inf), (2, np.inf), (3, np.nan)])
def test_padding_modes(mode, pad):
    x = np.arange(5, dtype=np.float32)
    y = np.zeros(8, np.float32)
    launch((1,), kernels.load_with_padding, (x, y, 8, mode))
    np.testing.assert_array_equal(y, np.concatenate([x, np.full(3, pad, np.float32)]))


def test_undetermined_padding_is_poisoned():
    """The default padding is unspecified in cuTile: reading it must not look like zeros."""
    floats = load(Array(np.ones((1, 5), np.float32), ct.float32), (0, 0), (1, 8))
    assert np.isnan(floats.data[0, 5:]).all()
    ints = load(Array(np.ones((1, 5), np.int32), ct.int32), (0, 0), (1, 8))
    assert (ints.data[0, 5:] == np.iinfo(np.int32).min).all()


def test_gather_and_scatter_skip_out_of_bounds():
    x = np.arange(10, dtype=np.float32) * 10
    idx = np.array([0, 3, 9, 12], np.int32)         # 12 is out of bounds: gathers 0
    y = np.full(11, -1, np.float32)
    launch((1,), kernels.gather_scatter, (x, idx, y, 4))
    expected = np.full(11, -1, np.float32)
    expected[[1, 4, 10]] = [0, 60, 180]              # index 13 is skipped
    np.testing.assert_array_equal(y, expected)


def test_store_needs_a_lossless_dtype():
    x = np.zeros((4, 4), np.float16)
    with pytest.raises(TileTypeError, match="cannot implicitly cast float32 to float16"):
        launch((1,), kernels.bad_store_dtype, (x,))
    # widening is implicit, as in cuTile: a float16 tile can be stored into float32
    a = np.ones(8, np.float16)
    out = np.zeros(8, np.float32)
    launch((2,), kernels.vector_add, (a, a, out, 4))
    assert out.tolist() == [2.0] * 8


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_torch_tensors_are_updated_in_place(dtype):
    a = torch.randn(100).to(dtype)
    b = torch.randn(100).to(dtype)
    c = torch.zeros(100, dtype=dtype)
    before = c.data_ptr()
    launch((4,), kernels.vector_add, (a, b, c, 32))
    assert c.data_ptr() == before
    expected = (a.float() + b.float()).to(dtype)     # one rounding of the exact sum
    torch.testing.assert_close(c, expected, rtol=0, atol=0)


def test_bfloat16_cast_matches_torch():
    x = torch.randn(64)
    y = torch.zeros(64, dtype=torch.bfloat16)
    launch((2,), kernels.cast_to, (x, y, 32))
    assert torch.equal(y, x.to(torch.bfloat16))
    np.testing.assert_array_equal(y.float().numpy(), round_to(x.numpy(), bfloat16))


def test_non_contiguous_numpy_views_work():
    base = rng.normal(size=(8, 16)).astype(np.float32)
    x = base[:, ::2]                       # strided view
    y = np.zeros((8, 8), np.float32)
    launch((2, 1), kernels.copy_2d, (x, y, 4, 8))
    np.testing.assert_array_equal(y, x)


def test_unchecked_bounds_refuse_a_tile_that_sticks_out():
    """check_bounds=False is undefined behaviour on a GPU when the tile is partial: refused."""
    inside = load(Array(np.ones((4, 8), np.float32), ct.float32), (1, 0), (2, 8),
                  check_bounds=False)
    assert inside.shape == (2, 8)
    with pytest.raises(TileValueError, match="check_bounds=False.*sticks out"):
        load(Array(np.ones((3, 8), np.float32), ct.float32), (1, 0), (2, 8), check_bounds=False)
    target = Array(np.zeros((3, 8), np.float32), ct.float32)
    with pytest.raises(TileValueError, match="check_bounds=False.*sticks out"):
        store(target, (1, 0), ct.full((2, 8), 1.0, ct.float32), check_bounds=False)
    assert not target.data.any()


def test_atomics_return_the_old_values_and_see_every_update():
    counter = np.zeros(1, np.int32)
    tickets = np.full(5, -1, np.int32)
    histogram = np.zeros(4, np.int32)
    values = np.array([0, 1, 1, 3] * 5, np.int32)    # block b counts values[4b:4b+4]
    launch((5,), kernels.ticket_and_histogram, (counter, tickets, histogram, values, 4))
    assert counter.tolist() == [5]
    assert tickets.tolist() == [0, 1, 2, 3, 4]           # blocks run in order here
    assert histogram.tolist() == [5, 10, 0, 5]           # the repeated 1 counted twice a block


def test_exchange_and_compare_and_swap():
    flags = np.zeros(2, np.int32)
    seen = np.full(3, -1, np.int32)
    launch((3,), kernels.exchange_and_compare, (flags, seen))
    assert seen.tolist() == [0, 0, 1]
    assert flags.tolist() == [2, 7]                      # only block 0 found the 0


def test_grid_dependency_control_is_a_no_op_here():
    # Kernels run one after the other on the interpreter, so the one before has always finished.
    x = np.arange(8, dtype=np.float32)
    y = np.zeros(8, np.float32)
    launch((2,), kernels.dependent_copy, (x, y, 4))
    np.testing.assert_array_equal(y, x)
