"""Backward of stage 3 (and of each chunk's part of stage 2): the per-chunk gradients.

With ``L_ij = exp(dA_i - dA_j) [i >= j]`` inside a chunk, ``h_c`` the state entering it
(``chunk_states``), ``dh`` the gradient of the state leaving it (``dstates``, from
:mod:`mamba2_tile.kernels.bwd_state_pass`) and ``dy`` the gradient of the scan's output (before
the skip and the gate), the chunk's output and outgoing state are

    y_i     = exp(dA_i) h_c C_i + sum_{j <= i} L_ij (C_i · B_j) dt_j x_j
    h_{c+1} = exp(dA_last) h_c + sum_j exp(dA_last - dA_j) dt_j x_j B_jᵀ

so, differentiating each term once::

    u_j   = sum_{i >= j} L_ij (C_i · B_j) dy_i + exp(dA_last - dA_j) dh B_j      (headdim,)
    dx_j  = dt_j u_j                       ddt_j = x_j · u_j    (dt's direct gradient)
    dB_j  = dt_j (sum_{i >= j} L_ij (dy_i · x_j) C_i + exp(dA_last - dA_j) x_jᵀ dh)
    dC_i  = exp(dA_i) dy_i h_c + sum_{j <= i} L_ij dt_j (dy_i · x_j) B_j

One block handles one chunk of ``HEADS_PER_BLOCK`` heads of one group, whole ``headdim`` and
``dstate`` tiles (padded to powers of two), in row blocks of ``BLOCK_M`` positions; the
``(BLOCK_M, BLOCK_M)`` pieces of ``L ∘ C Bᵀ`` and ``L ∘ dy xᵀ`` live in registers between the two
``ct.mma`` that make and consume them, and blocks above the diagonal are skipped. As in the
forward kernels (and mamba_ssm), ``ct.mma`` operands are rounded to the input dtype (tensor cores
for 16-bit inputs) and everything accumulates in float32.

The heads of a group share ``B`` and ``C``, so ``dB`` and ``dC`` are sums over the heads: a block
keeps one float32 ``dB_j`` (``dC_i``) for all its heads and writes it once, ``(b, l, h /
HEADS_PER_BLOCK, n)``, and the caller sums a group's blocks. A head's part carries its own
``dt_j`` (and decays), so these go into the ``mma`` operand before rounding, ``(dt_j x_j)ᵀ dh``
rather than ``dt_j (x_jᵀ dh)``: the rounding mamba_ssm's kernels take too. Reading ``B`` and
``C`` once per block of heads and writing no per-head ``dB``, ``dC`` is what makes the kernel
fast: one head a block wrote float32 ``dB`` and ``dC`` per head, more bytes than all of its
inputs, and the caller's sums over them cost as much again (PyTorch's profiler on the H200, b8
h64 L2048, chunk 64). ``dx`` is written in ``x``'s dtype with the skip's ``D dy`` added, and
``D``'s gradient as sums of ``dy · x`` per row block (the caller adds them up).

The gradient through ``dA_cumsum`` comes from the same tiles. ``dA_k`` enters every term above
as ``+dA_k`` where ``k`` is the reading position ``i`` and as ``-dA_k`` where ``k`` is the
written position ``j``, so its gradient is ``C_k · dC_k - B_k · dB_k`` (plus, at the chunk's
last position, the decay of the whole chunk: see :mod:`mamba2_tile.autograd`). The kernel writes
the three row sums ``C_k · dC_k``, ``B_k · dB_k`` and ``B_k · dB_k``'s part through ``dh``, in
float32, to ``ddA_terms`` (the last with ``exp(dA_last) <dh, h_c>`` added at the chunk's first
position: its sum over the chunk is ``<dh, h_{c+1}>``, the gradient of ``dA_last``). Their
in-chunk parts are sums of the pairs ``L_ij (C_i · B_j) dt_j (dy_i · x_j)``, taken from the
float32 ``mma`` results before any rounding (the dC loop makes ``C Bᵀ`` once more for it): the
caller's running sum over a chunk cancels the pairs on one side of each position, and it
cancels them exactly only when both sides hold the same values, with nothing rounded to the
input dtype. (Taken as ``dy · y`` from the forward against ``dt ddt``, or from ``dC`` and ``dB``
whose pieces are rounded, the pairs cancel to the input dtype's precision: an error that grows
with the chunk.)

From dstate 256 or chunk 128 on, 16-bit inputs run the same sums as three kernels instead
(:mod:`mamba2_tile.kernels.bwd_chunk_split`, ``BWD_CHUNK_SPLIT_DSTATE``,
``BWD_CHUNK_SPLIT_CHUNK``): one for everything
that sums over dstate, one for the gradient of the scores ``C_i · B_j`` summed over a group's
heads, and one for ``dB`` and ``dC`` in blocks of dstate columns, so that no tile spans the whole
state and the in-chunk parts of ``dB`` and ``dC`` are made once a group.

Float32 inputs run :func:`bwd_chunk_float32_kernel`: the same sums with float32's accuracy on
tensor cores (three TF32 products per ``mma``, :mod:`mamba2_tile.kernels.split_tf32`), whose
operands sit in registers, so it keeps no tile spanning the whole ``dstate``: row blocks of 32
and dstate in blocks of 32 (:func:`bwd_chunk_tiles`). Compiled for sm_90 at chunk 64, headdim
64, dstate 128 it uses 168 registers per thread and no stack, so nothing spills
(tests/test_compiler.py checks the cubin); exact float32 ``mma`` in the 16-bit kernel's shape
was ~111,000 instructions, 14,600 spill stores and 26,225 spill loads. It keeps one head a
block: its ``dB`` and ``dC`` are per head, ``(b, l, h, n)`` float32, for the caller to sum.

Packed sequences (``HAS_SEQ_IDX``, :mod:`mamba2_tile.kernels.packing`): every factor above
carries the forward's 0/1 mask, and a masked factor ``m exp(u)`` differentiates to ``m exp(u)``:
``L_ij`` is zero unless tokens i and j share a sequence, ``exp(dA_last - dA_j)`` unless token j
is of the chunk's last token's sequence (only that one leaves the chunk), ``exp(dA_i)`` unless
token i is of the entering state's sequence. Without ``seq_idx`` the masks are not compiled.

Each sequence's last state (``return_varlen_states``, ``HAS_VARLEN``): the state ``V_k`` after
the last token ``e`` of packed sequence ``k`` is a jump to ``e`` from the start of ``e``'s chunk,
``V_k = [entering state is k's] exp(dA_e) h_c + sum_{j of k in the chunk} exp(dA_e - dA_j)
dt_j x_j B_jᵀ``. Its gradient ``G_k`` adds to the tokens of ``k`` in that chunk, like ``dh``
with ``e`` in the place of the chunk's last position::

    u_j  += exp(dA_e - dA_j) G_k B_j           dB_j += dt_j exp(dA_e - dA_j) x_jᵀ G_k

A block loops over the sequences that end in its chunk (``chunk_sequences[c]`` to
``chunk_sequences[c + 1]``, from the launcher), skipping those with no token in a row block.
The caller adds the rest: ``exp(dA_e) G_k`` to the entering state's gradient and
``<G_k, V_k>`` to ``dA_e``'s (:mod:`mamba2_tile.autograd`); ``B_j · dB_j``'s part through
``G_k`` (``dA_j``'s side) is in ``ddA_terms``' second row, not its third (that is ``dA_last``'s).
"""

