"""Live explorers for the notebooks (ipywidgets): move a slider, the picture redraws.

* ``state_norm_explorer`` (notebook 01): ``‖h_t‖`` over a long sequence as ``A``, ``dt`` and the
  input scale change: a state that levels off, or one that keeps growing.
* ``decay_mask_explorer`` (notebook 02): the decay mask ``L = exp(segsum(dt·A))`` as ``A``, ``dt``
  and one token's spike in ``dt`` change.
* ``chunk_explorer`` (notebook 03): sliders over ``seqlen`` and ``chunk_size`` redraw the block
  picture of the mask and the cost table, for a fixed model shape. ``show_chunk_choice`` draws
  the same view once, without a live kernel, so the notebook reads well as a static page.
* ``tile_explorer`` (notebook 04): which tile of an array block ``(i, j)`` loads, for a tile
  shape.

Each picture is drawn by a plain function in ``mamba2_tile.course.plots`` (tested without a
browser); an :class:`Explorer` only puts sliders above it.
"""

import base64
import io

import ipywidgets as widgets
import matplotlib.pyplot as plt

from mamba2_tile.cost import cost_table
from mamba2_tile.problem import Problem
from mamba2_tile.course.plots.chunks import plot_block_grid
from mamba2_tile.course.plots.masks import plot_decay_mask_for
from mamba2_tile.course.plots.recurrence import plot_state_norm
from mamba2_tile.course.plots.tiles import block_tile, plot_block_tile, tile_grid_shape

# A Mamba-2 130M layer (d_model 768, expand 2 -> 24 heads of 64; dstate 128), in bfloat16.
MODEL = dict(batch=1, nheads=24, headdim=64, dstate=128, ngroups=1, dtype="bfloat16")
CHUNK_SIZES = (16, 32, 64, 128, 256)
# Slider stops, 1-2-5 per decade, so that every value a learner lands on reads cleanly.
# A is negative: from fast forgetting on the left to slow on the right.
A_VALUES = (-10.0, -5.0, -2.0, -1.0, -0.5, -0.2, -0.1, -0.05, -0.02, -0.01)
DT_VALUES = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
SCALE_VALUES = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
TILE_SIZES = (1, 2, 4, 8, 16)          # cuTile tile dimensions are powers of two


