"""Stage 2 of the chunked SSD: carry the state across chunks with the jump formula.

Reference: :func:`mamba2_tile.reference.fwd_pass_state`. One block owns a
``(BLOCK_P, BLOCK_N)`` tile of one head's ``(headdim, dstate)`` state, kept in float32 registers
for the whole sequence. It walks the chunks in order; for each chunk it

1. stores the state entering the chunk (``chunk_states[b, h, c]``, read by stage 3),
2. loads the chunk's ``x`` (chunk_size, BLOCK_P), ``B`` (chunk_size, BLOCK_N), ``dt`` and
   ``dA_cumsum`` (chunk_size,), and jumps to the end of the chunk in one step::

       h_next = exp(dA_last) * h + (x * w)ᵀ @ B,      w_i = exp(dA_last - dA_i) * dt_i

   The ``(x * w)ᵀ @ B`` product runs on tensor cores (``ct.mma``): the weighted ``x`` is cast back
   to the input dtype (as mamba_ssm's Triton kernel does) and accumulated into the float32 state.

``exp(dA_last - dA_i) <= 1`` always (``A < 0``, ``dt >= 0``), so nothing can overflow.
Blocks for different heads / state tiles are independent; only the chunk loop is sequential.
"""

import torch

from mamba2_tile.kernels.launching import KernelLaunch, cdiv, next_power_of_2, placeholder
from mamba2_tile.tile import ct


@ct.kernel
def fwd_pass_state_kernel(
    x, B, dt, dA_cumsum, initial_states,   # (b, l, h, p), (b, l, g, n), (b, h, c, s) x2, (b, h, p, n)
    chunk_states, final_states,            # outputs: (b, h, c, p, n), (b, h, p, n), float32
    CHUNK_SIZE: ct.Constant[int],
    BLOCK_P: ct.Constant[int],
    BLOCK_N: ct.Constant[int],
    HAS_INITIAL_STATES: ct.Constant[bool],
):
    nheads = x.shape[2]
    b = ct.bid(0) // nheads
    h = ct.bid(0) % nheads
    p_tile = ct.bid(1)
    n_tile = ct.bid(2)
    g = h // (nheads // B.shape[2])        # the group whose B this head reads
    nchunks = dA_cumsum.shape[2]
    zero = ct.PaddingMode.ZERO

    if HAS_INITIAL_STATES:
        state = ct.load(initial_states, (b, h, p_tile, n_tile), (1, 1, BLOCK_P, BLOCK_N),
                        padding_mode=zero)
        state = ct.reshape(state, (BLOCK_P, BLOCK_N)).astype(ct.float32)
    else:
        state = ct.zeros((BLOCK_P, BLOCK_N), dtype=ct.float32)

    for c in range(nchunks):
        ct.store(chunk_states, (b, h, c, p_tile, n_tile),
                 ct.reshape(state, (1, 1, 1, BLOCK_P, BLOCK_N)))

        # Decay weights as a column, one per position of the chunk. Past seqlen dt = 0 (stage 1),
        # so padded positions get weight 0; dA_last is the cumsum at the chunk's last position.
        dA = ct.reshape(ct.load(dA_cumsum, (b, h, c, 0), (1, 1, 1, CHUNK_SIZE)), (CHUNK_SIZE, 1))
        dt_c = ct.reshape(ct.load(dt, (b, h, c, 0), (1, 1, 1, CHUNK_SIZE)), (CHUNK_SIZE, 1))
        dA_last = ct.reshape(ct.load(dA_cumsum, (b, h, c, CHUNK_SIZE - 1), (1, 1, 1, 1)), (1, 1))
        weight = ct.exp(dA_last - dA) * dt_c

        x_c = ct.load(x, (b, c, h, p_tile), (1, CHUNK_SIZE, 1, BLOCK_P), padding_mode=zero)
        x_c = ct.reshape(x_c, (CHUNK_SIZE, BLOCK_P))
        B_c = ct.load(B, (b, c, g, n_tile), (1, CHUNK_SIZE, 1, BLOCK_N), padding_mode=zero)
        B_c = ct.reshape(B_c, (CHUNK_SIZE, BLOCK_N))

        x_weighted = (x_c.astype(ct.float32) * weight).astype(x.dtype)
        state = ct.mma(ct.transpose(x_weighted), B_c, state * ct.exp(dA_last))

    ct.store(final_states, (b, h, p_tile, n_tile), ct.reshape(state, (1, 1, BLOCK_P, BLOCK_N)))


def fwd_pass_state_launch(x, B, dt, dA_cumsum, initial_states=None, block_p=None, block_n=None):
    """Allocate the outputs and plan the launch.

    Returns ``(KernelLaunch, (chunk_states, final_states))``. Tiles default to 64 x 64, shrunk to
    the next power of two of ``headdim`` / ``dstate`` when those are smaller.
    """
    batch, _, nheads, headdim = x.shape
    dstate = B.shape[3]
    nchunks, chunk_size = dA_cumsum.shape[2], dA_cumsum.shape[3]
    chunk_states = torch.empty(batch, nheads, nchunks, headdim, dstate, dtype=torch.float32,
                               device=x.device)
    final_states = torch.empty(batch, nheads, headdim, dstate, dtype=torch.float32,
                               device=x.device)
    block_p = block_p or min(next_power_of_2(headdim), 64)
    block_n = block_n or min(next_power_of_2(dstate), 64)
    grid = (batch * nheads, cdiv(headdim, block_p), cdiv(dstate, block_n))
    args = (
        x, B, dt, dA_cumsum,
        placeholder(dA_cumsum) if initial_states is None else initial_states,
        chunk_states, final_states,
        chunk_size, block_p, block_n, initial_states is not None,
    )
    return KernelLaunch(grid, fwd_pass_state_kernel, args), (chunk_states, final_states)


def fwd_pass_state(x, B, dt, dA_cumsum, initial_states=None):
    """Run stage 2; returns ``(chunk_states, final_states)`` in float32."""
    launch, outputs = fwd_pass_state_launch(x, B, dt, dA_cumsum, initial_states)
    launch.run()
    return outputs