import torch

from mamba2_tile.kernels.bwd_chunk_split import (bwd_chunk_dB_dC_kernel, bwd_chunk_dscores_kernel,
                                                  bwd_chunk_dx_kernel)
from mamba2_tile.kernels.bwd_chunk_tiles import (decay_t, load_rows, pair_dyx, pair_tiles_t,
                                                  sequence_in_block, sequence_state_columns,
                                                  sequences_ending_in, state_columns,
                                                  to_sequence_end)
from mamba2_tile.kernels.exp2 import LOG2E
from mamba2_tile.kernels.launching import (KernelLaunch, next_power_of_2, placeholder,
                                           seq_placeholder, with_hints)
from mamba2_tile.kernels.packing import last_seq, rows_seq, seq_before
from mamba2_tile.kernels.row_blocks import row_blocks_with_tokens
from mamba2_tile.kernels.split_tf32 import split_mma
from mamba2_tile.tile import ct


@ct.kernel
def bwd_chunk_kernel(
    x, dt, dA_cumsum, B, C,          # (b, l, h, p), (b, h, c, s) x2, (b, l, g, n) x2
    chunk_states, dstates, dy,       # (b, h, c, p, n) x2, (b, l, h, p): any float dtype
    D,                               # (h, p) f32: the skip (HAS_D)
    seq_idx,                         # (b, l) int32: packed sequences
    dvarlen_states,                  # (num_sequences, h, p, n) f32: the gradient of each V_k
    cu_seqlens,                      # (num_sequences + 1,) int32 / int64
    chunk_sequences,                 # (c + 1,) int32: sequences ending in chunk c: [c], [c + 1]
    dx,                              # out, x's dtype: (b, l, h, p), with the skip's D dy
    ddt,                             # out, f32: (b, h, c, s)
    dB, dC,                          # out, f32: (b, l, h / HEADS_PER_BLOCK, n), a block's sum
    ddA_terms,                       # out, f32: (b, h, c, 3, s)
    dD,                              # out, f32: (b, l / BLOCK_M, h, p), dy · x per row block
    CHUNK_SIZE: ct.Constant[int],
    BLOCK_M: ct.Constant[int],
    HEADDIM: ct.Constant[int],       # headdim padded to a power of two
    DSTATE: ct.Constant[int],        # dstate padded to a power of two
    HEADS_PER_BLOCK: ct.Constant[int],   # heads of one group, summed into one dB and dC
    HAS_D: ct.Constant[bool],        # the skip: dx gets D dy, and dD is written
    HAS_SEQ_IDX: ct.Constant[bool],  # the forward's seq_idx masks (module doc)
    HAS_VARLEN: ct.Constant[bool],   # each sequence's last state has a gradient (batch 1)
    WHOLE_CHUNKS: ct.Constant[bool],  # seqlen a multiple of CHUNK_SIZE
):
    blocks_per_chunk = CHUNK_SIZE // BLOCK_M
    nchunks = dA_cumsum.shape[2]
    b = ct.bid(0) // nchunks
    c = ct.bid(0) % nchunks
    split = ct.bid(1)
    first_head = split * HEADS_PER_BLOCK
    g = first_head // (x.shape[2] // B.shape[2])
    token_blocks = row_blocks_with_tokens(x.shape[1], c, CHUNK_SIZE, BLOCK_M, WHOLE_CHUNKS)
    zero = ct.PaddingMode.ZERO
    mma_dtype = x.dtype
    if HAS_SEQ_IDX:
        # The sequences of the state entering the chunk and of the one leaving it; the
        # entering state only carries through the chunk if both are the same.
        seq_enter = seq_before(seq_idx, b, c * CHUNK_SIZE)
        seq_leave = last_seq(rows_seq(seq_idx, b, c, CHUNK_SIZE))

    # dx, ddt, dB: column blocks j; for each head, the row blocks i >= j. B_j is the group's,
    # loaded once for all the block's heads, and dB_j sums their parts: each head's part is
    # scaled by its dt_j inside the mma operands, so one float32 accumulator holds them all.
    for j in range(token_blocks):
        col_block = c * blocks_per_chunk + j
        B_j = load_rows(B, b, col_block, g, 0, BLOCK_M, DSTATE).astype(mma_dtype)
        cols = ct.reshape(j * BLOCK_M + ct.arange(BLOCK_M, dtype=ct.int32), (BLOCK_M, 1))
        first = (j * BLOCK_M + ct.arange(BLOCK_M, dtype=ct.int32)) == 0
        if HAS_SEQ_IDX:
            seq_j = rows_seq(seq_idx, b, col_block, BLOCK_M)             # (BLOCK_M, 1)
        dB_j = ct.zeros((BLOCK_M, DSTATE), dtype=ct.float32)
        for head in range(HEADS_PER_BLOCK):
            h = first_head + head
            # In log2 units: every exp is an exp2 (kernels/exp2.py).
            dA_last = ct.reshape(ct.load(dA_cumsum, (b, h, c, CHUNK_SIZE - 1),
                                         (1, 1, 1, 1)), (1, 1)) * LOG2E
            dh = ct.reshape(ct.load(dstates, (b, h, c, 0, 0), (1, 1, 1, HEADDIM, DSTATE),
                                    padding_mode=zero), (HEADDIM, DSTATE))
            dA_j = ct.reshape(ct.load(dA_cumsum, (b, h, c, j), (1, 1, 1, BLOCK_M)),
                              (BLOCK_M, 1)) * LOG2E
            dt_j = ct.reshape(ct.load(dt, (b, h, c, j), (1, 1, 1, BLOCK_M)), (BLOCK_M, 1))
            x_j = load_rows(x, b, col_block, h, 0, BLOCK_M, HEADDIM).astype(ct.float32)

            to_end = ct.exp2(dA_last - dA_j, flush_to_zero=True)         # (BLOCK_M, 1)
            if HAS_SEQ_IDX:
                to_end = ct.where(seq_j == seq_leave, to_end, 0.0)
            u = ct.mma(B_j, ct.transpose(dh.astype(mma_dtype)),
                       ct.zeros((BLOCK_M, HEADDIM), dtype=ct.float32))
            u = u * to_end
            # B_j · dB_j's part through dh, as dt_j x_j · u: the same products, fewer
            # registers.
            B_dB = ct.sum(x_j * u, axis=1) * ct.reshape(dt_j, (BLOCK_M,))
            B_dB_dh = B_dB
            if j == 0:
                # exp(dA_last) <dh, h_c>, dA_last's gradient through the entering state,
                # rides on the chunk's first position (float32).
                h_enter = ct.load(chunk_states, (b, h, c, 0, 0), (1, 1, 1, HEADDIM, DSTATE),
                                  padding_mode=zero)
                h_enter = ct.reshape(h_enter, (HEADDIM, DSTATE)).astype(ct.float32)
                entering = ct.sum(ct.sum(dh.astype(ct.float32) * h_enter, axis=1,
                                         keepdims=True), axis=0, keepdims=True)
                entering = entering * ct.exp2(dA_last, flush_to_zero=True)   # (1, 1)
                if HAS_SEQ_IDX:
                    entering = ct.where(seq_enter == seq_leave, entering, 0.0)
                B_dB_dh = B_dB_dh + ct.where(first, ct.reshape(entering, (1,)), 0.0)
            ct.store(ddA_terms, (b, h, c, 2, j), ct.reshape(B_dB_dh, (1, 1, 1, 1, BLOCK_M)))
            dB_j = ct.mma((x_j * (to_end * dt_j)).astype(mma_dtype),
                          dh.astype(mma_dtype), dB_j)
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
                        # B_j · dB_j's part through G_k (its dA_e side is the caller's
                        # <G, V>).
                        B_dB = B_dB + (ct.sum(x_j * G_u, axis=1)
                                       * ct.reshape(dt_j, (BLOCK_M,)))
                        dB_j = ct.mma((x_j * (to_e * dt_j)).astype(mma_dtype), G, dB_j)
            B_dB_pairs = ct.zeros((BLOCK_M,), dtype=ct.float32)
            for i in range(j, token_blocks):
                # Transposed pieces, (j, i).
                C_i, dy_i, scores_t, dyx_t, pairs_t = pair_tiles_t(
                    B_j, x_j.astype(mma_dtype), C, dy, dA_cumsum, dA_j, cols, seq_idx, b, h, g,
                    c, i, c * blocks_per_chunk + i, col_block, BLOCK_M, DSTATE, HEADDIM,
                    HAS_SEQ_IDX)
                B_dB_pairs = B_dB_pairs + ct.sum(pairs_t, axis=1)
                u = ct.mma(scores_t.astype(mma_dtype), dy_i, u)
                dB_j = ct.mma((dyx_t * dt_j).astype(mma_dtype), C_i, dB_j)
            dx_j = u * dt_j
            if HAS_D:
                # The skip y += D x: dx gets D dy, and D gets this row block's dy · x.
                dy_j = load_rows(dy, b, col_block, h, 0, BLOCK_M, HEADDIM).astype(ct.float32)
                D_h = ct.reshape(ct.load(D, (h, 0), (1, HEADDIM), padding_mode=zero),
                                 (1, HEADDIM))
                dx_j = dx_j + D_h * dy_j
                ct.store(dD, (b, col_block, h, 0),
                         ct.reshape(ct.sum(dy_j * x_j, axis=0), (1, 1, 1, HEADDIM)))
            ct.store(dx, (b, col_block, h, 0),
                     ct.reshape(dx_j, (1, BLOCK_M, 1, HEADDIM)).astype(dx.dtype))
            ddt_j = ct.sum(x_j * u, axis=1)
            ct.store(ddt, (b, h, c, j), ct.reshape(ddt_j, (1, 1, 1, BLOCK_M)))
            B_dB = B_dB + B_dB_pairs * ct.reshape(dt_j, (BLOCK_M,))
            ct.store(ddA_terms, (b, h, c, 1, j), ct.reshape(B_dB, (1, 1, 1, 1, BLOCK_M)))
        ct.store(dB, (b, col_block, split, 0), ct.reshape(dB_j, (1, BLOCK_M, 1, DSTATE)))

    # dC: row blocks i; for each head, the column blocks j <= i, summed into one dC_i.
    for i in range(token_blocks):
        row_block = c * blocks_per_chunk + i
        C_i = load_rows(C, b, row_block, g, 0, BLOCK_M, DSTATE).astype(mma_dtype)
        rows = ct.reshape(i * BLOCK_M + ct.arange(BLOCK_M, dtype=ct.int32), (BLOCK_M, 1))
        if HAS_SEQ_IDX:
            seq_i = rows_seq(seq_idx, b, row_block, BLOCK_M)             # (BLOCK_M, 1)
        dC_i = ct.zeros((BLOCK_M, DSTATE), dtype=ct.float32)
        for head in range(HEADS_PER_BLOCK):
            h = first_head + head
            dA_i = ct.reshape(ct.load(dA_cumsum, (b, h, c, i), (1, 1, 1, BLOCK_M)),
                              (BLOCK_M, 1)) * LOG2E
            dy_i = load_rows(dy, b, row_block, h, 0, BLOCK_M, HEADDIM).astype(ct.float32)
            h_enter = ct.load(chunk_states, (b, h, c, 0, 0), (1, 1, 1, HEADDIM, DSTATE),
                              padding_mode=zero)
            h_enter = ct.reshape(h_enter, (HEADDIM, DSTATE)).astype(mma_dtype)
            read_out = ct.exp2(dA_i, flush_to_zero=True)                 # (BLOCK_M, 1)
            if HAS_SEQ_IDX:
                read_out = ct.where(seq_i == seq_enter, read_out, 0.0)
            # dC_i's part through the entering state, exp(dA_i) h_cᵀ dy_i, and its row sum
            # C_i · (exp(dA_i) h_cᵀ dy_i) = exp(dA_i) dy_i · (h_c C_i), from a tile of
            # headdim columns.
            C_dC = ct.sum(dy_i * ct.mma(C_i, ct.transpose(h_enter),
                                        ct.zeros((BLOCK_M, HEADDIM), dtype=ct.float32)),
                          axis=1) * ct.reshape(read_out, (BLOCK_M,))
            dC_i = ct.mma((dy_i * read_out).astype(mma_dtype), h_enter, dC_i)
            dy_i = dy_i.astype(mma_dtype)
            for j in range(i + 1):
                col_block = c * blocks_per_chunk + j
                dyx = pair_dyx(x, dt, dA_cumsum, seq_idx, dy_i, dA_i, rows, b, h, c, j,
                               row_block, col_block, BLOCK_M, HEADDIM, HAS_SEQ_IDX)
                B_j = load_rows(B, b, col_block, g, 0, BLOCK_M, DSTATE).astype(mma_dtype)
                # C_i · dC_i's pairs from float32 tiles: C Bᵀ again, the j loop's scores.
                scores = ct.mma(C_i, ct.transpose(B_j),
                                ct.zeros((BLOCK_M, BLOCK_M), dtype=ct.float32))
                C_dC = C_dC + ct.sum(scores * dyx, axis=1)
                dC_i = ct.mma(dyx.astype(mma_dtype), B_j, dC_i)
            ct.store(ddA_terms, (b, h, c, 0, i), ct.reshape(C_dC, (1, 1, 1, 1, BLOCK_M)))
        ct.store(dC, (b, row_block, split, 0), ct.reshape(dC_i, (1, BLOCK_M, 1, DSTATE)))


