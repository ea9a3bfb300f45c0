"""Small kernels that exercise the compiler check: one per kind of tile operation the course uses.

They import the real `cuda.tile` (not `mamba2_tile.tile`) because only the real package has a
compiler. `examples()` pairs each kernel with arguments shaped like a real launch.
"""

import numpy as np

import cuda.tile as ct


@ct.kernel
def scale_add(x, y, out, alpha, TILE: ct.Constant[int]):
    """out = alpha * x + y on 1-D tiles; the last tile is partial when TILE does not divide n."""
    i = ct.bid(0)
    a = ct.load(x, index=(i,), shape=(TILE,), padding_mode=ct.PaddingMode.ZERO)
    b = ct.load(y, index=(i,), shape=(TILE,), padding_mode=ct.PaddingMode.ZERO)
    ct.store(out, index=(i,), tile=alpha * a + b)


@ct.kernel
def row_cumsum(x, out, ROWS: ct.Constant[int], COLS: ct.Constant[int]):
    """Running sum along each row of a (ROWS, COLS) tile: the scan at the heart of chunk_cumsum."""
    i = ct.bid(0)
    tile = ct.load(x, index=(i, 0), shape=(ROWS, COLS), padding_mode=ct.PaddingMode.ZERO)
    ct.store(out, index=(i, 0), tile=ct.cumsum(tile.astype(ct.float32), axis=1))


@ct.kernel
def matmul(a, b, c, TM: ct.Constant[int], TN: ct.Constant[int], TK: ct.Constant[int]):
    """c = a @ b: one (TM, TN) output tile per block, accumulated over K in float32 by ct.mma."""
    i, j = ct.bid(0), ct.bid(1)
    acc = ct.zeros((TM, TN), dtype=ct.float32)
    for k in range(ct.num_tiles(a, axis=1, shape=(TM, TK))):
        a_tile = ct.load(a, index=(i, k), shape=(TM, TK), padding_mode=ct.PaddingMode.ZERO)
        b_tile = ct.load(b, index=(k, j), shape=(TK, TN), padding_mode=ct.PaddingMode.ZERO)
        acc = ct.mma(a_tile, b_tile, acc)
    ct.store(c, index=(i, j), tile=acc.astype(c.dtype))


@ct.kernel
def broken_mma(x, out, TILE: ct.Constant[int]):
    """Does not compile: ct.mma needs 2-D tiles (matrices), this passes 1-D ones."""
    t = ct.load(x, index=(0,), shape=(TILE,))
    ct.store(out, index=(0,), tile=ct.mma(t, t, t))


def examples():
    """(name, kernel, args) triples, like `mamba2_tile.kernels.compile_examples()`."""
    x = np.zeros(1000, np.float32)
    rows = np.zeros((48, 64), np.float32)
    a = np.zeros((128, 96), np.float16)
    b = np.zeros((96, 64), np.float16)
    c = np.zeros((128, 64), np.float32)
    return [
        ("scale_add", scale_add, (x, x, x, 2.0, 256)),
        ("row_cumsum", row_cumsum, (rows, rows, 16, 64)),
        ("matmul", matmul, (a, b, c, 64, 64, 32)),
    ]
