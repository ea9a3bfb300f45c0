"""Checks for notebook 04, the cuTile primer: a row sum, a chunked scan and a tiled matmul.

Each check launches the learner's kernel on fresh, seeded inputs whose sizes are deliberately
*not* multiples of the tile shape (so edge handling is tested too), on the GPU when there is one
and on the CPU tile interpreter otherwise, then compares with NumPy and explains what is off.
"""


import numpy as np
import torch

from mamba2_tile.course.checks.feedback import (NOT_DONE, attempt, compare, exercise,
                                                 launch_exercise)
from mamba2_tile.dispatch import default_device
from mamba2_tile.kernels.launching import cdiv, next_power_of_2



def _run(name, kernel, grid, args):
    """Launch the learner's kernel; NOT_DONE (after a friendly line) if it is not written yet."""
    return attempt(name, launch_exercise, grid, kernel, args)


def _tensor(array):
    return torch.as_tensor(array, device=default_device())


_NAN_HINT = ("NaN usually means a load read past the edge of an array without a padding_mode "
             "(the CPU interpreter fills those elements with NaN, a GPU with whatever is there); "
             "pass padding_mode=ct.PaddingMode.ZERO.")


def _same(got, candidate, atol):
    with np.errstate(invalid="ignore"):
        return (got.shape == candidate.shape
                and np.allclose(got, candidate, atol=atol, equal_nan=True))


def _named(catalogue, got, atol, *inputs):
    """The diagnosis of the first catalogue entry whose wrong answer is ``got``, else None."""
    for wrong_answer, hint in catalogue:
        if _same(got, np.asarray(wrong_answer(*inputs), dtype=np.float64), atol):
            return hint
    return None


_NEG_INF_HINT = ("-inf sums: the load padded the missing columns with -inf, as "
                 "padding_mode=ct.PaddingMode.NEG_INF does (right for row_max_kernel's max, "
                 "since -inf never wins it, but every sum with a -inf term is -inf). For a sum, "
                 "pad with padding_mode=ct.PaddingMode.ZERO: zeros add nothing.")

# Exercise 1's catalogue: (the row sums a mistake produces from x (rows, cols) and the tile
# shape, the diagnosis); the general rules in _row_sum_hint follow it.
ROW_SUM_MISTAKES = [
    # section 3's row_max_kernel kept its NEG_INF padding: every row hangs over TILE_C
    (lambda x, tile_rows, tile_cols: np.where(x.shape[1] < tile_cols, -np.inf,
                                              x.sum(axis=1)),
     _NEG_INF_HINT),
    (lambda x, tile_rows, tile_cols: np.zeros(len(x)),
     "`out` is still all zeros: store the (TILE_R,) tile of sums with ct.store."),
    (lambda x, tile_rows, tile_cols: x.max(axis=1),
     "those are the rows' maxima (ct.max): sum it along axis 1 with ct.sum instead."),
]


def _row_sum_hint(got, x, expected, tile_rows, tile_cols):
    named = _named(ROW_SUM_MISTAKES, got, 1e-4, x.astype(np.float64), tile_rows, tile_cols)
    if named:
        return named
    last_block = (len(x) // tile_rows) * tile_rows
    if np.isneginf(got).any():
        return _NEG_INF_HINT
    if np.isnan(got).any():
        return _NAN_HINT
    if np.allclose(got[:last_block], expected[:last_block], atol=1e-4):
        return ("only the last block is wrong; its tile hangs over the edge of `x`. Load with "
                "padding_mode=ct.PaddingMode.ZERO so the missing elements add nothing.")
    return ("block i owns rows i*TILE_R .. i*TILE_R+TILE_R-1: load tile (ct.bid(0), 0) of "
            "shape (TILE_R, TILE_C), sum it along axis 1 and store it at index (ct.bid(0),).")


@exercise("04.1")
def check_row_sum(row_sum_kernel, rows=37, cols=50, tile_rows=8):
    """Exercise 1: `row_sum_kernel(x, out, TILE_R, TILE_C)` writes out[r] = sum(x[r, :])."""
    name = "row_sum_kernel"
    x = np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float32)
    out = _tensor(np.zeros(rows, np.float32))
    tile_cols = next_power_of_2(cols)
    if _run(name, row_sum_kernel, (cdiv(rows, tile_rows),),
            (_tensor(x), out, tile_rows, tile_cols)) is NOT_DONE:
        return False

    got = out.cpu().numpy()
    expected = x.astype(np.float64).sum(axis=1)
    hint = _row_sum_hint(got, x, expected, tile_rows, tile_cols)
    return compare(name, got, expected, atol=1e-4, rtol=1e-5, hint=hint)


