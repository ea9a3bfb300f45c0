"""The per-chunk gradients of :mod:`mamba2_tile.kernels.bwd_chunk` in three kernels, for wide
states.

:func:`~mamba2_tile.kernels.bwd_chunk.bwd_chunk_kernel` keeps float32 ``dB_j`` and ``dC_i``
tiles spanning the whole ``dstate`` next to the ``B``, ``C`` and ``dh`` tiles that feed them. At
dstate 256 that is most of the register file: compiled for sm_90 it needs 235 registers a thread
at chunk 64 and 248 at chunk 256, and in a training step at b8 h64 p64 L2048 chunk 256 it took
4.0 of 5.1 ms (data/h200_backward_profile_2026-12-04.txt). The same sums split along what each
output needs:

* :func:`bwd_chunk_dx_kernel`, one block a (chunk, head): everything that sums *over* dstate —
  ``u_j`` (so ``dx``, ``ddt`` and ``dD``) and the three rows of ``ddA_terms``. Their in-chunk
  pairs ``L_ij (C_i · B_j) dt_j (dy_i · x_j)`` come from one float32 tile a pair of row blocks,
  summed over ``i`` for ``B_j · dB_j`` and over ``j`` for ``C_i · dC_i`` (one row a row block,
  carried through the loop), so ``C Bᵀ`` is made once a head. Its float32 tiles are
  ``(BLOCK_M, HEADDIM)`` and ``(BLOCK_M, BLOCK_M)``; ``dstate`` is only the inner dimension of
  its ``mma``.
* :func:`bwd_chunk_dscores_kernel`, one block a (chunk, group, pair of row blocks ``j <= i``):
  ``dscores_ij = sum_h L_ij dt_j (dy_i · x_j)`` over the group's heads. The in-chunk terms of
  ``dB`` and ``dC`` are that sum times the group's ``C`` and ``B``::

      sum_h dC_i = ... + sum_{j <= i} dscores_ij B_j
      sum_h dB_j = ... + sum_{i >= j} dscores_ij C_i

  so they are made once a group instead of once a head (mamba_ssm's backward takes the same
  turn, its ``dcb``). It is written in the input dtype, the rounding the ``mma`` that reads it
  takes anyway.
* :func:`bwd_chunk_dB_dC_kernel`, one block a (chunk, group's block of heads, ``BLOCK_N``
  columns of dstate): ``dB_j`` and ``dC_i`` on those columns: ``dscores`` against ``C`` and
  ``B`` (in the group's first block only), then each head's part through the states, ``(dt_j
  x_j)ᵀ dh`` and ``(exp(dA_i) dy_i)ᵀ h_c``, summed over the block's heads. A sum over heads
  of products is one product of the heads side by side: ``HEADS_PER_MMA`` heads' scaled
  ``(BLOCK_M, headdim)`` tiles next to each other against their states stacked make one
  ``mma`` ``HEADS_PER_MMA * headdim`` deep, where one head made one ``headdim`` deep (the
  launcher's ``bwd_chunk_heads_per_mma``).

The formulas, the masks of packed sequences and the varlen terms are those of the one-kernel
form (its module doc), term for term, through the tile functions they share
(:mod:`mamba2_tile.kernels.bwd_chunk_tiles`); so are the outputs' layouts.

Multiply-adds a (chunk, head) at chunk 256, headdim 64, dstate 256 (row blocks of 64, so 10
pairs of row blocks; data/cpu_bwd_chunk_dscores.txt): the dx kernel 25.2 M (38.3 M when its
``C_i · dC_i`` loop made ``C Bᵀ`` and ``dy xᵀ`` a second time), dscores 2.6 M, the dB/dC kernel
8.7 M (50.3 M when every head made its own in-chunk terms, ``dy xᵀ`` again for each of the four
column blocks): 36.5 M against 88.6 M. The gradients are the same within 1% on the interpreter.
Compiled for sm_90 at b8 L2048's heads a block: dx 255 registers and ~212 KB of shared memory
(one block an SM, as before, whatever its occupancy hint), dB/dC 128 registers without spills
(the occupancy hint 2); both hints are the launcher's (``BWD_CHUNK_SPLIT_DX_OCCUPANCY``,
``BWD_CHUNK_SPLIT_DB_DC_OCCUPANCY``).

Timed on the H200 against the one-kernel form (data/h200_bwd_chunk_forms.txt, 2026-12-05),
these three kernels were faster at dstate 256 and at every chunk of 128 or more, slower only at
dstate 128 chunk 64; so :func:`~mamba2_tile.kernels.bwd_chunk.bwd_chunk_launch` takes them from
a padded dstate of 256 or a chunk of 128 on (the timings are beside ``BWD_CHUNK_SPLIT_CHUNK``).
Earlier forms, before the dscores kernel (data/h200_bwd_chunk_split.txt): two kernels, each head
making its own in-chunk dB/dC terms, took 4.53 ms at dstate 256 chunk 256 (b8 h64 L2048);
reading a precomputed ``C Bᵀ`` in the dx kernel instead of forming it per head, 4.68 ms.
"""

