"""Stage 1 of the chunked SSD: the running sum of ``dt * A`` inside each chunk.

Reference: :func:`mamba2_tile.reference.chunk_cumsum`. One block handles one chunk of one batch
for a block of ``BLOCK_H`` heads: it loads the ``(chunk_size, BLOCK_H)`` slab of ``dt`` (contiguous
along heads in memory), prepares ``dt`` exactly as mamba_ssm does (``+ dt_bias``, ``softplus``,
clamp to ``dt_limit``, zero past ``seqlen``), scans ``dt * A`` along the chunk, and stores both
results transposed into the chunk layout ``(batch, nheads, nchunks, chunk_size)`` that the two
later stages read one head at a time.

``dA_cumsum`` is stored in natural-log units, exactly the quantity the reference returns; the
later stages read it back as ``exp2(dA_cumsum * LOG2E)`` (:mod:`mamba2_tile.kernels.exp2`).

Options (:mod:`mamba2_tile.kernels.options`): ``block_h`` and ``occupancy`` only. Stage 1 reads
one float per token and head, 1/headdim of what the later stages stream, so latency hints or
layout switches here could not show in a measurement; its signature stays the one notebook 05
builds.
"""

import torch

from mamba2_tile.kernels.launching import (KernelLaunch, cdiv, expect_options, next_power_of_2,
                                           placeholder, with_hints)
from mamba2_tile.kernels.options import ChunkCumsumOptions
from mamba2_tile.tile import ct

# mamba_ssm applies softplus only below this threshold; above it softplus(dt) == dt to float32
# precision, and skipping it avoids exp overflow.
SOFTPLUS_THRESHOLD = 20.0
# The floor of one token's dA = dt * A (see the kernel): exp2(-128 * LOG2E) = 2^-184.7 flushes to
# 0 and exp(-128) = 3e-56 is 0 next to any float32 sum, yet 256 such steps stay far from -inf.
DA_STEP_MIN = -128.0


