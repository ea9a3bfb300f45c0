"""The notebook 02 checks pass right answers, fail plausible wrong ones with a useful message,
and greet an unfinished exercise with the friendly line."""

import numpy as np
import pytest

from mamba2_tile.course.checks.quadratic import (check_decay_mask, check_segsum,
                                          check_ssd_quadratic_single_head)
from mamba2_tile.reference import segsum


def not_written(*args):
    raise NotImplementedError("Exercise: write your code here")


def naive_segsum(a):
    """Differences of prefix sums: right for short, tame inputs, wrong after a huge step."""
    prefix = np.cumsum(a, axis=-1)
    diff = prefix[..., :, None] - prefix[..., None, :]
    T = a.shape[-1]
    return np.where(np.tril(np.ones((T, T), dtype=bool)), diff, -np.inf)


def inclusive_segsum(a):
    return segsum(a) + np.where(np.isfinite(segsum(a)), a[..., None, :], 0.0)


def naive_decay_mask(dt, A):
    prefix = np.exp(np.cumsum(dt * A))
    return np.tril(prefix[:, None] / prefix[None, :])


def transposed_decay_mask(dt, A):
    return np.exp(segsum(dt * A)).T


def ssd_quadratic_single_head(x, dt, A, B, C):
    return (np.exp(segsum(dt * A)) * (C @ B.T)) @ (dt[:, None] * x)


def forgot_dt(x, dt, A, B, C):
    return (np.exp(segsum(dt * A)) * (C @ B.T)) @ x


def swapped_b_c(x, dt, A, B, C):
    return (np.exp(segsum(dt * A)) * (B @ C.T)) @ (dt[:, None] * x)


def test_correct_answers_pass(capsys):
    assert check_segsum(segsum)
    assert check_decay_mask(lambda dt, A: np.exp(segsum(dt * A)))
    assert check_ssd_quadratic_single_head(ssd_quadratic_single_head)
    out = capsys.readouterr().out
    assert "✅" in out and "❌" not in out


@pytest.mark.parametrize("check", [check_segsum, check_decay_mask,
                                   check_ssd_quadratic_single_head])
def test_unfinished_exercise_gets_the_friendly_line(check, capsys):
    assert check(not_written) is False
    out = capsys.readouterr().out
    assert "⏳" in out and "not implemented yet" in out


@pytest.mark.parametrize("wrong, hint", [
    (naive_segsum, "cumsum[t] - cumsum[s]"),
    (inclusive_segsum, "starts *after* s"),
    (lambda a: np.where(np.isfinite(segsum(a)), segsum(a), 0.0), "-inf"),
])
def test_wrong_segsum_fails_with_positions_and_hint(wrong, hint, capsys):
    assert check_segsum(wrong) is False
    out = capsys.readouterr().out
    assert "❌" in out and "   at [" in out and hint in out


@pytest.mark.parametrize("wrong, hint", [
    (naive_decay_mask, "NaN"),
    (transposed_decay_mask, "transposed"),
])
def test_wrong_decay_mask_fails_with_positions_and_hint(wrong, hint, capsys):
    with np.errstate(all="ignore"):
        assert check_decay_mask(wrong) is False
    out = capsys.readouterr().out
    assert "❌" in out and "   at [" in out and hint in out


@pytest.mark.parametrize("wrong, hint", [
    (forgot_dt, "dt·x"),
    (swapped_b_c, "C Bᵀ"),
])
def test_wrong_quadratic_fails_with_positions_and_hint(wrong, hint, capsys):
    assert check_ssd_quadratic_single_head(wrong) is False
    out = capsys.readouterr().out
    assert "❌" in out and "   at [" in out and hint in out


def zero_above_segsum(a):
    """The right lower triangle, but 0 (not -inf) for the future: the hint must name the
    upper triangle, not the way the lower one was computed (issue #16, item 1)."""
    return np.where(np.isfinite(segsum(a)), segsum(a), 0.0)


def test_zero_above_the_diagonal_is_named(capsys):
    assert check_segsum(zero_above_segsum) is False
    out = capsys.readouterr().out
    assert "above the diagonal" in out and "cumsum[t] - cumsum[s]" not in out
