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

One block handles one chunk of one head, whole ``headdim`` and ``dstate`` tiles (padded to powers
of two), in row blocks of ``BLOCK_M`` positions; the ``(BLOCK_M, BLOCK_M)`` pieces of ``L ∘ C Bᵀ``
and ``L ∘ dy xᵀ`` live in registers between the two ``ct.mma`` that make and consume them, and
blocks above the diagonal are skipped. ``dB`` and ``dC`` are written per head, ``(b, l, h, n)``:
the caller sums the heads of each group. As in the forward kernels (and mamba_ssm), ``ct.mma``
operands are rounded to the input dtype (tensor cores for 16-bit inputs; float32 ``mma`` for
float32 inputs, whose fully unrolled code would be far larger) and everything accumulates in
float32.

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
"""

import torch

from mamba2_tile.kernels.exp2 import LOG2E
from mamba2_tile.kernels.launching import KernelLaunch, next_power_of_2
from mamba2_tile.tile import ct


@ct.kernel
def bwd_chunk_kernel(
    x, dt, dA_cumsum, B, C,          # (b, l, h, p), (b, h, c, s) x2, (b, l, g, n) x2
    chunk_states, dstates, dy,       # (b, h, c, p, n) x2, (b, l, h, p): any float dtype
    dx, ddt, dB, dC,                 # out, f32: (b, l, h, p), (b, h, c, s), (b, l, h, n) x2
    ddA_terms,                       # out, f32: (b, h, c, 3, s)
    CHUNK_SIZE: ct.Constant[int],
    BLOCK_M: ct.Constant[int],
    HEADDIM: ct.Constant[int],       # headdim padded to a power of two
    DSTATE: ct.Constant[int],        # dstate padded to a power of two
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

    # In log2 units: every exp is an exp2 (kernels/exp2.py).
    dA_last = ct.reshape(ct.load(dA_cumsum, (b, h, c, CHUNK_SIZE - 1), (1, 1, 1, 1)),
                         (1, 1)) * LOG2E
    dh = ct.reshape(ct.load(dstates, (b, h, c, 0, 0), (1, 1, 1, HEADDIM, DSTATE),
                            padding_mode=zero), (HEADDIM, DSTATE)).astype(ct.float32)
    h_enter = ct.reshape(ct.load(chunk_states, (b, h, c, 0, 0), (1, 1, 1, HEADDIM, DSTATE),
                                 padding_mode=zero), (HEADDIM, DSTATE)).astype(ct.float32)
    # exp(dA_last) <dh, h_c>: dA_last's gradient through the entering state, in float32.
    entering = ct.sum(ct.sum(dh * h_enter, axis=1, keepdims=True), axis=0, keepdims=True)
    entering = ct.reshape(entering * ct.exp2(dA_last, flush_to_zero=True), (1,))
    dh = dh.astype(mma_dtype)
    h_enter = h_enter.astype(mma_dtype)

    # dx, ddt, dB: column blocks j, each summing over the row blocks i >= j.
    for j in range(blocks_per_chunk):
        col_block = c * blocks_per_chunk + j
        # A block entirely past seqlen (last chunk) has nothing to store, and a load entirely
        # out of bounds is undefined behaviour.
        if col_block * BLOCK_M < seqlen:
            dA_j = ct.reshape(ct.load(dA_cumsum, (b, h, c, j), (1, 1, 1, BLOCK_M)),
                              (BLOCK_M, 1)) * LOG2E
            dt_j = ct.reshape(ct.load(dt, (b, h, c, j), (1, 1, 1, BLOCK_M)), (BLOCK_M, 1))
            B_j = ct.load(B, (b, col_block, g, 0), (1, BLOCK_M, 1, DSTATE), padding_mode=zero)
            B_j = ct.reshape(B_j, (BLOCK_M, DSTATE)).astype(mma_dtype)
            x_j = ct.load(x, (b, col_block, h, 0), (1, BLOCK_M, 1, HEADDIM), padding_mode=zero)
            x_j = ct.reshape(x_j, (BLOCK_M, HEADDIM)).astype(mma_dtype)

            to_end = ct.exp2(dA_last - dA_j, flush_to_zero=True)             # (BLOCK_M, 1)
            u = ct.mma(B_j, ct.transpose(dh), ct.zeros((BLOCK_M, HEADDIM), dtype=ct.float32))
            u = u * to_end
            # B_j · dB_j's part through dh, as dt_j x_j · u: the same products, fewer registers;
            # the entering state's term rides on the chunk's first position.
            B_dB = ct.sum(x_j.astype(ct.float32) * u, axis=1) * ct.reshape(dt_j, (BLOCK_M,))
            first = (j * BLOCK_M + ct.arange(BLOCK_M, dtype=ct.int32)) == 0
            ct.store(ddA_terms, (b, h, c, 2, j),
                     ct.reshape(B_dB + ct.where(first, entering, 0.0), (1, 1, 1, 1, BLOCK_M)))
            dB_j = ct.mma(x_j, dh, ct.zeros((BLOCK_M, DSTATE), dtype=ct.float32)) * to_end
            B_dB_pairs = ct.zeros((BLOCK_M,), dtype=ct.float32)
            cols = ct.reshape(j * BLOCK_M + ct.arange(BLOCK_M, dtype=ct.int32), (BLOCK_M, 1))
            for i in range(j, blocks_per_chunk):
                row_block = c * blocks_per_chunk + i
                if row_block * BLOCK_M < seqlen:
                    dA_i = ct.reshape(ct.load(dA_cumsum, (b, h, c, i), (1, 1, 1, BLOCK_M)),
                                      (1, BLOCK_M)) * LOG2E
                    C_i = ct.load(C, (b, row_block, g, 0), (1, BLOCK_M, 1, DSTATE),
                                  padding_mode=zero)
                    C_i = ct.reshape(C_i, (BLOCK_M, DSTATE)).astype(mma_dtype)
                    dy_i = ct.load(dy, (b, row_block, h, 0), (1, BLOCK_M, 1, HEADDIM),
                                   padding_mode=zero)
                    dy_i = ct.reshape(dy_i, (BLOCK_M, HEADDIM)).astype(mma_dtype)
                    rows = ct.reshape(i * BLOCK_M + ct.arange(BLOCK_M, dtype=ct.int32),
                                      (1, BLOCK_M))
                    # Transposed pieces, (j, i): clamp before exp2, as in compute_out (above
                    # the diagonal the difference is positive and masked anyway).
                    decay = ct.exp2(ct.minimum(dA_i - dA_j, 0.0, propagate_nan=True),
                                    flush_to_zero=True)
                    causal = rows >= cols
                    scores_t = ct.mma(B_j, ct.transpose(C_i),
                                      ct.zeros((BLOCK_M, BLOCK_M), dtype=ct.float32))
                    dyx_t = ct.mma(x_j, ct.transpose(dy_i),
                                   ct.zeros((BLOCK_M, BLOCK_M), dtype=ct.float32))
                    dyx_t = ct.where(causal, dyx_t * decay, 0.0)
                    # B_j · dB_j's pairs (dt_j aside), from the float32 tiles (the dC loop
                    # makes the same).
                    B_dB_pairs = B_dB_pairs + ct.sum(scores_t * dyx_t, axis=1)
                    scores_t = ct.where(causal, scores_t * decay, 0.0).astype(mma_dtype)
                    u = ct.mma(scores_t, dy_i, u)
                    dB_j = ct.mma(dyx_t.astype(mma_dtype), C_i, dB_j)
            ct.store(dx, (b, col_block, h, 0),
                     ct.reshape(u * dt_j, (1, BLOCK_M, 1, HEADDIM)))
            ddt_j = ct.sum(x_j.astype(ct.float32) * u, axis=1)
            ct.store(ddt, (b, h, c, j), ct.reshape(ddt_j, (1, 1, 1, BLOCK_M)))
            ct.store(dB, (b, col_block, h, 0),
                     ct.reshape(dB_j * dt_j, (1, BLOCK_M, 1, DSTATE)))
            B_dB = B_dB + B_dB_pairs * ct.reshape(dt_j, (BLOCK_M,))
            ct.store(ddA_terms, (b, h, c, 1, j), ct.reshape(B_dB, (1, 1, 1, 1, BLOCK_M)))

    # dC: row blocks i, each summing over the column blocks j <= i.
    for i in range(blocks_per_chunk):
        row_block = c * blocks_per_chunk + i
        if row_block * BLOCK_M < seqlen:
            dA_i = ct.reshape(ct.load(dA_cumsum, (b, h, c, i), (1, 1, 1, BLOCK_M)),
                              (BLOCK_M, 1)) * LOG2E
            dy_i = ct.load(dy, (b, row_block, h, 0), (1, BLOCK_M, 1, HEADDIM), padding_mode=zero)
            dy_i = ct.reshape(dy_i, (BLOCK_M, HEADDIM)).astype(mma_dtype)
            C_i = ct.load(C, (b, row_block, g, 0), (1, BLOCK_M, 1, DSTATE), padding_mode=zero)
            C_i = ct.reshape(C_i, (BLOCK_M, DSTATE)).astype(mma_dtype)
            dC_i = ct.mma(dy_i, h_enter, ct.zeros((BLOCK_M, DSTATE), dtype=ct.float32))
            dC_i = dC_i * ct.exp2(dA_i, flush_to_zero=True)
            C_dC = ct.sum(C_i.astype(ct.float32) * dC_i, axis=1)
            rows = ct.reshape(i * BLOCK_M + ct.arange(BLOCK_M, dtype=ct.int32), (BLOCK_M, 1))
            for j in range(i + 1):
                col_block = c * blocks_per_chunk + j
                dA_j = ct.reshape(ct.load(dA_cumsum, (b, h, c, j), (1, 1, 1, BLOCK_M)),
                                  (1, BLOCK_M)) * LOG2E
                dt_j = ct.reshape(ct.load(dt, (b, h, c, j), (1, 1, 1, BLOCK_M)), (1, BLOCK_M))
                x_j = ct.load(x, (b, col_block, h, 0), (1, BLOCK_M, 1, HEADDIM),
                              padding_mode=zero)
                x_j = ct.reshape(x_j, (BLOCK_M, HEADDIM)).astype(mma_dtype)
                B_j = ct.load(B, (b, col_block, g, 0), (1, BLOCK_M, 1, DSTATE),
                              padding_mode=zero)
                B_j = ct.reshape(B_j, (BLOCK_M, DSTATE)).astype(mma_dtype)
                cols = ct.reshape(j * BLOCK_M + ct.arange(BLOCK_M, dtype=ct.int32), (1, BLOCK_M))
                decay = ct.exp2(ct.minimum(dA_i - dA_j, 0.0, propagate_nan=True),
                                flush_to_zero=True)
                dyx = ct.mma(dy_i, ct.transpose(x_j),
                             ct.zeros((BLOCK_M, BLOCK_M), dtype=ct.float32))
                dyx = ct.where(rows >= cols, dyx * decay * dt_j, 0.0)
                # C_i · dC_i's pairs from float32 tiles: C Bᵀ again, the j loop's scores.
                scores = ct.mma(C_i, ct.transpose(B_j),
                                ct.zeros((BLOCK_M, BLOCK_M), dtype=ct.float32))
                C_dC = C_dC + ct.sum(scores * dyx, axis=1)
                dC_i = ct.mma(dyx.astype(mma_dtype), B_j, dC_i)
            ct.store(dC, (b, row_block, h, 0), ct.reshape(dC_i, (1, BLOCK_M, 1, DSTATE)))
            ct.store(ddA_terms, (b, h, c, 0, i), ct.reshape(C_dC, (1, 1, 1, 1, BLOCK_M)))


def bwd_chunk_block_m(chunk_size):
    """Row blocks of 64 positions (at most the chunk)."""
    return min(64, chunk_size)


def bwd_chunk_launch(x, dt, dA_cumsum, B, C, chunk_states, dstates, dy):
    """Allocate the outputs and plan the launch; returns
    ``(KernelLaunch, (dx, ddt, dB, dC, ddA_terms))``, all float32: ``dx`` (b, l, h, p) without
    the skip's ``D dy``; ``ddt`` (b, h, c, s) in the chunk layout of ``dt``, zero past seqlen;
    ``dB``, ``dC`` (b, l, h, n) per head; ``ddA_terms`` (b, h, c, 3, s), zero past seqlen:
    ``C_k · dC_k``, ``B_k · dB_k`` and the part of the latter through the state gradient (plus
    ``exp(dA_last) <dh, h_c>`` at position 0), which sums over a chunk to ``dA_last``'s
    gradient."""
    batch, seqlen, nheads, headdim = x.shape
    dstate = B.shape[3]
    nchunks, chunk_size = dA_cumsum.shape[2], dA_cumsum.shape[3]
    dx = torch.empty(batch, seqlen, nheads, headdim, dtype=torch.float32, device=x.device)
    # Zeros: blocks past seqlen are never stored, and the caller sums ddt over whole chunks.
    ddt = torch.zeros(batch, nheads, nchunks, chunk_size, dtype=torch.float32, device=x.device)
    ddA_terms = torch.zeros(batch, nheads, nchunks, 3, chunk_size, dtype=torch.float32,
                            device=x.device)
    dB = torch.empty(batch, seqlen, nheads, dstate, dtype=torch.float32, device=x.device)
    dC = torch.empty_like(dB)
    grid = (batch * nchunks, nheads, 1)
    args = (x, dt, dA_cumsum, B, C, chunk_states, dstates, dy, dx, ddt, dB, dC, ddA_terms,
            chunk_size, bwd_chunk_block_m(chunk_size), next_power_of_2(headdim),
            next_power_of_2(dstate))
    return KernelLaunch(grid, bwd_chunk_kernel, args), (dx, ddt, dB, dC, ddA_terms)


def bwd_chunk(x, dt, dA_cumsum, B, C, chunk_states, dstates, dy):
    """Run the per-chunk gradients; returns ``(dx, ddt, dB, dC, ddA_terms)`` (see the
    launcher)."""
    launch, outputs = bwd_chunk_launch(x, dt, dA_cumsum, B, C, chunk_states, dstates, dy)
    launch.run()
    return outputs
