"""The notebook 11 checks pass right answers, name the tokens / chunks a wrong answer gets wrong,
recognise walking forward and a missing or off-by-one decay, and greet an unfinished exercise
with the friendly line."""

import numpy as np
import pytest

from mamba2_tile.course.checks.backward import (check_bwd_pass_state,
                                                check_recurrent_state_gradient, state_gradients)
from mamba2_tile.reference_backward import ssd_recurrent_backward


def not_written(*args):
    raise NotImplementedError("Exercise: write your code here")


def _recurrent(order, factor, with_dt=True):
    """A state-gradient walk; ``factor(decay, t)`` multiplies the gradient carried into t."""
    def walk(dy, x, dt, A, B, C):
        decay = np.exp(dt * A)
        dh = np.zeros((len(dt), dy.shape[1], C.shape[1]))
        g, previous = np.zeros(dh.shape[1:]), None
        for t in order(len(dt)):
            g = (0.0 if previous is None else factor(decay, t, previous)) * g \
                + np.outer(dy[t], C[t])
            dh[t], previous = g, t
        dx = np.einsum("tpn,tn->tp", dh, B)
        return dh, (dt[:, None] * dx if with_dt else dx)
    return walk


def backwards(n):
    return reversed(range(n))


def forwards(n):
    return range(n)


recurrent_state_gradient = _recurrent(backwards, lambda decay, t, prev: decay[prev])
walked_forward = _recurrent(forwards, lambda decay, t, prev: decay[t])
without_decay = _recurrent(backwards, lambda decay, t, prev: 1.0)
decay_off_by_one = _recurrent(backwards, lambda decay, t, prev: decay[t])
dx_without_dt = _recurrent(backwards, lambda decay, t, prev: decay[prev], with_dt=False)


def _chunked(order, carry_of, read=True, record_before=False):
    def walk(dy, C, dA_cumsum, dfinal_state):
        carry = np.exp(dA_cumsum[:, -1])
        weight = np.exp(dA_cumsum) if read else np.ones_like(dA_cumsum)
        from_outputs = np.einsum("cs,csp,csn->cpn", weight, dy, C)
        out, g = np.zeros_like(from_outputs), dfinal_state.copy()
        for c in order(len(carry)):
            if record_before:
                out[c] = g
            g = carry_of(carry, c) * g + from_outputs[c]
            if not record_before:
                out[c] = g
        return out
    return walk


bwd_pass_state_single_head = _chunked(backwards, lambda carry, c: carry[c])
chunks_walked_forward = _chunked(forwards, lambda carry, c: carry[c])
chunks_without_carry = _chunked(backwards, lambda carry, c: 1.0)
carry_off_by_one = _chunked(backwards, lambda carry, c: carry[c + 1] if c + 1 < len(carry) else 1.0)
unread_state = _chunked(backwards, lambda carry, c: carry[c], read=False)
stored_leaving_state = _chunked(backwards, lambda carry, c: carry[c], record_before=True)


def test_state_gradients_are_the_recurrence_run_backward():
    rng = np.random.default_rng(0)
    dy, x = rng.standard_normal((2, 7, 3))
    B, C = rng.standard_normal((2, 7, 4))
    dt, A = rng.uniform(0.1, 0.9, 7), -0.7
    dfinal = rng.standard_normal((3, 4))
    dh = state_gradients(dy, dt, A, C, dfinal)
    g = dfinal.copy()
    for t in reversed(range(7)):
        g = g + np.outer(dy[t], C[t])
        np.testing.assert_allclose(dh[t], g, atol=1e-12)
        g = np.exp(dt[t] * A) * g
    dx = ssd_recurrent_backward(dy[None, :, None], x[None, :, None], dt[None, :, None],
                                np.array([A]), B[None, :, None], C[None, :, None]).dx[0, :, 0]
    np.testing.assert_allclose(recurrent_state_gradient(dy, x, dt, A, B, C)[1], dx, atol=1e-12)


def test_correct_answers_pass(capsys):
    assert check_recurrent_state_gradient(recurrent_state_gradient)
    assert check_bwd_pass_state(bwd_pass_state_single_head)
    out = capsys.readouterr().out
    assert "✅" in out and "❌" not in out


@pytest.mark.parametrize("check", [check_recurrent_state_gradient, check_bwd_pass_state])
def test_unfinished_exercise_gets_the_friendly_line(check, capsys):
    assert check(not_written) is False
    out = capsys.readouterr().out
    assert "⏳" in out and "not implemented yet" in out


@pytest.mark.parametrize("check, wrong, hint, where", [
    (check_recurrent_state_gradient, walked_forward, "you walked forward", "wrong at tokens"),
    (check_recurrent_state_gradient, without_decay, "no decay", "wrong at tokens 0, 1"),
    (check_recurrent_state_gradient, decay_off_by_one, "off by one token", "wrong at tokens 0,"),
    (check_recurrent_state_gradient, dx_without_dt, "multiply by dt_t", "wrong at tokens"),
    (check_bwd_pass_state, chunks_walked_forward, "you walked forward", "wrong at chunks"),
    (check_bwd_pass_state, chunks_without_carry, "no carry decay", "wrong at chunks 0, 1, 2, 3, 4 "),
    (check_bwd_pass_state, carry_off_by_one, "off by one chunk", "wrong at chunks 0, 1, 2, 3, 4 "),
    (check_bwd_pass_state, unread_state, "weight dy_i ⊗ C_i", "wrong at chunks"),
    (check_bwd_pass_state, stored_leaving_state, "leaving", "wrong at chunks"),
])
def test_wrong_answer_is_diagnosed(check, wrong, hint, where, capsys):
    assert check(wrong) is False
    out = capsys.readouterr().out
    assert "❌" in out and hint in out and where in out


def test_only_the_wrong_tokens_and_chunks_are_listed(capsys):
    # Without dfinal_state the last token's gradient has nothing to decay, so it stays right;
    # the chunk check passes a dfinal_state, which the last chunk's carry decay must scale.
    check_recurrent_state_gradient(without_decay)
    assert "wrong at tokens 0, 1, 2, 3, 4, 5, 6, 7 and 3 more (of 0..11;" in capsys.readouterr().out
    check_bwd_pass_state(stored_leaving_state)
    assert "wrong at chunks 0, 1, 2, 3, 4 (of 0..4;" in capsys.readouterr().out


def test_a_pair_is_required(capsys):
    assert check_recurrent_state_gradient(lambda *args: np.zeros(3)) is False
    assert "pair (dh, dx)" in capsys.readouterr().out
