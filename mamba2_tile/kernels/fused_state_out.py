"""Stages 2 and 3 in one kernel: the state never leaves the chip.

Reference: :func:`mamba2_tile.reference.fwd_pass_state` followed by
:func:`mamba2_tile.reference.compute_out`. Why: the three-kernel pipeline writes the state
entering every chunk to global memory (stage 2) and reads it back (stage 3). In float32 that is
``headdim * dstate * 4`` bytes per chunk and head, four times the bytes of the chunk's ``x`` at
headdim 64, dstate 128, chunk 64: most of the forward pass's memory traffic. Here one block owns
a ``(headdim tile, dstate)`` state of one head, kept in float32 registers, and walks the sequence
in order, ``BLOCK_M`` rows (a *row block*) at a time. For each row block it

1. computes the output rows as ``compute_out`` does, with the row block in the role of the
   chunk: the state entering the row block read out by ``C``, ``exp(dA_i - dA_start) *
   (C_i @ h_enter)``, plus the causal ``(L ∘ C Bᵀ)(dt x)`` inside the row block, then ``D x``
   and the gate (:mod:`mamba2_tile.kernels.epilogue`, shared with stage 3);
2. carries the state past the row block with ``fwd_pass_state``'s jump formula,
   ``h_end = exp(dA_end - dA_start) * h_enter + Σ_i exp(dA_end - dA_i) dt_i x_i ⊗ B_i``.

``dA_start`` and ``dA_end`` are ``dA_cumsum`` just before the row block's first token and at
its last. When ``BLOCK_M`` is the chunk size that is exactly one chunk of the chunked
algorithm. When it is smaller (chunk 128 and 256 run 64-row blocks), the state is handed from
row block to row block inside a chunk, and the products of a row with the earlier row blocks of
its chunk, ``(L ∘ C Bᵀ)`` left of the diagonal, are never formed: the handed-over state carries
those tokens. Same sum, fewer products: the work per token no longer grows with the chunk size,
and rounding differs only in where the state passes through the input dtype.

The state is kept as ``(dstate, BLOCK_P)``, so every transpose an ``mma`` needs falls on a tile
loaded from memory (``B_iᵀ``), never on a register tile: ``C_i @ h`` reads it as it is, and the
update is ``B_iᵀ @ (w x_i)``. Rounding is the three-kernel pipeline's: the state enters the
``mma`` in the input dtype, accumulation is float32.

The price is parallelism: one block per (batch, head, headdim tile) instead of one per (batch,
chunk, head, ...) for stage 3. With batch x nheads in the hundreds that fills an H200; with a
handful of heads it does not: the sequence is then cut into segments that run in parallel
(:mod:`mamba2_tile.kernels.sequence_parallel`, the grid's third axis here). ``C Bᵀ`` comes
precomputed (:mod:`mamba2_tile.kernels.chunk_scores`) above dstate 128, where forming it here
spills (:func:`scores_given`).
"""

import torch

from mamba2_tile.kernels.chunk_scores import chunk_scores
from mamba2_tile.kernels.epilogue import load_skip, skip_and_gate
from mamba2_tile.kernels.exp2 import LOG2E
from mamba2_tile.kernels.launching import (KernelLaunch, cdiv, expect_options, next_power_of_2,
                                           placeholder, seq_placeholder, with_hints)
from mamba2_tile.kernels.options import FusedStateOutOptions
from mamba2_tile.kernels.packing import last_seq, rows_seq, seq_before
from mamba2_tile.kernels.split_tf32 import split_mma
from mamba2_tile.tile import ct

