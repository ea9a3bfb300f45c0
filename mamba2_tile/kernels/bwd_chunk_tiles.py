"""Tile helpers the per-chunk gradient kernels share (:mod:`mamba2_tile.kernels.bwd_chunk` and
:mod:`mamba2_tile.kernels.bwd_chunk_split`): row blocks of a (b, l, k, w) array, the decays
between positions of a chunk, the masked ``(BLOCK_M, BLOCK_M)`` tiles of a pair of row blocks,
and the packed sequences a row block holds."""

from mamba2_tile.kernels.exp2 import LOG2E
from mamba2_tile.kernels.packing import rows_seq
from mamba2_tile.tile import ct


@ct.function
def load_rows(array, b, row_block, k, column_block, BLOCK_M, WIDTH):
    """``(BLOCK_M, WIDTH)``: rows ``row_block * BLOCK_M`` onward of batch ``b``'s ``array[b, :,
    k]`` ((b, l, k, w): ``x``, ``dy``, ``B``, ``C`` and the outputs' layout), columns
    ``column_block * WIDTH`` onward; zero past the ends (seqlen, padded widths)."""
    tile = ct.load(array, (b, row_block, k, column_block), (1, BLOCK_M, 1, WIDTH),
                   padding_mode=ct.PaddingMode.ZERO)
    return ct.reshape(tile, (BLOCK_M, WIDTH))


@ct.function
def head_rows(array, b, row_block, heads, HEADS, BLOCK_M, WIDTH):
    """``(BLOCK_M, HEADS, WIDTH)``: :func:`load_rows` of ``HEADS`` adjacent heads at once, heads
    ``heads * HEADS`` onward (``x``, ``dy``)."""
    tile = ct.load(array, (b, row_block, heads, 0), (1, BLOCK_M, HEADS, WIDTH),
                   padding_mode=ct.PaddingMode.ZERO)
    return ct.reshape(tile, (BLOCK_M, HEADS, WIDTH))


@ct.function
def head_columns(array, b, heads, c, j, HEADS, BLOCK_M):
    """``(BLOCK_M, HEADS, 1)``: row block ``j`` of chunk ``c`` of ``HEADS`` adjacent heads,
    ``heads * HEADS`` onward, of ``array`` ((b, h, c, s): ``dA_cumsum``, ``dt``), a column
    each."""
    tile = ct.reshape(ct.load(array, (b, heads, c, j), (1, HEADS, 1, BLOCK_M)), (HEADS, BLOCK_M))
    return ct.reshape(ct.transpose(tile), (BLOCK_M, HEADS, 1))


@ct.function
def to_sequence_end(dA_cumsum, b, h, c, col_block, dA_j, start, last, CHUNK_SIZE, BLOCK_M):
    """``(BLOCK_M, 1)``: ``exp(dA_e - dA_j)`` for the rows of row block ``col_block`` (in
    ``BLOCK_M`` units of seqlen, in chunk ``c``) that belong to the sequence of tokens
    ``start`` to ``last`` (= e, in the chunk), 0 elsewhere; ``dA_j`` (log2 units) a column."""
    dA_e = ct.reshape(ct.load(dA_cumsum, (b, h, c, last - c * CHUNK_SIZE), (1, 1, 1, 1)),
                      (1, 1)) * LOG2E
    tokens = col_block * BLOCK_M + ct.reshape(ct.arange(BLOCK_M, dtype=ct.int32), (BLOCK_M, 1))
    # Clamped: rows after e would overflow, and are masked anyway.
    to_e = ct.exp2(ct.minimum(dA_e - dA_j, 0.0, propagate_nan=True), flush_to_zero=True)
    return ct.where((tokens >= start) & (tokens <= last), to_e, 0.0)


