"""Backward of stage 1 (:mod:`mamba2_tile.kernels.chunk_cumsum`): from the gradient of
``dA_cumsum`` to the gradients of ``dt`` and ``A``.

Stage 1 made ``dA_cumsum_k = sum_{t <= k} dt_t A`` inside each chunk, from ``dt`` prepared as
``clamp(softplus(dt + dt_bias), *dt_limit)``. Run backward, the gradient of one token's step
``dt_k A`` is the reverse running sum of ``dA_cumsum``'s gradient from ``k`` to the chunk's end;
:mod:`mamba2_tile.kernels.bwd_chunk` hands that gradient over as three rows a chunk
(``ddA_terms``): ``C_k · dC_k`` and ``B_k · dB_k``, whose difference is the gradient at ``k``,
and the terms of the whole chunk's decay, which every step of the chunk gets. So, for each
chunk and head::

    d_step_k = sum_{t >= k} (C_t · dC_t - B_t · dB_t)  +  sum_t dA_last_terms_t
    dA      += sum_k d_step_k dt_k
    ddt_k    = ddt_direct_k + d_step_k A

then ``dt``'s chain run backward: no gradient where the clamp to ``dt_limit`` held, the
softplus's derivative ``sigmoid(dt + dt_bias)`` where it was applied, and none where stage 1
floored the step at ``DA_STEP_MIN``.

The block's shape is stage 1's: one chunk of one batch for ``BLOCK_H`` heads, ``dt`` read and
``ddt`` written as ``(chunk_size, BLOCK_H)`` slabs, contiguous along heads; the chunk-layout
inputs are read one ``(BLOCK_H, chunk_size)`` tile each. One launch does what was ten
elementwise PyTorch operations on ``(b, h, c, s)`` tensors.

Packed sequences cut the running sum at each sequence's end; that stays in PyTorch
(``mamba2_tile.autograd``), and this kernel runs without ``seq_idx``.
"""

import torch

from mamba2_tile.kernels.chunk_cumsum import (DA_STEP_MIN, SOFTPLUS_THRESHOLD,
                                              chunk_cumsum_block_h, prepared_dt)
from mamba2_tile.kernels.launching import KernelLaunch, cdiv, placeholder
from mamba2_tile.tile import ct


@ct.kernel
def bwd_chunk_cumsum_kernel(
    dt, A, dt_bias,               # stage 1's inputs: (b, l, h), (h,), (h,)
    ddA_terms,                    # (b, h, c, 3, s) f32: C·dC, B·dB, the chunk's decay terms
    ddt_direct,                   # (b, h, c, s) f32: dt's gradient through x's scaling
    ddt, dA_chunks,               # out, f32: (b, l, h), (b, c, h): each chunk's part of dA
    CHUNK_SIZE: ct.Constant[int],
    BLOCK_H: ct.Constant[int],
    HAS_DT_BIAS: ct.Constant[bool],
    DT_SOFTPLUS: ct.Constant[bool],
    DT_MIN: ct.Constant[float],
    DT_MAX: ct.Constant[float],
):
    b = ct.bid(0)
    c = ct.bid(1)
    hb = ct.bid(2)
    zero = ct.PaddingMode.ZERO

    # dt prepared as stage 1 prepares it, kept at each step (the softplus's input and output
    # too), turned to (BLOCK_H, CHUNK_SIZE): the chunk layout's rows.
    dt_raw, dt_soft, dt_used = prepared_dt(dt, dt_bias, b, c, hb, CHUNK_SIZE, BLOCK_H,
                                           HAS_DT_BIAS, DT_SOFTPLUS, DT_MIN, DT_MAX)
    dt_raw = ct.transpose(dt_raw)
    dt_soft = ct.transpose(dt_soft)
    dt_used = ct.transpose(dt_used)
    pos = ct.reshape(c * CHUNK_SIZE + ct.arange(CHUNK_SIZE, dtype=ct.int32), (1, CHUNK_SIZE))
    dt_used = ct.where(pos < dt.shape[1], dt_used, 0.0)
    A_h = ct.reshape(ct.load(A, (hb,), (BLOCK_H,), padding_mode=zero).astype(ct.float32),
                     (BLOCK_H, 1))

    C_dC = terms_row(ddA_terms, b, hb, c, 0, BLOCK_H, CHUNK_SIZE)
    B_dB = terms_row(ddA_terms, b, hb, c, 1, BLOCK_H, CHUNK_SIZE)
    whole_chunk = ct.sum(terms_row(ddA_terms, b, hb, c, 2, BLOCK_H, CHUNK_SIZE), axis=1,
                         keepdims=True)
    d_step = ct.cumsum(C_dC - B_dB, axis=1, reverse=True) + whole_chunk
    # No gradient where stage 1 floored the step at DA_STEP_MIN.
    d_step = ct.where(dt_used * A_h < DA_STEP_MIN, 0.0, d_step)
    ct.store(dA_chunks, (b, c, hb),
             ct.reshape(ct.sum(d_step * dt_used, axis=1), (1, 1, BLOCK_H)))

    direct = ct.load(ddt_direct, (b, hb, c, 0), (1, BLOCK_H, 1, CHUNK_SIZE), padding_mode=zero)
    ddt_h = ct.reshape(direct, (BLOCK_H, CHUNK_SIZE)) + d_step * A_h
    if DT_SOFTPLUS:     # the softplus's slope, sigmoid(dt + dt_bias), at or below the threshold
        ddt_h = ddt_h * ct.where(dt_raw <= SOFTPLUS_THRESHOLD, 1.0 / (1.0 + ct.exp(-dt_raw)), 1.0)
    ddt_h = ct.where((dt_soft < DT_MIN) | (dt_soft > DT_MAX), 0.0, ddt_h)
    # Positions past seqlen lie outside ddt: the store leaves them out.
    ct.store(ddt, (b, c, hb), ct.reshape(ct.transpose(ddt_h), (1, CHUNK_SIZE, BLOCK_H)))


