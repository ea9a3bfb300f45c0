"""Kernels shared by the interpreter tests and the GPU agreement tests.

They live in a .py file because real cuTile reads kernel source with `inspect`. Each is
ordinary cuTile code written against `mamba2_tile.tile.ct`.
"""
from mamba2_tile.tile import ct


@ct.kernel
def vector_add(a, b, c, TILE: ct.Constant[int]):
    i = ct.bid(0)
    x = ct.load(a, index=(i,), shape=(TILE,), padding_mode=ct.PaddingMode.ZERO)
    y = ct.load(b, index=(i,), shape=(TILE,), padding_mode=ct.PaddingMode.ZERO)
    ct.store(c, index=(i,), tile=x + y)


@ct.kernel
def row_softmax(x, y, TILE_N: ct.Constant[int]):
    """One row per block; the row is padded with -inf up to a power of two."""
    row = ct.bid(0)
    t = ct.load(x, index=(row, 0), shape=(1, TILE_N), padding_mode=ct.PaddingMode.NEG_INF)
    t = t.astype(ct.float32)
    e = ct.exp(t - ct.max(t, axis=1, keepdims=True))
    p = e / ct.sum(e, axis=1, keepdims=True)
    ct.store(y, index=(row, 0), tile=p.astype(y.dtype))


@ct.kernel
def tiled_matmul(A, B, C, TM: ct.Constant[int], TN: ct.Constant[int], TK: ct.Constant[int]):
    """C = A @ B with a float32 accumulator, looping over K with ct.mma."""
    bm, bn = ct.bid(0), ct.bid(1)
    acc = ct.zeros((TM, TN), dtype=ct.float32)
    for k in range(ct.cdiv(A.shape[1], TK)):
        a = ct.load(A, index=(bm, k), shape=(TM, TK), padding_mode=ct.PaddingMode.ZERO)
        b = ct.load(B, index=(k, bn), shape=(TK, TN), padding_mode=ct.PaddingMode.ZERO)
        acc = ct.mma(a, b, acc)
    ct.store(C, index=(bm, bn), tile=acc.astype(C.dtype))


@ct.kernel
def row_cumsum(x, y, TILE_N: ct.Constant[int], REVERSE: ct.Constant[bool]):
    row = ct.bid(0)
    t = ct.load(x, index=(row, 0), shape=(1, TILE_N), padding_mode=ct.PaddingMode.ZERO)
    ct.store(y, index=(row, 0), tile=ct.cumsum(t, axis=1, reverse=REVERSE))


@ct.kernel
def copy_2d(x, y, TM: ct.Constant[int], TN: ct.Constant[int]):
    """Copy with a 2-D grid; partial edge tiles exercise padding and clipping."""
    i, j = ct.bid(0), ct.bid(1)
    ct.store(y, index=(i, j), tile=ct.load(x, index=(i, j), shape=(TM, TN)))


@ct.kernel
def transpose_copy(x, y, TM: ct.Constant[int], TN: ct.Constant[int]):
    """y = x.T, reading x through a transposed view (order='F')."""
    i, j = ct.bid(0), ct.bid(1)
    t = ct.load(x, index=(i, j), shape=(TM, TN), order="F", latency=2, allow_tma=True)
    ct.store(y, index=(i, j), tile=t)


@ct.kernel
def load_with_padding(x, y, TILE: ct.Constant[int], MODE: ct.Constant[int]):
    """Load one tile that sticks out of x with each padding mode, store the whole tile."""
    if MODE == 0:
        t = ct.load(x, index=(0,), shape=(TILE,), padding_mode=ct.PaddingMode.ZERO)
    elif MODE == 1:
        t = ct.load(x, index=(0,), shape=(TILE,), padding_mode=ct.PaddingMode.NEG_INF)
    elif MODE == 2:
        t = ct.load(x, index=(0,), shape=(TILE,), padding_mode=ct.PaddingMode.POS_INF)
    else:
        t = ct.load(x, index=(0,), shape=(TILE,), padding_mode=ct.PaddingMode.NAN)
    ct.store(y, index=(0,), tile=t)


@ct.kernel
def gather_scatter(x, idx, y, TILE: ct.Constant[int]):
    """y[idx[k] + 1] = x[idx[k]] * 2 for one tile of indices (out of bounds skipped)."""
    i = ct.load(idx, index=(0,), shape=(TILE,))
    v = ct.gather(x, i)
    ct.scatter(y, i + 1, v * 2)


