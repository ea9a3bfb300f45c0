"""Live explorers for the notebooks (ipywidgets).

``chunk_explorer`` (notebook 03): sliders over ``seqlen`` and ``chunk_size`` redraw the block
picture of the mask and the cost table, for a fixed model shape. ``show_chunk_choice`` draws the
same view once, without a live kernel, so the notebook reads well as a static page.
"""

import ipywidgets as widgets
import matplotlib.pyplot as plt

from mamba2_tile.cost import cost_table
from mamba2_tile.problem import Problem
from mamba2_tile.course.plots.chunks import plot_block_grid

# A Mamba-2 130M layer (d_model 768, expand 2 -> 24 heads of 64; dstate 128), in bfloat16.
MODEL = dict(batch=1, nheads=24, headdim=64, dstate=128, ngroups=1, dtype="bfloat16")
CHUNK_SIZES = (16, 32, 64, 128, 256)


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
