"""The notebook 01 checks pass a right answer, fail plausible wrong ones, and wait for stubs."""

import numpy as np
import pytest

from mamba2_tile.course.checks.recurrence import check_ssd_scan, check_ssd_step


def ssd_step(state, x_t, dt_t, A, B_t, C_t):
    new_state = np.exp(dt_t * A) * state + dt_t * np.outer(x_t, B_t)
    return new_state, new_state @ C_t


def step_reading_old_state(state, x_t, dt_t, A, B_t, C_t):
    new_state = np.exp(dt_t * A) * state + dt_t * np.outer(x_t, B_t)
    return new_state, state @ C_t


def step_without_dt_in_decay(state, x_t, dt_t, A, B_t, C_t):
    new_state = np.exp(A) * state + dt_t * np.outer(x_t, B_t)
    return new_state, new_state @ C_t


def step_with_transposed_state(state, x_t, dt_t, A, B_t, C_t):
    new_state = np.exp(dt_t * A) * state.T + dt_t * np.outer(B_t, x_t)
    return new_state, C_t @ new_state


def step_updating_in_place(state, x_t, dt_t, A, B_t, C_t):
    state *= np.exp(dt_t * A)
    state += dt_t * np.outer(x_t, B_t)
    return state, state @ C_t


def not_implemented(*args, **kwargs):
    raise NotImplementedError("Exercise: write your code here")


def make_scan(group_of_head=lambda h, nheads, ngroups: h // (nheads // ngroups),
              use_D=True, use_initial_states=True):
    def ssd_scan(x, dt, A, B, C, D=None, initial_states=None):
        batch, seqlen, nheads, headdim = x.shape
        ngroups, dstate = B.shape[2:]
        group = group_of_head(np.arange(nheads), nheads, ngroups)
        B, C = B[:, :, group], C[:, :, group]
        state = np.zeros((batch, nheads, headdim, dstate))
        if use_initial_states and initial_states is not None:
            state = initial_states.copy()
        y = np.empty_like(x)
        for t in range(seqlen):
            decay = np.exp(dt[:, t] * A)[:, :, None, None]
            state = decay * state + (dt[:, t, :, None] * x[:, t])[..., None] * B[:, t, :, None]
            y[:, t] = np.einsum("bhpn,bhn->bhp", state, C[:, t])
        if use_D and D is not None:
            y = y + x * (D[:, None] if D.ndim == 1 else D)
        return y, state
    return ssd_scan


def test_step_passes_the_right_answer(capsys):
    assert check_ssd_step(ssd_step)
    out = capsys.readouterr().out
    assert "✅ new_state" in out and "✅ y_t" in out and "❌" not in out


def test_step_accepts_an_in_place_update(capsys):
    assert check_ssd_step(step_updating_in_place)


@pytest.mark.parametrize("wrong, hint", [
    (step_reading_old_state, "UPDATED state"),
    (step_without_dt_in_decay, "not exp(A)"),
])
def test_step_fails_a_plausible_mistake_and_names_it(capsys, wrong, hint):
    assert not check_ssd_step(wrong)
    out = capsys.readouterr().out
    assert "❌" in out
    assert "   at [trial 0, " in out                     # the differing positions, named
    assert hint in out


def test_step_reports_a_transposed_state_by_its_shape(capsys):
    assert not check_ssd_step(step_with_transposed_state)
    assert "shape (4, 3, 5), expected (4, 5, 3)" in capsys.readouterr().out


def test_step_waits_for_an_unfinished_exercise(capsys):
    assert check_ssd_step(not_implemented) is False
    out = capsys.readouterr().out
    assert "⏳ ssd_step is not implemented yet" in out and "❌" not in out


def test_step_asks_for_a_pair(capsys):
    assert not check_ssd_step(lambda state, x_t, dt_t, A, B_t, C_t: state)
    assert "must return a pair" in capsys.readouterr().out


def test_scan_passes_the_right_answer(capsys):
    assert check_ssd_scan(make_scan())
    out = capsys.readouterr().out
    assert out.count("✅") == 6 and "❌" not in out


@pytest.mark.parametrize("wrong, hint", [
    (make_scan(group_of_head=lambda h, nheads, ngroups: h % ngroups), "not h % ngroups"),
    (make_scan(use_D=False), "skip connection D * x"),
    (make_scan(use_initial_states=False), "start from initial_states"),
])
def test_scan_fails_a_plausible_mistake_and_names_it(capsys, wrong, hint):
    assert not check_ssd_scan(wrong)
    out = capsys.readouterr().out
    assert "❌ y:" in out
    assert "   at [batch 0, token " in out
    assert hint in out


def test_scan_waits_for_an_unfinished_exercise(capsys):
    assert check_ssd_scan(not_implemented) is False
    out = capsys.readouterr().out
    assert "⏳ ssd_scan is not implemented yet" in out and "❌" not in out


def test_scan_checks_are_deterministic(capsys):
    check_ssd_scan(make_scan(use_D=False))
    first = capsys.readouterr().out
    check_ssd_scan(make_scan(use_D=False))
    assert capsys.readouterr().out == first
