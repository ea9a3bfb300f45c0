"""Packed sequences in the kernels: reading ``seq_idx`` and keeping the sequences apart.

Reference: the ``seq_idx`` rule of :mod:`mamba2_tile.reference` (mamba_ssm's): ``seq_idx``
(batch, seqlen) int32, non-negative and nondecreasing along the row, says which sequence each
token belongs to; the state is reset where it changes, and the state before token 0
(``initial_states``) belongs to sequence 0. Every kernel that carries a state over a run of
tokens (a chunk, a row block, a segment) applies it the same way, the rule of the chunked
reference with the run in the chunk's place:

* the state entering the run belongs to the sequence of the token before it
  (:func:`seq_before`, 0 before token 0);
* a row reads that state out only if it is of that sequence; a row reads another row of the
  run only if both are of one sequence (:func:`rows_seq`);
* the state leaving the run belongs to the run's last token's sequence (:func:`last_seq`): it
  keeps the entering state only if that is the same sequence, and a token only if it is of it.

A run reads its ``seq_idx`` once, ``4 * BLOCK_M`` bytes, shared by every head in L2, next to
``2 * BLOCK_M * headdim`` bytes of ``x`` per head: packing costs a few masks a row block, no
extra pass over the data. All masks are compile-time optional (``HAS_SEQ_IDX``).
"""

from mamba2_tile.tile import ct


@ct.function
def rows_seq(seq_idx, b, row_block, BLOCK_M):
    """``(BLOCK_M, 1)`` int32: the sequence of each row of row block ``row_block`` (in
    ``BLOCK_M`` units of seqlen) of batch ``b``; rows past seqlen read 0."""
    rows = ct.load(seq_idx, (b, row_block), (1, BLOCK_M), padding_mode=ct.PaddingMode.ZERO)
    return ct.reshape(rows, (BLOCK_M, 1))


@ct.function
def last_seq(seq_rows):
    """``(1, 1)``: the sequence of the last row inside seqlen. Rows past seqlen read 0 and
    ``seq_idx`` is non-negative and nondecreasing, so that is the largest."""
    return ct.max(seq_rows, axis=0, keepdims=True)


@ct.function
def seq_before(seq_idx, b, token):
    """``(1, 1)`` int32: the sequence the state entering token ``token`` belongs to, that of
    token ``token - 1``, or 0 (``initial_states``' sequence) for token 0."""
    previous = ct.load(seq_idx, (b, max(token - 1, 0)), (1, 1))
    return ct.where(token > 0, previous, 0)
