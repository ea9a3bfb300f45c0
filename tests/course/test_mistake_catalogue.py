"""The catalogue of plausible learner mistakes (issue #16 item 1): each test writes one wrong
answer the way a learner would, runs it through the very check the notebook calls (CPU tile
interpreter, the check's own small shapes) and asserts that the hint names *that* mistake, not
another cause. The matching correct answers pass.

cuTile (and the interpreter) read a kernel's source, so the kernels are defined at module level.
"""

import numpy as np
import pytest
import torch

from mamba2_tile import reference
from mamba2_tile.course.checks import chunk_cumsum as chunk_cumsum_checks
from mamba2_tile.course.checks import chunked, compute_out, primer
from mamba2_tile.course.checks.chunk_cumsum import check_chunk_cumsum_heads
from mamba2_tile.course.checks.quadratic import (QUADRATIC_MISTAKES, SEGSUM_MISTAKES, check_segsum,
                                                  check_ssd_quadratic_single_head)
from mamba2_tile.tile import ct

from compute_out_kernels import (mma_decay_without_exp, mma_inter_decay_without_exp,
                                 mma_strict_mask)

ZERO = ct.PaddingMode.ZERO


# --- notebook 02, Exercise 1: segsum ----------------------------------------------------------

def segsum_correct(a):
    T = a.shape[-1]
    terms = np.where(np.tril(np.ones((T, T), dtype=bool), k=-1), a[..., :, None], 0.0)
    sums = np.cumsum(terms, axis=-2)
    return np.where(np.tril(np.ones((T, T), dtype=bool)), sums, -np.inf)


def segsum_tril_of_prefix_differences(a):
    """np.tril leaves 0 above the diagonal, where the future must be -inf."""
    prefix = np.cumsum(a, axis=-1)
    return np.tril(prefix[..., :, None] - prefix[..., None, :])


def test_nb02_ex1_correct_passes(capsys):
    assert check_segsum(segsum_correct)


def test_nb02_ex1_zero_above_the_diagonal_is_named(capsys):
    assert not check_segsum(segsum_tril_of_prefix_differences)
    out = capsys.readouterr().out
    assert "above the diagonal (s > t, the future) every entry must be -inf" in out


def segsum_prefix_differences(a):
    """Masked correctly, but as cumsum[t] - cumsum[s]: fails only after a huge step."""
    prefix = np.cumsum(a, axis=-1)
    T = a.shape[-1]
    return np.where(np.tril(np.ones((T, T), dtype=bool)),
                    prefix[..., :, None] - prefix[..., None, :], -np.inf)


def segsum_inclusive(a):
    """a[s] + ... + a[t]: the segment includes s, so the diagonal is a[t], not 0."""
    T = a.shape[-1]
    sums = np.cumsum(np.where(np.tril(np.ones((T, T), dtype=bool)), a[..., :, None], 0.0),
                     axis=-2)
    return np.where(np.tril(np.ones((T, T), dtype=bool)), sums, -np.inf)


@pytest.mark.parametrize("mistake, diagnosis", [
    (segsum_prefix_differences, "the segments must be summed directly"),
    (segsum_inclusive, "the segment for (t, s) starts *after* s"),
])
def test_nb02_ex1_mistake_is_named(capsys, mistake, diagnosis):
    assert not check_segsum(mistake)
    assert diagnosis in capsys.readouterr().out


@pytest.mark.parametrize("entry", range(len(SEGSUM_MISTAKES)))
def test_nb02_ex1_every_catalogue_entry_is_reachable(capsys, entry):
    wrong_answer, diagnosis = SEGSUM_MISTAKES[entry]
    assert not check_segsum(wrong_answer)
    assert f"Hint: {diagnosis}" in capsys.readouterr().out


# --- notebook 02, Exercise 3: the quadratic form ------------------------------------------

def quadratic_correct(x, dt, A, B, C):
    L = np.exp(segsum_correct(dt * A))
    return (L * (C @ B.T)) @ (dt[:, None] * x)


def quadratic_strict_mask(x, dt, A, B, C):
    L = np.tril(np.exp(segsum_correct(dt * A)), k=-1)
    return (L * (C @ B.T)) @ (dt[:, None] * x)


def quadratic_without_exp(x, dt, A, B, C):
    L = np.tril(segsum_correct(dt * A))                    # tril: -inf * 0 would be NaN
    return (L * (C @ B.T)) @ (dt[:, None] * x)


def test_nb02_ex3_correct_passes(capsys):
    assert check_ssd_quadratic_single_head(quadratic_correct)


@pytest.mark.parametrize("mistake, diagnosis", [
    (quadratic_strict_mask, "the mask leaves out the diagonal"),
    (quadratic_without_exp, "L is segsum itself, not its exponential"),
])
def test_nb02_ex3_mistake_is_named(capsys, mistake, diagnosis):
    assert not check_ssd_quadratic_single_head(mistake)
    assert diagnosis in capsys.readouterr().out