@ct.kernel
def chunk_cumsum_kernel(
    dt, A, dt_bias,               # inputs: (batch, seqlen, nheads), (nheads,), (nheads,)
    dA_cumsum, dt_out,            # outputs: (batch, nheads, nchunks, chunk_size), float32
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

    dt_c = prepared_dt(dt, dt_bias, b, c, hb, CHUNK_SIZE, BLOCK_H, HAS_DT_BIAS, DT_SOFTPLUS,
                       DT_MIN, DT_MAX)[2]
    # Bias, softplus and the clamp can make padded positions nonzero: zero them again so that
    # they add nothing to the state or the output downstream.
    pos = c * CHUNK_SIZE + ct.arange(CHUNK_SIZE, dtype=ct.int32)
    in_sequence = ct.reshape(pos < dt.shape[1], (CHUNK_SIZE, 1))
    dt_c = ct.where(in_sequence, dt_c, 0.0)

    A_h = ct.load(A, (hb,), (BLOCK_H,), padding_mode=zero).astype(ct.float32)
    # A step's decay exp(dt * A) below exp(DA_STEP_MIN) is 0 in float32: flooring the step there
    # changes no decay, and keeps dA_cumsum finite when dt * A is -inf (A = -inf), where the
    # later stages' differences dA_i - dA_j would be -inf - -inf = NaN although the recurrence
    # just forgets the state. Padded positions add no step (0 * -inf would be NaN).
    dA_step = ct.maximum(dt_c * ct.reshape(A_h, (1, BLOCK_H)), DA_STEP_MIN, propagate_nan=True)
    dA_c = ct.cumsum(ct.where(in_sequence, dA_step, 0.0), axis=0)

    # (CHUNK_SIZE, BLOCK_H) -> (1, BLOCK_H, 1, CHUNK_SIZE): each head's chunk is contiguous.
    out_shape = (1, BLOCK_H, 1, CHUNK_SIZE)
    ct.store(dA_cumsum, (b, hb, c, 0), ct.reshape(ct.transpose(dA_c), out_shape))
    ct.store(dt_out, (b, hb, c, 0), ct.reshape(ct.transpose(dt_c), out_shape))


@ct.function
def prepared_dt(dt, dt_bias, b, c, hb, CHUNK_SIZE, BLOCK_H, HAS_DT_BIAS, DT_SOFTPLUS, DT_MIN,
                DT_MAX):
    """Chunk ``c`` of batch ``b`` for the ``hb``-th block of heads, ``dt`` prepared as mamba_ssm
    does, as three float32 ``(CHUNK_SIZE, BLOCK_H)`` tiles: ``dt + dt_bias``, that after the
    softplus (where ``DT_SOFTPLUS`` asks for it), and that clamped to ``dt_limit``. Stage 1
    keeps the last; its backward (:mod:`mamba2_tile.kernels.bwd_chunk_cumsum`) needs all three
    for the chain rule."""
    zero = ct.PaddingMode.ZERO
    # Positions past seqlen (last chunk) and heads past nheads (last head block) load as 0.
    dt_raw = ct.load(dt, (b, c, hb), (1, CHUNK_SIZE, BLOCK_H), padding_mode=zero)
    dt_raw = ct.reshape(dt_raw, (CHUNK_SIZE, BLOCK_H)).astype(ct.float32)
    if HAS_DT_BIAS:
        bias = ct.load(dt_bias, (hb,), (BLOCK_H,), padding_mode=zero).astype(ct.float32)
        dt_raw = dt_raw + ct.reshape(bias, (1, BLOCK_H))
    dt_soft = dt_raw
    if DT_SOFTPLUS:
        dt_soft = ct.where(dt_raw <= SOFTPLUS_THRESHOLD, ct.log(1.0 + ct.exp(dt_raw)), dt_raw)
    # A NaN dt (or dt_bias) must come out as NaN, as in the recurrence: the clamp's default
    # ignores NaN operands and would turn it into DT_MIN, silently skipping the token.
    dt_used = ct.minimum(ct.maximum(dt_soft, DT_MIN, propagate_nan=True), DT_MAX,
                         propagate_nan=True)
    return dt_raw, dt_soft, dt_used


def chunk_cumsum_block_h(nheads, options=ChunkCumsumOptions()):
    """The heads tile: the options' ``block_h``, else every head up to 16 (padded to a power of
    two); one block then reads a ``(chunk_size, BLOCK_H)`` slab of ``dt``, contiguous in heads."""
    return options.block_h or min(next_power_of_2(nheads), 16)


def chunk_cumsum_launch(dt, A, chunk_size, dt_bias=None, dt_softplus=False,
                        dt_limit=(0.0, float("inf")), options=ChunkCumsumOptions()):
    """Allocate the outputs and plan the launch; returns ``(KernelLaunch, (dA_cumsum, dt_out))``."""
    expect_options(options, ChunkCumsumOptions)
    batch, seqlen, nheads = dt.shape
    nchunks = cdiv(seqlen, chunk_size)
    dA_cumsum = torch.empty(batch, nheads, nchunks, chunk_size, dtype=torch.float32,
                            device=dt.device)
    dt_out = torch.empty_like(dA_cumsum)
    block_h = chunk_cumsum_block_h(nheads, options)
    grid = (batch, nchunks, cdiv(nheads, block_h))
    args = (
        dt, A, placeholder(dt) if dt_bias is None else dt_bias,
        dA_cumsum, dt_out,
        chunk_size, block_h, dt_bias is not None, bool(dt_softplus),
        float(dt_limit[0]), float(dt_limit[1]),
    )
    kernel = with_hints(chunk_cumsum_kernel, options.occupancy)
    return KernelLaunch(grid, kernel, args), (dA_cumsum, dt_out)


def chunk_cumsum(dt, A, chunk_size, dt_bias=None, dt_softplus=False,
                 dt_limit=(0.0, float("inf")), options=ChunkCumsumOptions()):
    """Run stage 1; returns ``(dA_cumsum, dt)``, both float32 (batch, nheads, nchunks, chunk_size)."""
    launch, outputs = chunk_cumsum_launch(dt, A, chunk_size, dt_bias, dt_softplus, dt_limit,
                                          options)
    launch.run()
    return outputs
