"""The catalogue of plausible learner mistakes (issue #16 item 1): each test writes one wrong
answer the way a learner would, runs it through the very check the notebook calls (CPU tile
interpreter, the check's own small shapes) and asserts that the hint names *that* mistake, not
another cause. The matching correct answers pass.

cuTile (and the interpreter) read a kernel's source, so the kernels are defined at module level.
"""

import numpy as np
import pytest

from mamba2_tile.course.checks import chunked, primer
from mamba2_tile.course.checks.chunk_cumsum import check_chunk_cumsum_heads
from mamba2_tile.tile import ct

ZERO = ct.PaddingMode.ZERO


# --- notebook 04, Exercise 1: row sums -------------------------------------------------------

@ct.kernel
def row_sum_correct(x, out, TILE_R: ct.Constant[int], TILE_C: ct.Constant[int]):
    i = ct.bid(0)
    rows = ct.load(x, index=(i, 0), shape=(TILE_R, TILE_C), padding_mode=ct.PaddingMode.ZERO)
    ct.store(out, index=(i,), tile=ct.sum(rows, axis=1))


@ct.kernel
def row_sum_neg_inf_padding(x, out, TILE_R: ct.Constant[int], TILE_C: ct.Constant[int]):
    """Section 3's row_max_kernel with max turned into sum but its NEG_INF padding kept."""
    i = ct.bid(0)
    rows = ct.load(x, index=(i, 0), shape=(TILE_R, TILE_C),
                   padding_mode=ct.PaddingMode.NEG_INF)
    ct.store(out, index=(i,), tile=ct.sum(rows, axis=1))


def test_nb04_ex1_correct_kernel_passes(capsys):
    assert primer.check_row_sum(row_sum_correct)


def test_nb04_ex1_neg_inf_padding_is_named(capsys):
    assert not primer.check_row_sum(row_sum_neg_inf_padding)
    out = capsys.readouterr().out
    assert "padding_mode=ct.PaddingMode.NEG_INF" in out
    assert "pad with padding_mode=ct.PaddingMode.ZERO" in out


# --- notebook 05, Exercise 2: a block of heads per block ------------------------------------

@ct.kernel
def heads_correct(dt, A, dA_cumsum, dt_out, CHUNK_SIZE: ct.Constant[int],
                  BLOCK_H: ct.Constant[int]):
    b, c, hb = ct.bid(0), ct.bid(1), ct.bid(2)
    dt_c = ct.load(dt, (b, c, hb), (1, CHUNK_SIZE, BLOCK_H), padding_mode=ZERO)
    dt_c = ct.reshape(dt_c, (CHUNK_SIZE, BLOCK_H)).astype(ct.float32)
    A_h = ct.load(A, (hb,), (BLOCK_H,), padding_mode=ZERO).astype(ct.float32)
    dA_c = ct.cumsum(dt_c * ct.reshape(A_h, (1, BLOCK_H)), axis=0)
    out_shape = (1, BLOCK_H, 1, CHUNK_SIZE)
    ct.store(dA_cumsum, (b, hb, c, 0), ct.reshape(ct.transpose(dA_c), out_shape))
    ct.store(dt_out, (b, hb, c, 0), ct.reshape(ct.transpose(dt_c), out_shape))


@ct.kernel
def heads_without_transpose(dt, A, dA_cumsum, dt_out, CHUNK_SIZE: ct.Constant[int],
                            BLOCK_H: ct.Constant[int]):
    b, c, hb = ct.bid(0), ct.bid(1), ct.bid(2)
    dt_c = ct.load(dt, (b, c, hb), (1, CHUNK_SIZE, BLOCK_H), padding_mode=ZERO)
    dt_c = ct.reshape(dt_c, (CHUNK_SIZE, BLOCK_H)).astype(ct.float32)
    A_h = ct.load(A, (hb,), (BLOCK_H,), padding_mode=ZERO).astype(ct.float32)
    dA_c = ct.cumsum(dt_c * ct.reshape(A_h, (1, BLOCK_H)), axis=0)
    out_shape = (1, BLOCK_H, 1, CHUNK_SIZE)
    ct.store(dA_cumsum, (b, hb, c, 0), ct.reshape(dA_c, out_shape))
    ct.store(dt_out, (b, hb, c, 0), ct.reshape(dt_c, out_shape))


def test_nb05_ex2_correct_kernel_passes(capsys):
    assert check_chunk_cumsum_heads(heads_correct, device="cpu")


def test_nb05_ex2_store_without_transpose_is_named(capsys):
    assert not check_chunk_cumsum_heads(heads_without_transpose, device="cpu")
    out = capsys.readouterr().out
    assert "ct.transpose the tile before reshaping" in out
    assert "padding" not in out


# --- notebook 03, Exercise 1: the chunk-local running sum ---------------------------------

def _chunks(dt, A, chunk_size):
    return np.pad(dt, (0, -len(dt) % chunk_size)).reshape(-1, chunk_size) * A


def chunk_cumsum_correct(dt, A, chunk_size):
    return np.cumsum(_chunks(dt, A, chunk_size), axis=-1)


def chunk_cumsum_exclusive(dt, A, chunk_size):
    terms = _chunks(dt, A, chunk_size)
    return np.cumsum(terms, axis=-1) - terms


def chunk_cumsum_wrong_axis(dt, A, chunk_size):
    return np.cumsum(_chunks(dt, A, chunk_size), axis=0)


def test_nb03_ex1_correct_passes(capsys):
    assert chunked.check_chunk_cumsum_single_head(chunk_cumsum_correct)


@pytest.mark.parametrize("mistake, diagnosis", [
    (chunk_cumsum_exclusive, "the sum is exclusive (off by one)"),
    (chunk_cumsum_wrong_axis, "the sum ran down the chunks (axis 0)"),
])
def test_nb03_ex1_mistake_is_named(capsys, mistake, diagnosis):
    assert not chunked.check_chunk_cumsum_single_head(mistake)
    assert diagnosis in capsys.readouterr().out


# --- notebook 03, Exercise 3: one chunk's output --------------------------------------------

def _chunk_output(x, dt, dA_cumsum, B, C, h_enter, diagonal):
    inter = np.exp(dA_cumsum)[:, None] * (C @ h_enter.T)
    Q = len(dA_cumsum)
    causal = np.tril(np.ones((Q, Q), dtype=bool), k=0 if diagonal else -1)
    L = np.exp(np.where(causal, dA_cumsum[:, None] - dA_cumsum[None, :], -np.inf))
    return inter + (L * (C @ B.T)) @ (dt[:, None] * x)


def chunk_output_correct(x, dt, dA_cumsum, B, C, h_enter):
    return _chunk_output(x, dt, dA_cumsum, B, C, h_enter, diagonal=True)


def chunk_output_strict_mask(x, dt, dA_cumsum, B, C, h_enter):
    return _chunk_output(x, dt, dA_cumsum, B, C, h_enter, diagonal=False)


def test_nb03_ex3_correct_passes(capsys):
    assert chunked.check_chunk_output(chunk_output_correct)


def test_nb03_ex3_strict_causal_mask_is_named(capsys):
    assert not chunked.check_chunk_output(chunk_output_strict_mask)
    assert "leaves out the diagonal" in capsys.readouterr().out