from mamba2_tile.kernels.bwd_chunk_tiles import (head_columns, head_rows, head_state_columns,
                                                  load_rows, pair_dyx, pair_tiles_t,
                                                  sequence_in_block, sequence_state_columns,
                                                  sequences_ending_in, state_columns,
                                                  to_sequence_end)
from mamba2_tile.kernels.exp2 import LOG2E
from mamba2_tile.kernels.packing import last_seq, rows_seq, seq_before
from mamba2_tile.kernels.row_blocks import row_blocks_with_tokens
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
    # The row-block count at run time even in whole chunks (a constant only at one block a
    # chunk, where it is always 1): with a constant count the compiler unrolled the loops, and a
    # training step (H100, b8 h64 p64 L2048 chunk 256) took 2.75 ms against 1.83 at dstate 128,
    # 4.56 against 3.19 at dstate 256, the gradients the same bit for bit
    # (data/h100_bwd_chunk_dx_row_count_2026-12-07.txt). Not with the varlen terms: a constant
    # count of 1 around their loop over sequences failed in tileiras 13.4 ("Invalid use-def
    # chain in schedule", chunk 64, dstate 256, on sm_90).
    token_blocks = row_blocks_with_tokens(x.shape[1], c, CHUNK_SIZE, BLOCK_M,
                                          (CHUNK_SIZE == BLOCK_M) & (not HAS_VARLEN))
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

    # C_i · dC_i for every row block i, one row each: first the part through the entering state,
    # exp(dA_i) dy_i · (h_c C_i); the j loop below adds the in-chunk pairs.
    C_dC = ct.zeros((blocks_per_chunk, BLOCK_M), dtype=ct.float32)
    row_block_ids = ct.reshape(ct.arange(blocks_per_chunk, dtype=ct.int32), (blocks_per_chunk, 1))
    for i in range(token_blocks):
        row_block = c * blocks_per_chunk + i
        C_i = load_rows(C, b, row_block, g, 0, BLOCK_M, DSTATE).astype(mma_dtype)
        dA_i = ct.reshape(ct.load(dA_cumsum, (b, h, c, i), (1, 1, 1, BLOCK_M)),
                          (BLOCK_M, 1)) * LOG2E
        dy_i = load_rows(dy, b, row_block, h, 0, BLOCK_M, HEADDIM).astype(ct.float32)
        read_out = ct.exp2(dA_i, flush_to_zero=True)                     # (BLOCK_M, 1)
        if HAS_SEQ_IDX:
            seq_i = rows_seq(seq_idx, b, row_block, BLOCK_M)              # (BLOCK_M, 1)
            read_out = ct.where(seq_i == seq_enter, read_out, 0.0)
        through_state = ct.sum(dy_i * ct.mma(C_i, ct.transpose(h_enter),
                                             ct.zeros((BLOCK_M, HEADDIM), dtype=ct.float32))
                               * read_out, axis=1)
        C_dC = ct.where(row_block_ids == i, ct.reshape(through_state, (1, BLOCK_M)), C_dC)

    # u_j, dx_j, ddt_j and B_j · dB_j: column blocks j, each summing over the row blocks i >= j.
    for j in range(token_blocks):
        col_block = c * blocks_per_chunk + j
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
                start, last, in_block = sequence_in_block(cu_seqlens, k, col_block, BLOCK_M)
                if in_block:
                    to_e = to_sequence_end(dA_cumsum, b, h, c, col_block, dA_j, start,
                                           last, CHUNK_SIZE, BLOCK_M)
                    G = sequence_state_columns(dvarlen_states, k, h, 0, HEADDIM,
                                               DSTATE).astype(mma_dtype)
                    G_u = ct.mma(B_j, ct.transpose(G),
                                 ct.zeros((BLOCK_M, HEADDIM), dtype=ct.float32)) * to_e
                    u = G_u + u
                    B_dB = B_dB + ct.sum(x_j * G_u, axis=1) * dt_row
        B_dB_pairs = ct.zeros((BLOCK_M,), dtype=ct.float32)
        for i in range(j, token_blocks):
            _, dy_i, scores_t, _, pairs_t = pair_tiles_t(
                B_j, x_j.astype(mma_dtype), C, dy, dA_cumsum, dA_j, cols, seq_idx, b, h, g, c,
                i, c * blocks_per_chunk + i, col_block, BLOCK_M, DSTATE, HEADDIM, HAS_SEQ_IDX)
            # The same float32 pairs give both sides of dA's gradient: summed over i
            # for B_j · dB_j, and (with dt_j) over j for C_i · dC_i.
            B_dB_pairs = B_dB_pairs + ct.sum(pairs_t, axis=1)
            C_dC_pairs = ct.reshape(ct.sum(pairs_t * dt_j, axis=0), (1, BLOCK_M))
            C_dC = C_dC + ct.where(row_block_ids == i, C_dC_pairs, 0.0)
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

    ct.store(ddA_terms, (b, h, c, 0, 0),
             ct.reshape(C_dC, (1, 1, 1, 1, CHUNK_SIZE)))


