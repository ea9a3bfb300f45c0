"""A failing check draws where the answer is wrong (issue #16 item 2): a small heat-map over two
axes named in the learner's terms, drawn for a wrong answer only, on a headless backend (Agg,
chosen in conftest.py). The exercises' own checks are fed real mistakes and the picture's
labels and pattern are read back."""

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest

from mamba2_tile.course.checks import (backward, chunked, compute_out, primer, quadratic,
                                       recurrence)
from mamba2_tile.course.checks.chunk_cumsum import check_chunk_cumsum_heads
from mamba2_tile.course.checks.feedback import compare
from mamba2_tile.course.plots.errors import error_map, plot_error
from mamba2_tile.reference import segsum

from compute_out_kernels import chunk_kernel, chunk_kernel_without_mask


def figures():
    return [plt.figure(number) for number in plt.get_fignums()]


def only_axes():
    """The axes of the single figure drawn (its colour bar aside)."""
    drawn = figures()
    assert len(drawn) == 1, f"expected one picture, got {len(drawn)}"
    return drawn[0].axes[0]


# --- the map itself --------------------------------------------------------------------------

def test_error_map_takes_the_max_over_the_other_axes_and_merges_named_ones():
    expected = np.zeros((2, 3, 4, 5))                       # (batch, head, chunk, position)
    got = expected.copy()
    got[1, 2, 3, 4] = 7.0
    got[0, 2, 3, 4] = 2.0
    got[0, 0, 0, 0] = np.nan
    wrong = ~np.isclose(got, expected) | np.isnan(got)
    axes = ("batch", "head", "chunk", "position")
    errors, not_finite, reduced = error_map(got, expected, wrong, axes, "head",
                                            ("chunk", "position"))
    assert errors.shape == (3, 20) and reduced == ("batch",)
    assert errors[2, 3 * 5 + 4] == 7.0
    assert not_finite[0, 0] and not_finite.sum() == 1
    assert errors[0, 0] == 0.0 and np.count_nonzero(errors) == 1


def test_error_map_leaves_positions_within_tolerance_white():
    expected = np.ones((3, 3))
    got = expected + 1e-12
    got[1, 1] = 5.0
    wrong = ~np.isclose(got, expected)
    errors, _, _ = error_map(got, expected, wrong, ("a", "b"), "a", "b")
    assert np.count_nonzero(errors) == 1 and errors[1, 1] == 4.0


@pytest.mark.parametrize("rows, cols, message", [
    ("token", "nowhere", "not among the array's axes"),
    ("token", ("token", "channel"), "repeat an axis"),
])
def test_error_map_rejects_bad_picture_axes(rows, cols, message):
    a = np.zeros((2, 2))
    with pytest.raises(ValueError, match=message):
        error_map(a, a, a == 0, ("token", "channel"), rows, cols)


def test_plot_error_titles_and_labels_in_the_learners_terms():
    expected = np.zeros((4, 4))
    got = np.where(np.triu(np.ones((4, 4), bool), k=1), np.inf, 0.0)   # +inf in the future
    wrong = ~np.isclose(got, expected)
    fig = plot_error("segsum", got, expected, wrong, ("t", "s"), "t", "s")
    ax = fig.axes[0]
    assert ax.get_ylabel() == "t" and ax.get_xlabel() == "s"
    assert "where segsum is wrong" in ax.get_title()
    assert "black: NaN or ±inf" in ax.get_title()
    shown = ax.images[0].get_array()
    assert np.array_equal(np.ma.getmaskarray(shown), np.triu(np.ones((4, 4), bool), k=1))


# --- compare draws it when asked, for a wrong answer only ----------------------------------

def test_compare_draws_nothing_for_a_right_answer(capsys):
    a = np.arange(6.0).reshape(2, 3)
    assert compare("y", a, a, axes=("token", "channel"), picture=("token", "channel"))
    assert figures() == []


def test_compare_draws_one_picture_for_a_wrong_answer(capsys):
    expected = np.arange(6.0).reshape(2, 3)
    got = expected.copy()
    got[1, 2] += 1
    assert not compare("y, case 1", got, expected, axes=("token", "channel"),
                       picture=("token", "channel"))
    ax = only_axes()
    assert (ax.get_ylabel(), ax.get_xlabel()) == ("token", "channel")
    assert ax.get_title().startswith("where y is wrong")
    assert matplotlib.get_backend().lower() == "agg"            # drawn headless


def test_compare_draws_nothing_for_a_wrong_shape_or_without_a_picture(capsys):
    assert not compare("y", np.zeros((2, 2)), np.ones((2, 3)), axes=("token", "channel"),
                       picture=("token", "channel"))
    assert not compare("y", np.zeros((2, 3)), np.ones((2, 3)), axes=("token", "channel"))
    assert figures() == []


def test_a_picture_needs_axis_names():
    with pytest.raises(ValueError, match="needs axes"):
        compare("y", np.zeros(2), np.zeros(2), picture=("token", "channel"))


# --- the exercises' checks, fed real mistakes -------------------------------------------------