@ct.function
def decay_t(dA_cumsum, b, h, c, i, dA_j, BLOCK_M):
    """``(BLOCK_M, BLOCK_M)``: ``exp(dA_i - dA_j)`` at (j, i) for row block ``i``, ``dA_j``
    (log2 units) a column; clamped to 1 above the diagonal, where it is masked anyway."""
    dA_i = ct.reshape(ct.load(dA_cumsum, (b, h, c, i), (1, 1, 1, BLOCK_M)), (1, BLOCK_M)) * LOG2E
    return ct.exp2(ct.minimum(dA_i - dA_j, 0.0, propagate_nan=True), flush_to_zero=True)


@ct.function
def pair_tiles_t(B_j, x_j, C, dy, dA_cumsum, dA_j, cols, seq_idx, b, h, g, c, i, row_block,
                 col_block, BLOCK_M, DSTATE, HEADDIM, HAS_SEQ_IDX):
    """Row block ``i`` of chunk ``c`` (``row_block`` of seqlen) against column block ``j <= i``
    (``col_block``: ``B_j`` and ``x_j`` in the mma dtype, ``dA_j`` a column in log2 units,
    ``cols`` ``(BLOCK_M, 1)`` its positions in the chunk). Loads ``C_i`` and ``dy_i`` in the mma
    dtype and returns ``(C_i, dy_i, scores_t, dyx_t, pairs_t)``, the last three ``(BLOCK_M,
    BLOCK_M)`` float32 tiles at (j, i): ``L ∘ B_j C_iᵀ`` and ``L ∘ x_j dy_iᵀ`` (zero where the
    causal or the sequence mask is), and ``B_j C_iᵀ ∘ L ∘ x_j dy_iᵀ``, the in-chunk pairs of
    ``dA``'s gradient from float32 tiles, ``dt_j`` aside: its row sums are ``B_j · dB_j``'s, its
    column sums (with ``dt_j``) ``C_i · dC_i``'s (module doc of
    :mod:`mamba2_tile.kernels.bwd_chunk`)."""
    C_i = load_rows(C, b, row_block, g, 0, BLOCK_M, DSTATE).astype(B_j.dtype)
    dy_i = load_rows(dy, b, row_block, h, 0, BLOCK_M, HEADDIM).astype(B_j.dtype)
    rows = ct.reshape(i * BLOCK_M + ct.arange(BLOCK_M, dtype=ct.int32), (1, BLOCK_M))
    decay = decay_t(dA_cumsum, b, h, c, i, dA_j, BLOCK_M)
    mask = rows >= cols
    if HAS_SEQ_IDX:
        # Tokens of different sequences never meet (the in-chunk mask).
        seq_i = ct.transpose(rows_seq(seq_idx, b, row_block, BLOCK_M))
        mask = mask & (seq_i == rows_seq(seq_idx, b, col_block, BLOCK_M))
    scores_t = ct.mma(B_j, ct.transpose(C_i), ct.zeros((BLOCK_M, BLOCK_M), dtype=ct.float32))
    dyx_t = ct.mma(x_j, ct.transpose(dy_i), ct.zeros((BLOCK_M, BLOCK_M), dtype=ct.float32))
    dyx_t = ct.where(mask, dyx_t * decay, 0.0)
    return C_i, dy_i, ct.where(mask, scores_t * decay, 0.0), dyx_t, scores_t * dyx_t