@ct.kernel
def bwd_chunk_dscores_kernel(
    x, dt, dA_cumsum, dy, seq_idx,   # as bwd_chunk_kernel
    dscores,                         # out, x's dtype: (b, c, g, s, s), the pairs j <= i
    CHUNK_SIZE: ct.Constant[int],
    BLOCK_M: ct.Constant[int],
    HEADDIM: ct.Constant[int],       # headdim padded to a power of two
    HAS_SEQ_IDX: ct.Constant[bool],  # the forward's seq_idx masks
):
    """``dscores_ij = sum_h L_ij dt_j (dy_i · x_j)`` over a group's heads: the gradient of the
    scores ``C_i · B_j`` its heads share. One block a (chunk, group, pair of row blocks ``i``,
    ``j``); pairs above the diagonal (``j > i``) and row blocks past seqlen do nothing, and are
    never read."""
    blocks_per_chunk = CHUNK_SIZE // BLOCK_M
    nchunks = dA_cumsum.shape[2]
    b = ct.bid(0) // nchunks
    c = ct.bid(0) % nchunks
    g = ct.bid(1)
    i = ct.bid(2) // blocks_per_chunk
    j = ct.bid(2) % blocks_per_chunk
    heads_per_group = x.shape[2] // dscores.shape[2]
    row_block = c * blocks_per_chunk + i
    if (j <= i) & (row_block * BLOCK_M < x.shape[1]):
        rows = ct.reshape(i * BLOCK_M + ct.arange(BLOCK_M, dtype=ct.int32), (BLOCK_M, 1))
        pairs = ct.zeros((BLOCK_M, BLOCK_M), dtype=ct.float32)
        for head in range(heads_per_group):
            h = g * heads_per_group + head
            dA_i = ct.reshape(ct.load(dA_cumsum, (b, h, c, i), (1, 1, 1, BLOCK_M)),
                              (BLOCK_M, 1)) * LOG2E
            dy_i = load_rows(dy, b, row_block, h, 0, BLOCK_M, HEADDIM).astype(x.dtype)
            pairs = pairs + pair_dyx(x, dt, dA_cumsum, seq_idx, dy_i, dA_i, rows, b, h, c, j,
                                     row_block, c * blocks_per_chunk + j, BLOCK_M, HEADDIM,
                                     HAS_SEQ_IDX)
        ct.store(dscores, (b, c, g, i, j),
                 ct.reshape(pairs, (1, 1, 1, BLOCK_M, BLOCK_M)).astype(dscores.dtype))


@ct.function
def dscores_block(dscores, b, c, g, i, j, BLOCK_M):
    """``(BLOCK_M, BLOCK_M)``: ``dscores`` of row block ``i`` against row block ``j`` (``j <=
    i``) of chunk ``c``, group ``g`` (:func:`bwd_chunk_dscores_kernel`'s layout)."""
    return ct.reshape(ct.load(dscores, (b, c, g, i, j), (1, 1, 1, BLOCK_M, BLOCK_M)),
                      (BLOCK_M, BLOCK_M))


