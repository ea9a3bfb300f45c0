"""Notebook 12's pictures: the backward flow draws both walks over every chunk; the chunk-weight
plot draws the forward jump's and the backward read's weights, mirror images in one chunk."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from mamba2_tile.course.plots.backward import plot_backward_flow, plot_chunk_weights  # noqa: E402


def test_backward_flow_has_a_forward_and_a_backward_box_per_chunk():
    fig = plot_backward_flow(nchunks=5)
    boxes = [p for p in fig.axes[0].patches if isinstance(p, Rectangle)]
    assert len(boxes) == 10
    texts = " ".join(t.get_text() for t in fig.axes[0].texts)
    assert "dS4" in texts and "d final_states" in texts and "final_states" in texts
    plt.close(fig)


def test_chunk_weights_are_the_jump_and_the_read():
    dA_cumsum = np.cumsum(np.full(16, -0.1))
    fig = plot_chunk_weights(dA_cumsum)
    jump, read = (line.get_ydata() for line in fig.axes[0].get_lines())
    np.testing.assert_allclose(jump, np.exp(dA_cumsum[-1] - dA_cumsum))
    np.testing.assert_allclose(read, np.exp(dA_cumsum))
    assert jump[-1] == 1.0 and read[0] < 1.0
    plt.close(fig)
