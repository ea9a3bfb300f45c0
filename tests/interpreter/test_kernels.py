"""Whole kernels against NumPy, printing, and the compiler-like errors."""
import inspect
import time

import numpy as np
import pytest

from mamba2_tile.interpreter import (TileInterpreterError, TileTypeError, TileValueError,
                                     launch)

from . import kernels

rng = np.random.default_rng(2)


def test_vector_add():
    a, b = rng.normal(size=1000).astype(np.float32), rng.normal(size=1000).astype(np.float32)
    c = np.zeros_like(a)
    launch((8,), kernels.vector_add, (a, b, c, 128))
    np.testing.assert_array_equal(c, a + b)


def test_row_softmax_with_neg_inf_padding():
    x = rng.normal(size=(6, 50)).astype(np.float32)
    y = np.zeros_like(x)
    launch((6,), kernels.row_softmax, (x, y, 64))
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_tiled_matmul_loops_over_k(dtype):
    A = rng.normal(size=(40, 72)).astype(dtype)
    B = rng.normal(size=(72, 24)).astype(dtype)
    C = np.zeros((40, 24), np.float32)
    launch((3, 2), kernels.tiled_matmul, (A, B, C, 16, 16, 32))
    np.testing.assert_allclose(C, A.astype(np.float64) @ B.astype(np.float64), rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("reverse", [False, True])
def test_row_cumsum(reverse):
    x = rng.normal(size=(5, 30)).astype(np.float32)
    y = np.zeros_like(x)
    launch((5,), kernels.row_cumsum, (x, y, 32, reverse))
    ref = np.flip(np.cumsum(np.flip(x, 1), 1), 1) if reverse else np.cumsum(x, 1)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)


def test_reductions_kernel():
    x = rng.uniform(0.5, 1.5, size=(4, 8)).astype(np.float32)
    out = np.zeros((4, 4), np.float32)
    launch((1,), kernels.reductions, (x, out, 4, 8))
    np.testing.assert_allclose(out, [x.sum(1), x.max(1), x.min(0)[:4], x.prod(1)], rtol=1e-6)


def test_shapes_and_cat_kernel():
    x = rng.normal(size=(4, 8)).astype(np.float32)
    y = np.zeros((16, 4), np.float32)
    launch((1,), kernels.shapes_and_cat, (x, y, 4, 8))
    np.testing.assert_allclose(y, np.concatenate([x.T + np.arange(4), x.T * 2]))


def test_helpers_are_rebound_and_ssd_like_block_is_correct():
    chunk, d, n = 64, 64, 4
    x, B, C = (rng.normal(size=(n * chunk, d)).astype(np.float32) for _ in range(3))
    y = np.zeros_like(x)
    launch((n,), kernels.ssd_like_block, (x, B, C, y, chunk, d))
    for c in range(n):
        rows = slice(c * chunk, (c + 1) * chunk)
        dA = np.cumsum(x[rows].sum(1) * -0.01)
        decay = np.exp(dA[:, None] - dA[None, :]) * np.tri(chunk)
        ref = ((C[rows] @ B[rows].T) * decay) @ x[rows]
        np.testing.assert_allclose(y[rows], ref, rtol=1e-3, atol=1e-3)


def test_print_matches_gpu_format(capsys):
    launch((1,), kernels.print_tiles, ())
    assert capsys.readouterr().out == kernels.PRINT_TILES_OUTPUT


def test_blocks_run_over_a_2d_grid_with_bid_and_num_blocks(capsys):
    launch((2, 2), kernels.print_block_ids, ())
    assert capsys.readouterr().out.splitlines() == [
        "block (0, 0) of (2, 2)", "block (1, 0) of (2, 2)",
        "block (0, 1) of (2, 2)", "block (1, 1) of (2, 2)"]


def _error_line(function):
    lines, start = inspect.getsourcelines(function)
    return start + next(i for i, line in enumerate(lines) if "ERROR-LINE" in line)


@pytest.mark.parametrize("kernel,where,args,error,match", [
    (kernels.bad_tile_shape, kernels.bad_tile_shape, (np.zeros((4, 4), np.float32),),
     TileTypeError, "power of two"),
    (kernels.bad_mma_shapes, kernels.bad_mma_shapes, (np.zeros((4, 8), np.float32),),
     TileTypeError, "cannot be multiplied"),
    (kernels.bad_mma_dtypes, kernels.bad_mma_dtypes, (np.zeros((4, 4), np.float32),),
     TileTypeError, "same dtype"),
    (kernels.bad_store_rank, kernels.bad_store_rank, (np.zeros((4, 4), np.float32),),
     TileTypeError, "rank"),
    (kernels.bad_store_dtype, kernels.bad_store_dtype, (np.zeros((4, 4), np.int32),),
     TileTypeError, "implicitly cast"),
    (kernels.bad_load_index, kernels.bad_load_index, (np.zeros(8, np.float32), 4),
     TileValueError, "outside the tile grid"),
    (kernels.bad_helper, kernels.helper_with_bad_reshape, (np.zeros(4, np.float32),),
     TileTypeError, "reshape"),
    (kernels.unsupported_op, kernels.unsupported_op, (np.zeros(4, np.float32),),
     NotImplementedError, "ct.scan is not supported"),
])
def test_errors_name_the_kernel_line(kernel, where, args, error, match):
    with pytest.raises(error, match=match) as info:
        launch((2,), kernel, args)
    function = getattr(where, "_pyfunc", None) or getattr(where, "__wrapped__", where)
    message = str(info.value)
    assert isinstance(info.value, TileInterpreterError)
    assert f'File "{inspect.getsourcefile(function)}", line {_error_line(function)}' in message
    assert "ERROR-LINE" in message and "(in block (" in message


def test_argument_count_is_checked():
    with pytest.raises(TileTypeError, match="takes 4 arguments"):
        launch((1,), kernels.vector_add, (np.zeros(4),))


def test_ssd_like_workload_runs_in_seconds():
    """256 blocks of 64x64 tiles, each with 2 mma + exp + cumsum: a notebook-sized SSD run."""
    chunk, d, n = 64, 64, 256
    x, B, C = (rng.normal(size=(n * chunk, d)).astype(np.float32) for _ in range(3))
    y = np.zeros_like(x)
    start = time.perf_counter()
    launch((n,), kernels.ssd_like_block, (x, B, C, y, chunk, d))
    elapsed = time.perf_counter() - start
    print(f"SSD-like workload: {n} blocks in {elapsed:.2f} s")
    assert elapsed < 20
    assert np.isfinite(y).all()
