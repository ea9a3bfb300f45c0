"""Each packed sequence's last state: ``varlen_states`` for ``return_varlen_states``.

Reference: :func:`mamba2_tile.reference.varlen_states` (batch 1, sequence ``i`` is tokens
``cu_seqlens[i]`` to ``cu_seqlens[i+1] - 1``). The forward pass keeps the state only at a few
places: the state entering every chunk (the three-kernel path's ``chunk_states``), every
segment (the sequence-parallel path's entering states) or only token 0 (the fused path:
``initial_states``). Call those places *anchors*, one every ``anchor_chunks`` chunks. One block
per (sequence, head, headdim tile) finds the last anchor at or before its sequence's last token
``e``, and walks ``BLOCK_M`` rows at a time from the later of that anchor and the sequence's
start to ``e``, with the fused kernel's update::

    h = exp(dA_last - dA_start) * h + B_mᵀ @ (exp(dA_last - dA_m) * dt_m * x_m)

keeping only the sequence's own rows. It starts from the anchor's state when the sequence began
before the anchor (or, at token 0, when it is sequence 0, which ``initial_states`` belongs to),
otherwise from zero. A sequence that crosses no anchor walks only its own tokens, and each
anchor is crossed by one sequence at most, so the blocks together read at most the tokens
once plus one anchor's stretch per sequence.
"""

import torch

from mamba2_tile.kernels.exp2 import LOG2E
from mamba2_tile.kernels.fused_state_out import fused_block_m, fused_block_p
from mamba2_tile.kernels.launching import (KernelLaunch, cdiv, next_power_of_2, placeholder,
                                           seq_placeholder)
from mamba2_tile.kernels.split_tf32 import split_mma
from mamba2_tile.tile import ct


