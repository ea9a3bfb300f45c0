"""Backward of stage 2: the state gradient, carried backward across the chunks.

The forward jump (:mod:`mamba2_tile.kernels.fwd_pass_state`) is
``h_{c+1} = exp(dA_last) * h_c + sum_j exp(dA_last - dA_j) * dt_j * x_j B_jᵀ``, and stage 3
reads ``h_c`` as ``y_i += exp(dA_i) * h_c C_i``. So the gradient of the loss with respect to the
state entering chunk ``c`` is the same jump run backward, with ``C`` in the place of ``B`` and
the output gradient ``dy`` in the place of ``x``::

    dh_c = exp(dA_last) * dh_{c+1} + (dy * exp(dA_i))ᵀ @ C          dh_nchunks = d final_states

One block owns a ``(BLOCK_P, BLOCK_N)`` tile of one head's state gradient, kept in float32 for
the whole walk over the chunks, last to first. For each chunk it stores ``dstates[b, h, c]``,
the gradient of the state *leaving* chunk ``c`` (``dh_{c+1}``, what the per-chunk gradients of
:mod:`mamba2_tile.kernels.bwd_chunk` read), then jumps; the gradient reaching the start,
``dh_0``, is the gradient of ``initial_states``.

``dy`` here is the gradient of the scan's output before the skip and the gate (float32, the
gate's chain rule applied by the caller); the ``mma`` operands are rounded to the dtype of ``C``,
the state gradient accumulates in float32.
"""

import torch

from mamba2_tile.kernels.exp2 import LOG2E
from mamba2_tile.kernels.launching import KernelLaunch, cdiv, next_power_of_2
from mamba2_tile.tile import ct


@ct.kernel
def bwd_state_pass_kernel(
    dy, C, dA_cumsum, dfinal_states,   # (b, l, h, p) f32, (b, l, g, n), (b, h, c, s), (b, h, p, n)
    dstates, dinitial_states,          # out: (b, h, c, p, n) f32 or C's dtype, (b, h, p, n) f32
    CHUNK_SIZE: ct.Constant[int],
    BLOCK_P: ct.Constant[int],
    BLOCK_N: ct.Constant[int],
):
    nheads = dy.shape[2]
    b = ct.bid(0) // nheads
    h = ct.bid(0) % nheads
    p_tile = ct.bid(1)
    n_tile = ct.bid(2)
    g = h // (nheads // C.shape[2])
    nchunks = dA_cumsum.shape[2]
    zero = ct.PaddingMode.ZERO

    dstate = ct.load(dfinal_states, (b, h, p_tile, n_tile), (1, 1, BLOCK_P, BLOCK_N),
                     padding_mode=zero)
    dstate = ct.reshape(dstate, (BLOCK_P, BLOCK_N)).astype(ct.float32)
    for k in range(nchunks):
        c = nchunks - 1 - k
        ct.store(dstates, (b, h, c, p_tile, n_tile),
                 ct.reshape(dstate.astype(dstates.dtype), (1, 1, 1, BLOCK_P, BLOCK_N)))
        # In log2 units: every exp is an exp2 (kernels/exp2.py). dA_cumsum <= 0 in a chunk.
        dA = ct.reshape(ct.load(dA_cumsum, (b, h, c, 0), (1, 1, 1, CHUNK_SIZE)),
                        (CHUNK_SIZE, 1)) * LOG2E
        dA_last = ct.reshape(ct.load(dA_cumsum, (b, h, c, CHUNK_SIZE - 1), (1, 1, 1, 1)),
                             (1, 1)) * LOG2E
        # Past seqlen dy and C load as 0: padded positions add nothing.
        dy_c = ct.load(dy, (b, c, h, p_tile), (1, CHUNK_SIZE, 1, BLOCK_P), padding_mode=zero)
        dy_c = ct.reshape(dy_c, (CHUNK_SIZE, BLOCK_P)).astype(ct.float32)
        C_c = ct.load(C, (b, c, g, n_tile), (1, CHUNK_SIZE, 1, BLOCK_N), padding_mode=zero)
        C_c = ct.reshape(C_c, (CHUNK_SIZE, BLOCK_N))
        # Rounded to the dtype of C for the mma (tensor cores for 16-bit inputs), as the forward.
        dy_read = (dy_c * ct.exp2(dA, flush_to_zero=True)).astype(C.dtype)
        dstate = ct.mma(ct.transpose(dy_read), C_c,
                        dstate * ct.exp2(dA_last, flush_to_zero=True))
    ct.store(dinitial_states, (b, h, p_tile, n_tile),
             ct.reshape(dstate, (1, 1, BLOCK_P, BLOCK_N)))


def bwd_state_pass_tiles(headdim, dstate):
    """``(block_p, block_n)``: 64 x 64, shrunk to the next power of two of smaller sizes."""
    return min(next_power_of_2(headdim), 64), min(next_power_of_2(dstate), 64)


def bwd_state_pass_launch(dy, C, dA_cumsum, dfinal_states, low_precision_states=False):
    """Allocate the outputs and plan the launch; returns
    ``(KernelLaunch, (dstates, dinitial_states))``: ``dstates`` (b, h, c, p, n) the gradient of
    the state leaving each chunk, float32 or, with ``low_precision_states``, in the dtype of
    ``C`` (the walk itself stays float32); ``dinitial_states`` (b, h, p, n) float32."""
    batch, _, nheads, headdim = dy.shape
    dstate = C.shape[3]
    nchunks, chunk_size = dA_cumsum.shape[2], dA_cumsum.shape[3]
    dstates = torch.empty(batch, nheads, nchunks, headdim, dstate, device=dy.device,
                          dtype=C.dtype if low_precision_states else torch.float32)
    dinitial_states = torch.empty(batch, nheads, headdim, dstate, dtype=torch.float32,
                                  device=dy.device)
    block_p, block_n = bwd_state_pass_tiles(headdim, dstate)
    grid = (batch * nheads, cdiv(headdim, block_p), cdiv(dstate, block_n))
    args = (dy, C, dA_cumsum, dfinal_states, dstates, dinitial_states,
            chunk_size, block_p, block_n)
    return KernelLaunch(grid, bwd_state_pass_kernel, args), (dstates, dinitial_states)


def bwd_state_pass(dy, C, dA_cumsum, dfinal_states, low_precision_states=False):
    """Run the backward state pass; returns ``(dstates, dinitial_states)``."""
    launch, outputs = bwd_state_pass_launch(dy, C, dA_cumsum, dfinal_states,
                                            low_precision_states)
    launch.run()
    return outputs