@ct.kernel
def bwd_chunk_dB_dC_kernel(
    x, dt, dA_cumsum, B, C, chunk_states, dstates, dy,      # as bwd_chunk_kernel
    dscores,                         # (b, c, g, s, s), from bwd_chunk_dscores_kernel
    seq_idx, dvarlen_states, cu_seqlens, chunk_sequences,    # as bwd_chunk_kernel
    dB, dC,                          # out, f32: (b, l, h / HEADS_PER_BLOCK, n), a block's sum
    CHUNK_SIZE: ct.Constant[int],
    BLOCK_M: ct.Constant[int],
    BLOCK_N: ct.Constant[int],       # the dstate columns of one block
    HEADDIM: ct.Constant[int],       # headdim padded to a power of two
    HEADS_PER_BLOCK: ct.Constant[int],   # heads of one group, summed into one dB and dC
    HEADS_PER_MMA: ct.Constant[int],     # heads whose state terms one mma sums (divides the above)
    HAS_SEQ_IDX: ct.Constant[bool],  # the forward's seq_idx masks
    HAS_VARLEN: ct.Constant[bool],   # each sequence's last state has a gradient (batch 1)
    WHOLE_CHUNKS: ct.Constant[bool],  # seqlen a multiple of CHUNK_SIZE
):
    blocks_per_chunk = CHUNK_SIZE // BLOCK_M
    nchunks = dA_cumsum.shape[2]
    b = ct.bid(0) // nchunks
    c = ct.bid(0) % nchunks
    split = ct.bid(1)
    n = ct.bid(2)
    first_head = split * HEADS_PER_BLOCK
    heads_per_group = x.shape[2] // B.shape[2]
    g = first_head // heads_per_group
    # The in-chunk terms are the group's, not a head's: the group's first block adds them.
    in_chunk = first_head % heads_per_group == 0
    token_blocks = row_blocks_with_tokens(x.shape[1], c, CHUNK_SIZE, BLOCK_M, WHOLE_CHUNKS)
    mma_dtype = x.dtype
    if HAS_SEQ_IDX:
        seq_enter = seq_before(seq_idx, b, c * CHUNK_SIZE)
        seq_leave = last_seq(rows_seq(seq_idx, b, c, CHUNK_SIZE))

    # dB_j on this block's columns: column blocks j; dscoresᵀ C_i over the row blocks i >= j,
    # then each head's part through the state leaving the chunk.
    for j in range(token_blocks):
        col_block = c * blocks_per_chunk + j
        dB_j = ct.zeros((BLOCK_M, BLOCK_N), dtype=ct.float32)
        if in_chunk:
            for i in range(j, token_blocks):
                row_block = c * blocks_per_chunk + i
                C_in = load_rows(C, b, row_block, g, n, BLOCK_M, BLOCK_N).astype(mma_dtype)
                dB_j = ct.mma(ct.transpose(dscores_block(dscores, b, c, g, i, j, BLOCK_M)),
                              C_in, dB_j)
        if HAS_SEQ_IDX:
            leaving = ct.reshape(rows_seq(seq_idx, b, col_block, BLOCK_M) == seq_leave,
                                 (BLOCK_M, 1, 1))
        # (x_j exp(dA_last - dA_j) dt_j)ᵀ dh over the block's heads, HEADS_PER_MMA at a time:
        # their (BLOCK_M, HEADDIM) tiles side by side against their states stacked, one mma
        # HEADS_PER_MMA * HEADDIM deep.
        for m in range(HEADS_PER_BLOCK // HEADS_PER_MMA):
            heads = split * (HEADS_PER_BLOCK // HEADS_PER_MMA) + m   # in HEADS_PER_MMA units
            dA_last = ct.reshape(ct.load(dA_cumsum, (b, heads, c, CHUNK_SIZE - 1),
                                         (1, HEADS_PER_MMA, 1, 1)),
                                 (1, HEADS_PER_MMA, 1)) * LOG2E
            dA_j = head_columns(dA_cumsum, b, heads, c, j, HEADS_PER_MMA, BLOCK_M) * LOG2E
            dt_j = head_columns(dt, b, heads, c, j, HEADS_PER_MMA, BLOCK_M)
            to_end = ct.exp2(dA_last - dA_j, flush_to_zero=True)  # (BLOCK_M, HEADS_PER_MMA, 1)
            if HAS_SEQ_IDX:
                to_end = ct.where(leaving, to_end, 0.0)
            x_j = head_rows(x, b, col_block, heads, HEADS_PER_MMA, BLOCK_M, HEADDIM)
            scaled = ct.reshape(x_j.astype(ct.float32) * (to_end * dt_j),
                                (BLOCK_M, HEADS_PER_MMA * HEADDIM))
            dh_n = head_state_columns(dstates, b, heads, c, n, HEADS_PER_MMA, HEADDIM, BLOCK_N)
            dB_j = ct.mma(scaled.astype(mma_dtype), dh_n.astype(mma_dtype), dB_j)
        if HAS_VARLEN:
            for head in range(HEADS_PER_BLOCK):
                h = first_head + head
                dA_j = ct.reshape(ct.load(dA_cumsum, (b, h, c, j), (1, 1, 1, BLOCK_M)),
                                  (BLOCK_M, 1)) * LOG2E
                dt_j = ct.reshape(ct.load(dt, (b, h, c, j), (1, 1, 1, BLOCK_M)), (BLOCK_M, 1))
                x_j = load_rows(x, b, col_block, h, 0, BLOCK_M, HEADDIM).astype(ct.float32)
                first_k, end_k = sequences_ending_in(chunk_sequences, c)
                for k in range(first_k, end_k):
                    start, last, in_block = sequence_in_block(cu_seqlens, k, col_block, BLOCK_M)
                    if in_block:
                        to_e = to_sequence_end(dA_cumsum, b, h, c, col_block, dA_j, start,
                                               last, CHUNK_SIZE, BLOCK_M)
                        G_n = sequence_state_columns(dvarlen_states, k, h, n, HEADDIM, BLOCK_N)
                        dB_j = ct.mma((x_j * (to_e * dt_j)).astype(mma_dtype),
                                      G_n.astype(mma_dtype), dB_j)
        ct.store(dB, (b, col_block, split, n), ct.reshape(dB_j, (1, BLOCK_M, 1, BLOCK_N)))

    # dC_i on this block's columns: row blocks i; dscores B_j over the column blocks j <= i,
    # then each head's part through the state entering the chunk.
    for i in range(token_blocks):
        row_block = c * blocks_per_chunk + i
        dC_i = ct.zeros((BLOCK_M, BLOCK_N), dtype=ct.float32)
        if in_chunk:
            for j in range(i + 1):
                B_jn = load_rows(B, b, c * blocks_per_chunk + j, g, n, BLOCK_M,
                                 BLOCK_N).astype(mma_dtype)
                dC_i = ct.mma(dscores_block(dscores, b, c, g, i, j, BLOCK_M), B_jn, dC_i)
        if HAS_SEQ_IDX:
            entered = ct.reshape(rows_seq(seq_idx, b, row_block, BLOCK_M) == seq_enter,
                                 (BLOCK_M, 1, 1))
        # (exp(dA_i) dy_i)ᵀ h_c over the block's heads, HEADS_PER_MMA at a time (as dB_j's).
        for m in range(HEADS_PER_BLOCK // HEADS_PER_MMA):
            heads = split * (HEADS_PER_BLOCK // HEADS_PER_MMA) + m   # in HEADS_PER_MMA units
            dA_i = head_columns(dA_cumsum, b, heads, c, i, HEADS_PER_MMA, BLOCK_M) * LOG2E
            read_out = ct.exp2(dA_i, flush_to_zero=True)         # (BLOCK_M, HEADS_PER_MMA, 1)
            if HAS_SEQ_IDX:
                read_out = ct.where(entered, read_out, 0.0)
            dy_i = head_rows(dy, b, row_block, heads, HEADS_PER_MMA, BLOCK_M, HEADDIM)
            scaled = ct.reshape(dy_i.astype(ct.float32) * read_out,
                                (BLOCK_M, HEADS_PER_MMA * HEADDIM))
            h_n = head_state_columns(chunk_states, b, heads, c, n, HEADS_PER_MMA, HEADDIM,
                                     BLOCK_N)
            dC_i = ct.mma(scaled.astype(mma_dtype), h_n.astype(mma_dtype), dC_i)
        ct.store(dC, (b, row_block, split, n), ct.reshape(dC_i, (1, BLOCK_M, 1, BLOCK_N)))
