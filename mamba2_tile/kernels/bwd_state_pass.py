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
the state gradient accumulates in float32. Float32 operands are multiplied as three TF32 products
(:mod:`mamba2_tile.kernels.split_tf32`): float32's accuracy on tensor cores, where the exact
float32 ``mma`` unrolled into scalar code that spilled (sm_90, chunk 256, 64 x 64 tile: 37,960
instructions, 5,680 spill stores, 9,786 spill loads; now 3,344 instructions and none).

Packed sequences (``HAS_SEQ_IDX``, :mod:`mamba2_tile.kernels.packing`): the forward's masks,
transposed. A row reads the entering state only if it is of that state's sequence, so only such
rows send their ``dy`` back into it; the entering state survives the jump only if the chunk's
last token is of its sequence, so only then does ``dh_{c+1}`` flow back into ``dh_c``. No
gradient crosses a boundary, and ``dinitial_states`` is zero for a row whose ``seq_idx`` does not
start at 0. Without ``seq_idx`` the masks are not compiled at all.

``dchunk_states_direct`` (``HAS_DIRECT``): a gradient reaching the state entering a chunk from
elsewhere (each packed sequence's last state reads the state entering its last chunk, see
:mod:`mamba2_tile.kernels.bwd_chunk`), added to ``dh_c`` before the walk goes on.
"""

import torch

from mamba2_tile.kernels.exp2 import LOG2E
from mamba2_tile.kernels.launching import (KernelLaunch, cdiv, next_power_of_2, placeholder,
                                           seq_placeholder, with_hints)
from mamba2_tile.kernels.packing import last_seq, rows_seq, seq_before
from mamba2_tile.kernels.split_tf32 import split_mma
from mamba2_tile.tile import ct


@ct.kernel
def bwd_state_pass_kernel(
    dy, C, dA_cumsum, dfinal_states,   # (b, l, h, p) f32, (b, l, g, n), (b, h, c, s), (b, h, p, n)
    seq_idx,                           # (b, l) int32: packed sequences
    dchunk_states_direct,              # (b, h, c, p, n) f32: more gradient of each entering state
    dstates, dinitial_states,          # out: (b, h, c, p, n) f32 or C's dtype, (b, h, p, n) f32
    CHUNK_SIZE: ct.Constant[int],
    BLOCK_P: ct.Constant[int],
    BLOCK_N: ct.Constant[int],
    HAS_SEQ_IDX: ct.Constant[bool],    # no gradient across a seq_idx change
    HAS_DIRECT: ct.Constant[bool],     # add dchunk_states_direct
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
        read_out = ct.exp2(dA, flush_to_zero=True)                        # (CHUNK_SIZE, 1)
        chunk_decay = ct.exp2(dA_last, flush_to_zero=True)
        if HAS_SEQ_IDX:
            # The forward's masks (packing.py), read the other way round.
            seq_c = rows_seq(seq_idx, b, c, CHUNK_SIZE)
            seq_enter = seq_before(seq_idx, b, c * CHUNK_SIZE)
            read_out = ct.where(seq_c == seq_enter, read_out, 0.0)
            chunk_decay = ct.where(last_seq(seq_c) == seq_enter, chunk_decay, 0.0)
        # Rounded to the dtype of C for the mma (tensor cores for 16-bit inputs), as the forward.
        dy_read = (dy_c * read_out).astype(C.dtype)
        carried = dstate * chunk_decay
        if HAS_DIRECT:
            # Into the mma's accumulator (tileiras' sm_90 pipeliner rejects the same sum after it).
            direct = ct.load(dchunk_states_direct, (b, h, c, p_tile, n_tile),
                             (1, 1, 1, BLOCK_P, BLOCK_N), padding_mode=zero)
            carried = carried + ct.reshape(direct, (BLOCK_P, BLOCK_N))
        dstate = split_mma(ct.transpose(dy_read), C_c, carried)
    ct.store(dinitial_states, (b, h, p_tile, n_tile),
             ct.reshape(dstate, (1, 1, BLOCK_P, BLOCK_N)))


# Compiled for two blocks an SM, as is the other walk of the backward, fwd_pass_state
# recomputing the states (autograd.STATE_RECOMPUTE_OPTIONS). Left to themselves the compiler
# gives both 255 registers a thread and, from chunk 128, 140-210 KB of shared memory (sm_90):
# one block an SM, one chain of chunks in flight. With the hint: 128 registers, 89-111 KB, no
# spills but 8 bytes in fwd_pass_state at chunk 256 (tests/test_compiler.py). The H200
# autotuner chose this hint for fwd_pass_state on every shape it tuned
# (data/h200_autotune_cache.json); the backward's time with it is not measured yet.
BWD_STATE_PASS_OCCUPANCY = 2


def bwd_state_pass_tiles(headdim, dstate, dtype):
    """``(block_p, block_n)``: 64 x 64, shrunk to the next power of two of smaller sizes; for
    float32 inputs 64 x 32: their ``mma`` splits both operands in two (kernels/split_tf32.py),
    and at chunk 256 a 64-wide dstate tile spills (sm_90: 13 spill stores, 26 loads; none at
    32)."""
    block_n = 32 if dtype == torch.float32 else 64
    return min(next_power_of_2(headdim), 64), min(next_power_of_2(dstate), block_n)


def bwd_state_pass_launch(dy, C, dA_cumsum, dfinal_states, seq_idx=None,
                          dchunk_states_direct=None, low_precision_states=False):
    """Allocate the outputs and plan the launch; returns
    ``(KernelLaunch, (dstates, dinitial_states))``: ``dstates`` (b, h, c, p, n) the gradient of
    the state leaving each chunk, float32 or, with ``low_precision_states``, in the dtype of
    ``C`` (the walk itself stays float32); ``dinitial_states`` (b, h, p, n) float32.
    ``seq_idx`` (b, l) int32: packed sequences; ``dchunk_states_direct`` (b, h, c, p, n)
    float32: more gradient of the state entering each chunk (module doc)."""
    batch, _, nheads, headdim = dy.shape
    dstate = C.shape[3]
    nchunks, chunk_size = dA_cumsum.shape[2], dA_cumsum.shape[3]
    dstates = torch.empty(batch, nheads, nchunks, headdim, dstate, device=dy.device,
                          dtype=C.dtype if low_precision_states else torch.float32)
    dinitial_states = torch.empty(batch, nheads, headdim, dstate, dtype=torch.float32,
                                  device=dy.device)
    block_p, block_n = bwd_state_pass_tiles(headdim, dstate, C.dtype)
    grid = (batch * nheads, cdiv(headdim, block_p), cdiv(dstate, block_n))
    args = (dy, C, dA_cumsum, dfinal_states,
            seq_placeholder(dy) if seq_idx is None else seq_idx,
            placeholder(dstates) if dchunk_states_direct is None else dchunk_states_direct,
            dstates, dinitial_states,
            chunk_size, block_p, block_n, seq_idx is not None, dchunk_states_direct is not None)
    kernel = with_hints(bwd_state_pass_kernel, occupancy=BWD_STATE_PASS_OCCUPANCY)
    return KernelLaunch(grid, kernel, args), (dstates, dinitial_states)


def bwd_state_pass(dy, C, dA_cumsum, dfinal_states, seq_idx=None, dchunk_states_direct=None,
                   low_precision_states=False):
    """Run the backward state pass; returns ``(dstates, dinitial_states)``."""
    launch, outputs = bwd_state_pass_launch(dy, C, dA_cumsum, dfinal_states, seq_idx,
                                            dchunk_states_direct, low_precision_states)
    launch.run()
    return outputs
