"""``C Bᵀ`` of each row block, once per group: the scores the fused kernel would form per head.

Reference: the ``C_i · B_j`` factor of :func:`mamba2_tile.reference.ssd_quadratic`'s ``L ∘ C Bᵀ``,
restricted to pairs ``i, j`` in the same ``BLOCK_M``-row block (the only ones the fused kernel
forms: it hands the state from row block to row block). One block per (batch, row block, group)
loads ``C`` and ``B`` of its rows, ``(BLOCK_M, dstate)`` each, and stores ``C Bᵀ``
``(BLOCK_M, BLOCK_M)`` in float32, the precision the fused kernel would have computed it in.

Why a kernel of its own. ``C Bᵀ`` depends on the group, not on the head: with 64 heads per group
the fused kernel forms the same product 64 times, a ``(BLOCK_M, dstate) @ (dstate, BLOCK_M)``
``mma`` per row block and head, the largest of its three. At dstate 256 it also makes the fused
kernel spill: the two 256-wide operands and the state do not fit in a block's registers together
(read off the cubin: hundreds of local loads and stores a row block, 74.7 ms instead of a few).
Computed here once per group and row block, it costs ``4 * BLOCK_M`` bytes a token and group
(against ``2 * headdim`` bytes of ``x`` a token and *head*), and the fused kernel loads it from
L2 instead (``SCORES_GIVEN``). mamba_ssm also computes ``C Bᵀ`` in a kernel of its own (its
``bmm_chunk``), for a whole chunk rather than a row block.

Rows past ``seqlen`` load as zeros, so their scores are zero; the fused kernel never stores
those rows' outputs anyway.
"""

import torch

from mamba2_tile.kernels.launching import KernelLaunch, cdiv, next_power_of_2
from mamba2_tile.kernels.split_tf32 import split_mma
from mamba2_tile.tile import ct


@ct.kernel
def chunk_scores_kernel(
    B, C,                            # (b, l, g, n), the input dtype
    scores,                          # out: (b, g, row blocks, BLOCK_M, BLOCK_M) float32
    BLOCK_M: ct.Constant[int],       # the fused kernel's row block
    DSTATE: ct.Constant[int],        # dstate padded to a power of two
    TF32: ct.Constant[bool],         # float32 mma operands rounded to TF32
):
    row_blocks = scores.shape[2]
    b = ct.bid(0) // row_blocks
    row_block = ct.bid(0) % row_blocks
    g = ct.bid(1)
    zero = ct.PaddingMode.ZERO
    mma_dtype = ct.tfloat32 if TF32 else C.dtype

    C_m = ct.load(C, (b, row_block, g, 0), (1, BLOCK_M, 1, DSTATE), padding_mode=zero)
    B_m = ct.load(B, (b, row_block, g, 0), (1, BLOCK_M, 1, DSTATE), padding_mode=zero)
    C_m = ct.reshape(C_m, (BLOCK_M, DSTATE)).astype(mma_dtype)
    B_m = ct.reshape(B_m, (BLOCK_M, DSTATE)).astype(mma_dtype)
    product = split_mma(C_m, ct.transpose(B_m), ct.zeros((BLOCK_M, BLOCK_M), dtype=ct.float32))
    ct.store(scores, (b, g, row_block, 0, 0), ct.reshape(product, (1, 1, 1, BLOCK_M, BLOCK_M)))


def chunk_scores_launch(B, C, block_m, tf32=False):
    """Allocate ``scores`` and plan the launch; returns ``(KernelLaunch, scores)``. ``tf32``
    rounds float32 operands to TF32, as the fused kernel it feeds does."""
    batch, seqlen, ngroups, dstate = B.shape
    row_blocks = cdiv(seqlen, block_m)
    scores = torch.empty(batch, ngroups, row_blocks, block_m, block_m, dtype=torch.float32,
                         device=B.device)
    grid = (batch * row_blocks, ngroups, 1)
    args = (B, C, scores, block_m, next_power_of_2(dstate), tf32 and B.dtype == torch.float32)
    return KernelLaunch(grid, chunk_scores_kernel, args), scores


def chunk_scores(B, C, block_m, tf32=False):
    """Run it; returns ``scores`` (batch, ngroups, row blocks, block_m, block_m) float32."""
    launch, scores = chunk_scores_launch(B, C, block_m, tf32)
    launch.run()
    return scores
