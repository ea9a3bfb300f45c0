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
   For float32 inputs the product is summed ``ROWS`` = 64 positions at a time
   (:func:`fwd_pass_state_rows`): the same sum, without the registers a whole chunk of float32
   operands would take.

``exp(dA_last - dA_i) <= 1`` always (``A < 0``, ``dt >= 0``), so nothing can overflow.
Blocks for different heads / state tiles are independent; only the chunk loop is sequential.

The block's work is one tile function behind two kernels: ``fwd_pass_state_kernel``, every
switch off, keeps the signature notebook 06 and its checks build (a learner's kernel is compiled
and launched with the package's arguments); ``fwd_pass_state_switched_kernel`` adds the switches.

Options (:mod:`mamba2_tile.kernels.options`, all off by default): ``LATENCY`` hints the ``x`` /
``B`` loads; ``SWAP_OPERANDS`` keeps the state as ``(BLOCK_N, BLOCK_P)`` and computes
``Bᵀ @ (x * w)``, so the transpose falls on the loaded ``B`` instead of the computed ``x * w``;
``STATES_TRANSPOSED`` stores ``chunk_states`` as ``(b, h, c, n, p)``; ``TF32`` rounds float32
``mma`` operands to TF32. ``chunk_states`` may be allocated in the input dtype (the launcher's
``low_precision_states``); the kernel only casts to whatever dtype it is given.
"""

import torch

from mamba2_tile.kernels.exp2 import LOG2E
from mamba2_tile.kernels.launching import (KernelLaunch, cdiv, expect_options, next_power_of_2,
                                           placeholder, seq_placeholder, with_hints)
from mamba2_tile.kernels.options import FwdPassStateOptions
from mamba2_tile.kernels.packing import last_seq, rows_seq
from mamba2_tile.kernels.row_blocks import row_blocks_with_tokens
from mamba2_tile.kernels.split_tf32 import split_mma
from mamba2_tile.tile import ct


@ct.function
def fwd_pass_state_tile(
    x, B, dt, dA_cumsum, initial_states,   # (b, l, h, p), (b, l, g, n), (b, h, c, s) x2, (b, h, p, n)
    seq_idx,                               # (b, l) int32: packed sequences
    chunk_states, final_states,            # out: (b, h, c, p, n) or (b, h, c, n, p); (b, h, p, n)
    CHUNK_SIZE, BLOCK_P, BLOCK_N,
    ROWS,                                  # positions of a chunk per mma, a divisor of CHUNK_SIZE
    HAS_INITIAL_STATES,
    HAS_SEQ_IDX,                           # reset the state where seq_idx changes
    LATENCY,                               # DRAM latency hint for x and B, 1-10; 0 = no hint
    SWAP_OPERANDS,                         # state kept as (BLOCK_N, BLOCK_P): Bᵀ @ (x * w)
    STATES_TRANSPOSED,                     # chunk_states is (b, h, c, n, p)
    TF32,                                  # float32 mma operands rounded to TF32
):
    """The work of one block, shared by both kernels below (compile-time constants throughout)."""
    nheads = x.shape[2]
    b = ct.bid(0) // nheads
    h = ct.bid(0) % nheads
    p_tile = ct.bid(1)
    n_tile = ct.bid(2)
    g = h // (nheads // B.shape[2])        # the group whose B this head reads
    nchunks = dA_cumsum.shape[2]
    zero = ct.PaddingMode.ZERO
    latency = LATENCY if LATENCY > 0 else None
    mma_dtype = ct.tfloat32 if TF32 else x.dtype

    if HAS_INITIAL_STATES:
        state = ct.load(initial_states, (b, h, p_tile, n_tile), (1, 1, BLOCK_P, BLOCK_N),
                        padding_mode=zero)
        state = ct.reshape(state, (BLOCK_P, BLOCK_N)).astype(ct.float32)
    else:
        state = ct.zeros((BLOCK_P, BLOCK_N), dtype=ct.float32)
    if SWAP_OPERANDS:
        state = ct.transpose(state)
    if HAS_SEQ_IDX:
        seq_prev = ct.zeros((1, 1), dtype=ct.int32)       # initial_states' sequence (packing.py)

    for c in range(nchunks):
        if STATES_TRANSPOSED:
            entering = state if SWAP_OPERANDS else ct.transpose(state)
            ct.store(chunk_states, (b, h, c, n_tile, p_tile),
                     ct.reshape(entering, (1, 1, 1, BLOCK_N, BLOCK_P)).astype(chunk_states.dtype))
        else:
            entering = ct.transpose(state) if SWAP_OPERANDS else state
            ct.store(chunk_states, (b, h, c, p_tile, n_tile),
                     ct.reshape(entering, (1, 1, 1, BLOCK_P, BLOCK_N)).astype(chunk_states.dtype))

        # In log2 units: every exp is an exp2 (kernels/exp2.py). dA_last is the cumsum at the
        # chunk's last position.
        dA_last = ct.reshape(ct.load(dA_cumsum, (b, h, c, CHUNK_SIZE - 1), (1, 1, 1, 1)),
                             (1, 1)) * LOG2E
        chunk_decay = ct.exp2(dA_last, flush_to_zero=True)
        if HAS_SEQ_IDX:
            # Only the sequence of the chunk's last token leaves it (kernels/packing.py).
            seq_c = rows_seq(seq_idx, b, c, CHUNK_SIZE)
            seq_last = last_seq(seq_c)
            chunk_decay = ct.where(seq_last == seq_prev, chunk_decay, 0.0)
            seq_prev = seq_last
        state = state * chunk_decay

        # The chunk's (x * w)ᵀ @ B, ROWS positions at a time (all of them unless the launcher
        # says fewer: float32 operands of a whole 256-row chunk would spill), up to the last
        # block of ROWS holding a token.
        for k in range(row_blocks_with_tokens(x.shape[1], c, CHUNK_SIZE, ROWS,
                                              ROWS == CHUNK_SIZE)):
            rows = c * (CHUNK_SIZE // ROWS) + k          # in ROWS units of seqlen
            # Decay weights as a column, one per position. Past seqlen dt = 0 (stage 1), so
            # padded positions get weight 0.
            dA = ct.reshape(ct.load(dA_cumsum, (b, h, c, k), (1, 1, 1, ROWS)), (ROWS, 1)) * LOG2E
            dt_k = ct.reshape(ct.load(dt, (b, h, c, k), (1, 1, 1, ROWS)), (ROWS, 1))
            weight = ct.exp2(dA_last - dA, flush_to_zero=True) * dt_k
            if HAS_SEQ_IDX:
                # One product for the chunk: its rows' sequences are loaded already.
                seq_k = seq_c if ROWS == CHUNK_SIZE else rows_seq(seq_idx, b, rows, ROWS)
                weight = ct.where(seq_k == seq_last, weight, 0.0)

            x_k = ct.load(x, (b, rows, h, p_tile), (1, ROWS, 1, BLOCK_P), padding_mode=zero,
                          latency=latency)
            x_k = ct.reshape(x_k, (ROWS, BLOCK_P))
            B_k = ct.load(B, (b, rows, g, n_tile), (1, ROWS, 1, BLOCK_N), padding_mode=zero,
                          latency=latency)
            B_k = ct.reshape(B_k, (ROWS, BLOCK_N)).astype(mma_dtype)

            # Rounded to the input dtype first (as mamba_ssm does), then to TF32 if asked.
            x_weighted = (x_k.astype(ct.float32) * weight).astype(x.dtype).astype(mma_dtype)
            if SWAP_OPERANDS:
                state = split_mma(ct.transpose(B_k), x_weighted, state)
            else:
                state = split_mma(ct.transpose(x_weighted), B_k, state)

    if SWAP_OPERANDS:
        state = ct.transpose(state)
    ct.store(final_states, (b, h, p_tile, n_tile), ct.reshape(state, (1, 1, BLOCK_P, BLOCK_N)))


@ct.kernel
def fwd_pass_state_kernel(
    x, B, dt, dA_cumsum, initial_states, chunk_states, final_states,
    CHUNK_SIZE: ct.Constant[int],
    BLOCK_P: ct.Constant[int],
    BLOCK_N: ct.Constant[int],
    HAS_INITIAL_STATES: ct.Constant[bool],
):
    """Every switch off: the validated kernel, with the signature notebook 06 builds."""
    fwd_pass_state_tile(x, B, dt, dA_cumsum, initial_states, x, chunk_states, final_states,
                        CHUNK_SIZE, BLOCK_P, BLOCK_N, CHUNK_SIZE, HAS_INITIAL_STATES, False,
                        0, False, False, False)


@ct.kernel
def fwd_pass_state_switched_kernel(
    x, B, dt, dA_cumsum, initial_states, seq_idx, chunk_states, final_states,
    CHUNK_SIZE: ct.Constant[int],
    BLOCK_P: ct.Constant[int],
    BLOCK_N: ct.Constant[int],
    HAS_INITIAL_STATES: ct.Constant[bool],
    HAS_SEQ_IDX: ct.Constant[bool],
    LATENCY: ct.Constant[int],
    SWAP_OPERANDS: ct.Constant[bool],
    STATES_TRANSPOSED: ct.Constant[bool],
    TF32: ct.Constant[bool],
    ROWS: ct.Constant[int],                # positions of a chunk per mma (fwd_pass_state_rows)
):
    """Any switch on (see :mod:`mamba2_tile.kernels.options`), packed sequences, or a chunk's
    product in several steps."""
    fwd_pass_state_tile(x, B, dt, dA_cumsum, initial_states, seq_idx, chunk_states,
                        final_states, CHUNK_SIZE, BLOCK_P, BLOCK_N, ROWS, HAS_INITIAL_STATES,
                        HAS_SEQ_IDX, LATENCY, SWAP_OPERANDS, STATES_TRANSPOSED, TF32)


# Float32 operands (exact float32 runs split TF32, kernels/split_tf32.py) of a whole chunk of 256
# positions are 128 KB of x and B for one block: compiled for sm_90 the kernel spilled 296 bytes
# a thread, 93 loads and 103 stores in its loop, where 64 positions at a time spill nothing (the
# same kernel at chunk 64: 219 registers). 16-bit operands keep the chunk in one product.
FLOAT32_ROWS = 64


def fwd_pass_state_rows(chunk_size, dtype):
    """Positions of a chunk summed into the state per ``mma``: the whole chunk, or
    :data:`FLOAT32_ROWS` at a time for float32 inputs."""
    return min(chunk_size, FLOAT32_ROWS) if dtype == torch.float32 else chunk_size


def fwd_pass_state_tiles(headdim, dstate, options=FwdPassStateOptions()):
    """``(block_p, block_n)``: the options' tiles, else 64 x 64, shrunk to the next power of two
    of ``headdim`` / ``dstate`` when those are smaller."""
    return (options.block_p or min(next_power_of_2(headdim), 64),
            options.block_n or min(next_power_of_2(dstate), 64))


def fwd_pass_state_launch(x, B, dt, dA_cumsum, initial_states=None, options=FwdPassStateOptions(),
                          transposed_layout=False, low_precision_states=False, seq_idx=None):
    """Allocate the outputs and plan the launch.

    Returns ``(KernelLaunch, (chunk_states, final_states))``; tiles from
    :func:`fwd_pass_state_tiles`. ``chunk_states`` is
    ``(b, h, c, n, p)`` when ``transposed_layout``, and in the input dtype when
    ``low_precision_states``; ``final_states`` is always ``(b, h, p, n)`` float32. ``seq_idx``
    (b, l) int32 packs several sequences in a row (:mod:`mamba2_tile.kernels.packing`); it runs
    the switched kernel, the plain one keeping notebook 06's signature, as do float32 inputs at
    chunks longer than :data:`FLOAT32_ROWS` (:func:`fwd_pass_state_rows`).
    """
    expect_options(options, FwdPassStateOptions)
    batch, _, nheads, headdim = x.shape
    dstate = B.shape[3]
    nchunks, chunk_size = dA_cumsum.shape[2], dA_cumsum.shape[3]
    state_dims = (dstate, headdim) if transposed_layout else (headdim, dstate)
    chunk_states = torch.empty(batch, nheads, nchunks, *state_dims, device=x.device,
                               dtype=x.dtype if low_precision_states else torch.float32)
    final_states = torch.empty(batch, nheads, headdim, dstate, dtype=torch.float32,
                               device=x.device)
    block_p, block_n = fwd_pass_state_tiles(headdim, dstate, options)
    grid = (batch * nheads, cdiv(headdim, block_p), cdiv(dstate, block_n))
    initial = placeholder(dA_cumsum) if initial_states is None else initial_states
    constants = (chunk_size, block_p, block_n, initial_states is not None)
    switches = (options.latency_constant(), options.swap_operands, transposed_layout,
                options.use_tf32(x.dtype))
    rows = fwd_pass_state_rows(chunk_size, x.dtype)
    if any(switches) or seq_idx is not None or rows != chunk_size:
        kernel = fwd_pass_state_switched_kernel
        args = (x, B, dt, dA_cumsum, initial,
                seq_placeholder(x) if seq_idx is None else seq_idx, chunk_states, final_states,
                *constants, seq_idx is not None, *switches, rows)
    else:
        kernel = fwd_pass_state_kernel
        args = (x, B, dt, dA_cumsum, initial, chunk_states, final_states, *constants)
    kernel = with_hints(kernel, options.occupancy)
    return KernelLaunch(grid, kernel, args), (chunk_states, final_states)


def fwd_pass_state(x, B, dt, dA_cumsum, initial_states=None, options=FwdPassStateOptions(),
                   transposed_layout=False, low_precision_states=False, seq_idx=None):
    """Run stage 2; returns ``(chunk_states, final_states)`` (see ``fwd_pass_state_launch``)."""
    launch, outputs = fwd_pass_state_launch(x, B, dt, dA_cumsum, initial_states, options,
                                            transposed_layout, low_precision_states, seq_idx)
    launch.run()
    return outputs
