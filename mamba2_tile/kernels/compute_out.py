"""Stage 3 of the chunked SSD: each chunk's output from its entering state and its own tokens.

Reference: :func:`mamba2_tile.reference.compute_out`. One block computes a
``(BLOCK_M, BLOCK_P)`` tile of ``y``: ``BLOCK_M`` consecutive positions (rows ``i``) of one chunk
of one head, ``BLOCK_P`` channels of ``headdim``. With ``C_i`` the block's rows of ``C``
(``BLOCK_M, dstate``), loaded once::

    inter-chunk   y  = exp(dA_i) * (C_i @ h_enterᵀ)                    h_enter: (BLOCK_P, dstate)
    intra-chunk   y += sum over column blocks j <= i of
                       (exp(dA_i - dA_j) * [i >= j] * (C_i @ B_jᵀ) * dt_j) @ x_j
    skip          y += D * x_i          (these two: mamba2_tile.kernels.epilogue, shared with
    gate          y *= silu(z_i)         the fused kernel)

The ``chunk x chunk`` interaction matrix is never materialised: each ``(BLOCK_M, BLOCK_M)``
piece of ``L ∘ C Bᵀ`` lives in registers between the two ``ct.mma`` that make and consume it,
and column blocks strictly above the diagonal (all zero by causality) are skipped. As in
mamba_ssm, tensor-core operands are cast to the input dtype; accumulation is float32.

``dstate`` is handled as one tile (padded up to a power of two with zeros, which add nothing
to the dot products); ``headdim`` is tiled by ``BLOCK_P`` and padded the same way.

Options (:mod:`mamba2_tile.kernels.options`, all off by default): ``LATENCY`` hints the loads of
``x``, ``B``, ``C``, ``z`` and the entering state; ``SWAP_OPERANDS`` accumulates ``yᵀ``
``(BLOCK_P, BLOCK_M)`` (``h_enter @ C_iᵀ`` and ``x_jᵀ @ scoresᵀ``), so headdim is the mma's M
dimension however small ``BLOCK_M`` is; ``STATES_TRANSPOSED`` reads ``chunk_states`` as
``(b, h, c, n, p)``; ``TF32`` rounds float32 mma operands to TF32. ``chunk_states`` may be
float32 or the input dtype: it is rounded to the dtype of ``C`` either way.
"""

import torch

from mamba2_tile.kernels.epilogue import load_skip, skip_and_gate
from mamba2_tile.kernels.exp2 import LOG2E
from mamba2_tile.kernels.launching import (KernelLaunch, cdiv, expect_options, next_power_of_2,
                                           placeholder, seq_placeholder, with_hints)
from mamba2_tile.kernels.options import ComputeOutOptions
from mamba2_tile.kernels.packing import rows_seq, seq_before
from mamba2_tile.kernels.split_tf32 import split_mma
from mamba2_tile.tile import ct


