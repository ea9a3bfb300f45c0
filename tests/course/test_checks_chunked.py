"""The notebook 03 checks pass right answers, fail plausible wrong ones with a useful message,
and greet an unfinished exercise with the friendly line."""

import numpy as np
import pytest

from mamba2_tile.course.checks.chunked import (check_chunk_cumsum_single_head, check_chunk_output,
                                        check_jump)


def not_written(*args):
    raise NotImplementedError("Exercise: write your code here")


def chunk_cumsum_single_head(dt, A, chunk_size):
    padded = np.pad(dt, (0, -len(dt) % chunk_size))
    return np.cumsum(padded.reshape(-1, chunk_size) * A, axis=-1)


def cumsum_not_restarting(dt, A, chunk_size):
    padded = np.pad(dt, (0, -len(dt) % chunk_size))
    return np.cumsum(padded * A).reshape(-1, chunk_size)


def cumsum_not_padded(dt, A, chunk_size):
    return np.cumsum(dt[: len(dt) // chunk_size * chunk_size].reshape(-1, chunk_size) * A, -1)


def jump(state, x, dt, dA_cumsum, B):
    weight = np.exp(dA_cumsum[-1] - dA_cumsum) * dt
    return np.exp(dA_cumsum[-1]) * state + np.einsum("s,sp,sn->pn", weight, x, B)


def jump_without_old_decay(state, x, dt, dA_cumsum, B):
    weight = np.exp(dA_cumsum[-1] - dA_cumsum) * dt
    return state + np.einsum("s,sp,sn->pn", weight, x, B)


def jump_decaying_from_start(state, x, dt, dA_cumsum, B):
    weight = np.exp(dA_cumsum) * dt
    return np.exp(dA_cumsum[-1]) * state + np.einsum("s,sp,sn->pn", weight, x, B)


def intra(x, dt, dA, B, C):
    s = len(dA)
    causal = np.tril(np.ones((s, s), dtype=bool))
    L = np.exp(np.where(causal, dA[:, None] - dA[None, :], -np.inf))
    return (L * (C @ B.T)) @ (dt[:, None] * x)


def chunk_output(x, dt, dA, B, C, h_enter):
    return np.exp(dA)[:, None] * (C @ h_enter.T) + intra(x, dt, dA, B, C)


def output_intra_only(x, dt, dA, B, C, h_enter):
    return intra(x, dt, dA, B, C)


def output_undecayed_state(x, dt, dA, B, C, h_enter):
    return C @ h_enter.T + intra(x, dt, dA, B, C)


def test_correct_answers_pass(capsys):
    assert check_chunk_cumsum_single_head(chunk_cumsum_single_head)
    assert check_jump(jump)
    assert check_chunk_output(chunk_output)
    out = capsys.readouterr().out
    assert "✅" in out and "❌" not in out


@pytest.mark.parametrize("check", [check_chunk_cumsum_single_head, check_jump,
                                   check_chunk_output])
def test_unfinished_exercise_gets_the_friendly_line(check, capsys):
    assert check(not_written) is False
    out = capsys.readouterr().out
    assert "⏳" in out and "not implemented yet" in out


@pytest.mark.parametrize("check, wrong, hint, lists_positions", [
    (check_chunk_cumsum_single_head, cumsum_not_restarting, "restarts at every chunk", True),
    (check_chunk_cumsum_single_head, cumsum_not_padded, "pad dt", False),
    (check_jump, jump_without_old_decay, "exp(dA_last) * h", True),
    (check_jump, jump_decaying_from_start, "exp(dA_last - dA_i)", True),
    (check_chunk_output, output_intra_only, "only the intra-chunk part", True),
    (check_chunk_output, output_undecayed_state, "scale C_i h_enter by exp(dA_i)", True),
])
def test_wrong_answers_fail_with_positions_and_hint(check, wrong, hint, lists_positions,
                                                     capsys):
    assert check(wrong) is False
    out = capsys.readouterr().out
    assert "❌" in out and hint in out
    assert ("   at [" in out) == lists_positions      # a wrong shape has no positions to list
