"""The per-chunk gradients of :mod:`mamba2_tile.kernels.bwd_chunk` as two kernels, for wide states.

:func:`~mamba2_tile.kernels.bwd_chunk.bwd_chunk_kernel` keeps float32 ``dB_j`` and ``dC_i``
tiles spanning the whole ``dstate`` next to the ``B``, ``C`` and ``dh`` tiles that feed them. At
dstate 256 that is most of the register file: compiled for sm_90 it needs 235 registers a thread
at chunk 64 and 248 at chunk 256, and in a training step at b8 h64 p64 L2048 chunk 256 it took
4.0 of 5.1 ms (data/h200_backward_profile_2026-12-04.txt). The same sums split cleanly in two,
along what each output needs:

* :func:`bwd_chunk_dx_kernel`, one block a (chunk, head): everything that sums *over* dstate —
  ``u_j`` (so ``dx``, ``ddt`` and ``dD``) and the three rows of ``ddA_terms``, whose in-chunk
  pairs ``L_ij (C_i · B_j) dt_j (dy_i · x_j)`` come from the float32 ``C Bᵀ`` and ``dy xᵀ``
  tiles as in the one-kernel form. Its float32 tiles are ``(BLOCK_M, HEADDIM)`` and ``(BLOCK_M,
  BLOCK_M)``; ``dstate`` is only the inner dimension of its ``mma``.
* :func:`bwd_chunk_dB_dC_kernel`, one block a (chunk, group's block of heads, ``BLOCK_N``
  columns of dstate): ``dB_j`` and ``dC_i`` on those columns, summed over the block's heads. It
  needs ``dy xᵀ`` (headdim deep: cheap to make again for each column block) but never ``C Bᵀ``.

The formulas, the masks of packed sequences and the varlen terms are those of the one-kernel
form (its module doc), term for term, through the tile functions both share
(:mod:`mamba2_tile.kernels.bwd_chunk_tiles`); so are the outputs' layouts. The cost of the
split: ``dy xᵀ`` is made in both kernels and once per column block, and ``x``, ``dy`` are read
once more.

Measured (H200, a training step of ours alone as the bench times it, b8 h64 p64 L2048 bf16,
data/h200_bwd_chunk_split.txt): at dstate 256, 5.06 -> 4.53 ms at chunk 256 and 4.10 -> 3.41 ms
at chunk 64, with 64 columns a dB/dC block and that kernel compiled for two blocks an SM (the
occupancy hint 2: 128 registers a thread and 95-113 KB of shared memory on sm_90, against 168
and ~200 KB without, which measured 5.46 and 3.77 ms). At dstate 128 the split was slower than
one kernel at every setting tried (2.79-4.12 against 2.36 ms at chunk 256), so
:func:`~mamba2_tile.kernels.bwd_chunk.bwd_chunk_launch` takes it from dstate 256 on. Reading a
precomputed ``C Bᵀ`` instead of forming it per head was slower again (4.68 ms at chunk 256).
"""

from mamba2_tile.kernels.bwd_chunk_tiles import (decay_t, load_rows, pair_dyx, pair_tiles_t,
                                                  sequence_tokens, sequences_ending_in,
                                                  state_columns, to_sequence_end)
from mamba2_tile.kernels.exp2 import LOG2E
from mamba2_tile.kernels.packing import last_seq, rows_seq, seq_before
from mamba2_tile.tile import ct