@ct.function
def terms_row(ddA_terms, b, hb, c, row, BLOCK_H, CHUNK_SIZE):
    """``(BLOCK_H, CHUNK_SIZE)``: row ``row`` of ``ddA_terms`` for a block of heads."""
    return ct.reshape(ct.load(ddA_terms, (b, hb, c, row, 0), (1, BLOCK_H, 1, 1, CHUNK_SIZE),
                              padding_mode=ct.PaddingMode.ZERO), (BLOCK_H, CHUNK_SIZE))


def bwd_chunk_cumsum_launch(dt, A, ddA_terms, ddt_direct, dt_bias=None, dt_softplus=False,
                            dt_limit=(0.0, float("inf"))):
    """Allocate the outputs and plan the launch; returns ``(KernelLaunch, (ddt, dA_chunks))``:
    ``ddt`` (b, l, h) and ``dA_chunks`` (b, c, h), float32."""
    batch, seqlen, nheads = dt.shape
    nchunks, chunk_size = ddt_direct.shape[2], ddt_direct.shape[3]
    ddt = torch.empty(batch, seqlen, nheads, dtype=torch.float32, device=dt.device)
    dA_chunks = torch.empty(batch, nchunks, nheads, dtype=torch.float32, device=dt.device)
    block_h = chunk_cumsum_block_h(nheads)
    grid = (batch, nchunks, cdiv(nheads, block_h))
    args = (dt, A, placeholder(dt) if dt_bias is None else dt_bias, ddA_terms, ddt_direct,
            ddt, dA_chunks, chunk_size, block_h, dt_bias is not None, bool(dt_softplus),
            float(dt_limit[0]), float(dt_limit[1]))
    return KernelLaunch(grid, bwd_chunk_cumsum_kernel, args), (ddt, dA_chunks)


def bwd_chunk_cumsum(dt, A, ddA_terms, ddt_direct, dt_bias=None, dt_softplus=False,
                     dt_limit=(0.0, float("inf"))):
    """Run the backward of stage 1; returns ``(ddt, dA)``: float32 (b, l, h) and (h,)."""
    launch, (ddt, dA_chunks) = bwd_chunk_cumsum_launch(dt, A, ddA_terms, ddt_direct, dt_bias,
                                                       dt_softplus, dt_limit)
    launch.run()
    return ddt, dA_chunks.sum((0, 1))
