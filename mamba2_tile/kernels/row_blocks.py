"""Row blocks of a chunk: how many hold a token, for loops that walk a chunk ``BLOCK_M`` rows at
a time without a load wholly past seqlen."""

from mamba2_tile.tile import ct


@ct.function
def row_blocks_with_tokens(seqlen, c, CHUNK_SIZE, BLOCK_M, WHOLE_CHUNKS):
    """How many of chunk ``c``'s row blocks hold a token: all ``CHUNK_SIZE // BLOCK_M`` but in a
    last chunk that ends early. Loops over a chunk's row blocks stop there (the per-chunk
    gradient kernels', float32 ``fwd_pass_state``'s). The gradient kernels used to run the whole
    chunk and branch around the blocks past seqlen (a load wholly out of bounds is undefined
    behaviour); on Hopper some launches with such a block then never returned, others did
    (data/h100_bwd_row_block_fix_2026-12-06.txt). With ``WHOLE_CHUNKS`` (seqlen a multiple of
    the chunk, or one block a chunk) the count is a constant, so those loops keep a fixed
    length and the compiler may unroll them. The split form's dx kernel asks for the constant
    only at one block a chunk, and not with the varlen terms (its comment says why): unrolled in whole chunks of 256, its training step was a third
    slower on an H100 (data/h100_bwd_chunk_dx_row_count_2026-12-07.txt)."""
    blocks = CHUNK_SIZE // BLOCK_M
    if not WHOLE_CHUNKS:
        blocks = min(blocks, ct.cdiv(seqlen - c * CHUNK_SIZE, BLOCK_M))
    return blocks
