"""The notebooks' live explorers, without a browser: each drawing function draws what its
sliders say (checked against the references), and each explorer redraws it when a slider
moves, shows as words and a PNG where widgets do not run, and refuses values off its sliders."""

import base64

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.colors import to_rgba  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from mamba2_tile import reference  # noqa: E402
from mamba2_tile.course import widgets  # noqa: E402
from mamba2_tile.course.plots.masks import plot_decay_mask_for, spiked_dt  # noqa: E402
from mamba2_tile.course.plots.recurrence import (expected_state_norm, plot_state_norm,  # noqa: E402
                                                 state_norms)
from mamba2_tile.course.plots.tiles import block_tile, plot_block_tile  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


# --- the decay mask (notebook 02) ---------------------------------------------------------

@pytest.mark.parametrize("A, dt, spike, seqlen", [(-1.0, 0.05, 0.0, 64), (-0.2, 0.5, 3.0, 37),
                                                  (-10.0, 1.0, 5.0, 8)])
def test_the_heat_map_is_the_mask_of_these_A_and_dt(A, dt, spike, seqlen):
    fig = plot_decay_mask_for(A, dt, spike, seqlen=seqlen)
    heat, row = fig.axes[0], fig.axes[1]
    shown = heat.images[0].get_array()
    steps = np.full(seqlen, dt)
    steps[seqlen * 5 // 8] += spike
    t, s = np.indices((seqlen, seqlen))
    # The mask from its definition: the product of exp(dt_r A) for r = s+1 .. t.
    expected = np.where(t >= s, np.exp(A * (np.cumsum(steps)[t] - np.cumsum(steps)[s])), 0)
    np.testing.assert_allclose(shown.filled(0), expected, rtol=1e-9, atol=1e-300)
    assert shown.mask[np.triu_indices(seqlen, 1)].all() and not shown.mask[t >= s].any()
    assert heat.images[0].get_clim() == (0, 1)      # fixed: the band moves, not the colour bar
    np.testing.assert_allclose(row.lines[0].get_ydata(), np.maximum(expected[-1], 1e-12),
                               rtol=1e-9)
    assert f"after {1 / abs(dt * A):.3g} tokens" in row.get_title()


def test_a_spike_cuts_the_memory_of_every_token_before_it():
    A, dt, spike, seqlen = -1.0, 0.05, 3.0, 64
    plain = np.exp(reference.segsum(spiked_dt(seqlen, dt) * A))
    spiked = np.exp(reference.segsum(spiked_dt(seqlen, dt, spike) * A))
    at = seqlen * 5 // 8
    assert at == 40 and spiked_dt(seqlen, dt, spike)[at] == dt + spike
    np.testing.assert_allclose(spiked[at:, :at], plain[at:, :at] * np.exp(spike * A))
    np.testing.assert_array_equal(spiked[:at, :at], plain[:at, :at])
    np.testing.assert_array_equal(spiked[at:, at:], plain[at:, at:])


# --- which tile a block loads (notebook 04) -----------------------------------------------

@pytest.mark.parametrize("array_shape, tile_shape", [((10, 14), (4, 4)), ((7, 5), (2, 8)),
                                                     ((1, 1), (1, 1)), ((3, 33), (16, 1))])
def test_block_tile_is_what_a_padded_load_reads(array_shape, tile_shape):
    x = np.arange(np.prod(array_shape)).reshape(array_shape)
    grid = [-(-n // t) for n, t in zip(array_shape, tile_shape)]
    padded = np.full([g * t for g, t in zip(grid, tile_shape)], -1)
    padded[:array_shape[0], :array_shape[1]] = x
    for i in range(grid[0]):
        for j in range(grid[1]):
            rows, cols, padding = block_tile(array_shape, tile_shape, (i, j))
            tile = padded[i * tile_shape[0]:(i + 1) * tile_shape[0],
                          j * tile_shape[1]:(j + 1) * tile_shape[1]]
            assert padding == (tile == -1).sum()
            np.testing.assert_array_equal(x[rows.start:rows.stop, cols.start:cols.stop],
                                          tile[:len(rows), :len(cols)])


@pytest.mark.parametrize("arguments, message", [
    (((10, 14), (4, 4), (3, 0)), r"block must index the \(3, 4\) grid of tiles, got \(3, 0\)"),
    (((10, 14), (4, 4), (0, -1)), r"block must index the \(3, 4\) grid"),
    (((10,), (4,), (0,)), "need a 2-D array shape"),
    (((10, 0), (4, 4), (0, 0)), "must be positive"),
])
def test_block_tile_refuses_what_no_launch_has(arguments, message):
    with pytest.raises(ValueError, match=message):
        block_tile(*arguments)


def _coloured_tiles(ax):
    """The rectangles drawn in a tile colour (not the grey of other tiles, nor padding/frames)."""
    plain = {to_rgba("0.93"), to_rgba("white")}
    return [p for p in ax.patches if isinstance(p, Rectangle) and p.get_fill()
            and tuple(p.get_facecolor()) not in plain]


@pytest.mark.parametrize("array_shape, tile_shape, block", [((10, 14), (4, 4), (1, 2)),
                                                            ((10, 14), (4, 4), (2, 3)),
                                                            ((9, 20), (8, 2), (0, 9))])
def test_only_the_blocks_tile_is_highlighted(array_shape, tile_shape, block):
    fig = plot_block_tile(array_shape, tile_shape, block)
    ax = fig.axes[0]
    rows, cols, padding = block_tile(array_shape, tile_shape, block)
    [tile] = _coloured_tiles(ax)
    assert (tile.get_x(), tile.get_y()) == (cols.start, rows.start)
    assert (tile.get_width(), tile.get_height()) == (len(cols), len(rows))
    assert [text.get_text() for text in ax.texts] == [f"block\n{block}"]
    label = ax.get_xlabel()
    assert f"index={block}" in label and f"x[{rows.start}:{rows.stop}, {cols.start}:{cols.stop}]" in label
    assert ("padding" in label) == (padding > 0)


def test_the_edge_block_of_notebook_04_reads_padding():
    rows, cols, padding = block_tile((10, 14), (4, 4), (2, 3))
    assert (rows, cols, padding) == (range(8, 10), range(12, 14), 12)
    assert "reads x[8:10, 12:14] + 12 padding" in plot_block_tile((10, 14), (4, 4), (2, 3)).axes[0].get_xlabel()


# --- the state's norm (notebook 01) -------------------------------------------------------

def test_state_norms_are_the_norms_of_the_states_the_quadratic_form_finds():
    rng = np.random.default_rng(0)
    seqlen, headdim, dstate, A = 50, 3, 5, -0.7
    x, B = rng.standard_normal((seqlen, headdim)), rng.standard_normal((seqlen, dstate))
    dt = rng.uniform(0.01, 1.0, seqlen)
    norms = state_norms(x, dt, A, B)
    for t in (1, 2, 17, seqlen):
        _, final = reference.ssd_quadratic(x[None, :t, None], dt[None, :t, None], np.array([A]),
                                           B[None, :t, None], B[None, :t, None],
                                           return_final_states=True)
        np.testing.assert_allclose(norms[t - 1], np.linalg.norm(final), rtol=1e-12)


def test_state_norms_refuse_mismatched_shapes():
    with pytest.raises(ValueError, match=r"need x \(seqlen, headdim\), dt \(seqlen,\) and B"):
        state_norms(np.zeros((5, 2)), np.zeros(4), -1.0, np.zeros((5, 3)))


@pytest.mark.parametrize("A, dt", [(-1.0, 0.05), (-0.01, 0.01), (0.0, 0.1)])
def test_the_expected_norm_is_the_root_mean_square_over_random_inputs(A, dt):
    rng = np.random.default_rng(1)
    seqlen, headdim, dstate, scale, runs = 120, 4, 3, 2.0, 400
    squares = np.zeros(seqlen)
    for _ in range(runs):
        x = scale * rng.standard_normal((seqlen, headdim))
        squares += state_norms(x, np.full(seqlen, dt), A, rng.standard_normal((seqlen, dstate))) ** 2
    expected = expected_state_norm(np.arange(1, seqlen + 1), A, dt, scale, headdim, dstate)
    np.testing.assert_allclose(np.sqrt(squares / runs), expected, rtol=0.15)


def test_the_expected_norm_levels_off_or_grows_like_the_square_root():
    unit = dict(dt=0.1, scale=1.0, headdim=8, dstate=16)
    level = 0.1 * np.sqrt(128 / -np.expm1(2 * 0.1 * -1.0))
    np.testing.assert_allclose(expected_state_norm(10_000, -1.0, **unit), level)
    np.testing.assert_allclose(expected_state_norm([1, 4, 100], 0.0, **unit),
                               0.1 * np.sqrt(128 * np.array([1, 4, 100])))
    np.testing.assert_allclose(expected_state_norm([1, 4, 100], -1e-300, **unit),
                               0.1 * np.sqrt(128 * np.array([1, 4, 100])))


def test_the_norm_picture_draws_the_recurrence_on_fixed_axes():
    fig = plot_state_norm(-1.0, 0.05, 2.0, seqlen=300, headdim=4, dstate=3, seed=5)
    ax = fig.axes[0]
    rng = np.random.default_rng(5)
    x, B = 2.0 * rng.standard_normal((300, 4)), rng.standard_normal((300, 3))
    np.testing.assert_allclose(ax.lines[0].get_ydata(), state_norms(x, np.full(300, 0.05), -1.0, B))
    assert ax.get_ylim() == (1e-4, 1e4) and ax.get_xscale() == ax.get_yscale() == "log"
    assert ax.lines[2].get_xdata()[0] == pytest.approx(20)      # 1 / |dt A|
    # A memory longer than the sequence gets no line.
    assert len(plot_state_norm(-0.01, 0.001, 1.0, seqlen=300).axes[0].lines) == 2


# --- the explorers ------------------------------------------------------------------------

def _png_of(fig):
    return widgets.figure_png(fig)


def test_moving_a_slider_redraws_the_picture_for_the_new_values():
    explorer = widgets.decay_mask_explorer()
    assert explorer.image.value == _png_of(plot_decay_mask_for(-1.0, 0.05, 0.0))
    explorer.sliders["A"].value = -0.1
    explorer.sliders["spike"].value = 2.5
    assert explorer.values == {"A": -0.1, "dt": 0.05, "spike": 2.5}
    assert explorer.image.value == _png_of(plot_decay_mask_for(-0.1, 0.05, 2.5))
    assert repr(explorer) == "decay mask explorer: A=-0.1, dt=0.05, spike=2.5"
    assert plt.get_fignums() == []          # every drawing closed after it became a PNG


def test_the_state_norm_explorer_draws_plot_state_norm():
    explorer = widgets.state_norm_explorer(seqlen=200)
    explorer.sliders["scale"].value = 10.0
    assert explorer.image.value == _png_of(plot_state_norm(-1.0, 0.01, 10.0, seqlen=200))
    assert repr(explorer) == "state norm explorer: A=-1, dt=0.01, scale=10"


def test_a_smaller_grid_moves_the_block_into_it():
    explorer = widgets.tile_explorer()
    assert explorer.values == {"tile_r": 4, "tile_c": 4, "i": 1, "j": 2}
    explorer.sliders["tile_c"].value = 16          # one column of tiles: j can only be 0
    assert explorer.values == {"tile_r": 4, "tile_c": 16, "i": 1, "j": 0}
    assert explorer.sliders["j"].max == 0 and explorer.sliders["i"].max == 2
    assert explorer.image.value == _png_of(plot_block_tile((10, 14), (4, 16), (1, 0)))
    explorer.sliders["tile_r"].value = 1            # ten rows of tiles
    explorer.sliders["i"].value = 9
    assert explorer.image.value == _png_of(plot_block_tile((10, 14), (1, 16), (9, 0)))


def test_where_widgets_do_not_run_the_explorer_shows_its_values_and_picture():
    explorer = widgets.tile_explorer()
    bundle = explorer._repr_mimebundle_()
    assert bundle["text/plain"] == "tile explorer: tile_r=4, tile_c=4, i=1, j=2"
    assert base64.b64decode(bundle["image/png"]) == explorer.image.value
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == explorer.model_id


@pytest.mark.parametrize("make, message", [
    (lambda: widgets.decay_mask_explorer(A=-0.3), r"A must be one of the slider's stops"),
    (lambda: widgets.state_norm_explorer(dt=0.03), r"dt must be one of the slider's stops"),
    (lambda: widgets.tile_explorer(tile_shape=(3, 4)), r"TILE_R must be one of"),
    (lambda: widgets.tile_explorer(block=(0, 4)), r"block must index the \(3, 4\) grid"),
])
def test_explorers_refuse_values_their_sliders_cannot_show(make, message):
    with pytest.raises(ValueError, match=message):
        make()
