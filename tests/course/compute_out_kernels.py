"""Notebook 07's kernels as the tests write them, right and with one learner's mistake each, in
one place for every test that feeds them to the checks (test_checks_compute_out,
test_mistake_catalogue, test_error_picture).

Each body is a ``ct.function`` whose trailing flags switch one mistake on; each kernel fixes the
flags. cuTile (and the interpreter) read a kernel's source, so everything is at module level.
"""

from mamba2_tile.tile import ct

ZERO = ct.PaddingMode.ZERO


# --- Exercise 2: one block per (batch, chunk, head), broadcasting and ct.sum ------------------

@ct.function
def chunk_body(x, dt, dA_cumsum, B, C, chunk_states, D, y, CHUNK_SIZE, HEADDIM, DSTATE, CAUSAL):
    """One (batch, chunk, head) block; ``CAUSAL=False`` is the learner's bug of a missing mask."""
    b, c, h = ct.bid(0), ct.bid(1), ct.bid(2)
    g = h // (x.shape[2] // B.shape[2])
    x_c = ct.reshape(ct.load(x, (b, c, h, 0), (1, CHUNK_SIZE, 1, HEADDIM), padding_mode=ZERO),
                     (CHUNK_SIZE, HEADDIM)).astype(ct.float32)
    B_c = ct.reshape(ct.load(B, (b, c, g, 0), (1, CHUNK_SIZE, 1, DSTATE), padding_mode=ZERO),
                     (CHUNK_SIZE, DSTATE)).astype(ct.float32)
    C_c = ct.reshape(ct.load(C, (b, c, g, 0), (1, CHUNK_SIZE, 1, DSTATE), padding_mode=ZERO),
                     (CHUNK_SIZE, DSTATE)).astype(ct.float32)
    dt_c = ct.reshape(ct.load(dt, (b, h, c, 0), (1, 1, 1, CHUNK_SIZE)), (1, CHUNK_SIZE))
    dA_c = ct.load(dA_cumsum, (b, h, c, 0), (1, 1, 1, CHUNK_SIZE))
    dA_i, dA_j = ct.reshape(dA_c, (CHUNK_SIZE, 1)), ct.reshape(dA_c, (1, CHUNK_SIZE))
    h_enter = ct.reshape(ct.load(chunk_states, (b, h, c, 0, 0), (1, 1, 1, HEADDIM, DSTATE),
                                 padding_mode=ZERO), (HEADDIM, DSTATE))
    inter = ct.sum(ct.reshape(C_c, (CHUNK_SIZE, 1, DSTATE))
                   * ct.reshape(h_enter, (1, HEADDIM, DSTATE)), axis=2) * ct.exp(dA_i)
    scores = ct.sum(ct.reshape(C_c, (CHUNK_SIZE, 1, DSTATE))
                    * ct.reshape(B_c, (1, CHUNK_SIZE, DSTATE)), axis=2)
    weights = scores * ct.exp(ct.minimum(dA_i - dA_j, 0.0)) * dt_c
    if CAUSAL:
        i = ct.reshape(ct.arange(CHUNK_SIZE, dtype=ct.int32), (CHUNK_SIZE, 1))
        j = ct.reshape(ct.arange(CHUNK_SIZE, dtype=ct.int32), (1, CHUNK_SIZE))
        weights = ct.where(i >= j, weights, 0.0)
    intra = ct.sum(ct.reshape(weights, (CHUNK_SIZE, CHUNK_SIZE, 1))
                   * ct.reshape(x_c, (1, CHUNK_SIZE, HEADDIM)), axis=1)
    y_c = inter + intra + ct.reshape(ct.load(D, (h,), (1,)), (1, 1)) * x_c
    ct.store(y, (b, c, h, 0), ct.reshape(y_c.astype(y.dtype), (1, CHUNK_SIZE, 1, HEADDIM)))


@ct.kernel
def chunk_kernel(x, dt, dA_cumsum, B, C, chunk_states, D, y,
                 CHUNK_SIZE: ct.Constant[int], HEADDIM: ct.Constant[int], DSTATE: ct.Constant[int]):
    chunk_body(x, dt, dA_cumsum, B, C, chunk_states, D, y, CHUNK_SIZE, HEADDIM, DSTATE, True)


@ct.kernel
def chunk_kernel_without_mask(x, dt, dA_cumsum, B, C, chunk_states, D, y,
                              CHUNK_SIZE: ct.Constant[int], HEADDIM: ct.Constant[int],
                              DSTATE: ct.Constant[int]):
    # The bug: no causal mask, so every position also reads the chunk's future.
    chunk_body(x, dt, dA_cumsum, B, C, chunk_states, D, y, CHUNK_SIZE, HEADDIM, DSTATE, False)


# --- Exercise 3: tensor cores, one block per (batch, chunk, head, headdim tile) ---------------

