"""The shared check machinery: verdicts, the positions it reports, the not-implemented path."""

import numpy as np
import pytest
import torch

from mamba2_tile.course.checks.feedback import NOT_DONE, attempt, compare


def test_match_passes(capsys):
    assert compare("y", np.ones((2, 3)), np.ones((2, 3)))
    assert "✅ y matches" in capsys.readouterr().out


def test_mismatch_lists_positions_values_and_hint(capsys):
    expected = np.arange(12.0).reshape(3, 4)
    got = expected.copy()
    got[1, 2] += 0.5
    got[2, 0] = np.nan
    assert not compare("y", got, expected, hint="check the decay")
    out = capsys.readouterr().out
    assert "❌ y: 2 of 12 values differ" in out
    assert "at [1, 2]: got 6.5, expected 6.0" in out
    assert "at [2, 0]: got nan" in out
    assert "1 values are NaN" in out and "Largest finite error 0.5 at [1, 2]" in out
    assert "Hint: check the decay" in out


def test_shape_mismatch_and_missing_return(capsys):
    assert not compare("y", np.ones(3), np.ones(4))
    assert not compare("y", None, np.ones(4))
    out = capsys.readouterr().out
    assert "shape (3,), expected (4,)" in out and "forget to `return`" in out


def test_equal_infinities_match_and_nan_never_does(capsys):
    assert compare("s", np.array([-np.inf, 1.0]), np.array([-np.inf, 1.0]))
    assert not compare("s", np.array([np.nan]), np.array([0.0]))


def test_long_lists_are_cut(capsys):
    assert not compare("y", np.zeros(20), np.ones(20), max_listed=3)
    assert "... and 17 more." in capsys.readouterr().out


def test_torch_tensors_are_compared_too(capsys):
    assert compare("y", torch.ones(3, dtype=torch.bfloat16), np.ones(3))


def test_attempt(capsys):
    def unfinished(a):
        raise NotImplementedError("Exercise: write your code here")

    assert attempt("f", unfinished, 1) is NOT_DONE
    assert "⏳ f is not implemented yet" in capsys.readouterr().out
    assert attempt("g", lambda a: a + 1, 1) == 2


def test_compare_names_the_axes_of_a_wrong_position(capsys):
    got = np.zeros((1, 2, 3))
    expected = got.copy()
    expected[0, 1, 2] = 1.0
    assert not compare("y", got, expected, axes=("batch", "chunk", "position in chunk"))
    out = capsys.readouterr().out
    assert "at [batch 0, chunk 1, position in chunk 2]: got 0.0, expected 1.0" in out
    with pytest.raises(ValueError, match="axes names 2 axes"):
        compare("y", got, expected, axes=("batch", "chunk"))