@ct.kernel
def unary_math(x, y, OP: ct.Constant[int], TILE: ct.Constant[int]):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    if OP == 0:
        r = ct.exp(t)
    elif OP == 1:
        r = ct.exp2(t)
    elif OP == 2:
        r = ct.log(t)
    elif OP == 3:
        r = ct.log2(t)
    elif OP == 4:
        r = ct.sqrt(t)
    elif OP == 5:
        r = ct.rsqrt(t)
    elif OP == 6:
        r = ct.abs(t)
    else:
        r = ct.negative(t)
    ct.store(y, index=(ct.bid(0),), tile=r)


UNARY_OPS = ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "abs", "negative")


@ct.kernel
def binary_arith(a, b, c, OP: ct.Constant[int], TILE: ct.Constant[int]):
    x = ct.load(a, index=(ct.bid(0),), shape=(TILE,))
    y = ct.load(b, index=(ct.bid(0),), shape=(TILE,))
    if OP == 0:
        r = ct.add(x, y)
    elif OP == 1:
        r = ct.sub(x, y)
    elif OP == 2:
        r = ct.mul(x, y)
    elif OP == 3:
        r = ct.truediv(x, y)
    elif OP == 4:
        r = ct.maximum(x, y)
    elif OP == 5:
        r = ct.minimum(x, y)
    elif OP == 6:
        r = ct.where(x > y, x, y * 2)
    else:
        r = x * 3 - y / 2 + 1
    ct.store(c, index=(ct.bid(0),), tile=r)


BINARY_OPS = ("add", "sub", "mul", "truediv", "maximum", "minimum", "where", "expression")


@ct.kernel
def reductions(x, out, TM: ct.Constant[int], TN: ct.Constant[int]):
    """out[0..3] = row sums, row maxes, column mins (first TM of them), row products."""
    t = ct.load(x, index=(0, 0), shape=(TM, TN))
    ct.store(out, index=(0, 0), tile=ct.sum(t, axis=1, keepdims=True).reshape((1, TM)))
    ct.store(out, index=(1, 0), tile=ct.max(t, axis=1).reshape((1, TM)))
    ct.store(out, index=(2, 0), tile=ct.extract(ct.min(t, axis=0), (0,), (TM,)).reshape((1, TM)))
    ct.store(out, index=(3, 0), tile=ct.prod(t, axis=1).reshape((1, TM)))


@ct.kernel
def cast_to(x, y, TILE: ct.Constant[int]):
    """y = x cast to y's dtype (bf16/fp16/tf32 rounding happens here)."""
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    ct.store(y, index=(ct.bid(0),), tile=ct.astype(t, y.dtype))


@ct.kernel
def tf32_round(x, y, TILE: ct.Constant[int]):
    t = ct.load(x, index=(ct.bid(0),), shape=(TILE,))
    ct.store(y, index=(ct.bid(0),), tile=t.astype(ct.tfloat32).astype(ct.float32))


@ct.kernel
def shapes_and_cat(x, y, TM: ct.Constant[int], TN: ct.Constant[int]):
    """y (2*TN x TM) = cat(x.T, permute(x) * 2) with a broadcast row added."""
    t = ct.load(x, index=(0, 0), shape=(TM, TN))
    row = ct.arange(TM, dtype=ct.float32)[None, :]
    top = ct.transpose(t) + ct.broadcast_to(row, (TN, TM))
    bottom = ct.permute(t, (1, 0)) * 2
    ct.store(y, index=(0, 0), tile=ct.cat((top, bottom), axis=0))


@ct.kernel
def print_tiles():
    x = ct.ones((2, 4), dtype=ct.float32)
    y = ct.ones((4, 2), dtype=ct.float32)
    acc = ct.full((2, 2), 10.0, dtype=ct.float32)
    print(f"{ct.mma(x, y, acc):.1f}")
    t = ct.arange(8, dtype=ct.int32).reshape((2, 4))
    print("cumsum:", ct.cumsum(t, 1))
    ct.printf("value: %d\n", ct.full((), 42, dtype=ct.int32))


PRINT_TILES_OUTPUT = "[[14.0, 14.0], [14.0, 14.0]]\ncumsum: [[0, 1, 3, 6], [4, 9, 15, 22]]\n" \
                     "value: 42\n"


@ct.kernel
def print_block_ids():
    print(f"block ({ct.bid(0)}, {ct.bid(1)}) of ({ct.num_blocks(0)}, {ct.num_blocks(1)})")


@ct.function
def scaled_exp(t, scale):
    """A @ct.function helper: rebinding must reach helpers too."""
    return ct.exp2(t * scale)


def log2e():
    """A plain Python helper called from a kernel."""
    return 1.4426950408889634


