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
   (C_i @ h_enter)``, plus the causal ``(L ∘ C Bᵀ)(dt x)`` inside the row block, ``D x``, the
   gate;
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
handful of heads it does not, and the three-kernel pipeline is faster
(``ForwardOptions.fuse_state_passing``; left at ``None``, :func:`fused_fills_gpu` picks;
:func:`uses_fused` applies that rule for the API, the autotuner and the benchmark).
"""

from functools import lru_cache

import torch

from mamba2_tile.kernels.launching import (KernelLaunch, cdiv, next_power_of_2, placeholder,
                                           with_hints)
from mamba2_tile.kernels.options import KernelOptions
from mamba2_tile.tile import ct

# SMs of the GPUs the course measures on (H100 / H200 SXM); used to decide for CPU tensors, so
# that the interpreter runs the same path a GPU would.
REFERENCE_SM_COUNT = 132
# Largest state tile (dstate x BLOCK_P float32 values) a block keeps in registers: 8192 floats is
# 64 registers a thread at 128 threads; a larger one spills.
MAX_STATE_ELEMENTS = 8192
# exp(a) = exp2(a * LOG2E). On sm_90 ct.exp compiles to a full-precision expf, eight
# instructions an element (read off the cubin); ct.exp2 with flush_to_zero is the hardware's
# approximate exp2 (about 22 correct bits), one instruction. The decays lie in (0, 1] and meet
# 16-bit operands, so those bits never show, while elementwise work on (64, 64) tiles is most of
# what this kernel's threads execute.
LOG2E = 1.4426950408889634


@ct.kernel
def fused_state_out_kernel(
    x, dt, dA_cumsum, B, C, initial_states, D, z,   # as in the three-kernel pipeline
    y, final_states,                                # outputs: like x; (b, h, p, n) float32
    CHUNK_SIZE: ct.Constant[int],
    BLOCK_M: ct.Constant[int],                      # rows handled at once, divides CHUNK_SIZE
    BLOCK_P: ct.Constant[int],
    DSTATE: ct.Constant[int],                       # dstate padded to a power of two
    HAS_INITIAL_STATES: ct.Constant[bool],
    HAS_D: ct.Constant[bool],
    D_PER_CHANNEL: ct.Constant[bool],               # D is (nheads, headdim) rather than (nheads,)
    HAS_Z: ct.Constant[bool],
    LATENCY: ct.Constant[int],                      # DRAM latency hint, 1-10; 0 = no hint
    TF32: ct.Constant[bool],                        # float32 mma operands rounded to TF32
):
    nheads = x.shape[2]
    seqlen = x.shape[1]
    b = ct.bid(0) // nheads
    h = ct.bid(0) % nheads
    p_tile = ct.bid(1)
    g = h // (nheads // B.shape[2])
    blocks_per_chunk = CHUNK_SIZE // BLOCK_M
    zero = ct.PaddingMode.ZERO
    latency = LATENCY if LATENCY > 0 else None
    mma_dtype = ct.tfloat32 if TF32 else x.dtype
    rows = ct.reshape(ct.arange(BLOCK_M, dtype=ct.int32), (BLOCK_M, 1))
    cols = ct.reshape(ct.arange(BLOCK_M, dtype=ct.int32), (1, BLOCK_M))

    if HAS_INITIAL_STATES:
        state = ct.load(initial_states, (b, h, p_tile, 0), (1, 1, BLOCK_P, DSTATE),
                        padding_mode=zero)
        state = ct.transpose(ct.reshape(state, (BLOCK_P, DSTATE)).astype(ct.float32))
    else:
        state = ct.zeros((DSTATE, BLOCK_P), dtype=ct.float32)
    if HAS_D:
        if D_PER_CHANNEL:
            D_h = ct.load(D, (h, p_tile), (1, BLOCK_P), padding_mode=zero).astype(ct.float32)
        else:
            D_h = ct.reshape(ct.load(D, (h,), (1,)), (1, 1)).astype(ct.float32)

    # dA_cumsum is in natural-log units; the kernel works in log2 units (see LOG2E).
    dA_start = ct.zeros((1, 1), dtype=ct.float32)
    for row_block in range(ct.cdiv(seqlen, BLOCK_M)):
        c = row_block // blocks_per_chunk
        m = row_block % blocks_per_chunk
        if m == 0:
            dA_start = ct.zeros((1, 1), dtype=ct.float32)       # a chunk's cumsum starts at 0
        # The entering state as an mma operand, rounded like stage 3 rounds what stage 2 stored.
        h_enter = state.astype(C.dtype).astype(mma_dtype)
        dA_block = ct.load(dA_cumsum, (b, h, c, m), (1, 1, 1, BLOCK_M))
        dA_m = ct.reshape(dA_block, (BLOCK_M, 1)) * LOG2E
        # The row block's last value, taken from the tile already loaded: a load of its own
        # would be a small synchronous one, waited for on every row block.
        dA_end = ct.reshape(ct.extract(dA_block, (0, 0, 0, BLOCK_M - 1), (1, 1, 1, 1)),
                            (1, 1)) * LOG2E
        state = state * ct.exp2(dA_end - dA_start, flush_to_zero=True)
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
        acc = ct.mma(C_m, h_enter, ct.zeros((BLOCK_M, BLOCK_P), dtype=ct.float32))
        acc = acc * ct.exp2(dA_m - dA_start, flush_to_zero=True)

        # Inside the row block: causal mask. Clamp before exp2: above the diagonal
        # dA_i - dA_j > 0 could overflow, and is masked anyway.
        scores = ct.mma(C_m, ct.transpose(B_m), ct.zeros((BLOCK_M, BLOCK_M), dtype=ct.float32))
        decay = ct.exp2(ct.minimum(dA_m - ct.transpose(dA_m), 0.0), flush_to_zero=True)
        scores = ct.where(rows >= cols, scores * decay * ct.transpose(dt_m), 0.0)
        acc = ct.mma(scores.astype(x.dtype).astype(mma_dtype), x_m.astype(mma_dtype), acc)

        x_f32 = x_m.astype(ct.float32)
        if HAS_D:
            acc = acc + x_f32 * D_h
        if HAS_Z:
            z_m = ct.load(z, (b, row_block, h, p_tile), (1, BLOCK_M, 1, BLOCK_P),
                          padding_mode=zero, latency=latency)
            z_m = ct.reshape(z_m, (BLOCK_M, BLOCK_P)).astype(ct.float32)
            acc = acc * z_m / (1.0 + ct.exp2(-z_m * LOG2E, flush_to_zero=True))  # y silu(z)
        ct.store(y, (b, row_block, h, p_tile),
                 ct.reshape(acc.astype(y.dtype), (1, BLOCK_M, 1, BLOCK_P)))

        # This row block's tokens, carried to its end, join the state. Past seqlen dt = 0
        # (stage 1), so padded rows add nothing.
        weight = ct.exp2(dA_end - dA_m, flush_to_zero=True) * dt_m
        x_weighted = (x_f32 * weight).astype(x.dtype).astype(mma_dtype)
        state = ct.mma(ct.transpose(B_m), x_weighted, state)
        dA_start = dA_end

    ct.store(final_states, (b, h, p_tile, 0),
             ct.reshape(ct.transpose(state), (1, 1, BLOCK_P, DSTATE)))


def fused_block_p(headdim, dstate, block_p=None):
    """The headdim tile: as wide as headdim allows while the state tile fits in registers."""
    if block_p is not None:
        return block_p
    fits = max(16, MAX_STATE_ELEMENTS // next_power_of_2(dstate))
    return min(next_power_of_2(headdim), 64, fits)


def fused_fills_gpu(x, B, options=KernelOptions()):
    """True when the fused kernel has at least one block per SM of ``x``'s GPU.

    Below that, SMs idle while each block walks every chunk alone; the three-kernel pipeline,
    whose stage 3 has a block per chunk, is faster (on an H200 at batch 1, 8 heads, seqlen 16384:
    0.43 ms three-kernel vs 0.79 ms fused, ``data/h200_probe.txt``).
    """
    batch, _, nheads, headdim = x.shape
    blocks = batch * nheads * cdiv(headdim, fused_block_p(headdim, B.shape[3], options.block_p))
    return blocks >= (_sm_count(x.device.index) if x.is_cuda else REFERENCE_SM_COUNT)


@lru_cache(maxsize=None)
def _sm_count(device_index):
    """Looked up once per GPU: the rule runs on every call of the public API."""
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def uses_fused(x, B, options):
    """Whether :class:`ForwardOptions` ``options`` run the fused kernel on these inputs: its
    ``fuse_state_passing``, or when that is ``None``, :func:`fused_fills_gpu`."""
    if options.fuse_state_passing is None:
        return fused_fills_gpu(x, B, options.fused_state_out)
    return options.fuse_state_passing


def fused_state_out_launch(x, dt, dA_cumsum, B, C, initial_states=None, D=None, z=None,
                           options=KernelOptions()):
    """Allocate ``y`` and ``final_states`` and plan the launch.

    Returns ``(KernelLaunch, (y, final_states))``; ``dt`` and ``dA_cumsum`` are stage 1's
    outputs. ``block_m`` defaults to 64 (the rows handled at once), ``block_p`` to
    :func:`fused_block_p`.
    """
    batch, _, nheads, headdim = x.shape
    dstate = B.shape[3]
    chunk_size = dA_cumsum.shape[3]
    y = torch.empty_like(x)
    final_states = torch.empty(batch, nheads, headdim, dstate, dtype=torch.float32,
                               device=x.device)
    block_m = min(options.block_m or 64, chunk_size)
    block_p = fused_block_p(headdim, dstate, options.block_p)
    grid = (batch * nheads, cdiv(headdim, block_p), 1)
    args = (
        x, dt, dA_cumsum, B, C,
        placeholder(dA_cumsum) if initial_states is None else initial_states,
        placeholder(dA_cumsum) if D is None else D,
        placeholder(x) if z is None else z,
        y, final_states,
        chunk_size, block_m, block_p, next_power_of_2(dstate),
        initial_states is not None, D is not None, D is not None and D.dim() == 2,
        z is not None, options.latency_constant(), options.use_tf32(x.dtype),
    )
    kernel = with_hints(fused_state_out_kernel, options.occupancy)
    return KernelLaunch(grid, kernel, args), (y, final_states)


def fused_state_out(x, dt, dA_cumsum, B, C, initial_states=None, D=None, z=None,
                    options=KernelOptions()):
    """Run stages 2 and 3 fused; returns ``(y, final_states)``."""
    launch, outputs = fused_state_out_launch(x, dt, dA_cumsum, B, C, initial_states, D, z,
                                             options)
    launch.run()
    return outputs