def test_nb02_segsum_zero_above_the_diagonal_draws_the_upper_triangle(capsys):
    assert not quadratic.check_segsum(lambda a: np.tril(segsum(a)))
    ax = only_axes()
    assert (ax.get_ylabel(), ax.get_xlabel()) == ("t (output token)", "s (input token)")
    bad = np.ma.getmaskarray(ax.images[0].get_array())
    assert np.array_equal(bad, np.triu(np.ones(bad.shape, bool), k=1))


def test_nb02_right_answers_draw_nothing(capsys):
    assert quadratic.check_segsum(segsum)
    assert quadratic.check_decay_mask(lambda dt, A: np.exp(segsum(dt * A)))
    assert figures() == []


def test_nb02_quadratic_strict_mask_draws_tokens_by_channels(capsys):
    wrong_answer = quadratic.QUADRATIC_MISTAKES[4][0]           # the mask without its diagonal
    assert not quadratic.check_ssd_quadratic_single_head(wrong_answer)
    ax = only_axes()
    assert (ax.get_ylabel(), ax.get_xlabel()) == ("token", "channel")


def test_nb03_strict_mask_draws_positions_by_channels(capsys):
    assert not chunked.check_chunk_output(chunked.OUTPUT_MISTAKES[2][0])
    ax = only_axes()
    assert (ax.get_ylabel(), ax.get_xlabel()) == ("position in chunk", "channel")


def test_nb03_exclusive_cumsum_draws_chunks_by_positions(capsys):
    exclusive = chunked.CUMSUM_MISTAKES[1][0]

    def learner(dt, A, chunk_size):
        return exclusive(np.pad(dt, (0, -len(dt) % chunk_size)).reshape(-1, chunk_size) * A, A)

    assert not chunked.check_chunk_cumsum_single_head(learner)
    ax = only_axes()
    assert (ax.get_ylabel(), ax.get_xlabel()) == ("chunk", "position in chunk")


def test_nb05_store_without_transpose_draws_heads_by_tokens(capsys):
    from test_mistake_catalogue import heads_correct, heads_without_transpose

    assert check_chunk_cumsum_heads(heads_correct, device="cpu")
    assert figures() == []
    assert not check_chunk_cumsum_heads(heads_without_transpose, device="cpu")
    ax = only_axes()
    assert (ax.get_ylabel(), ax.get_xlabel()) == ("head", "chunk · position in chunk")
    assert "max over batch" in ax.get_title()


def test_nb07_missing_mask_draws_tokens_by_head_and_channel(capsys):
    assert compute_out.check_compute_out_chunk(chunk_kernel, device="cpu")
    assert figures() == []
    assert not compute_out.check_compute_out_chunk(chunk_kernel_without_mask, device="cpu")
    ax = only_axes()
    assert (ax.get_ylabel(), ax.get_xlabel()) == ("token", "head · channel")


def test_nb11_forward_walk_draws_tokens_by_state_entries(capsys):
    def forward_walk(dy, x, dt, A, B, C):
        dh = np.zeros((len(dt), dy.shape[1], C.shape[1]))
        g = 0.0
        for t in range(len(dt)):
            g = np.exp(dt[t] * A) * g + np.outer(dy[t], C[t])
            dh[t] = g
        return dh, dt[:, None] * np.einsum("tpn,tn->tp", dh, B)

    assert not backward.check_recurrent_state_gradient(forward_walk)
    ax = only_axes()
    assert (ax.get_ylabel(), ax.get_xlabel()) == ("token", "channel · state")


def test_nb04_matmul_with_one_k_tile_draws_rows_by_columns(capsys):
    from test_mistake_catalogue import ct

    @ct.kernel
    def first_k_tile_only(a, b, c, TM: ct.Constant[int], TN: ct.Constant[int],
                          TK: ct.Constant[int]):
        i, j = ct.bid(0), ct.bid(1)
        acc = ct.zeros((TM, TN), dtype=ct.float32)
        acc = ct.mma(ct.load(a, (i, 0), (TM, TK), padding_mode=ct.PaddingMode.ZERO),
                     ct.load(b, (0, j), (TK, TN), padding_mode=ct.PaddingMode.ZERO), acc)
        ct.store(c, (i, j), acc)

    assert not primer.check_matmul(first_k_tile_only)
    ax = only_axes()
    assert (ax.get_ylabel(), ax.get_xlabel()) == ("row of c", "column of c")


def test_nb01_scan_without_skip_draws_tokens_by_head_and_channel(capsys):
    from mamba2_tile.reference import ssd_recurrent

    def scan_without_D(x, dt, A, B, C, D=None, initial_states=None):
        return ssd_recurrent(x, dt, A, B, C, initial_states=initial_states,
                             return_final_states=True)

    assert not recurrence.check_ssd_scan(scan_without_D)
    ax = only_axes()
    assert (ax.get_ylabel(), ax.get_xlabel()) == ("token", "head · channel")


def test_nb06_state_stored_after_the_jump_draws_chunks_by_state_entries(capsys):
    from mamba2_tile.course.checks.fwd_pass_state import check_fwd_pass_state_simple
    from test_checks_fwd_pass_state import simple_stores_after

    assert not check_fwd_pass_state_simple(simple_stores_after, device="cpu")
    ax = only_axes()
    assert (ax.get_ylabel(), ax.get_xlabel()) == ("chunk", "channel · state")
    assert "max over batch, head" in ax.get_title()