@ct.kernel
def ssd_like_block(x, B, C, y, CHUNK: ct.Constant[int], D: ct.Constant[int]):
    """A notebook-sized SSD-like block: decay mask, two mma, exp, cumsum."""
    c = ct.bid(0)
    xt = ct.load(x, index=(c, 0), shape=(CHUNK, D), padding_mode=ct.PaddingMode.ZERO)
    bt = ct.load(B, index=(c, 0), shape=(CHUNK, D), padding_mode=ct.PaddingMode.ZERO)
    ctile = ct.load(C, index=(c, 0), shape=(CHUNK, D), padding_mode=ct.PaddingMode.ZERO)
    dA = ct.cumsum(ct.sum(xt, axis=1) * -0.01, axis=0)
    decay = scaled_exp(dA[:, None] - dA[None, :], log2e())
    causal = ct.arange(CHUNK, dtype=ct.int32)[:, None] >= ct.arange(CHUNK, dtype=ct.int32)[None, :]
    scores = ct.mma(ctile, ct.transpose(bt), ct.zeros((CHUNK, CHUNK), dtype=ct.float32))
    mixed = ct.where(causal, scores * decay, 0.0)
    out = ct.mma(mixed, xt, ct.zeros((CHUNK, D), dtype=ct.float32))
    ct.store(y, index=(c, 0), tile=out)


# -- kernels with mistakes a learner makes; the marked line is where the error must point --

@ct.kernel
def bad_tile_shape(x):
    t = ct.zeros((3, 4), dtype=ct.float32)  # ERROR-LINE
    ct.store(x, index=(0, 0), tile=t)


@ct.kernel
def bad_mma_shapes(x):
    a = ct.ones((4, 8), dtype=ct.float16)
    b = ct.ones((4, 8), dtype=ct.float16)
    acc = ct.mma(a, b, ct.zeros((4, 8), dtype=ct.float32))  # ERROR-LINE
    ct.store(x, index=(0, 0), tile=acc)


@ct.kernel
def bad_mma_dtypes(x):
    a = ct.ones((4, 8), dtype=ct.float16)
    b = ct.ones((8, 4), dtype=ct.bfloat16)
    acc = ct.mma(a, b, ct.zeros((4, 4), dtype=ct.float32))  # ERROR-LINE
    ct.store(x, index=(0, 0), tile=acc)


@ct.kernel
def bad_store_rank(x):
    t = ct.zeros((4,), dtype=ct.float32)
    ct.store(x, index=(0, 0), tile=t)  # ERROR-LINE


@ct.kernel
def bad_store_dtype(x):
    t = ct.zeros((4, 4), dtype=ct.float32)
    ct.store(x, index=(0, 0), tile=t)  # ERROR-LINE


@ct.kernel
def bad_load_index(x, TILE: ct.Constant[int]):
    t = ct.load(x, index=(ct.bid(0) + 1,), shape=(TILE,))  # ERROR-LINE
    ct.store(x, index=(ct.bid(0),), tile=t)


@ct.function
def helper_with_bad_reshape(t):
    return ct.reshape(t, (3,))  # ERROR-LINE


@ct.kernel
def bad_helper(x):
    t = ct.load(x, index=(0,), shape=(4,))
    ct.store(x, index=(0,), tile=helper_with_bad_reshape(t))


@ct.kernel
def unsupported_op(x):
    t = ct.load(x, index=(0,), shape=(4,))
    ct.store(x, index=(0,), tile=ct.scan(t, 0, lambda a, b: a + b))  # ERROR-LINE


@ct.kernel
def ticket_and_histogram(counter, tickets, histogram, values, N: ct.Constant[int]):
    """Each block takes a ticket (the counter's old value) and counts its values."""
    ticket = ct.atomic_add(counter, 0, 1)
    ct.store(tickets, (ct.bid(0),), ct.reshape(ticket, (1,)))
    ct.atomic_add(histogram, ct.load(values, (ct.bid(0),), (N,)), 1)


@ct.kernel
def exchange_and_compare(flags, seen):
    """Block b swaps b into flags[0] (reading the previous block's), and sets flags[1] to 7 only
    if it still holds 0."""
    previous = ct.atomic_xchg(flags, 0, ct.bid(0), memory_order=ct.MemoryOrder.RELEASE)
    ct.store(seen, (ct.bid(0),), ct.reshape(previous, (1,)))
    ct.atomic_cas(flags, 1, 0, 7 + ct.bid(0))


@ct.kernel
def dependent_copy(x, y, N: ct.Constant[int]):
    """A kernel written for programmatic dependent launch: wait, let the next one start, copy."""
    ct.grid_dependency_control_wait()
    ct.grid_dependency_control_launch_dependents()
    ct.store(y, (ct.bid(0),), ct.load(x, (ct.bid(0),), (N,)))