@pytest.mark.parametrize("entry", range(len(QUADRATIC_MISTAKES)))
def test_nb02_ex3_every_catalogue_entry_is_reachable(capsys, entry):
    wrong_answer, diagnosis = QUADRATIC_MISTAKES[entry]
    assert not check_ssd_quadratic_single_head(wrong_answer)
    assert f"Hint: {diagnosis}" in capsys.readouterr().out


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


@pytest.mark.parametrize("entry", range(len(chunked.CUMSUM_MISTAKES)))
def test_nb03_ex1_every_catalogue_entry_is_reachable(capsys, entry):
    """Each catalogued wrong answer, fed through the notebook's check, gets its own diagnosis."""
    wrong_answer, diagnosis = chunked.CUMSUM_MISTAKES[entry]

    def learner(dt, A, chunk_size):
        return wrong_answer(_chunks(dt, A, chunk_size), A)

    assert not chunked.check_chunk_cumsum_single_head(learner)
    assert f"Hint: {diagnosis}" in capsys.readouterr().out


# --- notebook 03, Exercise 2: the jump over one chunk ------------------------------------

def jump_correct(state, x, dt, dA_cumsum, B):
    weights = np.exp(dA_cumsum[-1] - dA_cumsum) * dt
    return np.exp(dA_cumsum[-1]) * state + (weights[:, None] * x).T @ B


def jump_without_exp(state, x, dt, dA_cumsum, B):
    weights = (dA_cumsum[-1] - dA_cumsum) * dt
    return np.exp(dA_cumsum[-1]) * state + (weights[:, None] * x).T @ B


def jump_decays_own_step(state, x, dt, dA_cumsum, B):
    before = np.concatenate([[0.0], dA_cumsum[:-1]])       # dA up to token i - 1
    weights = np.exp(dA_cumsum[-1] - before) * dt
    return np.exp(dA_cumsum[-1]) * state + (weights[:, None] * x).T @ B


def test_nb03_ex2_correct_passes(capsys):
    assert chunked.check_jump(jump_correct)


@pytest.mark.parametrize("mistake, diagnosis", [
    (jump_without_exp, "the weight is the exponent without its exp"),
    (jump_decays_own_step, "token i also decays over its own step (off by one)"),
])
def test_nb03_ex2_mistake_is_named(capsys, mistake, diagnosis):
    assert not chunked.check_jump(mistake)
    assert diagnosis in capsys.readouterr().out


@pytest.mark.parametrize("entry", range(len(chunked.JUMP_MISTAKES)))
def test_nb03_ex2_every_catalogue_entry_is_reachable(capsys, entry):
    wrong_answer, diagnosis = chunked.JUMP_MISTAKES[entry]
    assert not chunked.check_jump(wrong_answer)
    assert f"Hint: {diagnosis}" in capsys.readouterr().out


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


def chunk_output_inter_without_exp(x, dt, dA_cumsum, B, C, h_enter):
    inter = dA_cumsum[:, None] * (C @ h_enter.T)
    intra = _chunk_output(x, dt, dA_cumsum, B, C, 0 * h_enter, diagonal=True)
    return inter + intra


def chunk_output_without_dt(x, dt, dA_cumsum, B, C, h_enter):
    """x enters the mixing without its step dt."""
    return _chunk_output(x, np.ones_like(dt), dA_cumsum, B, C, h_enter, diagonal=True)


@pytest.mark.parametrize("mistake, diagnosis", [
    (chunk_output_inter_without_exp, "the entering state's decay is dA_i itself"),
    (chunk_output_without_dt, "each input j enters as dt_j x_j"),
])
def test_nb03_ex3_mistake_is_named(capsys, mistake, diagnosis):
    assert not chunked.check_chunk_output(mistake)
    assert diagnosis in capsys.readouterr().out


@pytest.mark.parametrize("entry", range(len(chunked.OUTPUT_MISTAKES)))
def test_nb03_ex3_every_catalogue_entry_is_reachable(capsys, entry):
    wrong_answer, diagnosis = chunked.OUTPUT_MISTAKES[entry]
    assert not chunked.check_chunk_output(wrong_answer)
    assert f"Hint: {diagnosis}" in capsys.readouterr().out


# --- notebook 07, Exercise 3: the tensor-core compute_out kernel ------------------------------

@pytest.mark.parametrize("mistake, diagnosis", [
    (mma_strict_mask, "the causal mask leaves out the diagonal"),
    (mma_decay_without_exp, "the intra-chunk decay is the exponent without its exp"),
    (mma_inter_decay_without_exp, "the inter-chunk decay is dA_cumsum[i] itself"),
])
def test_nb07_ex3_mistake_is_named(capsys, mistake, diagnosis):
    assert not compute_out.check_compute_out_mma(mistake, device="cpu")
    assert diagnosis in capsys.readouterr().out