@ct.kernel
def bwd_chunk_float32_kernel(
    x, dt, dA_cumsum, B, C,          # as bwd_chunk_kernel, all float32
    chunk_states, dstates, dy, D,
    seq_idx,                         # (b, l) int32: packed sequences
    dvarlen_states, cu_seqlens, chunk_sequences,   # as bwd_chunk_kernel
    dx, ddt, dB, dC, ddA_terms, dD,  # as bwd_chunk_kernel, one head per block: dB, dC per head
    CHUNK_SIZE: ct.Constant[int],
    BLOCK_M: ct.Constant[int],
    BLOCK_N: ct.Constant[int],       # dstate columns per step
    HEADDIM: ct.Constant[int],       # headdim padded to a power of two
    HAS_D: ct.Constant[bool],        # the skip: dx gets D dy, and dD is written
    HAS_SEQ_IDX: ct.Constant[bool],  # the forward's seq_idx masks (module doc)
    HAS_VARLEN: ct.Constant[bool],   # each sequence's last state has a gradient (batch 1)
    WHOLE_CHUNKS: ct.Constant[bool],  # seqlen a multiple of CHUNK_SIZE
):
    """:func:`bwd_chunk_kernel` for float32 inputs, with ``dstate`` in blocks of ``BLOCK_N``.

    Its ``mma`` are three TF32 products each (:mod:`mamba2_tile.kernels.split_tf32`), whose
    operands live in registers, so no tile spanning the whole ``dstate`` is kept: ``u`` sums
    ``B_j Cᵢᵀ`` and ``B_j dhᵀ`` over the dstate blocks, and ``dB`` and ``dC`` are made one
    dstate block at a time, recomputing the ``(BLOCK_M, BLOCK_M)`` pieces of ``dy xᵀ`` for each.
    The row sums of ``ddA_terms`` are taken from the finished float32 ``dB`` and ``dC`` blocks
    (``B_k · dB_k`` and ``C_k · dC_k`` summed over the dstate blocks): unlike the 16-bit
    kernel's, nothing in them is rounded below float32.
    """
    blocks_per_chunk = CHUNK_SIZE // BLOCK_M
    n_blocks = (B.shape[3] + BLOCK_N - 1) // BLOCK_N
    nchunks = dA_cumsum.shape[2]
    b = ct.bid(0) // nchunks
    c = ct.bid(0) % nchunks
    h = ct.bid(1)
    g = h // (x.shape[2] // B.shape[2])
    token_blocks = row_blocks_with_tokens(x.shape[1], c, CHUNK_SIZE, BLOCK_M, WHOLE_CHUNKS)
    zero = ct.PaddingMode.ZERO
    dA_last = ct.reshape(ct.load(dA_cumsum, (b, h, c, CHUNK_SIZE - 1), (1, 1, 1, 1)),
                         (1, 1)) * LOG2E
    if HAS_SEQ_IDX:
        # The sequences of the state entering the chunk and of the one leaving it.
        seq_enter = seq_before(seq_idx, b, c * CHUNK_SIZE)
        seq_leave = last_seq(rows_seq(seq_idx, b, c, CHUNK_SIZE))
    # exp(dA_last) <dh, h_c>: dA_last's gradient through the entering state.
    # As the trace of dhᵀ h_c, a split_mma per dstate block: the elementwise product of the two
    # (HEADDIM, BLOCK_N) tiles and its sum took sm_90 from 168 to 255 registers a thread.
    gram = ct.zeros((BLOCK_N, BLOCK_N), dtype=ct.float32)
    for n in range(n_blocks):
        dh_n = state_columns(dstates, b, h, c, n, HEADDIM, BLOCK_N)
        h_n = state_columns(chunk_states, b, h, c, n, HEADDIM, BLOCK_N)
        gram = split_mma(ct.transpose(dh_n), h_n, gram)
    diagonal = (ct.reshape(ct.arange(BLOCK_N, dtype=ct.int32), (BLOCK_N, 1))
                == ct.reshape(ct.arange(BLOCK_N, dtype=ct.int32), (1, BLOCK_N)))
    entering = ct.sum(ct.sum(ct.where(diagonal, gram, 0.0), axis=1, keepdims=True), axis=0,
                      keepdims=True)
    entering = entering * ct.exp2(dA_last, flush_to_zero=True)
    if HAS_SEQ_IDX:
        # The entering state only carries through the chunk into the leaving one's sequence.
        entering = ct.where(seq_enter == seq_leave, entering, 0.0)
    entering = ct.reshape(entering, (1,))

    # dx and ddt: column blocks j, each summing over the row blocks i >= j.
    for j in range(token_blocks):
        col_block = c * blocks_per_chunk + j
        dA_j = ct.reshape(ct.load(dA_cumsum, (b, h, c, j), (1, 1, 1, BLOCK_M)),
                          (BLOCK_M, 1)) * LOG2E
        dt_j = ct.reshape(ct.load(dt, (b, h, c, j), (1, 1, 1, BLOCK_M)), (BLOCK_M, 1))
        x_j = load_rows(x, b, col_block, h, 0, BLOCK_M, HEADDIM)
        u = ct.zeros((BLOCK_M, HEADDIM), dtype=ct.float32)
        for n in range(n_blocks):
            B_jn = load_rows(B, b, col_block, g, n, BLOCK_M, BLOCK_N)
            dh_n = state_columns(dstates, b, h, c, n, HEADDIM, BLOCK_N)
            u = split_mma(B_jn, ct.transpose(dh_n), u)
        to_end = ct.exp2(dA_last - dA_j, flush_to_zero=True)            # (BLOCK_M, 1)
        if HAS_SEQ_IDX:
            seq_j = rows_seq(seq_idx, b, col_block, BLOCK_M)             # (BLOCK_M, 1)
            to_end = ct.where(seq_j == seq_leave, to_end, 0.0)
        u = u * to_end
        if HAS_VARLEN:
            # The sequences ending in this chunk (bwd_chunk_kernel, module doc).
            first_k, end_k = sequences_ending_in(chunk_sequences, c)
            for k in range(first_k, end_k):
                start, last, in_block = sequence_in_block(cu_seqlens, k, col_block, BLOCK_M)
                if in_block:
                    to_e = to_sequence_end(dA_cumsum, b, h, c, col_block, dA_j, start,
                                           last, CHUNK_SIZE, BLOCK_M)
                    G_u = ct.zeros((BLOCK_M, HEADDIM), dtype=ct.float32)
                    for n in range(n_blocks):
                        B_jn = load_rows(B, b, col_block, g, n, BLOCK_M, BLOCK_N)
                        G_n = sequence_state_columns(dvarlen_states, k, h, n, HEADDIM, BLOCK_N)
                        G_u = split_mma(B_jn, ct.transpose(G_n), G_u)
                    u = G_u * to_e + u
        cols = ct.reshape(j * BLOCK_M + ct.arange(BLOCK_M, dtype=ct.int32), (BLOCK_M, 1))
        for i in range(j, token_blocks):
            row_block = c * blocks_per_chunk + i
            scores_t = ct.zeros((BLOCK_M, BLOCK_M), dtype=ct.float32)
            for n in range(n_blocks):
                B_jn = load_rows(B, b, col_block, g, n, BLOCK_M, BLOCK_N)
                C_in = load_rows(C, b, row_block, g, n, BLOCK_M, BLOCK_N)
                scores_t = split_mma(B_jn, ct.transpose(C_in), scores_t)
            decay = decay_t(dA_cumsum, b, h, c, i, dA_j, BLOCK_M)
            rows = ct.reshape(i * BLOCK_M + ct.arange(BLOCK_M, dtype=ct.int32),
                              (1, BLOCK_M))
            scores_t = ct.where(rows >= cols, scores_t * decay, 0.0)
            if HAS_SEQ_IDX:
                # Tokens of different sequences never meet (the in-chunk mask).
                seq_i = ct.transpose(rows_seq(seq_idx, b, row_block, BLOCK_M))
                scores_t = ct.where(seq_i == seq_j, scores_t, 0.0)
            dy_i = load_rows(dy, b, row_block, h, 0, BLOCK_M, HEADDIM)
            u = split_mma(scores_t, dy_i, u)
        dx_j = u * dt_j
        if HAS_D:
            # The skip y += D x: dx gets D dy, and D gets this row block's dy · x.
            dy_j = load_rows(dy, b, col_block, h, 0, BLOCK_M, HEADDIM)
            D_h = ct.reshape(ct.load(D, (h, 0), (1, HEADDIM), padding_mode=zero),
                             (1, HEADDIM))
            dx_j = dx_j + D_h * dy_j
            ct.store(dD, (b, col_block, h, 0),
                     ct.reshape(ct.sum(dy_j * x_j, axis=0), (1, 1, 1, HEADDIM)))
        ct.store(dx, (b, col_block, h, 0), ct.reshape(dx_j, (1, BLOCK_M, 1, HEADDIM)))
        ct.store(ddt, (b, h, c, j), ct.reshape(ct.sum(x_j * u, axis=1), (1, 1, 1, BLOCK_M)))

    # dB: column blocks j and dstate blocks n, each summing over the row blocks i >= j.
    for j in range(token_blocks):
        col_block = c * blocks_per_chunk + j
        dA_j = ct.reshape(ct.load(dA_cumsum, (b, h, c, j), (1, 1, 1, BLOCK_M)),
                          (BLOCK_M, 1)) * LOG2E
        dt_j = ct.reshape(ct.load(dt, (b, h, c, j), (1, 1, 1, BLOCK_M)), (BLOCK_M, 1))
        x_j = load_rows(x, b, col_block, h, 0, BLOCK_M, HEADDIM)
        to_end = ct.exp2(dA_last - dA_j, flush_to_zero=True)
        if HAS_SEQ_IDX:
            seq_j = rows_seq(seq_idx, b, col_block, BLOCK_M)             # (BLOCK_M, 1)
            to_end = ct.where(seq_j == seq_leave, to_end, 0.0)
        cols = ct.reshape(j * BLOCK_M + ct.arange(BLOCK_M, dtype=ct.int32), (BLOCK_M, 1))
        B_dB_dh = ct.zeros((BLOCK_M,), dtype=ct.float32)     # B_j · dB_j through dh
        B_dB = ct.zeros((BLOCK_M,), dtype=ct.float32)
        for n in range(n_blocks):
            dh_n = state_columns(dstates, b, h, c, n, HEADDIM, BLOCK_N)
            B_jn = load_rows(B, b, col_block, g, n, BLOCK_M, BLOCK_N)
            dB_jn = split_mma(x_j, dh_n, ct.zeros((BLOCK_M, BLOCK_N), dtype=ct.float32))
            dB_jn = dB_jn * to_end
            B_dB_dh = B_dB_dh + ct.sum(B_jn * dB_jn, axis=1)
            if HAS_VARLEN:
                first_k, end_k = sequences_ending_in(chunk_sequences, c)
                for k in range(first_k, end_k):
                    start, last, in_block = sequence_in_block(cu_seqlens, k, col_block, BLOCK_M)
                    if in_block:
                        to_e = to_sequence_end(dA_cumsum, b, h, c, col_block, dA_j, start,
                                               last, CHUNK_SIZE, BLOCK_M)
                        G_n = sequence_state_columns(dvarlen_states, k, h, n, HEADDIM, BLOCK_N)
                        G_x = split_mma(x_j, G_n, ct.zeros((BLOCK_M, BLOCK_N),
                                                            dtype=ct.float32))
                        dB_jn = G_x * to_e + dB_jn
            for i in range(j, token_blocks):
                row_block = c * blocks_per_chunk + i
                dy_i = load_rows(dy, b, row_block, h, 0, BLOCK_M, HEADDIM)
                dyx_t = split_mma(x_j, ct.transpose(dy_i),
                                  ct.zeros((BLOCK_M, BLOCK_M), dtype=ct.float32))
                rows = ct.reshape(i * BLOCK_M + ct.arange(BLOCK_M, dtype=ct.int32),
                                  (1, BLOCK_M))
                decay = decay_t(dA_cumsum, b, h, c, i, dA_j, BLOCK_M)
                dyx_t = ct.where(rows >= cols, dyx_t * decay, 0.0)
                if HAS_SEQ_IDX:
                    seq_i = ct.transpose(rows_seq(seq_idx, b, row_block, BLOCK_M))
                    dyx_t = ct.where(seq_i == seq_j, dyx_t, 0.0)
                C_in = load_rows(C, b, row_block, g, n, BLOCK_M, BLOCK_N)
                dB_jn = split_mma(dyx_t, C_in, dB_jn)
            B_dB = B_dB + ct.sum(B_jn * dB_jn, axis=1)
            ct.store(dB, (b, col_block, h, n), ct.reshape(dB_jn * dt_j,
                                                          (1, BLOCK_M, 1, BLOCK_N)))
        dt_row = ct.reshape(dt_j, (BLOCK_M,))
        first = (j * BLOCK_M + ct.arange(BLOCK_M, dtype=ct.int32)) == 0
        ct.store(ddA_terms, (b, h, c, 1, j),
                 ct.reshape(B_dB * dt_row, (1, 1, 1, 1, BLOCK_M)))
        ct.store(ddA_terms, (b, h, c, 2, j),
                 ct.reshape(B_dB_dh * dt_row + ct.where(first, entering, 0.0),
                            (1, 1, 1, 1, BLOCK_M)))

    # dC: row blocks i and dstate blocks n, each summing over the column blocks j <= i.
    for i in range(token_blocks):
        row_block = c * blocks_per_chunk + i
        dA_i = ct.reshape(ct.load(dA_cumsum, (b, h, c, i), (1, 1, 1, BLOCK_M)),
                          (BLOCK_M, 1)) * LOG2E
        dy_i = load_rows(dy, b, row_block, h, 0, BLOCK_M, HEADDIM)
        rows = ct.reshape(i * BLOCK_M + ct.arange(BLOCK_M, dtype=ct.int32), (BLOCK_M, 1))
        read_out = ct.exp2(dA_i, flush_to_zero=True)                     # (BLOCK_M, 1)
        if HAS_SEQ_IDX:
            seq_i = rows_seq(seq_idx, b, row_block, BLOCK_M)             # (BLOCK_M, 1)
            read_out = ct.where(seq_i == seq_enter, read_out, 0.0)
        C_dC = ct.zeros((BLOCK_M,), dtype=ct.float32)
        for n in range(n_blocks):
            h_n = state_columns(chunk_states, b, h, c, n, HEADDIM, BLOCK_N)
            dC_in = split_mma(dy_i, h_n, ct.zeros((BLOCK_M, BLOCK_N), dtype=ct.float32))
            dC_in = dC_in * read_out
            for j in range(i + 1):
                col_block = c * blocks_per_chunk + j
                dA_j = ct.reshape(ct.load(dA_cumsum, (b, h, c, j), (1, 1, 1, BLOCK_M)),
                                  (1, BLOCK_M)) * LOG2E
                dt_j = ct.reshape(ct.load(dt, (b, h, c, j), (1, 1, 1, BLOCK_M)),
                                  (1, BLOCK_M))
                x_j = load_rows(x, b, col_block, h, 0, BLOCK_M, HEADDIM)
                cols = ct.reshape(j * BLOCK_M + ct.arange(BLOCK_M, dtype=ct.int32),
                                  (1, BLOCK_M))
                decay = ct.exp2(ct.minimum(dA_i - dA_j, 0.0, propagate_nan=True),
                                flush_to_zero=True)
                dyx = split_mma(dy_i, ct.transpose(x_j),
                                ct.zeros((BLOCK_M, BLOCK_M), dtype=ct.float32))
                dyx = ct.where(rows >= cols, dyx * decay * dt_j, 0.0)
                if HAS_SEQ_IDX:
                    seq_j = ct.transpose(rows_seq(seq_idx, b, col_block, BLOCK_M))
                    dyx = ct.where(seq_i == seq_j, dyx, 0.0)
                B_jn = load_rows(B, b, col_block, g, n, BLOCK_M, BLOCK_N)
                dC_in = split_mma(dyx, B_jn, dC_in)
            C_in = load_rows(C, b, row_block, g, n, BLOCK_M, BLOCK_N)
            C_dC = C_dC + ct.sum(C_in * dC_in, axis=1)
            ct.store(dC, (b, row_block, h, n), ct.reshape(dC_in, (1, BLOCK_M, 1, BLOCK_N)))
        ct.store(ddA_terms, (b, h, c, 0, i), ct.reshape(C_dC, (1, 1, 1, 1, BLOCK_M)))