@ct.kernel
def bwd_chunk_dx_kernel(
    x, dt, dA_cumsum, B, C, chunk_states, dstates, dy, D,   # as bwd_chunk_kernel
    seq_idx, dvarlen_states, cu_seqlens, chunk_sequences,    # as bwd_chunk_kernel
    dx, ddt, ddA_terms, dD,                                  # out: as bwd_chunk_kernel
    CHUNK_SIZE: ct.Constant[int],
    BLOCK_M: ct.Constant[int],
    HEADDIM: ct.Constant[int],       # headdim padded to a power of two
    DSTATE: ct.Constant[int],        # dstate padded to a power of two
    HAS_D: ct.Constant[bool],        # the skip: dx gets D dy, and dD is written
    HAS_SEQ_IDX: ct.Constant[bool],  # the forward's seq_idx masks
    HAS_VARLEN: ct.Constant[bool],   # each sequence's last state has a gradient (batch 1)
):
    blocks_per_chunk = CHUNK_SIZE // BLOCK_M
    nchunks = dA_cumsum.shape[2]
    b = ct.bid(0) // nchunks
    c = ct.bid(0) % nchunks
    h = ct.bid(1)
    g = h // (x.shape[2] // B.shape[2])
    seqlen = x.shape[1]
    zero = ct.PaddingMode.ZERO
    mma_dtype = x.dtype
    dA_last = ct.reshape(ct.load(dA_cumsum, (b, h, c, CHUNK_SIZE - 1), (1, 1, 1, 1)),
                         (1, 1)) * LOG2E
    dh = state_columns(dstates, b, h, c, 0, HEADDIM, DSTATE).astype(mma_dtype)
    h_enter = state_columns(chunk_states, b, h, c, 0, HEADDIM, DSTATE).astype(mma_dtype)
    if HAS_SEQ_IDX:
        seq_enter = seq_before(seq_idx, b, c * CHUNK_SIZE)
        seq_leave = last_seq(rows_seq(seq_idx, b, c, CHUNK_SIZE))
    # exp(dA_last) <dh, h_c>: the trace of dh h_cᵀ, exact products of the rounded states summed
    # in float32 (the one-kernel form's elementwise product, without its (HEADDIM, DSTATE)
    # float32 tiles).
    gram = ct.mma(dh, ct.transpose(h_enter), ct.zeros((HEADDIM, HEADDIM), dtype=ct.float32))
    diagonal = (ct.reshape(ct.arange(HEADDIM, dtype=ct.int32), (HEADDIM, 1))
                == ct.reshape(ct.arange(HEADDIM, dtype=ct.int32), (1, HEADDIM)))
    entering = ct.sum(ct.sum(ct.where(diagonal, gram, 0.0), axis=1, keepdims=True), axis=0,
                      keepdims=True) * ct.exp2(dA_last, flush_to_zero=True)
    if HAS_SEQ_IDX:
        entering = ct.where(seq_enter == seq_leave, entering, 0.0)
    entering = ct.reshape(entering, (1,))

    # u_j, dx_j, ddt_j and B_j · dB_j: column blocks j, each summing over the row blocks i >= j.
    for j in range(blocks_per_chunk):
        col_block = c * blocks_per_chunk + j
        if col_block * BLOCK_M < seqlen:
            B_j = load_rows(B, b, col_block, g, 0, BLOCK_M, DSTATE).astype(mma_dtype)
            cols = ct.reshape(j * BLOCK_M + ct.arange(BLOCK_M, dtype=ct.int32), (BLOCK_M, 1))
            dA_j = ct.reshape(ct.load(dA_cumsum, (b, h, c, j), (1, 1, 1, BLOCK_M)),
                              (BLOCK_M, 1)) * LOG2E
            dt_j = ct.reshape(ct.load(dt, (b, h, c, j), (1, 1, 1, BLOCK_M)), (BLOCK_M, 1))
            dt_row = ct.reshape(dt_j, (BLOCK_M,))
            x_j = load_rows(x, b, col_block, h, 0, BLOCK_M, HEADDIM).astype(ct.float32)
            to_end = ct.exp2(dA_last - dA_j, flush_to_zero=True)             # (BLOCK_M, 1)
            if HAS_SEQ_IDX:
                seq_j = rows_seq(seq_idx, b, col_block, BLOCK_M)              # (BLOCK_M, 1)
                to_end = ct.where(seq_j == seq_leave, to_end, 0.0)
            u = ct.mma(B_j, ct.transpose(dh), ct.zeros((BLOCK_M, HEADDIM), dtype=ct.float32))
            u = u * to_end
            B_dB_dh = ct.sum(x_j * u, axis=1) * dt_row
            B_dB = B_dB_dh
            first = (j * BLOCK_M + ct.arange(BLOCK_M, dtype=ct.int32)) == 0
            ct.store(ddA_terms, (b, h, c, 2, j),
                     ct.reshape(B_dB_dh + ct.where(first, entering, 0.0), (1, 1, 1, 1, BLOCK_M)))
            if HAS_VARLEN:
                first_k, end_k = sequences_ending_in(chunk_sequences, c)
                for k in range(first_k, end_k):
                    start, last = sequence_tokens(cu_seqlens, k)
                    if (start < col_block * BLOCK_M + BLOCK_M) & (last >= col_block * BLOCK_M):
                        to_e = to_sequence_end(dA_cumsum, b, h, c, col_block, dA_j, start,
                                               last, CHUNK_SIZE, BLOCK_M)
                        G = ct.load(dvarlen_states, (k, h, 0, 0), (1, 1, HEADDIM, DSTATE),
                                    padding_mode=zero)
                        G = ct.reshape(G, (HEADDIM, DSTATE)).astype(mma_dtype)
                        G_u = ct.mma(B_j, ct.transpose(G),
                                     ct.zeros((BLOCK_M, HEADDIM), dtype=ct.float32)) * to_e
                        u = G_u + u
                        B_dB = B_dB + ct.sum(x_j * G_u, axis=1) * dt_row
            B_dB_pairs = ct.zeros((BLOCK_M,), dtype=ct.float32)
            for i in range(j, blocks_per_chunk):
                row_block = c * blocks_per_chunk + i
                if row_block * BLOCK_M < seqlen:
                    C_i = load_rows(C, b, row_block, g, 0, BLOCK_M, DSTATE).astype(mma_dtype)
                    dy_i = load_rows(dy, b, row_block, h, 0, BLOCK_M, HEADDIM).astype(mma_dtype)
                    rows = ct.reshape(i * BLOCK_M + ct.arange(BLOCK_M, dtype=ct.int32),
                                      (1, BLOCK_M))
                    scores_t, _, pairs = pair_tiles_t(
                        B_j, C_i, x_j.astype(mma_dtype), dy_i,
                        decay_t(dA_cumsum, b, h, c, i, dA_j, BLOCK_M), rows, cols, seq_idx, b,
                        row_block, col_block, BLOCK_M, HAS_SEQ_IDX)
                    B_dB_pairs = B_dB_pairs + pairs
                    u = ct.mma(scores_t.astype(mma_dtype), dy_i, u)
            dx_j = u * dt_j
            if HAS_D:
                dy_j = load_rows(dy, b, col_block, h, 0, BLOCK_M, HEADDIM).astype(ct.float32)
                D_h = ct.reshape(ct.load(D, (h, 0), (1, HEADDIM), padding_mode=zero),
                                 (1, HEADDIM))
                dx_j = dx_j + D_h * dy_j
                ct.store(dD, (b, col_block, h, 0),
                         ct.reshape(ct.sum(dy_j * x_j, axis=0), (1, 1, 1, HEADDIM)))
            ct.store(dx, (b, col_block, h, 0),
                     ct.reshape(dx_j, (1, BLOCK_M, 1, HEADDIM)).astype(dx.dtype))
            ct.store(ddt, (b, h, c, j), ct.reshape(ct.sum(x_j * u, axis=1), (1, 1, 1, BLOCK_M)))
            B_dB = B_dB + B_dB_pairs * dt_row
            ct.store(ddA_terms, (b, h, c, 1, j), ct.reshape(B_dB, (1, 1, 1, 1, BLOCK_M)))

    # C_i · dC_i: row blocks i, each summing over the column blocks j <= i.
    for i in range(blocks_per_chunk):
        row_block = c * blocks_per_chunk + i
        if row_block * BLOCK_M < seqlen:
            C_i = load_rows(C, b, row_block, g, 0, BLOCK_M, DSTATE).astype(mma_dtype)
            rows = ct.reshape(i * BLOCK_M + ct.arange(BLOCK_M, dtype=ct.int32), (BLOCK_M, 1))
            dA_i = ct.reshape(ct.load(dA_cumsum, (b, h, c, i), (1, 1, 1, BLOCK_M)),
                              (BLOCK_M, 1)) * LOG2E
            dy_i = load_rows(dy, b, row_block, h, 0, BLOCK_M, HEADDIM).astype(ct.float32)
            read_out = ct.exp2(dA_i, flush_to_zero=True)                     # (BLOCK_M, 1)
            if HAS_SEQ_IDX:
                seq_i = rows_seq(seq_idx, b, row_block, BLOCK_M)              # (BLOCK_M, 1)
                read_out = ct.where(seq_i == seq_enter, read_out, 0.0)
            C_dC = ct.sum(dy_i * ct.mma(C_i, ct.transpose(h_enter),
                                        ct.zeros((BLOCK_M, HEADDIM), dtype=ct.float32)),
                          axis=1) * ct.reshape(read_out, (BLOCK_M,))
            dy_i = dy_i.astype(mma_dtype)
            for j in range(i + 1):
                col_block = c * blocks_per_chunk + j
                dyx = pair_dyx(x, dt, dA_cumsum, seq_idx, dy_i, dA_i, rows, b, h, c, j,
                               row_block, col_block, BLOCK_M, HEADDIM, HAS_SEQ_IDX)
                B_j = load_rows(B, b, col_block, g, 0, BLOCK_M, DSTATE).astype(mma_dtype)
                scores = ct.mma(C_i, ct.transpose(B_j),
                                ct.zeros((BLOCK_M, BLOCK_M), dtype=ct.float32))
                C_dC = C_dC + ct.sum(scores * dyx, axis=1)
            ct.store(ddA_terms, (b, h, c, 0, i), ct.reshape(C_dC, (1, 1, 1, 1, BLOCK_M)))


