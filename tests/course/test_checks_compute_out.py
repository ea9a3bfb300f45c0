"""Notebook 07's checks pass right answers, fail plausible wrong ones naming the positions and the
likely mistake, and greet an unfinished exercise with the friendly line."""

import numpy as np
import pytest
import torch

from mamba2_tile.course.checks import compute_out as checks
from mamba2_tile.cost import interaction_matrix_bytes
from mamba2_tile.tile import ct

ZERO = ct.PaddingMode.ZERO


# --- the byte count -------------------------------------------------------------------------

def bytes_floor(batch, seqlen, nheads, chunk_size, bytes_per_value):
    return batch * nheads * (seqlen // chunk_size) * chunk_size ** 2 * bytes_per_value


def not_written(*args):
    raise NotImplementedError("Exercise: write your code here")


def test_bytes_check_passes_the_package_formula(capsys):
    assert checks.check_interaction_matrix_bytes(interaction_matrix_bytes)
    assert "✅ interaction_matrix_bytes matches" in capsys.readouterr().out


def test_bytes_check_catches_a_forgotten_partial_chunk(capsys):
    assert not checks.check_interaction_matrix_bytes(bytes_floor)
    out = capsys.readouterr().out
    assert "❌ interaction_matrix_bytes" in out and "at [1]" in out
    assert "ceil(seqlen / chunk_size)" in out and "Call [1]" in out


def test_bytes_check_unfinished(capsys):
    assert not checks.check_interaction_matrix_bytes(not_written)
    assert "⏳ interaction_matrix_bytes is not implemented yet" in capsys.readouterr().out


# --- every hint is reachable: feed each mistake's own answer back in -------------------------

@pytest.mark.parametrize("switches, words", [(s, h.split(":")[0]) for s, h in checks._MISTAKES])
def test_each_mistake_gets_its_hint(switches, words):
    rng = np.random.default_rng(0)
    t = checks._inputs(rng, 1, 50, 4, 4, 2, 8, 16, torch.float32, True, "cpu")
    args = [checks._np(t[k]) for k in ("x", "dt", "dA_cumsum", "B", "C", "chunk_states", "D", "z")]
    got = torch.tensor(checks.stage3_variant(*args, **switches))
    assert checks._hint(got, args, 1e-4).startswith(words)


# --- the kernel with one block per (batch, chunk, head) --------------------------------------

@ct.function
def chunk_body(x, dt, dA_cumsum, B, C, chunk_states, D, y, CHUNK_SIZE, HEADDIM, DSTATE, CAUSAL):
    """One (batch, chunk, head) block; ``CAUSAL=False`` is the learner's bug of a missing mask."""
    b, c, h = ct.bid(0), ct.bid(1), ct.bid(2)
    g = h // (x.shape[2] // B.shape[2])
    x_c = ct.reshape(ct.load(x, (b, c, h, 0), (1, CHUNK_SIZE, 1, HEADDIM), padding_mode=ZERO),
                     (CHUNK_SIZE, HEADDIM)).astype(ct.float32)
    B_c = ct.reshape(ct.load(B, (b, c, g, 0), (1, CHUNK_SIZE, 1, DSTATE), padding_mode=ZERO),
                     (CHUNK_SIZE, DSTATE)).astype(ct.float32)
    C_c = ct.reshape(ct.load(C, (b, c, g, 0), (1, CHUNK_SIZE, 1, DSTATE), padding_mode=ZERO),
                     (CHUNK_SIZE, DSTATE)).astype(ct.float32)
    dt_c = ct.reshape(ct.load(dt, (b, h, c, 0), (1, 1, 1, CHUNK_SIZE)), (1, CHUNK_SIZE))
    dA_c = ct.load(dA_cumsum, (b, h, c, 0), (1, 1, 1, CHUNK_SIZE))
    dA_i, dA_j = ct.reshape(dA_c, (CHUNK_SIZE, 1)), ct.reshape(dA_c, (1, CHUNK_SIZE))
    h_enter = ct.reshape(ct.load(chunk_states, (b, h, c, 0, 0), (1, 1, 1, HEADDIM, DSTATE),
                                 padding_mode=ZERO), (HEADDIM, DSTATE))
    inter = ct.sum(ct.reshape(C_c, (CHUNK_SIZE, 1, DSTATE))
                   * ct.reshape(h_enter, (1, HEADDIM, DSTATE)), axis=2) * ct.exp(dA_i)
    scores = ct.sum(ct.reshape(C_c, (CHUNK_SIZE, 1, DSTATE))
                    * ct.reshape(B_c, (1, CHUNK_SIZE, DSTATE)), axis=2)
    weights = scores * ct.exp(ct.minimum(dA_i - dA_j, 0.0)) * dt_c
    if CAUSAL:
        i = ct.reshape(ct.arange(CHUNK_SIZE, dtype=ct.int32), (CHUNK_SIZE, 1))
        j = ct.reshape(ct.arange(CHUNK_SIZE, dtype=ct.int32), (1, CHUNK_SIZE))
        weights = ct.where(i >= j, weights, 0.0)
    intra = ct.sum(ct.reshape(weights, (CHUNK_SIZE, CHUNK_SIZE, 1))
                   * ct.reshape(x_c, (1, CHUNK_SIZE, HEADDIM)), axis=1)
    y_c = inter + intra + ct.reshape(ct.load(D, (h,), (1,)), (1, 1)) * x_c
    ct.store(y, (b, c, h, 0), ct.reshape(y_c.astype(y.dtype), (1, CHUNK_SIZE, 1, HEADDIM)))


@ct.kernel
def chunk_kernel(x, dt, dA_cumsum, B, C, chunk_states, D, y,
                 CHUNK_SIZE: ct.Constant[int], HEADDIM: ct.Constant[int], DSTATE: ct.Constant[int]):
    chunk_body(x, dt, dA_cumsum, B, C, chunk_states, D, y, CHUNK_SIZE, HEADDIM, DSTATE, True)


@ct.kernel
def chunk_kernel_without_mask(x, dt, dA_cumsum, B, C, chunk_states, D, y,
                              CHUNK_SIZE: ct.Constant[int], HEADDIM: ct.Constant[int],
                              DSTATE: ct.Constant[int]):
    # The bug: no causal mask, so every position also reads the chunk's future.
    chunk_body(x, dt, dA_cumsum, B, C, chunk_states, D, y, CHUNK_SIZE, HEADDIM, DSTATE, False)


@ct.kernel
def chunk_kernel_stub(x, dt, dA_cumsum, B, C, chunk_states, D, y,
                      CHUNK_SIZE: ct.Constant[int], HEADDIM: ct.Constant[int],
                      DSTATE: ct.Constant[int]):
    b, c, h = ct.bid(0), ct.bid(1), ct.bid(2)
    raise NotImplementedError("Exercise: write your code here")


def test_chunk_check_passes_a_correct_kernel(capsys):
    assert checks.check_compute_out_chunk(chunk_kernel)
    out = capsys.readouterr().out
    assert out.count("✅ compute_out_chunk_kernel") == 2 and "ngroups=2" in out


def test_chunk_check_catches_a_missing_causal_mask(capsys):
    assert not checks.check_compute_out_chunk(chunk_kernel_without_mask)
    out = capsys.readouterr().out
    assert "❌ compute_out_chunk_kernel" in out and "   at [batch 0, token " in out
    assert "Hint: the causal mask is missing" in out


def test_chunk_check_unfinished(capsys):
    assert not checks.check_compute_out_chunk(chunk_kernel_stub)
    assert "⏳ compute_out_chunk_kernel is not implemented yet" in capsys.readouterr().out


# --- the tensor-core kernel, one block per (batch, chunk, head, headdim tile) -----------------

@ct.function
def mma_body(x, dt, dA_cumsum, B, C, chunk_states, D, z, y, CHUNK_SIZE, BLOCK_P, DSTATE, HAS_Z,
             WEIGHT_BY_DT):
    """One (batch, chunk, head, headdim tile) block; ``WEIGHT_BY_DT=False`` is the learner's bug
    of scores not weighted by ``dt_j``."""
    nchunks = dA_cumsum.shape[2]
    b, c, h, p = ct.bid(0) // nchunks, ct.bid(0) % nchunks, ct.bid(1), ct.bid(2)
    g = h // (x.shape[2] // B.shape[2])
    x_c = ct.reshape(ct.load(x, (b, c, h, p), (1, CHUNK_SIZE, 1, BLOCK_P), padding_mode=ZERO),
                     (CHUNK_SIZE, BLOCK_P))
    B_c = ct.reshape(ct.load(B, (b, c, g, 0), (1, CHUNK_SIZE, 1, DSTATE), padding_mode=ZERO),
                     (CHUNK_SIZE, DSTATE))
    C_c = ct.reshape(ct.load(C, (b, c, g, 0), (1, CHUNK_SIZE, 1, DSTATE), padding_mode=ZERO),
                     (CHUNK_SIZE, DSTATE))
    dA = ct.load(dA_cumsum, (b, h, c, 0), (1, 1, 1, CHUNK_SIZE))
    dA_i, dA_j = ct.reshape(dA, (CHUNK_SIZE, 1)), ct.reshape(dA, (1, CHUNK_SIZE))
    h_enter = ct.reshape(ct.load(chunk_states, (b, h, c, p, 0), (1, 1, 1, BLOCK_P, DSTATE),
                                 padding_mode=ZERO), (BLOCK_P, DSTATE)).astype(C.dtype)
    acc = ct.mma(C_c, ct.transpose(h_enter), ct.zeros((CHUNK_SIZE, BLOCK_P), dtype=ct.float32))
    acc = acc * ct.exp(dA_i)
    scores = ct.mma(C_c, ct.transpose(B_c), ct.zeros((CHUNK_SIZE, CHUNK_SIZE), dtype=ct.float32))
    scores = scores * ct.exp(ct.minimum(dA_i - dA_j, 0.0))
    if WEIGHT_BY_DT:
        scores = scores * ct.reshape(ct.load(dt, (b, h, c, 0), (1, 1, 1, CHUNK_SIZE)),
                                     (1, CHUNK_SIZE))
    rows = ct.reshape(ct.arange(CHUNK_SIZE, dtype=ct.int32), (CHUNK_SIZE, 1))
    cols = ct.reshape(ct.arange(CHUNK_SIZE, dtype=ct.int32), (1, CHUNK_SIZE))
    scores = ct.where(rows >= cols, scores, 0.0)
    acc = ct.mma(scores.astype(x.dtype), x_c, acc)
    acc = acc + x_c.astype(ct.float32) * ct.reshape(ct.load(D, (h,), (1,)), (1, 1))
    if HAS_Z:
        z_c = ct.reshape(ct.load(z, (b, c, h, p), (1, CHUNK_SIZE, 1, BLOCK_P), padding_mode=ZERO),
                         (CHUNK_SIZE, BLOCK_P)).astype(ct.float32)
        acc = acc * z_c / (1.0 + ct.exp(-z_c))
    ct.store(y, (b, c, h, p), ct.reshape(acc.astype(y.dtype), (1, CHUNK_SIZE, 1, BLOCK_P)))


@ct.kernel
def mma_kernel(x, dt, dA_cumsum, B, C, chunk_states, D, z, y,
               CHUNK_SIZE: ct.Constant[int], BLOCK_P: ct.Constant[int], DSTATE: ct.Constant[int],
               HAS_Z: ct.Constant[bool]):
    mma_body(x, dt, dA_cumsum, B, C, chunk_states, D, z, y, CHUNK_SIZE, BLOCK_P, DSTATE, HAS_Z,
             True)


@ct.kernel
def mma_kernel_without_dt(x, dt, dA_cumsum, B, C, chunk_states, D, z, y,
                          CHUNK_SIZE: ct.Constant[int], BLOCK_P: ct.Constant[int],
                          DSTATE: ct.Constant[int], HAS_Z: ct.Constant[bool]):
    # The bug: the scores are not weighted by dt_j.
    mma_body(x, dt, dA_cumsum, B, C, chunk_states, D, z, y, CHUNK_SIZE, BLOCK_P, DSTATE, HAS_Z,
             False)


@ct.kernel
def mma_kernel_stub(x, dt, dA_cumsum, B, C, chunk_states, D, z, y,
                    CHUNK_SIZE: ct.Constant[int], BLOCK_P: ct.Constant[int],
                    DSTATE: ct.Constant[int], HAS_Z: ct.Constant[bool]):
    raise NotImplementedError("Exercise: write your code here")


def test_mma_check_passes_a_correct_kernel(capsys):
    assert checks.check_compute_out_mma(mma_kernel)
    out = capsys.readouterr().out
    assert out.count("✅ compute_out_mma_kernel") == 3
    assert "dtype=bfloat16 with z" in out


def test_mma_check_catches_a_missing_dt_weight(capsys):
    assert not checks.check_compute_out_mma(mma_kernel_without_dt)
    out = capsys.readouterr().out
    assert "❌ compute_out_mma_kernel" in out and "   at [batch 0, token " in out
    assert "Hint: each input position j must be weighted by its step dt[j]" in out


def test_mma_check_unfinished(capsys):
    assert not checks.check_compute_out_mma(mma_kernel_stub)
    assert "⏳ compute_out_mma_kernel is not implemented yet" in capsys.readouterr().out


# --- the traffic table the notebook shows ----------------------------------------------------

def test_traffic_rows_fused_is_cheapest_and_matrix_grows_with_chunk():
    from mamba2_tile.course.plots.compute_out import traffic_rows, traffic_table

    rows = traffic_rows(8, 8192, 64, 64, 128, chunk_sizes=(64, 256))
    for row in rows:
        assert row["bytes"]["fused"] < row["bytes"]["C Bᵀ via memory"] < \
            row["bytes"]["L ∘ C Bᵀ via memory"]
    extra = [r["bytes"]["L ∘ C Bᵀ via memory"] - r["bytes"]["fused"] for r in rows]
    assert extra[1] == 4 * extra[0]      # seqlen * chunk_size per head: x4 from 64 to 256
    assert extra[0] == 2 * 8 * 64 * 8192 * 64 * 4
    table = traffic_table(rows)
    assert all(name in table for name in rows[0]["bytes"])
    assert [line.split()[0] for line in table.splitlines()[2:]] == ["64", "256"]
