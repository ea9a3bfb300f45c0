"""Notebook 07's checks pass right answers, fail plausible wrong ones naming the positions and the
likely mistake, and greet an unfinished exercise with the friendly line."""

import numpy as np
import pytest
import torch

from mamba2_tile.course.checks import compute_out as checks
from mamba2_tile.cost import interaction_matrix_bytes
from mamba2_tile.tile import ct

from compute_out_kernels import chunk_kernel, chunk_kernel_without_mask, mma_kernel, mma_without_dt


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
    assert not checks.check_compute_out_mma(mma_without_dt)
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
