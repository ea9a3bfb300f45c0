"""The three cuTile kernels of the chunked SSD forward pass, one file each, host launcher beside.

    chunk_cumsum    dt -> (dA_cumsum, dt)                          stage 1
    fwd_pass_state  (x, B, dt, dA_cumsum) -> (chunk_states, final)  stage 2
    compute_out     (x, dt, dA_cumsum, B, C, chunk_states) -> y     stage 3

    fused_state_out (x, dt, dA_cumsum, B, C) -> (y, final)         stages 2 + 3, state on chip
    chunk_scores    (B, C) -> C Bᵀ per row block and group           read by the fused kernel
                                                                    above dstate 128
    segment_states  (x, B, dt, dA_cumsum) -> each segment's state    sequence parallelism:
    segment_pass    segment states -> state entering each segment    the fused kernel then runs
                                                                    one block per segment
    selective_state_update  (state, x, dt, B, C) -> y, state in place  the decode step
    varlen_states   (x, B, dt, dA_cumsum, kept states) -> each       return_varlen_states
                    packed sequence's last state

Every kernel that carries a state takes an optional ``seq_idx`` (packed sequences: the state is
reset where it changes), read and applied by the tile functions of
:mod:`mamba2_tile.kernels.packing`.

:func:`mamba2_tile.api.mamba_chunk_scan_combined` chains stage 1 with stages 2 and 3, or with the
fused kernel, cut into segments run in parallel when batch x heads is small
(:mod:`mamba2_tile.kernels.sequence_parallel`): :mod:`mamba2_tile.kernels.plan` decides which,
and with which tiles, from the problem's sizes and :data:`DEFAULT_OPTIONS`.
"""

from mamba2_tile.kernels.chunk_cumsum import chunk_cumsum, chunk_cumsum_launch
from mamba2_tile.kernels.chunk_scores import chunk_scores, chunk_scores_launch
from mamba2_tile.kernels.compute_out import compute_out, compute_out_launch
from mamba2_tile.kernels.fused_state_out import fused_state_out, fused_state_out_launch
from mamba2_tile.kernels.fwd_pass_state import fwd_pass_state, fwd_pass_state_launch
from mamba2_tile.kernels.options import (DEFAULT_OPTIONS, ChunkCumsumOptions, ComputeOutOptions,
                                         ForwardOptions, FusedStateOutOptions,
                                         FwdPassStateOptions, KernelOptions)
from mamba2_tile.kernels.segment_pass import segment_pass, segment_pass_launch
from mamba2_tile.kernels.segment_states import segment_states, segment_states_launch
from mamba2_tile.kernels.selective_state_update import selective_state_update_launch
from mamba2_tile.kernels.sequence_parallel import sequence_parallel_state_out
from mamba2_tile.kernels.varlen_states import varlen_states, varlen_states_launch

__all__ = [
    "chunk_cumsum", "chunk_cumsum_launch",
    "fwd_pass_state", "fwd_pass_state_launch",
    "compute_out", "compute_out_launch",
    "fused_state_out", "fused_state_out_launch",
    "chunk_scores", "chunk_scores_launch",
    "segment_states", "segment_states_launch",
    "segment_pass", "segment_pass_launch",
    "sequence_parallel_state_out",
    "selective_state_update_launch",
    "varlen_states", "varlen_states_launch",
    "ForwardOptions", "KernelOptions", "ChunkCumsumOptions", "FwdPassStateOptions",
    "ComputeOutOptions", "FusedStateOutOptions", "DEFAULT_OPTIONS",
]