@ct.kernel
def bwd_chunk_dB_dC_kernel(
    x, dt, dA_cumsum, B, C, chunk_states, dstates, dy,      # as bwd_chunk_kernel
    seq_idx, dvarlen_states, cu_seqlens, chunk_sequences,    # as bwd_chunk_kernel
    dB, dC,                          # out, f32: (b, l, h / HEADS_PER_BLOCK, n), a block's sum
    CHUNK_SIZE: ct.Constant[int],
    BLOCK_M: ct.Constant[int],
    BLOCK_N: ct.Constant[int],       # the dstate columns of one block
    HEADDIM: ct.Constant[int],       # headdim padded to a power of two
    HEADS_PER_BLOCK: ct.Constant[int],   # heads of one group, summed into one dB and dC
    HAS_SEQ_IDX: ct.Constant[bool],  # the forward's seq_idx masks
    HAS_VARLEN: ct.Constant[bool],   # each sequence's last state has a gradient (batch 1)
):
    blocks_per_chunk = CHUNK_SIZE // BLOCK_M
    nchunks = dA_cumsum.shape[2]
    b = ct.bid(0) // nchunks
    c = ct.bid(0) % nchunks
    split = ct.bid(1)
    n = ct.bid(2)
    first_head = split * HEADS_PER_BLOCK
    g = first_head // (x.shape[2] // B.shape[2])
    seqlen = x.shape[1]
    zero = ct.PaddingMode.ZERO
    mma_dtype = x.dtype
    if HAS_SEQ_IDX:
        seq_enter = seq_before(seq_idx, b, c * CHUNK_SIZE)
        seq_leave = last_seq(rows_seq(seq_idx, b, c, CHUNK_SIZE))

    # dB_j on this block's columns: column blocks j; for each head, the row blocks i >= j.
    for j in range(blocks_per_chunk):
        col_block = c * blocks_per_chunk + j
        if col_block * BLOCK_M < seqlen:
            cols = ct.reshape(j * BLOCK_M + ct.arange(BLOCK_M, dtype=ct.int32), (BLOCK_M, 1))
            if HAS_SEQ_IDX:
                seq_j = rows_seq(seq_idx, b, col_block, BLOCK_M)              # (BLOCK_M, 1)
            dB_j = ct.zeros((BLOCK_M, BLOCK_N), dtype=ct.float32)
            for head in range(HEADS_PER_BLOCK):
                h = first_head + head
                dA_last = ct.reshape(ct.load(dA_cumsum, (b, h, c, CHUNK_SIZE - 1),
                                             (1, 1, 1, 1)), (1, 1)) * LOG2E
                dA_j = ct.reshape(ct.load(dA_cumsum, (b, h, c, j), (1, 1, 1, BLOCK_M)),
                                  (BLOCK_M, 1)) * LOG2E
                dt_j = ct.reshape(ct.load(dt, (b, h, c, j), (1, 1, 1, BLOCK_M)), (BLOCK_M, 1))
                x_j = load_rows(x, b, col_block, h, 0, BLOCK_M, HEADDIM).astype(ct.float32)
                to_end = ct.exp2(dA_last - dA_j, flush_to_zero=True)         # (BLOCK_M, 1)
                if HAS_SEQ_IDX:
                    to_end = ct.where(seq_j == seq_leave, to_end, 0.0)
                dh_n = state_columns(dstates, b, h, c, n, HEADDIM, BLOCK_N)
                dB_j = ct.mma((x_j * (to_end * dt_j)).astype(mma_dtype),
                              dh_n.astype(mma_dtype), dB_j)
                if HAS_VARLEN:
                    first_k, end_k = sequences_ending_in(chunk_sequences, c)
                    for k in range(first_k, end_k):
                        start, last = sequence_tokens(cu_seqlens, k)
                        if ((start < col_block * BLOCK_M + BLOCK_M)
                                & (last >= col_block * BLOCK_M)):
                            to_e = to_sequence_end(dA_cumsum, b, h, c, col_block, dA_j, start,
                                                   last, CHUNK_SIZE, BLOCK_M)
                            G_n = ct.reshape(ct.load(dvarlen_states, (k, h, 0, n),
                                                     (1, 1, HEADDIM, BLOCK_N),
                                                     padding_mode=zero), (HEADDIM, BLOCK_N))
                            dB_j = ct.mma((x_j * (to_e * dt_j)).astype(mma_dtype),
                                          G_n.astype(mma_dtype), dB_j)
                x_j = x_j.astype(mma_dtype)
                for i in range(j, blocks_per_chunk):
                    row_block = c * blocks_per_chunk + i
                    if row_block * BLOCK_M < seqlen:
                        dy_i = load_rows(dy, b, row_block, h, 0, BLOCK_M, HEADDIM).astype(mma_dtype)
                        rows = ct.reshape(i * BLOCK_M + ct.arange(BLOCK_M, dtype=ct.int32),
                                          (1, BLOCK_M))
                        decay = decay_t(dA_cumsum, b, h, c, i, dA_j, BLOCK_M)
                        dyx_t = ct.mma(x_j, ct.transpose(dy_i),
                                       ct.zeros((BLOCK_M, BLOCK_M), dtype=ct.float32))
                        dyx_t = ct.where(rows >= cols, dyx_t * (decay * dt_j), 0.0)
                        if HAS_SEQ_IDX:
                            seq_i = ct.transpose(rows_seq(seq_idx, b, row_block, BLOCK_M))
                            dyx_t = ct.where(seq_i == seq_j, dyx_t, 0.0)
                        C_in = load_rows(C, b, row_block, g, n, BLOCK_M, BLOCK_N).astype(mma_dtype)
                        dB_j = ct.mma(dyx_t.astype(mma_dtype), C_in, dB_j)
            ct.store(dB, (b, col_block, split, n), ct.reshape(dB_j, (1, BLOCK_M, 1, BLOCK_N)))

    # dC_i on this block's columns: row blocks i; for each head, the column blocks j <= i.
    for i in range(blocks_per_chunk):
        row_block = c * blocks_per_chunk + i
        if row_block * BLOCK_M < seqlen:
            rows = ct.reshape(i * BLOCK_M + ct.arange(BLOCK_M, dtype=ct.int32), (BLOCK_M, 1))
            if HAS_SEQ_IDX:
                seq_i = rows_seq(seq_idx, b, row_block, BLOCK_M)              # (BLOCK_M, 1)
            dC_i = ct.zeros((BLOCK_M, BLOCK_N), dtype=ct.float32)
            for head in range(HEADS_PER_BLOCK):
                h = first_head + head
                dA_i = ct.reshape(ct.load(dA_cumsum, (b, h, c, i), (1, 1, 1, BLOCK_M)),
                                  (BLOCK_M, 1)) * LOG2E
                dy_i = load_rows(dy, b, row_block, h, 0, BLOCK_M, HEADDIM).astype(ct.float32)
                h_n = state_columns(chunk_states, b, h, c, n, HEADDIM, BLOCK_N)
                read_out = ct.exp2(dA_i, flush_to_zero=True)                 # (BLOCK_M, 1)
                if HAS_SEQ_IDX:
                    read_out = ct.where(seq_i == seq_enter, read_out, 0.0)
                dC_i = ct.mma((dy_i * read_out).astype(mma_dtype), h_n.astype(mma_dtype), dC_i)
                dy_i = dy_i.astype(mma_dtype)
                for j in range(i + 1):
                    col_block = c * blocks_per_chunk + j
                    dyx = pair_dyx(x, dt, dA_cumsum, seq_idx, dy_i, dA_i, rows, b, h, c, j,
                                   row_block, col_block, BLOCK_M, HEADDIM, HAS_SEQ_IDX)
                    B_jn = load_rows(B, b, col_block, g, n, BLOCK_M, BLOCK_N).astype(mma_dtype)
                    dC_i = ct.mma(dyx.astype(mma_dtype), B_jn, dC_i)
            ct.store(dC, (b, row_block, split, n), ct.reshape(dC_i, (1, BLOCK_M, 1, BLOCK_N)))