# Largest state tile (dstate x BLOCK_P float32 values) a block keeps in registers next to the
# C Bᵀ product, two blocks an SM: 8192 floats is 64 registers a thread at 128 threads (the
# compiler's budget is 128 at two blocks an SM); a larger one spills.
MAX_STATE_ELEMENTS = 8192
# Without the C Bᵀ product (precomputed above dstate 128), one block an SM holds a (256, 64)
# state with no spills (168 registers a thread on sm_90). On the H200 at b8 h64 p64 n256 L8192,
# one 64-wide block per head, one an SM, took 1.00 ms; two 32-wide ones, two an SM, 1.71 ms:
# each reads the head's B and C, so the narrow tiles read them twice.
MAX_LARGE_STATE_ELEMENTS = 16384
# Above this dstate, C Bᵀ comes precomputed (chunk_scores): formed in the kernel, its two
# (64, 256) operands next to the state spill (read off the sm_90 cubin: ~800 local loads and
# stores at dstate 256, none without that product).
MAX_DSTATE_SCORES_IN_KERNEL = 128
# Float32 inputs, with TF32 or without: 4-byte operand tiles take twice the registers of 16-bit
# ones, so the block runs 8 worker warps at one block an SM, spreading its tiles over twice the
# threads. Local bytes a thread in the sm_90 cubins, TF32 at chunk 256, headdim 64, as the
# benchmark calls it, 4 warps with the 16-bit hints -> 8 (data/cpu_fused_float32_tiles.txt):
# dstate 64: 24 -> 0; dstate 128: 328 -> 48; dstate 256: 808 -> 0.
FLOAT32_WORKER_WARPS = 8
# Float32 without TF32 ("split": every mma is three TF32 ones on operands split in two,
# kernels/split_tf32.py) doubles the operands again: the state tile is at most 4096 floats and
# the row block 32 rows where the kernel forms C Bᵀ itself (dstate <= 128; above, the scores'
# layout fixes 64). Spill stores in the sm_90 SASS, 16-bit tiles -> these: dstate 64: 0,
# 128: 410 -> 0, 256: 616 -> 55.
SPLIT_MAX_STATE_ELEMENTS = 4096
SPLIT_BLOCK_M = 32