# Exercise 2's catalogue: (what a mistake stores, from x and the chunk-wise inclusive scan,
# the diagnosis).
CUMSUM_MISTAKES = [
    (lambda x, expected: np.cumsum(x),
     "this is one running sum over the whole array: each block must start again from 0."),
    (lambda x, expected: expected - x,
     "off by one: out[t] should include x[t] itself (an inclusive scan, like ct.cumsum)."),
    (lambda x, expected: x,
     "the output is just x: apply ct.cumsum(tile, axis=0) before storing."),
]


def _cumsum_hint(got, x, expected):
    named = _named(CUMSUM_MISTAKES, got, 1e-4, x.astype(np.float64), expected)
    if named:
        return named
    if np.isnan(got).any():
        return _NAN_HINT
    return ("block c loads tile (ct.bid(0),) of shape (CHUNK,), zero-padded, and stores "
            "ct.cumsum of it at the same index.")


@exercise("04.2")
def check_chunk_cumsum(chunk_cumsum_kernel, length=100, chunk=32):
    """Exercise 2: `chunk_cumsum_kernel(x, out, CHUNK)`: a running sum restarting every CHUNK."""
    name = "chunk_cumsum_kernel"
    x = np.random.default_rng(1).standard_normal(length).astype(np.float32)
    out = _tensor(np.zeros(length, np.float32))
    if _run(name, chunk_cumsum_kernel, (cdiv(length, chunk),),
            (_tensor(x), out, chunk)) is NOT_DONE:
        return False

    got = out.cpu().numpy()
    padded = np.zeros(cdiv(length, chunk) * chunk)
    padded[:length] = x
    expected = padded.reshape(-1, chunk).cumsum(axis=1).reshape(-1)[:length]
    hint = _cumsum_hint(got, x, expected)
    return compare(name, got, expected, atol=1e-4, rtol=1e-5, hint=hint)


def _k_tiles(a, b, tile_k, which):
    """a @ b over the first (``which=0``) or the last (``which=-1``) k tile only."""
    k0 = list(range(0, a.shape[1], tile_k))[which]
    return a[:, k0:k0 + tile_k] @ b[k0:k0 + tile_k]


# Exercise 3's catalogue: (what a mistake computes from a, b (float64) and TK, the diagnosis).
MATMUL_MISTAKES = [
    (lambda a, b, tile_k: np.zeros((a.shape[0], b.shape[1])),
     "`c` is still all zeros. ct.mma returns the new accumulator: write "
     "`acc = ct.mma(a_tile, b_tile, acc)`, then store acc."),
    (lambda a, b, tile_k: _k_tiles(a, b, tile_k, 0),
     "only the first k tile was used: loop k over ct.num_tiles(a, axis=1, shape=(TM, TK))."),
    (lambda a, b, tile_k: _k_tiles(a, b, tile_k, -1),
     "only the last k tile survived: accumulate into acc instead of overwriting it."),
]


def _matmul_hint(got, a, b, tile_k):
    named = _named(MATMUL_MISTAKES, got, 1e-2, a, b, tile_k)
    if named:
        return named
    if np.isnan(got).any():
        return _NAN_HINT
    return ("block (i, j) owns c tile (i, j); for each k it multiplies a tile (i, k) of shape "
            "(TM, TK) by b tile (k, j) of shape (TK, TN). Zero-pad both loads.")


@exercise("04.3")
def check_matmul(matmul_kernel, m=100, n=48, k=72, tile_m=32, tile_n=32, tile_k=16):
    """Exercise 3: `matmul_kernel(a, b, c, TM, TN, TK)` computes c = a @ b in tiles with ct.mma."""
    name = "matmul_kernel"
    rng = np.random.default_rng(2)
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((k, n)).astype(np.float16)
    c = _tensor(np.zeros((m, n), np.float32))
    grid = (cdiv(m, tile_m), cdiv(n, tile_n))
    if _run(name, matmul_kernel, grid,
            (_tensor(a), _tensor(b), c, tile_m, tile_n, tile_k)) is NOT_DONE:
        return False

    got = c.cpu().numpy()
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    expected = a64 @ b64
    hint = _matmul_hint(got, a64, b64, tile_k)
    return compare(name, got, expected, atol=2e-3, rtol=2e-3, hint=hint,
                   axes=("row of c", "column of c"), picture=("row of c", "column of c"))