@ct.kernel
def compute_out_kernel(
    x, dt, dA_cumsum, B, C, chunk_states, D, z,   # as in reference.compute_out
    seq_idx,                                      # (b, l) int32: packed sequences
    y,                                            # output (batch, seqlen, nheads, headdim)
    CHUNK_SIZE: ct.Constant[int],
    BLOCK_M: ct.Constant[int],
    BLOCK_P: ct.Constant[int],
    DSTATE: ct.Constant[int],                     # dstate padded to a power of two
    HAS_D: ct.Constant[bool],
    D_PER_CHANNEL: ct.Constant[bool],             # D is (nheads, headdim) rather than (nheads,)
    HAS_Z: ct.Constant[bool],
    HAS_SEQ_IDX: ct.Constant[bool],               # keep packed sequences apart (packing.py)
    LATENCY: ct.Constant[int],                    # DRAM latency hint, 1-10; 0 = no hint
    SWAP_OPERANDS: ct.Constant[bool],             # accumulate yᵀ, (BLOCK_P, BLOCK_M)
    STATES_TRANSPOSED: ct.Constant[bool],         # chunk_states is (b, h, c, n, p)
    TF32: ct.Constant[bool],                      # float32 mma operands rounded to TF32
):
    blocks_per_chunk = CHUNK_SIZE // BLOCK_M
    m = ct.bid(0) % blocks_per_chunk              # row block inside the chunk
    p_tile = ct.bid(0) // blocks_per_chunk
    nchunks = dA_cumsum.shape[2]
    b = ct.bid(1) // nchunks
    c = ct.bid(1) % nchunks
    h = ct.bid(2)
    g = h // (x.shape[2] // B.shape[2])
    row_block = c * blocks_per_chunk + m          # this block's rows, in BLOCK_M units of seqlen
    zero = ct.PaddingMode.ZERO
    latency = LATENCY if LATENCY > 0 else None
    mma_dtype = ct.tfloat32 if TF32 else x.dtype

    # In the last chunk a whole row block can lie past seqlen: nothing to compute or store
    # (and a load entirely out of bounds is undefined behaviour).
    if row_block * BLOCK_M < x.shape[1]:
        # dA_cumsum in log2 units from here on: every exp is an exp2 (kernels/exp2.py).
        dA_i = ct.reshape(ct.load(dA_cumsum, (b, h, c, m), (1, 1, 1, BLOCK_M)),
                          (BLOCK_M, 1)) * LOG2E
        C_i = ct.load(C, (b, row_block, g, 0), (1, BLOCK_M, 1, DSTATE), padding_mode=zero,
                      latency=latency)
        C_i = ct.reshape(C_i, (BLOCK_M, DSTATE)).astype(mma_dtype)
        read_out = ct.exp2(dA_i, flush_to_zero=True)                     # (BLOCK_M, 1)
        if HAS_SEQ_IDX:
            # Rows of another sequence than the entering state's do not read it.
            seq_i = rows_seq(seq_idx, b, row_block, BLOCK_M)
            read_out = ct.where(seq_i == seq_before(seq_idx, b, c * CHUNK_SIZE), read_out, 0.0)

        # Inter-chunk: the state entering the chunk, read out by C and decayed to position i.
        # Rounded to the dtype of C first (as mamba_ssm does), then to TF32 if asked.
        if STATES_TRANSPOSED:
            h_enter = ct.load(chunk_states, (b, h, c, 0, p_tile), (1, 1, 1, DSTATE, BLOCK_P),
                              padding_mode=zero, latency=latency)
            h_enter_t = ct.reshape(h_enter, (DSTATE, BLOCK_P)).astype(C.dtype).astype(mma_dtype)
        else:
            h_enter = ct.load(chunk_states, (b, h, c, p_tile, 0), (1, 1, 1, BLOCK_P, DSTATE),
                              padding_mode=zero, latency=latency)
            h_enter_t = ct.transpose(
                ct.reshape(h_enter, (BLOCK_P, DSTATE)).astype(C.dtype).astype(mma_dtype))
        if SWAP_OPERANDS:
            acc = split_mma(ct.transpose(h_enter_t), ct.transpose(C_i),
                         ct.zeros((BLOCK_P, BLOCK_M), dtype=ct.float32))
            acc = acc * ct.transpose(read_out)
        else:
            acc = split_mma(C_i, h_enter_t, ct.zeros((BLOCK_M, BLOCK_P), dtype=ct.float32))
            acc = acc * read_out

        # Intra-chunk: column blocks j = 0 .. m (the ones at or below the diagonal).
        rows = ct.reshape(m * BLOCK_M + ct.arange(BLOCK_M, dtype=ct.int32), (BLOCK_M, 1))
        for j in range(m + 1):
            col_block = c * blocks_per_chunk + j
            dA_j = ct.reshape(ct.load(dA_cumsum, (b, h, c, j), (1, 1, 1, BLOCK_M)),
                              (1, BLOCK_M)) * LOG2E
            dt_j = ct.reshape(ct.load(dt, (b, h, c, j), (1, 1, 1, BLOCK_M)), (1, BLOCK_M))
            B_j = ct.load(B, (b, col_block, g, 0), (1, BLOCK_M, 1, DSTATE), padding_mode=zero,
                          latency=latency)
            B_j = ct.reshape(B_j, (BLOCK_M, DSTATE)).astype(mma_dtype)
            x_j = ct.load(x, (b, col_block, h, p_tile), (1, BLOCK_M, 1, BLOCK_P),
                          padding_mode=zero, latency=latency)
            x_j = ct.reshape(x_j, (BLOCK_M, BLOCK_P)).astype(mma_dtype)

            scores = split_mma(C_i, ct.transpose(B_j),
                               ct.zeros((BLOCK_M, BLOCK_M), dtype=ct.float32))
            cols = ct.reshape(j * BLOCK_M + ct.arange(BLOCK_M, dtype=ct.int32), (1, BLOCK_M))
            # Clamp before exp2: above the diagonal dA_i - dA_j > 0 could overflow, and is
            # masked to 0 anyway. A NaN stays NaN (the default clamp would make it a decay of 1).
            decay = ct.exp2(ct.minimum(dA_i - dA_j, 0.0, propagate_nan=True), flush_to_zero=True)
            scores = ct.where(rows >= cols, scores * decay * dt_j, 0.0)
            if HAS_SEQ_IDX:
                seq_j = ct.transpose(rows_seq(seq_idx, b, col_block, BLOCK_M))
                scores = ct.where(seq_i == seq_j, scores, 0.0)
            scores = scores.astype(x.dtype).astype(mma_dtype)
            if SWAP_OPERANDS:
                acc = split_mma(ct.transpose(x_j), ct.transpose(scores), acc)
            else:
                acc = split_mma(scores, x_j, acc)
        if SWAP_OPERANDS:
            acc = ct.transpose(acc)

        x_i = ct.load(x, (b, row_block, h, p_tile), (1, BLOCK_M, 1, BLOCK_P), padding_mode=zero,
                      latency=latency)
        x_i = ct.reshape(x_i, (BLOCK_M, BLOCK_P)).astype(ct.float32)
        acc = skip_and_gate(acc, x_i, load_skip(D, h, p_tile, BLOCK_P, HAS_D, D_PER_CHANNEL), z,
                            b, row_block, h, p_tile, BLOCK_M, BLOCK_P, HAS_D, HAS_Z, LATENCY)

        ct.store(y, (b, row_block, h, p_tile),
                 ct.reshape(acc.astype(y.dtype), (1, BLOCK_M, 1, BLOCK_P)))