@ct.function
def mma_body(x, dt, dA_cumsum, B, C, chunk_states, D, z, y, CHUNK_SIZE, BLOCK_P, DSTATE, HAS_Z,
             DIAGONAL, DECAY_EXP, INTER_EXP, WEIGHT_BY_DT):
    """The notebook's solution, each flag True; False is one learner's mistake:
    ``DIAGONAL`` the strict mask ``rows > cols``, ``DECAY_EXP`` / ``INTER_EXP`` the intra- /
    inter-chunk decay without its ``ct.exp``, ``WEIGHT_BY_DT`` scores not weighted by ``dt_j``."""
    nchunks = dA_cumsum.shape[2]
    b, c = ct.bid(0) // nchunks, ct.bid(0) % nchunks
    h, p = ct.bid(1), ct.bid(2)
    g = h // (x.shape[2] // B.shape[2])
    x_c = ct.reshape(ct.load(x, (b, c, h, p), (1, CHUNK_SIZE, 1, BLOCK_P), padding_mode=ZERO),
                     (CHUNK_SIZE, BLOCK_P))
    B_c = ct.reshape(ct.load(B, (b, c, g, 0), (1, CHUNK_SIZE, 1, DSTATE), padding_mode=ZERO),
                     (CHUNK_SIZE, DSTATE))
    C_c = ct.reshape(ct.load(C, (b, c, g, 0), (1, CHUNK_SIZE, 1, DSTATE), padding_mode=ZERO),
                     (CHUNK_SIZE, DSTATE))
    dt_j = ct.reshape(ct.load(dt, (b, h, c, 0), (1, 1, 1, CHUNK_SIZE)), (1, CHUNK_SIZE))
    dA = ct.load(dA_cumsum, (b, h, c, 0), (1, 1, 1, CHUNK_SIZE))
    dA_i, dA_j = ct.reshape(dA, (CHUNK_SIZE, 1)), ct.reshape(dA, (1, CHUNK_SIZE))
    h_enter = ct.reshape(ct.load(chunk_states, (b, h, c, p, 0), (1, 1, 1, BLOCK_P, DSTATE),
                                 padding_mode=ZERO), (BLOCK_P, DSTATE)).astype(C.dtype)
    acc = ct.mma(C_c, ct.transpose(h_enter), ct.zeros((CHUNK_SIZE, BLOCK_P), dtype=ct.float32))
    if INTER_EXP:
        acc = acc * ct.exp(dA_i)
    else:
        acc = acc * dA_i
    scores = ct.mma(C_c, ct.transpose(B_c), ct.zeros((CHUNK_SIZE, CHUNK_SIZE), dtype=ct.float32))
    rows = ct.reshape(ct.arange(CHUNK_SIZE, dtype=ct.int32), (CHUNK_SIZE, 1))
    cols = ct.reshape(ct.arange(CHUNK_SIZE, dtype=ct.int32), (1, CHUNK_SIZE))
    decay = ct.minimum(dA_i - dA_j, 0.0)
    if DECAY_EXP:
        decay = ct.exp(decay)
    scores = scores * decay
    if WEIGHT_BY_DT:
        scores = scores * dt_j
    if DIAGONAL:
        scores = ct.where(rows >= cols, scores, 0.0)
    else:
        scores = ct.where(rows > cols, scores, 0.0)
    acc = ct.mma(scores.astype(x.dtype), x_c, acc)
    acc = acc + x_c.astype(ct.float32) * ct.reshape(ct.load(D, (h,), (1,)), (1, 1))
    if HAS_Z:
        z_c = ct.reshape(ct.load(z, (b, c, h, p), (1, CHUNK_SIZE, 1, BLOCK_P), padding_mode=ZERO),
                         (CHUNK_SIZE, BLOCK_P)).astype(ct.float32)
        acc = acc * z_c / (1.0 + ct.exp(-z_c))
    ct.store(y, (b, c, h, p), ct.reshape(acc.astype(y.dtype), (1, CHUNK_SIZE, 1, BLOCK_P)))


@ct.kernel
def mma_kernel(x, dt, dA_cumsum, B, C, chunk_states, D, z, y,
               CHUNK_SIZE: ct.Constant[int], BLOCK_P: ct.Constant[int], DSTATE: ct.Constant[int],
               HAS_Z: ct.Constant[bool]):
    mma_body(x, dt, dA_cumsum, B, C, chunk_states, D, z, y, CHUNK_SIZE, BLOCK_P, DSTATE, HAS_Z,
             True, True, True, True)


@ct.kernel
def mma_strict_mask(x, dt, dA_cumsum, B, C, chunk_states, D, z, y,
                    CHUNK_SIZE: ct.Constant[int], BLOCK_P: ct.Constant[int],
                    DSTATE: ct.Constant[int], HAS_Z: ct.Constant[bool]):
    mma_body(x, dt, dA_cumsum, B, C, chunk_states, D, z, y, CHUNK_SIZE, BLOCK_P, DSTATE, HAS_Z,
             False, True, True, True)


@ct.kernel
def mma_decay_without_exp(x, dt, dA_cumsum, B, C, chunk_states, D, z, y,
                          CHUNK_SIZE: ct.Constant[int], BLOCK_P: ct.Constant[int],
                          DSTATE: ct.Constant[int], HAS_Z: ct.Constant[bool]):
    mma_body(x, dt, dA_cumsum, B, C, chunk_states, D, z, y, CHUNK_SIZE, BLOCK_P, DSTATE, HAS_Z,
             True, False, True, True)


@ct.kernel
def mma_inter_decay_without_exp(x, dt, dA_cumsum, B, C, chunk_states, D, z, y,
                                CHUNK_SIZE: ct.Constant[int], BLOCK_P: ct.Constant[int],
                                DSTATE: ct.Constant[int], HAS_Z: ct.Constant[bool]):
    mma_body(x, dt, dA_cumsum, B, C, chunk_states, D, z, y, CHUNK_SIZE, BLOCK_P, DSTATE, HAS_Z,
             True, True, False, True)


@ct.kernel
def mma_without_dt(x, dt, dA_cumsum, B, C, chunk_states, D, z, y,
                   CHUNK_SIZE: ct.Constant[int], BLOCK_P: ct.Constant[int],
                   DSTATE: ct.Constant[int], HAS_Z: ct.Constant[bool]):
    mma_body(x, dt, dA_cumsum, B, C, chunk_states, D, z, y, CHUNK_SIZE, BLOCK_P, DSTATE, HAS_Z,
             True, True, True, False)
