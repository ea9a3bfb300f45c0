"""The sequence-parallel path: the chunked algorithm one level up, for few heads and long sequences.

The fused kernel (:mod:`mamba2_tile.kernels.fused_state_out`) gives each (batch, head, headdim
tile) one block that walks the whole sequence. At batch-1 prefill (one sequence, 24 to 80 heads)
that is fewer blocks than an H200 has SMs (132), and each of them walks 128k tokens alone. Here
the sequence is cut into *segments* of ``segment_chunks`` whole chunks, and the segment plays the
chunk's role in the chunked algorithm:

    chunk_cumsum     dt -> (dA_cumsum, dt)                           as always
    segment_states   each segment's own state (from zero) and decay  all segments in parallel
    segment_pass     the state entering every segment                 one short walk per head
    fused_state_out  each segment's y from its entering state         all segments in parallel

``segment_pass`` is the jump formula the learner wrote for chunks in notebook 06,
``h_next = exp(decay) * h + local``, with a whole segment as the jump. The fused kernel is the
same kernel as on the one-block-per-head path, its grid given a segment axis.

The price: ``x`` and ``B`` are read twice (once per parallel step) and a state per segment goes
through memory; the gain: ``segments`` times the blocks. :func:`choose_segment_chunks` picks the
segment length from the shape and the SM count; :mod:`mamba2_tile.kernels.plan` takes this path
when batch x heads alone cannot fill the GPU.
"""

from functools import lru_cache

from mamba2_tile.kernels.chunk_scores import chunk_scores
from mamba2_tile.kernels.fused_state_out import (fused_block_m, fused_block_p, fused_state_out,
                                                 fused_state_out_launch, scores_given)
from mamba2_tile.kernels.launching import cdiv
from mamba2_tile.kernels.options import FusedStateOutOptions
from mamba2_tile.kernels.segment_pass import segment_pass
from mamba2_tile.kernels.segment_states import segment_states

# What a segment costs beyond its rows, in 64-row blocks: its share of segment_states' and the
# fused kernel's start (loads waited for before the first mma, the entering state) and of the
# pass. Fitted to the H200 probe (data/h200_probe_sequence_parallel.json): at 24 heads, seqlen
# 8192, chunk 256, 11 segments of 3 chunks (one full wave) took 0.100 ms, 16 of 2 (a wave and
# a half) 0.137 ms and 32 of 1 (three waves) 0.161 ms.
SEGMENT_OVERHEAD_ROW_BLOCKS = 6


@lru_cache(maxsize=None)     # the API asks on every call; the answer depends on integers only
def choose_segment_chunks(batch, nheads, headdim, dstate, nchunks, sm_count, chunk_size=256,
                          block_p=None, blocks_per_sm=2):
    """Chunks per segment: the one that finishes first if every block takes its rows plus
    :data:`SEGMENT_OVERHEAD_ROW_BLOCKS` and the blocks run in waves of ``blocks_per_sm *
    sm_count``. A partial last wave leaves SMs idle, so the answer is usually the length that
    makes the blocks fill whole waves (one, if the segments stay long), not the most segments."""
    blocks_per_segment = batch * nheads * cdiv(headdim, fused_block_p(headdim, dstate, block_p))
    slots = blocks_per_sm * sm_count
    row_blocks_per_chunk = chunk_size // fused_block_m(chunk_size)

    def finish(chunks):
        waves = cdiv(blocks_per_segment * cdiv(nchunks, chunks), slots)
        return waves * (chunks * row_blocks_per_chunk + SEGMENT_OVERHEAD_ROW_BLOCKS)

    # Longest segments first, so that ties go to fewer segments (fewer states to pass).
    return min(range(nchunks, 0, -1), key=finish)


def sequence_parallel_state_out(x, dt, dA_cumsum, B, C, initial_states=None, D=None, z=None,
                                options=FusedStateOutOptions(), segment_chunks=1, seq_idx=None):
    """Stages 2 and 3 with the sequence cut into segments of ``segment_chunks`` chunks;
    returns ``(y, final_states)``, as :func:`mamba2_tile.kernels.fused_state_out.fused_state_out`
    (which is what one segment is)."""
    y, final_states, _ = sequence_parallel_states(x, dt, dA_cumsum, B, C, initial_states, D, z,
                                                  options, segment_chunks, seq_idx)
    return y, final_states


def sequence_parallel_states(x, dt, dA_cumsum, B, C, initial_states=None, D=None, z=None,
                             options=FusedStateOutOptions(), segment_chunks=1, seq_idx=None,
                             chunk_states=None):
    """:func:`sequence_parallel_state_out`, and the state entering each segment:
    ``(y, final_states, entering)``, ``entering`` (b, h, segments, p, n) float32, or ``None``
    with a single segment (then it is ``initial_states``). The packed path's
    ``varlen_states`` start from those states. ``chunk_states``, if given, takes the state
    entering each chunk (:func:`~mamba2_tile.kernels.fused_state_out.fused_state_out_launch`)."""
    if segment_chunks >= dA_cumsum.shape[2]:
        return (*fused_state_out(x, dt, dA_cumsum, B, C, initial_states, D, z, options,
                                 seq_idx, chunk_states), None)
    local, decay = segment_states(x, B, dt, dA_cumsum, segment_chunks, options, seq_idx)
    entering = segment_pass(local, decay, initial_states)
    scores = None
    if scores_given(B.shape[3]):
        scores = chunk_scores(B, C, fused_block_m(dA_cumsum.shape[3], options), options.tf32)
    launch, (y, final_states) = fused_state_out_launch(x, dt, dA_cumsum, B, C, entering, D, z,
                                                       options, scores, segment_chunks,
                                                       seq_idx, chunk_states)
    launch.run()
    return y, final_states, entering