@ct.function
def pair_dyx(x, dt, dA_cumsum, seq_idx, dy_i, dA_i, rows, b, h, c, j, row_block, col_block,
             BLOCK_M, HEADDIM, HAS_SEQ_IDX):
    """``(BLOCK_M, BLOCK_M)`` float32: ``L_ij dt_j (dy_i · x_j)`` for row block ``i`` (``dy_i``
    in the mma dtype, ``dA_i`` a column in log2 units, ``rows`` its positions) against column
    block ``j`` of chunk ``c``: what ``dC_i`` takes from every ``j <= i``."""
    dA_j = ct.reshape(ct.load(dA_cumsum, (b, h, c, j), (1, 1, 1, BLOCK_M)), (1, BLOCK_M)) * LOG2E
    dt_j = ct.reshape(ct.load(dt, (b, h, c, j), (1, 1, 1, BLOCK_M)), (1, BLOCK_M))
    x_j = load_rows(x, b, col_block, h, 0, BLOCK_M, HEADDIM).astype(dy_i.dtype)
    cols = ct.reshape(j * BLOCK_M + ct.arange(BLOCK_M, dtype=ct.int32), (1, BLOCK_M))
    decay = ct.exp2(ct.minimum(dA_i - dA_j, 0.0, propagate_nan=True), flush_to_zero=True)
    dyx = ct.mma(dy_i, ct.transpose(x_j), ct.zeros((BLOCK_M, BLOCK_M), dtype=ct.float32))
    dyx = ct.where(rows >= cols, dyx * decay * dt_j, 0.0)
    if HAS_SEQ_IDX:
        seq_i = rows_seq(seq_idx, b, row_block, BLOCK_M)                      # (BLOCK_M, 1)
        seq_j = ct.transpose(rows_seq(seq_idx, b, col_block, BLOCK_M))
        dyx = ct.where(seq_i == seq_j, dyx, 0.0)
    return dyx


@ct.function
def sequences_ending_in(chunk_sequences, c):
    """``(first, end)``: packed sequences ``first`` to ``end - 1`` end in chunk ``c``
    (``chunk_sequences`` from :func:`mamba2_tile.kernels.bwd_chunk.chunk_sequences`)."""
    return (ct.reshape(ct.load(chunk_sequences, (c,), (1,)), ()),
            ct.reshape(ct.load(chunk_sequences, (c + 1,), (1,)), ()))


@ct.function
def sequence_in_block(cu_seqlens, k, row_block, BLOCK_M):
    """``(start, last, overlaps)``: the first and the last token of packed sequence ``k``, and
    whether any of its tokens lies in row block ``row_block`` (``BLOCK_M`` units of seqlen)."""
    start = ct.reshape(ct.load(cu_seqlens, (k,), (1,)).astype(ct.int32), ())
    last = ct.reshape(ct.load(cu_seqlens, (k + 1,), (1,)).astype(ct.int32), ()) - 1
    return start, last, (start < row_block * BLOCK_M + BLOCK_M) & (last >= row_block * BLOCK_M)


@ct.function
def sequence_state_columns(dvarlen_states, k, h, n, HEADDIM, BLOCK_N):
    """``(HEADDIM, BLOCK_N)``: columns ``n * BLOCK_N`` onward of ``dvarlen_states[k, h]`` ((s, h,
    p, n): the gradient of packed sequence ``k``'s last state), zero past the padded ends."""
    tile = ct.load(dvarlen_states, (k, h, 0, n), (1, 1, HEADDIM, BLOCK_N),
                   padding_mode=ct.PaddingMode.ZERO)
    return ct.reshape(tile, (HEADDIM, BLOCK_N))


@ct.function
def state_columns(states, b, h, c, n, HEADDIM, BLOCK_N):
    """``(HEADDIM, BLOCK_N)``: columns ``n * BLOCK_N`` onward of ``states[b, h, c]`` ((b, h, c,
    p, n): ``chunk_states``, ``dstates``), zero past the padded ends."""
    tile = ct.load(states, (b, h, c, 0, n), (1, 1, 1, HEADDIM, BLOCK_N),
                   padding_mode=ct.PaddingMode.ZERO)
    return ct.reshape(tile, (HEADDIM, BLOCK_N))


@ct.function
def head_state_columns(states, b, heads, c, n, HEADS, HEADDIM, BLOCK_N):
    """``(HEADS * HEADDIM, BLOCK_N)``: :func:`state_columns` of ``HEADS`` adjacent heads,
    ``heads * HEADS`` onward, stacked."""
    tile = ct.load(states, (b, heads, c, 0, n), (1, HEADS, 1, HEADDIM, BLOCK_N),
                   padding_mode=ct.PaddingMode.ZERO)
    return ct.reshape(tile, (HEADS * HEADDIM, BLOCK_N))