@ct.kernel
def fused_state_out_kernel(
    x, dt, dA_cumsum, B, C, D, z,                   # as in the three-kernel pipeline
    initial_states,                                 # (b, h, segments, p, n): state entering each
    seq_idx,                                        # (b, l) int32: packed sequences
    scores,                                         # (b, g, row blocks, BLOCK_M, BLOCK_M) C Bᵀ
    y, final_states,                                # outputs: like x; (b, h, p, n) float32
    chunk_states,                                   # output: (b, h, c, p, n), the state entering
                                                    # each chunk, for the backward
    segment_blocks,                                 # row blocks per segment (runtime int)
    CHUNK_SIZE: ct.Constant[int],
    BLOCK_M: ct.Constant[int],                      # rows handled at once, divides CHUNK_SIZE
    BLOCK_P: ct.Constant[int],
    DSTATE: ct.Constant[int],                       # dstate padded to a power of two
    HAS_INITIAL_STATES: ct.Constant[bool],
    HAS_SEQ_IDX: ct.Constant[bool],                 # reset the state where seq_idx changes
    HAS_D: ct.Constant[bool],
    D_PER_CHANNEL: ct.Constant[bool],               # D is (nheads, headdim) rather than (nheads,)
    HAS_Z: ct.Constant[bool],
    SCORES_GIVEN: ct.Constant[bool],                # read C Bᵀ from scores instead of forming it
    LATENCY: ct.Constant[int],                      # DRAM latency hint, 1-10; 0 = no hint
    TF32: ct.Constant[bool],                        # float32 mma operands rounded to TF32
    STORE_CHUNK_STATES: ct.Constant[bool],          # write chunk_states (training)
):
    nheads = x.shape[2]
    seqlen = x.shape[1]
    b = ct.bid(0) // nheads
    h = ct.bid(0) % nheads
    p_tile = ct.bid(1)
    segment = ct.bid(2)
    g = h // (nheads // B.shape[2])
    blocks_per_chunk = CHUNK_SIZE // BLOCK_M
    zero = ct.PaddingMode.ZERO
    latency = LATENCY if LATENCY > 0 else None
    mma_dtype = ct.tfloat32 if TF32 else x.dtype
    rows = ct.reshape(ct.arange(BLOCK_M, dtype=ct.int32), (BLOCK_M, 1))
    cols = ct.reshape(ct.arange(BLOCK_M, dtype=ct.int32), (1, BLOCK_M))

    if HAS_INITIAL_STATES:
        state = ct.load(initial_states, (b, h, segment, p_tile, 0), (1, 1, 1, BLOCK_P, DSTATE),
                        padding_mode=zero)
        state = ct.transpose(ct.reshape(state, (BLOCK_P, DSTATE)).astype(ct.float32))
    else:
        state = ct.zeros((DSTATE, BLOCK_P), dtype=ct.float32)
    D_h = load_skip(D, h, p_tile, BLOCK_P, HAS_D, D_PER_CHANNEL)

    # dA_cumsum is in natural-log units; the kernel works in log2 units (see LOG2E).
    # A segment is a whole number of chunks, so it starts where a chunk's cumsum starts at 0.
    first = segment * segment_blocks
    stop = min(first + segment_blocks, ct.cdiv(seqlen, BLOCK_M))
    dA_start = ct.zeros((1, 1), dtype=ct.float32)
    # Packed sequences (kernels/packing.py): the sequence the carried state belongs to.
    if HAS_SEQ_IDX:
        seq_prev = seq_before(seq_idx, b, first * BLOCK_M)
    for row_block in range(first, stop):
        c = row_block // blocks_per_chunk
        m = row_block % blocks_per_chunk
        if m == 0:
            dA_start = ct.zeros((1, 1), dtype=ct.float32)       # a chunk's cumsum starts at 0
            if STORE_CHUNK_STATES:
                # The state entering chunk c, which the backward would otherwise recompute.
                ct.store(chunk_states, (b, h, c, p_tile, 0),
                         ct.reshape(ct.transpose(state).astype(chunk_states.dtype),
                                    (1, 1, 1, BLOCK_P, DSTATE)))
        # The entering state as an mma operand, rounded like stage 3 rounds what stage 2 stored.
        h_enter = state.astype(C.dtype).astype(mma_dtype)
        dA_block = ct.load(dA_cumsum, (b, h, c, m), (1, 1, 1, BLOCK_M))
        dA_m = ct.reshape(dA_block, (BLOCK_M, 1)) * LOG2E
        # The row block's last value, taken from the tile already loaded: a load of its own
        # would be a small synchronous one, waited for on every row block.
        dA_end = ct.reshape(ct.extract(dA_block, (0, 0, 0, BLOCK_M - 1), (1, 1, 1, 1)),
                            (1, 1)) * LOG2E
        state = state * ct.exp2(dA_end - dA_start, flush_to_zero=True)
        if HAS_SEQ_IDX:
            # Packed sequences: first used after the first mma, so the load is waited for late.
            seq_m = rows_seq(seq_idx, b, row_block, BLOCK_M)
            seq_end = last_seq(seq_m)
        dt_m = ct.reshape(ct.load(dt, (b, h, c, m), (1, 1, 1, BLOCK_M)), (BLOCK_M, 1))
        C_m = ct.load(C, (b, row_block, g, 0), (1, BLOCK_M, 1, DSTATE),
                      padding_mode=zero, latency=latency)
        C_m = ct.reshape(C_m, (BLOCK_M, DSTATE)).astype(mma_dtype)
        B_m = ct.load(B, (b, row_block, g, 0), (1, BLOCK_M, 1, DSTATE),
                      padding_mode=zero, latency=latency)
        B_m = ct.reshape(B_m, (BLOCK_M, DSTATE)).astype(mma_dtype)
        x_m = ct.load(x, (b, row_block, h, p_tile), (1, BLOCK_M, 1, BLOCK_P),
                      padding_mode=zero, latency=latency)
        x_m = ct.reshape(x_m, (BLOCK_M, BLOCK_P))

        # The entering state read out by C, decayed to each row.
        acc = split_mma(C_m, h_enter, ct.zeros((BLOCK_M, BLOCK_P), dtype=ct.float32))
        acc = acc * ct.exp2(dA_m - dA_start, flush_to_zero=True)
        if HAS_SEQ_IDX:
            acc = ct.where(seq_m == seq_prev, acc, 0.0)     # rows of another sequence

        # Inside the row block: causal mask. Clamp before exp2: above the diagonal
        # dA_i - dA_j > 0 could overflow, and is masked anyway; a NaN stays NaN (the default
        # clamp would make it a decay of 1).
        if SCORES_GIVEN:
            scores_m = ct.load(scores, (b, g, row_block, 0, 0), (1, 1, 1, BLOCK_M, BLOCK_M),
                               latency=latency)
            scores_m = ct.reshape(scores_m, (BLOCK_M, BLOCK_M))
        else:
            scores_m = split_mma(C_m, ct.transpose(B_m),
                              ct.zeros((BLOCK_M, BLOCK_M), dtype=ct.float32))
        decay = ct.exp2(ct.minimum(dA_m - ct.transpose(dA_m), 0.0, propagate_nan=True),
                        flush_to_zero=True)
        scores_m = ct.where(rows >= cols, scores_m * decay * ct.transpose(dt_m), 0.0)
        if HAS_SEQ_IDX:
            scores_m = ct.where(seq_m == ct.transpose(seq_m), scores_m, 0.0)
        acc = split_mma(scores_m.astype(x.dtype).astype(mma_dtype), x_m.astype(mma_dtype), acc)

        x_f32 = x_m.astype(ct.float32)
        acc = skip_and_gate(acc, x_f32, D_h, z, b, row_block, h, p_tile, BLOCK_M, BLOCK_P,
                            HAS_D, HAS_Z, LATENCY)
        ct.store(y, (b, row_block, h, p_tile),
                 ct.reshape(acc.astype(y.dtype), (1, BLOCK_M, 1, BLOCK_P)))

        # This row block's tokens, carried to its end, join the state. Past seqlen dt = 0
        # (stage 1), so padded rows add nothing.
        weight = ct.exp2(dA_end - dA_m, flush_to_zero=True) * dt_m
        if HAS_SEQ_IDX:
            # Only the sequence of the block's last row leaves it, with the state if that is
            # the sequence it came in with.
            weight = ct.where(seq_m == seq_end, weight, 0.0)
            state = ct.where(seq_end == seq_prev, state, 0.0)
            seq_prev = seq_end
        x_weighted = (x_f32 * weight).astype(x.dtype).astype(mma_dtype)
        state = split_mma(ct.transpose(B_m), x_weighted, state)
        dA_start = dA_end

    # Every segment ends in the state entering the next one (already known, from
    # segment_pass); only the last one's is an output.
    if segment == ct.num_blocks(2) - 1:
        ct.store(final_states, (b, h, p_tile, 0),
                 ct.reshape(ct.transpose(state), (1, 1, BLOCK_P, DSTATE)))