FLOAT32_TILES = (32, 32)


def bwd_chunk_tiles(dtype, chunk_size, dstate):
    """``(block_m, block_n)``: row blocks of 64 positions (at most the chunk) and the whole
    dstate (``block_n`` None) for 16-bit inputs; for float32, FLOAT32_TILES."""
    if dtype == torch.float32:
        block_m, block_n = FLOAT32_TILES
        return min(block_m, chunk_size), min(block_n, next_power_of_2(dstate))
    return min(64, chunk_size), None


def chunk_sequences(cu_seqlens, chunk_size, nchunks):
    """(nchunks + 1,) int32: sequences ``chunk_sequences[c]`` to ``chunk_sequences[c + 1] - 1``
    end in chunk ``c`` (their last token ``cu_seqlens[k + 1] - 1`` lies in it)."""
    last_chunk = (cu_seqlens[1:] - 1) // chunk_size
    bounds = torch.arange(nchunks + 1, device=cu_seqlens.device)
    return torch.searchsorted(last_chunk.contiguous(), bounds).int()


# The 16-bit kernel's compiler hint: 8 worker warps. Its tiles (a block's shared memory is over
# 200 KB at dstate 128, so one block an SM either way) then fit the registers: compiled for sm_90
# at chunk 64, dstate 128, 4 warps spilled 840 bytes a thread, 8 spill none (at chunk 256: 640
# bytes against 16); the heads a block do not change this, as they are a loop, not unrolled.
# The occupancy hint 2 (two blocks an SM, ~50 KB of shared memory each) spilled 56-400 bytes and
# was slower on the H200 at every chunk size (data/h200_bwd_chunk_heads_per_block.txt).
BWD_CHUNK_WORKER_WARPS = 8