# --- notebook 04: every catalogue entry, fed to the check's diagnosis -------------------------
# (A kernel per entry would only re-type the wrong answer; the entries that a kernel is written
# for above go through the check itself.)

@pytest.mark.parametrize("entry", range(len(primer.ROW_SUM_MISTAKES)))
def test_nb04_ex1_every_catalogue_entry_is_reachable(entry):
    wrong_answer, diagnosis = primer.ROW_SUM_MISTAKES[entry]
    x = np.random.default_rng(0).standard_normal((37, 50))
    got = np.asarray(wrong_answer(x, 8, 64), dtype=np.float32)
    assert primer._row_sum_hint(got, x, x.sum(axis=1), 8, 64) == diagnosis


@pytest.mark.parametrize("entry", range(len(primer.CUMSUM_MISTAKES)))
def test_nb04_ex2_every_catalogue_entry_is_reachable(entry):
    wrong_answer, diagnosis = primer.CUMSUM_MISTAKES[entry]
    x = np.random.default_rng(1).standard_normal(100)
    expected = np.pad(x, (0, 28)).reshape(-1, 32).cumsum(axis=1).reshape(-1)[:100]
    got = np.asarray(wrong_answer(x, expected), dtype=np.float32)
    assert primer._cumsum_hint(got, x, expected) == diagnosis


@pytest.mark.parametrize("entry", range(len(primer.MATMUL_MISTAKES)))
def test_nb04_ex3_every_catalogue_entry_is_reachable(entry):
    wrong_answer, diagnosis = primer.MATMUL_MISTAKES[entry]
    rng = np.random.default_rng(2)
    a = rng.standard_normal((100, 72)).astype(np.float16).astype(np.float64)
    b = rng.standard_normal((72, 48)).astype(np.float16).astype(np.float64)
    got = np.asarray(wrong_answer(a, b, 16), dtype=np.float32)
    assert primer._matmul_hint(got, a, b, 16) == diagnosis


# --- notebook 05: every catalogue entry, fed to the check's diagnosis -------------------------

def _nb05_inputs(softplus=False):
    rng = np.random.default_rng(55)
    low, high = (-3.0, 1.0) if softplus else (0.05, 0.5)
    dt = rng.uniform(low, high, (2, 45, 6)).astype(np.float32).astype(np.float64)
    A = -rng.uniform(0.5, 2.0, 6).astype(np.float32).astype(np.float64)
    return dt, A


@pytest.mark.parametrize("entry", range(len(chunk_cumsum_checks.DA_CUMSUM_MISTAKES)))
def test_nb05_dA_cumsum_every_catalogue_entry_is_reachable(entry):
    wrong_answer, diagnosis = chunk_cumsum_checks.DA_CUMSUM_MISTAKES[entry]
    dt, A = _nb05_inputs()
    dt_chunks = reference.chunk_cumsum(dt, np.zeros_like(A), 16)[1]
    got = torch.tensor(wrong_answer(dt_chunks, A))
    assert chunk_cumsum_checks._dA_hint(got, dt, A, seqlen=45) == diagnosis


@pytest.mark.parametrize("output", [0, 1])            # dA_cumsum, dt_out
@pytest.mark.parametrize("entry", range(len(chunk_cumsum_checks.HEADS_MISTAKES)))
def test_nb05_ex2_every_catalogue_entry_is_reachable(entry, output):
    wrong_answer, diagnosis = chunk_cumsum_checks.HEADS_MISTAKES[entry]
    dt, A = _nb05_inputs()
    expected = reference.chunk_cumsum(dt, A, 16)[output]
    got = wrong_answer(expected, 3)
    assert chunk_cumsum_checks._heads_hint(got, expected, 3) == diagnosis


@pytest.mark.parametrize("entry", range(len(chunk_cumsum_checks.FULL_DT_MISTAKES)))
def test_nb05_ex3_every_catalogue_entry_is_reachable(entry):
    wrong_answer, diagnosis = chunk_cumsum_checks.FULL_DT_MISTAKES[entry]
    dt, _ = _nb05_inputs(softplus=True)
    bias = np.random.default_rng(56).uniform(-0.5, 0.5, 6)
    prepared = wrong_answer(dt, bias, True, (0.3, 0.9))
    padded = np.pad(prepared, [(0, 0), (0, 3), (0, 0)])                  # 45 -> 3 chunks of 16
    got = torch.tensor(padded.reshape(2, 3, 16, 6).transpose(0, 3, 1, 2))  # (b, h, c, s)
    assert chunk_cumsum_checks._full_hint(got, dt, bias, True, (0.3, 0.9), 45) == diagnosis