def compute_out_tiles(headdim, chunk_size, options=ComputeOutOptions()):
    """``(block_m, block_p)``: the options' tiles, else 64 rows (at most the chunk) and 64
    channels (shrunk to the next power of two of ``headdim`` when that is smaller)."""
    return (min(options.block_m or 64, chunk_size),
            options.block_p or min(next_power_of_2(headdim), 64))


def compute_out_launch(x, dt, dA_cumsum, B, C, chunk_states, D=None, z=None,
                       options=ComputeOutOptions(), transposed_layout=False, seq_idx=None):
    """Allocate ``y`` (like ``x``) and plan the launch; returns ``(KernelLaunch, y)``.

    ``chunk_states`` is ``(b, h, c, n, p)`` when ``transposed_layout`` (as stage 2 wrote it).
    ``seq_idx`` (b, l) int32 packs several sequences in a row
    (:mod:`mamba2_tile.kernels.packing`).
    """
    expect_options(options, ComputeOutOptions)
    batch, _, nheads, headdim = x.shape
    dstate = B.shape[3]
    nchunks, chunk_size = dA_cumsum.shape[2], dA_cumsum.shape[3]
    y = torch.empty_like(x, memory_format=torch.contiguous_format)   # whatever x's strides
    block_m, block_p = compute_out_tiles(headdim, chunk_size, options)
    grid = ((chunk_size // block_m) * cdiv(headdim, block_p), batch * nchunks, nheads)
    args = (
        x, dt, dA_cumsum, B, C, chunk_states,
        placeholder(dA_cumsum) if D is None else D,
        placeholder(x) if z is None else z,
        seq_placeholder(x) if seq_idx is None else seq_idx,
        y,
        chunk_size, block_m, block_p, next_power_of_2(dstate),
        D is not None, D is not None and D.dim() == 2, z is not None, seq_idx is not None,
        options.latency_constant(), options.swap_operands, transposed_layout,
        options.use_tf32(x.dtype),
    )
    kernel = with_hints(compute_out_kernel, options.occupancy)
    return KernelLaunch(grid, kernel, args), y


def compute_out(x, dt, dA_cumsum, B, C, chunk_states, D=None, z=None, options=ComputeOutOptions(),
                transposed_layout=False, seq_idx=None):
    """Run stage 3; returns ``y`` with the shape and dtype of ``x``."""
    launch, y = compute_out_launch(x, dt, dA_cumsum, B, C, chunk_states, D, z, options,
                                   transposed_layout, seq_idx)
    launch.run()
    return y