def splits(dtype, options=FusedStateOutOptions()):
    """Whether the kernel multiplies as split TF32 (float32 inputs without ``tf32``), the case
    with the smallest state tile (:data:`SPLIT_MAX_STATE_ELEMENTS`)."""
    return dtype == torch.float32 and not options.tf32


def fused_block_p(headdim, dstate, block_p=None, split=False):
    """The headdim tile: as wide as headdim allows while the state tile fits in registers (one
    block an SM where ``C Bᵀ`` comes precomputed, two otherwise; ``split``: see
    :data:`SPLIT_MAX_STATE_ELEMENTS`)."""
    if block_p is not None:
        return block_p
    budget = MAX_LARGE_STATE_ELEMENTS if scores_given(dstate) else MAX_STATE_ELEMENTS
    if split:
        budget = SPLIT_MAX_STATE_ELEMENTS
    fits = max(16, budget // next_power_of_2(dstate))
    return min(next_power_of_2(headdim), 64, fits)


def fused_occupancy(dstate, block_p, occupancy, float32=False):
    """The occupancy hint a launch keeps: ``occupancy``, unless the state tile is beyond the
    two-blocks-an-SM budget (:data:`MAX_STATE_ELEMENTS`) or the inputs are float32
    (:data:`FLOAT32_WORKER_WARPS`): then one block an SM (``None``, the compiler's choice),
    since a hint of 2 would cap the registers below the state's needs."""
    if float32 or block_p * next_power_of_2(dstate) > MAX_STATE_ELEMENTS:
        return None
    return occupancy


def fused_worker_warps(options, float32=False):
    """The worker-warps hint: the options', else :data:`FLOAT32_WORKER_WARPS` for ``float32``
    inputs, else ``None`` (the compiler's choice)."""
    if options.worker_warps is not None:
        return options.worker_warps
    return FLOAT32_WORKER_WARPS if float32 else None


def fused_block_m(chunk_size, options=FusedStateOutOptions(), split=False, dstate=None):
    """The row block: 64 rows (or the chunk, if smaller), 32 for ``split`` where the kernel forms
    ``C Bᵀ`` itself (``dstate`` up to 128); it must divide the chunk."""
    rows = SPLIT_BLOCK_M if split and not scores_given(dstate) else 64
    return min(options.block_m or rows, chunk_size)


def scores_given(dstate):
    """Whether ``C Bᵀ`` comes from :mod:`mamba2_tile.kernels.chunk_scores` rather than from an
    ``mma`` in the fused kernel: above 128 state dimensions the kernel spills without it."""
    return next_power_of_2(dstate) > MAX_DSTATE_SCORES_IN_KERNEL


def fused_tiles(headdim, dstate, chunk_size, options=FusedStateOutOptions(), split=False):
    """``(block_m, block_p)``: the options' tiles, else :func:`fused_block_m` and
    :func:`fused_block_p`."""
    return (fused_block_m(chunk_size, options, split, dstate),
            fused_block_p(headdim, dstate, options.block_p, split))


def uses_fused(x, B, options):
    """Whether ``options`` run this kernel on these inputs: the plan's path rule
    (:func:`mamba2_tile.kernels.plan.fuses`), under the name the benchmark imports. Imported
    here, not at the top, because the plan imports this module for its tiles."""
    from mamba2_tile.kernels.plan import device_sm_count, fuses

    batch, _, nheads, headdim = x.shape
    return fuses(batch, nheads, headdim, B.shape[3], device_sm_count(x.device), options)


def fused_state_out_launch(x, dt, dA_cumsum, B, C, initial_states=None, D=None, z=None,
                           options=FusedStateOutOptions(), scores=None,
                           segment_chunks=None, seq_idx=None, chunk_states=None):
    """Allocate ``y`` and ``final_states`` and plan the launch.

    Returns ``(KernelLaunch, (y, final_states))``; ``dt`` and ``dA_cumsum`` are stage 1's
    outputs. ``block_m`` defaults to :func:`fused_block_m`, ``block_p`` to
    :func:`fused_block_p`. ``scores`` is :func:`chunk_scores`'s output for that ``block_m``, or
    ``None`` to form ``C Bᵀ`` in the kernel.

    Sequence-parallel use (:mod:`mamba2_tile.kernels.segment_states`): with ``segment_chunks``,
    the grid gets one block per segment of ``segment_chunks`` chunks, and ``initial_states`` is
    ``(b, h, segments, p, n)``, the state entering each segment (:func:`segment_pass`).
    Otherwise ``initial_states`` is the usual ``(b, h, p, n)`` or ``None``. ``seq_idx``
    (b, l) int32 packs several sequences in a row (:mod:`mamba2_tile.kernels.packing`).
    ``chunk_states`` (b, h, c, p, n), contiguous, takes the state entering each chunk as the
    kernel carries it, rounded to its dtype: what :func:`mamba2_tile.kernels.fwd_pass_state`
    would give the backward (``None``: not written).
    """
    expect_options(options, FusedStateOutOptions)
    batch, _, nheads, headdim = x.shape
    dstate = B.shape[3]
    nchunks, chunk_size = dA_cumsum.shape[2], dA_cumsum.shape[3]
    y = torch.empty_like(x, memory_format=torch.contiguous_format)   # whatever x's strides
    final_states = torch.empty(batch, nheads, headdim, dstate, dtype=torch.float32,
                               device=x.device)
    float32 = x.dtype == torch.float32
    block_m, block_p = fused_tiles(headdim, dstate, chunk_size, options, splits(x.dtype, options))
    if segment_chunks is None:
        segments, segment_chunks = 1, nchunks
        if initial_states is not None:
            initial_states = initial_states.unsqueeze(2)    # one segment: a view, no copy
    else:
        segments = cdiv(nchunks, segment_chunks)
    grid = (batch * nheads, cdiv(headdim, block_p), segments)
    absent = placeholder(dA_cumsum)       # float32, for whichever of D, states, scores is absent
    args = (
        x, dt, dA_cumsum, B, C,
        absent if D is None else D,
        placeholder(x) if z is None else z,
        absent if initial_states is None else initial_states,
        seq_placeholder(x) if seq_idx is None else seq_idx,
        absent if scores is None else scores,
        y, final_states,
        absent if chunk_states is None else chunk_states,
        segment_chunks * (chunk_size // block_m),
        chunk_size, block_m, block_p, next_power_of_2(dstate),
        initial_states is not None, seq_idx is not None,
        D is not None, D is not None and D.dim() == 2,
        z is not None, scores is not None, options.latency_constant(), options.use_tf32(x.dtype),
        chunk_states is not None,
    )
    kernel = with_hints(fused_state_out_kernel,
                        fused_occupancy(dstate, block_p, options.occupancy, float32),
                        fused_worker_warps(options, float32))
    return KernelLaunch(grid, kernel, args), (y, final_states)


def fused_state_out(x, dt, dA_cumsum, B, C, initial_states=None, D=None, z=None,
                    options=FusedStateOutOptions(), seq_idx=None, chunk_states=None):
    """Run stages 2 and 3 fused (with :func:`chunk_scores` first where :func:`scores_given`);
    returns ``(y, final_states)``, and fills ``chunk_states`` if given
    (:func:`fused_state_out_launch`)."""
    scores = None
    if scores_given(B.shape[3]):
        scores = chunk_scores(B, C, fused_block_m(dA_cumsum.shape[3], options), options.tf32)
    launch, outputs = fused_state_out_launch(x, dt, dA_cumsum, B, C, initial_states, D, z,
                                             options, scores, seq_idx=seq_idx,
                                             chunk_states=chunk_states)
    launch.run()
    return outputs