def _block_causal(size, tile, keep):
    """A (size, size) 0/1 mask from ``keep(row tile, column tile, rows, cols)`` per tile pair."""
    rows, cols = np.indices((size, size))
    return keep(rows // tile, cols // tile, rows, cols).astype(np.float64)


CAUSAL_MISTAKES = [  # (which entries of s the wrong kernel uses, as a mask; the diagnosis)
    (lambda T, tile: _block_causal(T, tile, lambda ti, tk, r, c: tk <= ti),
     "the tiles left of the diagonal are right, but the diagonal tile (k == i) is not masked: "
     "inside it, the entries with column > row are the future. Zero them with "
     "ct.where(rows >= cols, s_tile, 0.0)."),
    (lambda T, tile: np.ones((T, T)),
     "every tile of s was used, the future included: loop k only over range(i + 1) (the tiles "
     "right of the diagonal tile are all future) and mask the diagonal tile."),
    (lambda T, tile: _block_causal(T, tile, lambda ti, tk, r, c: r > c),
     "the diagonal is missing: row t reads its own column t too, so keep rows >= cols, not "
     "rows > cols."),
    (lambda T, tile: _block_causal(T, tile, lambda ti, tk, r, c: (tk == ti) & (r <= c)),
     "the mask points the wrong way: it keeps the future (cols > rows) and drops the past. Keep "
     "the entries where rows >= cols."),
    (lambda T, tile: _block_causal(T, tile, lambda ti, tk, r, c: tk < ti),
     "the loop stops before the diagonal tile: range(i) leaves out k == i; loop over "
     "range(i + 1) and mask that last tile."),
    (lambda T, tile: _block_causal(T, tile, lambda ti, tk, r, c: (tk <= ti) & (r % tile >= c % tile)),
     "the mask compares positions inside the tile (ct.arange alone), so it also cuts the upper "
     "corner off the tiles left of the diagonal, which lie wholly in the past. Compare positions "
     "in the whole matrix: rows = i*TM + ct.arange(TM, ...), cols = k*TM + ct.arange(TM, ...)."),
    (lambda T, tile: _block_causal(T, tile, lambda ti, tk, r, c: (tk == ti) & (r >= c)),
     "only the diagonal tile (k == i) counts: either there is no loop over k, or each step "
     "overwrites the accumulator; write acc = ct.mma(s_tile, v_tile, acc) inside "
     "`for k in range(i + 1)`."),
]


def _wrong_blocks(got, expected, tile, atol, rtol):
    """Which blocks (row tiles) hold a wrong row, in words: 'blocks 1 (rows 16-31), 2 (...)'."""
    with np.errstate(invalid="ignore"):
        bad_rows = ~np.isclose(got, expected, atol=atol, rtol=rtol).all(axis=1)
    blocks = sorted({int(r) // tile for r in np.flatnonzero(bad_rows)})
    last = len(expected) - 1
    return ", ".join(f"{b} (rows {b * tile}-{min(b * tile + tile - 1, last)})" for b in blocks)


@exercise("04.4")
def check_causal_matmul(causal_matmul_kernel, size=45, n=12, tile=16):
    """Exercise 4: `causal_matmul_kernel(s, v, out, TM, TN)` computes out = tril(s) @ v in tiles.

    Block i owns the output rows of row tile i; only the tiles k <= i of s hold the past, and
    the diagonal tile k == i must be masked inside. A wrong answer is compared with each
    mistake in CAUSAL_MISTAKES, and the blocks (row tiles) whose rows are wrong are named.
    """
    name = "causal_matmul_kernel"
    rng = np.random.default_rng(3)
    s = rng.standard_normal((size, size)).astype(np.float16)
    v = rng.standard_normal((size, n)).astype(np.float16)
    out = _tensor(np.zeros((size, n), np.float32))
    if _run(name, causal_matmul_kernel, (cdiv(size, tile),),
            (_tensor(s), _tensor(v), out, tile, next_power_of_2(n))) is NOT_DONE:
        return False

    got = out.cpu().numpy()
    s64, v64 = s.astype(np.float64), v.astype(np.float64)
    expected = np.tril(s64) @ v64
    atol = rtol = 2e-3
    hint = None
    if np.isnan(got).any():
        hint = _NAN_HINT
    elif not got.any():
        hint = ("`out` is still all zeros. ct.mma returns the new accumulator: write "
                "`acc = ct.mma(s_tile, v_tile, acc)`, then store acc at index (i, 0).")
    else:
        for uses, diagnosis in CAUSAL_MISTAKES:
            if _same(got, (uses(size, tile) * s64) @ v64, atol):
                hint = diagnosis
                break
    if hint is None:
        hint = ("block i owns rows i*TM .. i*TM+TM-1 of out; for k in range(i + 1) it multiplies "
                "tile (i, k) of s, masked where the column is past the row, by tile (k, 0) of v, "
                "and accumulates with ct.mma.")
    if got.shape == expected.shape and not np.isnan(got).any():
        blocks = _wrong_blocks(got, expected, tile, atol, rtol)
        if blocks:
            hint += f" Blocks (row tiles of {tile}) with wrong rows: {blocks}."
    return compare(name, got, expected, atol=atol, rtol=rtol, hint=hint, axes=("row", "column"),
                   picture=("row", "column"))