# Blocks one bwd_chunk launch should have at least: about one per SM of an H200 (132 SMs). Fewer,
# fatter blocks read B and C and write dB and dC fewer times, and were faster as long as they
# filled the SMs once (a training step, b8 h64 p64 n128 L2048 bf16, H200,
# data/h200_bwd_chunk_heads_per_block.txt): at chunk 128, 3.43 ms with 2 heads a block (4096
# blocks), 2.57 with 8 (1024), 2.22 with 32 (256); at chunk 256, 2.87 ms with 4 heads (1024
# blocks), 2.62 with 8, 2.42 with 32 (128), and 4.03 with 64 (64 blocks: half the SMs idle).
# The split form's dB/dC kernel (below) launches a block per dstate column block too, and those
# count: at b8 h64 p64 L2048 chunk 256 (H100, data/h100_bwd_chunk_dB_dC_2026-12-07.txt) all 64
# heads in a block (256 blocks at dstate 256, 128 at dstate 128) took the step from 3.12 to
# 2.96 ms at dstate 256 and left it at 1.79 ms at dstate 128, where 32 heads a block had been
# the rule's (by (chunk, block of heads) alone).
BWD_CHUNK_MIN_BLOCKS = 128


def bwd_chunk_heads_per_block(dtype, batch, nchunks, nheads, ngroups, column_blocks=1):
    """The heads of one group that one block loops over, summing their ``dB`` and ``dC``: the
    most (a divisor of ``nheads // ngroups``) that still leave ``BWD_CHUNK_MIN_BLOCKS`` blocks,
    or 1 if even one head per block leaves fewer; ``column_blocks`` blocks a (chunk, block of
    heads), as :func:`bwd_chunk_column_blocks` counts them. Each block reads its group's ``B``
    and ``C`` once and writes one ``dB`` and ``dC`` for all its heads, so more heads a block
    means less memory traffic; fewer, more blocks to fill the GPU. float32: always 1 (its
    kernel keeps one head, dstate in blocks)."""
    if dtype == torch.float32:
        return 1
    heads_per_group = nheads // ngroups
    best = 1
    for heads in range(1, heads_per_group + 1):
        if (heads_per_group % heads == 0 and batch * nchunks * (nheads // heads) * column_blocks
                >= BWD_CHUNK_MIN_BLOCKS):
            best = heads
    return best


# The 16-bit per-chunk gradients run as three kernels (kernels/bwd_chunk_split.py) from this
# dstate (padded) on, or from this chunk size on; one kernel below both. A training step at b8
# h64 p64 L2048 on the H200, one kernel -> three (data/h200_bwd_chunk_forms.txt, 2026-12-05):
# dstate 256 chunk 256 4.85 -> 2.75 ms, chunk 64 3.81 -> 2.73; dstate 128 chunk 256
# 2.25 -> 1.68, chunk 128 1.80 -> 1.53, chunk 64 1.54 -> 1.60 (one kernel stays); dstate 64
# chunk 256 1.78 -> 1.41. The one-kernel form's dstate-wide float32 dB and dC tiles need
# 235-248 registers a thread on sm_90 at dstate 256, and its chunk-wide pair tiles grow with
# the chunk; the split form makes the scores' gradient once a group instead of once a head.
BWD_CHUNK_SPLIT_DSTATE = 256
BWD_CHUNK_SPLIT_CHUNK = 128

# The dstate columns one block of the split form's dB/dC kernel makes.
BWD_CHUNK_SPLIT_COLUMNS = 64


def bwd_chunk_split_form(dtype, chunk_size, dstate):
    """Whether the per-chunk gradients run as the split form's three kernels."""
    return (dtype != torch.float32
            and (next_power_of_2(dstate) >= BWD_CHUNK_SPLIT_DSTATE
                 or chunk_size >= BWD_CHUNK_SPLIT_CHUNK))


def bwd_chunk_split_columns(dstate):
    """The dstate columns of one block of the split form's dB/dC kernel:
    ``BWD_CHUNK_SPLIT_COLUMNS``, or the padded dstate if narrower."""
    return min(BWD_CHUNK_SPLIT_COLUMNS, next_power_of_2(dstate))


def bwd_chunk_column_blocks(dtype, chunk_size, dstate):
    """Blocks a launch has for each (chunk, block of heads): the split form's dB/dC kernel one
    per :func:`bwd_chunk_split_columns` columns of dstate, the one-kernel forms one."""
    if not bwd_chunk_split_form(dtype, chunk_size, dstate):
        return 1
    return -(-dstate // bwd_chunk_split_columns(dstate))

# The split form's dB/dC kernel with the occupancy hint 2 (two blocks an SM: 128 registers a
# thread on sm_90): in the same steps at dstate 256, 4.53 ms against 5.46 without at chunk 256,
# 3.41 against 3.77 at chunk 64.
BWD_CHUNK_SPLIT_DB_DC_OCCUPANCY = 2

# How deep the split form's dB/dC kernel makes each mma through the states: it sums
# BWD_CHUNK_SPLIT_MMA_DEPTH // headdim heads in one (their x or dy side by side, their states
# stacked) where one head made a headdim-deep mma. A training step at b8 h64 p64 L2048 (H100,
# data/h100_bwd_chunk_dB_dC_2026-12-07.txt), one head an mma (64 deep) -> two (128) -> four
# (256): dstate 256 chunk 256 3.13 -> 3.11 -> 3.29 ms, dstate 128 chunk 256 1.83 -> 1.79 ->
# 1.86, chunk 128 1.72 -> 1.69 -> 1.71, dstate 256 chunk 64 3.11 -> 3.09 -> 3.09. Four heads'
# float32 operand tile (64 x 256) does not fit beside the rest: compiled for sm_90 the kernel
# drops to 4 warps at 255 registers and spills.
BWD_CHUNK_SPLIT_MMA_DEPTH = 128


def bwd_chunk_heads_per_mma(heads_per_block, headdim_tile):
    """The heads one ``mma`` of the dB/dC kernel sums: the largest power of two that divides
    ``heads_per_block`` (a tile's dimensions are powers of two) and keeps the ``mma``
    ``BWD_CHUNK_SPLIT_MMA_DEPTH`` deep at most (``headdim_tile`` deep for one head)."""
    heads = 1
    while (heads_per_block % (2 * heads) == 0
           and 2 * heads * headdim_tile <= BWD_CHUNK_SPLIT_MMA_DEPTH):
        heads *= 2
    return heads

# The split form's dx kernel with the occupancy hint 2 too. At dstate 256 its shared memory
# (~212 KB on sm_90) leaves one block an SM whatever the hint, and the cubin's resources are the
# same; where the split form was forced at dstate 128 (chunk 256) the hint took the dx kernel to
# 128 registers and 108 KB, two blocks an SM, and the step from 4.12 to 2.79 ms (the two-kernel
# form, data/h200_bwd_chunk_split.txt: split-64 against split-64-dx-occ2). 8 worker warps on
# the split form's kernels were timed too and lost (dx 3-20% slower) or tied (dscores, dB/dC):
# data/h100_bwd_chunk_hints_2026-12-05.txt; timed again on 2026-12-07, 8 worker warps lost to the
# dx kernel's row-block count left to run time (data/h100_bwd_chunk_dx_row_count_2026-12-07.txt),
# with which the compiler builds it at dstate 128, chunk 256 with 256 threads and 128 registers,
# no spills (data/cpu_bwd_chunk_dx_warps_2026-12-07.txt).
BWD_CHUNK_SPLIT_DX_OCCUPANCY = 2


def bwd_chunk_launch(x, dt, dA_cumsum, B, C, chunk_states, dstates, dy, D=None, seq_idx=None,
                     dvarlen_states=None, cu_seqlens=None, heads_per_block=None):
    """Allocate the outputs and plan the launches; returns
    ``(launches, (dx, ddt, dB, dC, ddA_terms, dD))``, ``launches`` a tuple of
    :class:`KernelLaunch` to run in order (three for the split form, one otherwise):

    - ``dx`` (b, l, h, p) in ``x``'s dtype, with the skip's ``D dy`` when ``D`` is given
      ((h,) or (h, p));
    - ``ddt`` (b, h, c, s) float32, ``dt``'s direct gradient in its chunk layout, zero past
      seqlen;
    - ``dB``, ``dC`` (b, l, h / heads_per_block, n) float32: each the sum over one block's
      heads (:func:`bwd_chunk_heads_per_block` when ``heads_per_block`` is None), for the caller
      to sum over each group's blocks;
    - ``ddA_terms`` (b, h, c, 3, s) float32, zero past seqlen: ``C_k · dC_k``, ``B_k · dB_k``
      and the part of the latter through the state gradient (plus ``exp(dA_last) <dh, h_c>`` at
      position 0), which sums over a chunk to ``dA_last``'s gradient;
    - ``dD`` (b, ceil(l / block_m), h, p) float32, ``dy · x`` summed over each row block of
      ``block_m`` tokens (None without ``D``).

    ``seq_idx`` (b, l) int32: packed sequences (module doc), with ``chunk_states`` and
    ``dstates`` those of the same packing. ``dvarlen_states`` (num_sequences, h, p, n) float32
    with ``cu_seqlens`` (batch 1): the gradient of each sequence's last state, its in-chunk part
    (module doc). 16-bit inputs with a padded dstate of ``BWD_CHUNK_SPLIT_DSTATE`` or more, or a
    chunk of ``BWD_CHUNK_SPLIT_CHUNK`` or more, take the split form
    (:mod:`mamba2_tile.kernels.bwd_chunk_split`)."""
    batch, seqlen, nheads, headdim = x.shape
    ngroups, dstate = B.shape[2], B.shape[3]
    nchunks, chunk_size = dA_cumsum.shape[2], dA_cumsum.shape[3]
    column_blocks = bwd_chunk_column_blocks(x.dtype, chunk_size, dstate)
    if heads_per_block is None:
        heads_per_block = bwd_chunk_heads_per_block(x.dtype, batch, nchunks, nheads, ngroups,
                                                    column_blocks)
    elif (isinstance(heads_per_block, bool) or not isinstance(heads_per_block, int)
          or heads_per_block < 1 or (nheads // ngroups) % heads_per_block):
        # A block's heads share one group's B and C (and, in the split form, its dscores).
        raise ValueError(f"heads_per_block must be a positive integer dividing the "
                         f"{nheads // ngroups} heads of a group, got {heads_per_block!r}")
    block_m, block_n = bwd_chunk_tiles(x.dtype, chunk_size, dstate)
    f32 = dict(dtype=torch.float32, device=x.device)
    dx = torch.empty_like(x)
    # Zeros: blocks past seqlen are never stored, and the caller sums ddt over whole chunks.
    ddt = torch.zeros(batch, nheads, nchunks, chunk_size, **f32)
    ddA_terms = torch.zeros(batch, nheads, nchunks, 3, chunk_size, **f32)
    dB = torch.empty(batch, seqlen, nheads // heads_per_block, dstate, **f32)
    dC = torch.empty_like(dB)
    dD = None if D is None else torch.empty(batch, -(-seqlen // block_m), nheads, headdim, **f32)
    outputs = (dx, ddt, dB, dC, ddA_terms, dD)
    varlen = dvarlen_states is not None
    D_rows = None if D is None else (D.float()[:, None] if D.dim() == 1 else D.float())
    D_arg = (placeholder(dA_cumsum) if D is None
             else D_rows.expand(nheads, headdim).contiguous())
    seq_arg = seq_placeholder(x) if seq_idx is None else seq_idx
    packing = (seq_arg,
               dvarlen_states if varlen else placeholder(dA_cumsum),
               cu_seqlens if varlen else seq_placeholder(x),
               chunk_sequences(cu_seqlens, chunk_size, nchunks) if varlen else seq_placeholder(x))
    dD_arg = placeholder(dA_cumsum) if D is None else dD
    inputs = (x, dt, dA_cumsum, B, C, chunk_states, dstates, dy)
    packed = (seq_idx is not None, varlen)
    flags = packed + (seqlen % chunk_size == 0,)
    headdim_tile, dstate_tile = next_power_of_2(headdim), next_power_of_2(dstate)
    if bwd_chunk_split_form(x.dtype, chunk_size, dstate):
        columns = bwd_chunk_split_columns(dstate)
        dx_launch = KernelLaunch(
            (batch * nchunks, nheads, 1),
            with_hints(bwd_chunk_dx_kernel, occupancy=BWD_CHUNK_SPLIT_DX_OCCUPANCY),
            inputs + (D_arg,) + packing + (dx, ddt, ddA_terms, dD_arg, chunk_size, block_m,
                                           headdim_tile, dstate_tile, D is not None) + packed)
        # Only the pairs j <= i are written (and read).
        dscores = torch.empty(batch, nchunks, ngroups, chunk_size, chunk_size, dtype=x.dtype,
                              device=x.device)
        blocks_per_chunk = chunk_size // block_m
        dscores_launch = KernelLaunch(
            (batch * nchunks, ngroups, blocks_per_chunk * blocks_per_chunk),
            bwd_chunk_dscores_kernel,
            (x, dt, dA_cumsum, dy, seq_arg, dscores, chunk_size, block_m, headdim_tile,
             seq_idx is not None))
        dB_dC_launch = KernelLaunch(
            (batch * nchunks, nheads // heads_per_block, column_blocks),
            with_hints(bwd_chunk_dB_dC_kernel, occupancy=BWD_CHUNK_SPLIT_DB_DC_OCCUPANCY),
            inputs + (dscores,) + packing + (dB, dC, chunk_size, block_m, columns, headdim_tile,
                                             heads_per_block,
                                             bwd_chunk_heads_per_mma(heads_per_block,
                                                                     headdim_tile)) + flags)
        return (dx_launch, dscores_launch, dB_dC_launch), outputs
    grid = (batch * nchunks, nheads // heads_per_block, 1)
    args = inputs + (D_arg,) + packing + (dx, ddt, dB, dC, ddA_terms, dD_arg, chunk_size, block_m)
    if block_n is None:
        args += (headdim_tile, dstate_tile, heads_per_block, D is not None) + flags
        kernel = with_hints(bwd_chunk_kernel, num_worker_warps=BWD_CHUNK_WORKER_WARPS)
        return (KernelLaunch(grid, kernel, args),), outputs
    if heads_per_block != 1:
        raise ValueError(f"heads_per_block must be 1 for float32 inputs, got {heads_per_block}")
    args += (block_n, headdim_tile, D is not None) + flags
    return (KernelLaunch(grid, bwd_chunk_float32_kernel, args),), outputs


def bwd_chunk(x, dt, dA_cumsum, B, C, chunk_states, dstates, dy, D=None, seq_idx=None,
              dvarlen_states=None, cu_seqlens=None, heads_per_block=None):
    """Run the per-chunk gradients; returns ``(dx, ddt, dB, dC, ddA_terms, dD)`` (see the
    launcher)."""
    launches, outputs = bwd_chunk_launch(x, dt, dA_cumsum, B, C, chunk_states, dstates, dy, D,
                                         seq_idx, dvarlen_states, cu_seqlens, heads_per_block)
    for launch in launches:
        launch.run()
    return outputs
