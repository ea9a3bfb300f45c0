"""Pictures of the backward pass as kernels (notebook 12).

* ``plot_backward_flow``: the forward walk carries the state through the chunks left to right;
  the backward walk carries its gradient right to left, each chunk adding what its own outputs
  send back; the entering states the backward reads are recomputed, not stored.
* ``plot_chunk_weights``: inside one chunk, the weight a token gets in the forward jump
  (``exp(dA_last - dA_i)``, decaying *to the chunk's end*) and in the backward read
  (``exp(dA_i)``, decaying *from the chunk's start*), mirror images of each other.
"""

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import FancyArrowPatch, Rectangle

_FORWARD = "darkorange"
_BACKWARD = "tab:blue"


def _box(ax, x, y, w, h, color, text, fontsize=8):
    ax.add_patch(Rectangle((x, y), w, h, facecolor=color, edgecolor="black", linewidth=0.8))
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=fontsize)


def _arrow(ax, start, end, color, width=2.0):
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=12, color=color,
                                 linewidth=width))


def plot_backward_flow(nchunks=4):
    """One head: the forward walk (top) and the backward walk (bottom) over ``nchunks`` chunks."""
    fig, ax = plt.subplots(figsize=(10, 3.8), dpi=90)
    step, width = 2.7, 1.9
    for c in range(nchunks):
        x0 = 0.8 + c * step
        _box(ax, x0, 0.0, width, 0.7, "#cfe2f3", f"chunk {c}")
        _arrow(ax, (x0 - 0.8, 0.35), (x0, 0.35), _FORWARD)
        ax.text(x0 - 0.4, 0.12, f"S{c}", color=_FORWARD, ha="center", fontsize=9)
        _box(ax, x0, 1.5, width, 0.7, "#dde8d0", f"chunk {c}\n+ Σ_i e^dA_i dy_i ⊗ C_i",
             fontsize=6.5)
        _arrow(ax, (x0 + width + 0.8, 1.85), (x0 + width, 1.85), _BACKWARD)
        ax.text(x0 - 0.4, 1.62, f"dS{c}", color=_BACKWARD, ha="center", fontsize=9)
        _arrow(ax, (x0 - 0.4, 0.55), (x0 + 0.35, 1.47), "0.55", width=1.0)
    xe = 0.8 + nchunks * step
    _arrow(ax, (xe - 0.8, 0.35), (xe, 0.35), _FORWARD)
    ax.text(xe + 0.05, 0.35, "final_states", va="center", fontsize=8, color=_FORWARD)
    ax.text(xe - step + width + 0.85, 1.85, "d final_states", va="center", ha="left", fontsize=8,
            color=_BACKWARD)
    ax.text(0.0, -0.35, "forward: S_{c+1} = e^Δ S_c + Σ_j e^(Δ − dA_j) dt_j x_j ⊗ B_j   "
            "(left to right; the S_c are recomputed for the backward)", fontsize=9,
            color=_FORWARD)
    ax.text(0.0, 2.65, "backward: dS_c = e^Δ dS_{c+1} + Σ_i e^dA_i dy_i ⊗ C_i   "
            "(right to left; dS_0 is d initial_states)", fontsize=9, color=_BACKWARD)
    ax.text(0.0, 3.05, "grey: chunk c's per-chunk gradients (dx, dB, dC, ddt) read S_c, "
            "recomputed, and the dS at both ends of the chunk", fontsize=8, color="0.4")
    ax.set_xlim(-0.9, xe + 2.0)
    ax.set_ylim(3.3, -0.6)
    ax.axis("off")
    ax.set_title("One head: the state walks forward, its gradient walks back", fontsize=10)
    fig.tight_layout()
    return fig


def plot_chunk_weights(dA_cumsum):
    """Each token's weight in the forward jump and in the backward read, for one chunk's
    ``dA_cumsum`` (a 1-d array)."""
    dA_cumsum = np.asarray(dA_cumsum, dtype=np.float64)
    i = np.arange(len(dA_cumsum))
    fig, ax = plt.subplots(figsize=(7, 3.2), dpi=90)
    ax.plot(i, np.exp(dA_cumsum[-1] - dA_cumsum), color=_FORWARD, marker=".",
            label="forward jump: exp(dA_last − dA_i), token i decays to the chunk's end")
    ax.plot(i, np.exp(dA_cumsum), color=_BACKWARD, marker=".",
            label="backward read: exp(dA_i), token i reads the state from the chunk's start")
    ax.set_xlabel("position i in the chunk")
    ax.set_ylabel("weight")
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=8, loc="lower center")
    ax.set_title("Two decays in one chunk: mirror images", fontsize=10)
    fig.tight_layout()
    return fig
