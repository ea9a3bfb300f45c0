"""Sequence parallelism, step 1: the state each segment of the sequence adds, all segments at once.

The path this serves is :mod:`mamba2_tile.kernels.sequence_parallel` (read that first). One
block per (batch x head, headdim tile, segment), all segments in parallel.

Reference: :func:`mamba2_tile.reference.fwd_pass_state`'s jump formula. The block walks its
segment ``BLOCK_M`` rows at a time, like the fused kernel (the same rounding of the weighted
``x``), from a zero state::

    h = exp(dA_end - dA_start) * h + B_mᵀ @ (exp(dA_end - dA_m) * dt_m * x_m)

and stores ``h`` at the segment's end, ``(b, h, segment, p, n)`` float32, and the segment's
decay ``Σ (dA_end - dA_start)`` over its row blocks (natural-log units), ``(b, h, segment)``;
every segment but the last (see the launcher).
Past ``seqlen``, ``dt = 0`` (stage 1), so padded rows add nothing.

It reads ``x`` and ``B`` once more than the fused kernel alone would (the price of not waiting
for the previous segment), and writes one state per segment instead of one per chunk as the
three-kernel pipeline does.
"""

import torch

from mamba2_tile.kernels.exp2 import LOG2E
from mamba2_tile.kernels.fused_state_out import fused_block_m, fused_block_p, fused_occupancy
from mamba2_tile.kernels.launching import (KernelLaunch, cdiv, expect_options, next_power_of_2,
                                           seq_placeholder, with_hints)
from mamba2_tile.kernels.options import FusedStateOutOptions
from mamba2_tile.kernels.packing import last_seq, rows_seq, seq_before
from mamba2_tile.kernels.split_tf32 import split_mma
from mamba2_tile.tile import ct


@ct.kernel
def segment_states_kernel(
    x, B, dt, dA_cumsum,         # (b, l, h, p), (b, l, g, n), (b, h, c, s) x2
    seq_idx,                     # (b, l) int32: packed sequences
    segment_states,              # out: (b, h, segments - 1, p, n) float32, each from zero
    segment_decay,               # out: (b, h, segments - 1) float32, Σ dA over the segment
    segment_blocks,              # row blocks per segment (runtime int)
    CHUNK_SIZE: ct.Constant[int],
    BLOCK_M: ct.Constant[int],   # rows handled at once, divides CHUNK_SIZE
    BLOCK_P: ct.Constant[int],
    DSTATE: ct.Constant[int],    # dstate padded to a power of two
    HAS_SEQ_IDX: ct.Constant[bool],   # reset the state where seq_idx changes
    LATENCY: ct.Constant[int],   # DRAM latency hint, 1-10; 0 = no hint
    TF32: ct.Constant[bool],     # float32 mma operands rounded to TF32
):
    nheads = x.shape[2]
    b = ct.bid(0) // nheads
    h = ct.bid(0) % nheads
    p_tile = ct.bid(1)
    segment = ct.bid(2)
    g = h // (nheads // B.shape[2])
    blocks_per_chunk = CHUNK_SIZE // BLOCK_M
    zero = ct.PaddingMode.ZERO
    latency = LATENCY if LATENCY > 0 else None
    mma_dtype = ct.tfloat32 if TF32 else x.dtype

    state = ct.zeros((DSTATE, BLOCK_P), dtype=ct.float32)     # kept as the fused kernel keeps it
    decay = ct.zeros((1, 1), dtype=ct.float32)
    dA_start = ct.zeros((1, 1), dtype=ct.float32)
    first = segment * segment_blocks
    stop = min(first + segment_blocks, ct.cdiv(x.shape[1], BLOCK_M))
    if HAS_SEQ_IDX:
        # Packed sequences (kernels/packing.py): the sequence of the state entering the
        # segment; a reset anywhere in the segment makes its decay -inf (nothing passes on).
        seq_prev = seq_before(seq_idx, b, first * BLOCK_M)
    for row_block in range(first, stop):
        c = row_block // blocks_per_chunk
        m = row_block % blocks_per_chunk
        if m == 0:
            dA_start = ct.zeros((1, 1), dtype=ct.float32)       # a chunk's cumsum starts at 0
        dA_block = ct.load(dA_cumsum, (b, h, c, m), (1, 1, 1, BLOCK_M))
        dA_m = ct.reshape(dA_block, (BLOCK_M, 1))
        dA_end = ct.reshape(ct.extract(dA_block, (0, 0, 0, BLOCK_M - 1), (1, 1, 1, 1)), (1, 1))
        dt_m = ct.reshape(ct.load(dt, (b, h, c, m), (1, 1, 1, BLOCK_M)), (BLOCK_M, 1))
        B_m = ct.load(B, (b, row_block, g, 0), (1, BLOCK_M, 1, DSTATE),
                      padding_mode=zero, latency=latency)
        B_m = ct.reshape(B_m, (BLOCK_M, DSTATE)).astype(mma_dtype)
        x_m = ct.load(x, (b, row_block, h, p_tile), (1, BLOCK_M, 1, BLOCK_P),
                      padding_mode=zero, latency=latency)
        x_m = ct.reshape(x_m, (BLOCK_M, BLOCK_P)).astype(ct.float32)

        # exp2 of log2 units, as in the fused kernel (see LOG2E there).
        weight = ct.exp2((dA_end - dA_m) * LOG2E, flush_to_zero=True) * dt_m
        carry = ct.exp2((dA_end - dA_start) * LOG2E, flush_to_zero=True)
        block_decay = dA_end - dA_start
        if HAS_SEQ_IDX:
            seq_m = rows_seq(seq_idx, b, row_block, BLOCK_M)
            seq_end = last_seq(seq_m)
            weight = ct.where(seq_m == seq_end, weight, 0.0)
            carry = ct.where(seq_end == seq_prev, carry, 0.0)
            block_decay = ct.where(seq_end == seq_prev, block_decay, float("-inf"))
            seq_prev = seq_end
        x_weighted = (x_m * weight).astype(x.dtype).astype(mma_dtype)
        state = split_mma(ct.transpose(B_m), x_weighted, state * carry)
        decay = decay + block_decay
        dA_start = dA_end

    ct.store(segment_states, (b, h, segment, p_tile, 0),
             ct.reshape(ct.transpose(state), (1, 1, 1, BLOCK_P, DSTATE)))
    if p_tile == 0:                       # every headdim tile has the same decay: store it once
        ct.store(segment_decay, (b, h, segment), ct.reshape(decay, (1, 1, 1)))