@ct.kernel
def varlen_states_kernel(
    x, B, dt, dA_cumsum,         # (1, l, h, p), (1, l, g, n), (1, h, c, s) x2
    seq_idx,                     # (1, l) int32: which sequence ``initial_states`` goes to
    cu_seqlens,                  # (num_sequences + 1,) int32 or int64
    anchor_states,               # (1, h, anchors, p, n) or (1, h, anchors, n, p): see the doc
    varlen_states,               # out: (num_sequences, h, p, n) float32
    anchor_chunks,               # chunks from one anchor to the next (runtime int)
    CHUNK_SIZE: ct.Constant[int],
    BLOCK_M: ct.Constant[int],   # rows handled at once, divides CHUNK_SIZE
    BLOCK_P: ct.Constant[int],
    DSTATE: ct.Constant[int],    # dstate padded to a power of two
    HAS_ANCHORS: ct.Constant[bool],        # else every anchor state is zero
    ANCHORS_TRANSPOSED: ct.Constant[bool],  # anchor_states is (1, h, anchors, n, p)
    HAS_SEQ_IDX: ct.Constant[bool],        # else the packed row holds sequence 0 only
    TF32: ct.Constant[bool],               # float32 mma operands rounded to TF32
):
    sequence = ct.bid(0)
    h = ct.bid(1)
    p_tile = ct.bid(2)
    g = h // (x.shape[2] // B.shape[2])
    blocks_per_chunk = CHUNK_SIZE // BLOCK_M
    zero = ct.PaddingMode.ZERO
    mma_dtype = ct.tfloat32 if TF32 else x.dtype

    start = ct.reshape(ct.load(cu_seqlens, (sequence,), (1,)).astype(ct.int32), ())
    last = ct.reshape(ct.load(cu_seqlens, (sequence + 1,), (1,)).astype(ct.int32), ()) - 1
    anchor = last // CHUNK_SIZE // anchor_chunks
    anchor_token = anchor * anchor_chunks * CHUNK_SIZE
    # Does the state at the anchor belong to this sequence? Before token 0 it is
    # initial_states', which belongs to sequence 0.
    if HAS_SEQ_IDX:
        is_first = ct.reshape(ct.load(seq_idx, (0, start), (1, 1)), ()) == 0
    else:
        is_first = True
    from_anchor = (start < anchor_token) | ((anchor_token == 0) & is_first)

    state = ct.zeros((DSTATE, BLOCK_P), dtype=ct.float32)     # kept as the fused kernel keeps it
    if HAS_ANCHORS:
        if ANCHORS_TRANSPOSED:
            entering = ct.load(anchor_states, (0, h, anchor, 0, p_tile),
                               (1, 1, 1, DSTATE, BLOCK_P), padding_mode=zero)
            entering = ct.reshape(entering, (DSTATE, BLOCK_P)).astype(ct.float32)
        else:
            entering = ct.load(anchor_states, (0, h, anchor, p_tile, 0),
                               (1, 1, 1, BLOCK_P, DSTATE), padding_mode=zero)
            entering = ct.transpose(ct.reshape(entering, (BLOCK_P, DSTATE)).astype(ct.float32))
        state = ct.where(from_anchor, entering, state)

    # From the anchor (a chunk start: the cumsum starts at 0 there) or from the sequence's start
    # (then the state is zero, and where the cumsum stood before it does not matter).
    first_token = max(start, anchor_token)
    dA_start = ct.zeros((1, 1), dtype=ct.float32)
    for row_block in range(first_token // BLOCK_M, last // BLOCK_M + 1):
        c = row_block // blocks_per_chunk
        m = row_block % blocks_per_chunk
        if m == 0:
            dA_start = ct.zeros((1, 1), dtype=ct.float32)
        dA_m = ct.reshape(ct.load(dA_cumsum, (0, h, c, m), (1, 1, 1, BLOCK_M)), (BLOCK_M, 1))
        dt_m = ct.reshape(ct.load(dt, (0, h, c, m), (1, 1, 1, BLOCK_M)), (BLOCK_M, 1))
        rows = row_block * BLOCK_M + ct.reshape(ct.arange(BLOCK_M, dtype=ct.int32), (BLOCK_M, 1))
        mine = (rows >= start) & (rows <= last)
        # The block's last row of the sequence: the cumsum there, picked out of the tile.
        stop_row = min(row_block * BLOCK_M + BLOCK_M - 1, last)
        dA_last = ct.sum(ct.where(rows == stop_row, dA_m, 0.0), axis=0, keepdims=True)

        B_m = ct.load(B, (0, row_block, g, 0), (1, BLOCK_M, 1, DSTATE), padding_mode=zero)
        B_m = ct.reshape(B_m, (BLOCK_M, DSTATE)).astype(mma_dtype)
        x_m = ct.load(x, (0, row_block, h, p_tile), (1, BLOCK_M, 1, BLOCK_P), padding_mode=zero)
        x_m = ct.reshape(x_m, (BLOCK_M, BLOCK_P)).astype(ct.float32)
        # Clamped before exp2: rows after stop_row would overflow, and are masked anyway.
        weight = ct.exp2(ct.minimum(dA_last - dA_m, 0.0) * LOG2E, flush_to_zero=True) * dt_m
        weight = ct.where(mine, weight, 0.0)
        x_weighted = (x_m * weight).astype(x.dtype).astype(mma_dtype)
        carry = ct.exp2((dA_last - dA_start) * LOG2E, flush_to_zero=True)
        state = split_mma(ct.transpose(B_m), x_weighted, state * carry)
        dA_start = dA_last

    ct.store(varlen_states, (sequence, h, p_tile, 0),
             ct.reshape(ct.transpose(state), (1, 1, BLOCK_P, DSTATE)))


def varlen_states_launch(x, B, dt, dA_cumsum, cu_seqlens, anchor_states=None, anchor_chunks=None,
                         seq_idx=None, anchors_transposed=False, tf32=False):
    """Allocate ``varlen_states`` (num_sequences, h, p, n) float32 and plan the launch; returns
    ``(KernelLaunch, varlen_states)``.

    ``anchor_states`` (1, h, anchors, p, n), any float dtype, is the state entering chunks
    ``0, anchor_chunks, 2 * anchor_chunks, ...`` (``(1, h, anchors, n, p)`` when
    ``anchors_transposed``); ``None`` means zero states, and ``anchor_chunks=None`` one anchor
    at token 0. Tiles as in the fused kernel.
    """
    _, _, nheads, headdim = x.shape
    dstate = B.shape[3]
    nchunks, chunk_size = dA_cumsum.shape[2], dA_cumsum.shape[3]
    sequences = cu_seqlens.shape[0] - 1
    varlen_states = torch.empty(sequences, nheads, headdim, dstate, dtype=torch.float32,
                                device=x.device)
    block_m = fused_block_m(chunk_size)
    block_p = fused_block_p(headdim, dstate)
    grid = (sequences, nheads, cdiv(headdim, block_p))
    args = (x, B, dt, dA_cumsum, seq_placeholder(x) if seq_idx is None else seq_idx, cu_seqlens,
            placeholder(dA_cumsum) if anchor_states is None else anchor_states, varlen_states,
            nchunks if anchor_chunks is None else anchor_chunks,
            chunk_size, block_m, block_p, next_power_of_2(dstate),
            anchor_states is not None, anchors_transposed, seq_idx is not None,
            tf32 and x.dtype == torch.float32)
    return KernelLaunch(grid, varlen_states_kernel, args), varlen_states


def varlen_states(x, B, dt, dA_cumsum, cu_seqlens, anchor_states=None, anchor_chunks=None,
                  seq_idx=None, anchors_transposed=False, tf32=False):
    """Run it; returns ``varlen_states`` (see ``varlen_states_launch``)."""
    launch, states = varlen_states_launch(x, B, dt, dA_cumsum, cu_seqlens, anchor_states,
                                          anchor_chunks, seq_idx, anchors_transposed, tf32)
    launch.run()
    return states