def figure_png(fig):
    """The figure as PNG bytes (without the Matplotlib version, so that they do not change
    with it); the figure is closed, so the notebook does not show it a second time."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", metadata={"Software": None})
    plt.close(fig)
    return buffer.getvalue()


class Explorer(widgets.VBox):
    """Sliders above a picture: every change redraws ``draw(**values)`` (a function returning a
    Matplotlib figure) into the image below them.

    The picture is an ``Image`` widget, not an ``Output`` one, so the cell's only output is this
    box. It shows as the slider values in words and a PNG of the current picture wherever
    widgets do not run: nbval compares the words (deterministic, unlike the widget's model id),
    and a renderer without widgets can fall back to the picture.
    """

    def __init__(self, title, draw, sliders, fit=None):
        """``fit``, if given, is called before every drawing and may move sliders (say, clamp a
        block index into a grid that shrank); its moves do not each redraw."""
        self.title = title
        self.draw = draw
        self.sliders = dict(sliders)
        self.fit = fit
        self._fitting = False
        self.image = widgets.Image(format="png")
        controls = widgets.HBox(list(self.sliders.values()),
                                layout=widgets.Layout(flex_flow="row wrap"))
        super().__init__([controls, self.image])
        for slider in self.sliders.values():
            slider.observe(self.redraw, names="value")
        self.redraw()

    @property
    def values(self):
        return {name: slider.value for name, slider in self.sliders.items()}

    def redraw(self, _change=None):
        if self._fitting:
            return
        if self.fit is not None:
            self._fitting = True
            try:
                self.fit()
            finally:
                self._fitting = False
        self.image.value = figure_png(self.draw(**self.values))

    def __repr__(self):
        return f"{self.title}: " + ", ".join(f"{name}={value:g}"
                                             for name, value in self.values.items())

    def _repr_mimebundle_(self, **kwargs):
        bundle = super()._repr_mimebundle_(**kwargs)
        bundle["image/png"] = base64.b64encode(self.image.value).decode("ascii")
        return bundle


def _choice(description, options, value):
    if value not in options:
        raise ValueError(f"{description} must be one of the slider's stops {options}, got {value}")
    return widgets.SelectionSlider(options=options, value=value, description=description,
                                   continuous_update=False)


def state_norm_explorer(A=-1.0, dt=0.01, scale=1.0, seqlen=4096):
    """Sliders for ``A``, ``dt`` and the input scale over :func:`plot_state_norm`."""
    return Explorer("state norm explorer", lambda A, dt, scale: plot_state_norm(
        A, dt, scale, seqlen=seqlen), {
        "A": _choice("A", A_VALUES, A),
        "dt": _choice("dt", DT_VALUES, dt),
        "scale": _choice("input scale", SCALE_VALUES, scale),
    })


def decay_mask_explorer(A=-1.0, dt=0.05, spike=0.0, seqlen=64):
    """Sliders for ``A``, ``dt`` and one token's extra ``dt`` over :func:`plot_decay_mask_for`."""
    return Explorer("decay mask explorer", lambda A, dt, spike: plot_decay_mask_for(
        A, dt, spike, seqlen=seqlen), {
        "A": _choice("A", A_VALUES, A),
        "dt": _choice("dt", DT_VALUES, dt),
        "spike": widgets.FloatSlider(value=spike, min=0.0, max=5.0, step=0.25,
                                     description=f"spike ({seqlen * 5 // 8})",
                                     continuous_update=False),
    })


def tile_explorer(array_shape=(10, 14), tile_shape=(4, 4), block=(1, 2)):
    """Sliders for the tile shape and the block ``(ct.bid(0), ct.bid(1))`` over
    :func:`plot_block_tile`; the block sliders reach exactly the blocks of the grid."""
    tile_r = _choice("TILE_R", TILE_SIZES, tile_shape[0])
    tile_c = _choice("TILE_C", TILE_SIZES, tile_shape[1])
    # Refuse a block outside the grid here: an IntSlider would quietly clamp it.
    block_tile(array_shape, tile_shape, block)
    grid = tile_grid_shape(array_shape, tile_shape)
    bid = [widgets.IntSlider(value=b, min=0, max=g - 1, description=f"bid({axis})",
                             continuous_update=False)
           for axis, (b, g) in enumerate(zip(block, grid))]

    def fit_blocks():
        # A smaller grid clamps the block into it (IntSlider lowers its value with its max).
        for slider, g in zip(bid, tile_grid_shape(array_shape, (tile_r.value, tile_c.value))):
            slider.max = g - 1

    return Explorer("tile explorer", lambda tile_r, tile_c, i, j: plot_block_tile(
        array_shape, (tile_r, tile_c), (i, j)),
        {"tile_r": tile_r, "tile_c": tile_c, "i": bid[0], "j": bid[1]}, fit=fit_blocks)


def show_chunk_choice(seqlen, chunk_size, model=MODEL):
    """Draw the block picture and print the cost table for one (seqlen, chunk_size)."""
    plot_block_grid(seqlen, chunk_size)
    plt.show()
    problem = Problem(seqlen=seqlen, chunk_size=chunk_size, **model)
    shape = ", ".join(f"{k}={v}" for k, v in model.items())
    print(f"cost for {shape}, seqlen={seqlen}, chunk_size={chunk_size}:")
    print(cost_table(problem))


def chunk_explorer(seqlen=1000, chunk_size=128, model=MODEL):
    """Sliders for seqlen and chunk_size; every change redraws :func:`show_chunk_choice`."""
    seqlen_slider = widgets.IntSlider(value=seqlen, min=64, max=4096, step=8,
                                      description="seqlen", continuous_update=False)
    chunk_slider = widgets.SelectionSlider(options=CHUNK_SIZES, value=chunk_size,
                                           description="chunk_size", continuous_update=False)
    output = widgets.Output()

    def redraw(_=None):
        with output:
            output.clear_output(wait=True)
            show_chunk_choice(seqlen_slider.value, chunk_slider.value, model)

    seqlen_slider.observe(redraw, names="value")
    chunk_slider.observe(redraw, names="value")
    redraw()
    return widgets.VBox([widgets.HBox([seqlen_slider, chunk_slider]), output])