def segment_states_launch(x, B, dt, dA_cumsum, segment_chunks, options=FusedStateOutOptions(),
                          seq_idx=None):
    """Allocate the outputs and plan the launch, for every segment but the last: what the last
    one adds is only ever needed for ``final_states``, which the fused kernel computes anyway
    (with 3 segments, a third less of this kernel's reading). Needs at least two segments.

    Returns ``(KernelLaunch, (segment_states, segment_decay))``. Row block, headdim tile and
    occupancy as in the fused kernel (:func:`fused_block_m`, :func:`fused_block_p`,
    :func:`fused_occupancy`): ``options`` are the fused kernel's. With ``seq_idx`` (packed
    sequences) a segment's state is that of its last token's sequence, and its decay is
    ``-inf`` when a sequence starts inside it (``segment_pass`` then carries nothing over).
    """
    expect_options(options, FusedStateOutOptions)
    batch, _, nheads, headdim = x.shape
    dstate = B.shape[3]
    nchunks, chunk_size = dA_cumsum.shape[2], dA_cumsum.shape[3]
    segments = cdiv(nchunks, segment_chunks) - 1            # the last one is not needed
    if segments < 1:
        raise ValueError(f"segment_states needs at least two segments: {nchunks} chunks in "
                         f"segments of {segment_chunks} make one")
    segment_states = torch.empty(batch, nheads, segments, headdim, dstate, dtype=torch.float32,
                                 device=x.device)
    segment_decay = torch.empty(batch, nheads, segments, dtype=torch.float32, device=x.device)
    block_m = fused_block_m(chunk_size, options)
    block_p = fused_block_p(headdim, dstate, options.block_p)
    grid = (batch * nheads, cdiv(headdim, block_p), segments)
    args = (x, B, dt, dA_cumsum, seq_placeholder(x) if seq_idx is None else seq_idx,
            segment_states, segment_decay,
            segment_chunks * (chunk_size // block_m),
            chunk_size, block_m, block_p, next_power_of_2(dstate), seq_idx is not None,
            options.latency_constant(), options.use_tf32(x.dtype))
    kernel = with_hints(segment_states_kernel,
                        fused_occupancy(dstate, block_p, options.occupancy))
    return KernelLaunch(grid, kernel, args), (segment_states, segment_decay)


def segment_states(x, B, dt, dA_cumsum, segment_chunks, options=FusedStateOutOptions(),
                   seq_idx=None):
    """Run it; returns ``(segment_states, segment_decay)`` (see ``segment_states_launch``)."""
    launch, outputs = segment_states_launch(x, B, dt, dA_cumsum, segment_chunks, options,
                                            seq_idx)
    launch.run()
    return outputs
