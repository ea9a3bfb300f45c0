"""Pictures of the chunked algorithm (notebook 03): the mask cut into ``chunk x chunk`` blocks,
the singular values that show off-diagonal blocks are low rank, and the state jumping from
chunk to chunk."""

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch

DPI = 90
# Block kinds: future (zero), diagonal (a small quadratic problem), off-diagonal (low rank).
_KIND_COLORS = ["#ffffff", "#f4a261", "#2a9d8f"]


def _chunk_grid(ax, seqlen, chunk_size):
    """Chunk boundaries as thin lines, in token coordinates."""
    for edge in range(chunk_size, seqlen, chunk_size):
        ax.axhline(edge - 0.5, color="k", linewidth=0.6)
        ax.axvline(edge - 0.5, color="k", linewidth=0.6)


def plot_mask_blocks(M, chunk_size, title="L ∘ C Bᵀ, cut into chunks"):
    """Heatmap of one head's ``seqlen x seqlen`` matrix with the chunk grid drawn over it."""
    T = M.shape[-1]
    fig, ax = plt.subplots(figsize=(5, 4.4), dpi=DPI)
    limit = np.abs(M).max()
    shown = np.ma.masked_where(np.triu(np.ones((T, T), dtype=bool), k=1), M)
    image = ax.imshow(shown, cmap="RdBu_r", vmin=-limit, vmax=limit, interpolation="nearest")
    _chunk_grid(ax, T, chunk_size)
    nchunks = -(-T // chunk_size)
    centres = np.arange(nchunks) * chunk_size + chunk_size / 2 - 0.5
    for row in range(nchunks):
        for col in range(row + 1):
            label = "diag" if row == col else "low\nrank"
            ax.text(centres[col], centres[row], label, ha="center", va="center", fontsize=8)
    ax.set_title(title)
    ax.set_xlabel("s (input token)")
    ax.set_ylabel("t (output token)")
    plt.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    fig.tight_layout()


def plot_singular_values(matrices, dstate):
    """Singular values (largest first, log scale) of each named square block."""
    fig, ax = plt.subplots(figsize=(6.5, 3.4), dpi=DPI)
    for name, M in matrices.items():
        sigma = np.linalg.svd(M, compute_uv=False)
        # Exact zeros cannot go on a log axis; floor them at the smallest double.
        ax.semilogy(np.arange(1, len(sigma) + 1), np.maximum(sigma, np.finfo(float).tiny),
                    marker=".", label=name)
    ax.axvline(dstate + 0.5, color="gray", linestyle="--", label=f"dstate = {dstate}")
    ax.set_ylim(1e-18, None)
    ax.set_xlabel("index k")
    ax.set_ylabel("singular value σ_k")
    ax.legend()
    fig.tight_layout()


def plot_block_grid(seqlen, chunk_size, ax=None):
    """The kind of every ``chunk x chunk`` block of the mask for this seqlen and chunk_size;
    the padding of the last chunk is hatched. Draws into ``ax`` (a new figure if None)."""
    if ax is None:
        _, ax = plt.subplots(figsize=(4.4, 4.4), dpi=DPI)
    nchunks = -(-seqlen // chunk_size)
    rows, cols = np.indices((nchunks, nchunks))
    kinds = np.where(rows == cols, 1, np.where(rows > cols, 2, 0))
    padded = nchunks * chunk_size
    ax.imshow(kinds, cmap=ListedColormap(_KIND_COLORS), vmin=0, vmax=2,
              extent=(0, padded, padded, 0), interpolation="nearest")
    if padded > seqlen:
        for side in ("x", "y"):
            span = ax.axvspan if side == "x" else ax.axhspan
            span(seqlen, padded, facecolor="none", edgecolor="gray", hatch="//", linewidth=0)
    if nchunks <= 64:                  # beyond that the grid lines would paint it black
        for edge in range(chunk_size, padded, chunk_size):
            ax.axhline(edge, color="k", linewidth=0.4)
            ax.axvline(edge, color="k", linewidth=0.4)
    ax.set_title(f"seqlen {seqlen}, chunk_size {chunk_size}: {nchunks} chunks")
    ax.set_xlabel("s (input token)")
    ax.set_ylabel("t (output token)")
    ax.legend(handles=[
        Patch(color=_KIND_COLORS[1], label=f"{nchunks} diagonal: quadratic"),
        Patch(color=_KIND_COLORS[2], label=f"{nchunks * (nchunks - 1) // 2} off-diagonal: "
                                           "through the state"),
        Patch(facecolor="none", edgecolor="gray", hatch="//", label="padding"),
    ], loc="upper right", fontsize=8)
    return ax


def plot_state_flow(state_norms, chunk_size, chunk_state_norms, final_state_norm):
    """The size of the state after every token (what the recurrence walks through) and the
    states the chunked algorithm actually computes: the one entering each chunk, and the final
    one, joined by one jump per chunk."""
    fig, ax = plt.subplots(figsize=(8, 3.4), dpi=DPI)
    seqlen = len(state_norms)
    ax.plot(np.arange(1, seqlen + 1), state_norms, color="0.6", linewidth=1,
            label="recurrence: ‖h‖ after every token")
    positions = np.append(np.arange(len(chunk_state_norms)) * chunk_size, seqlen)
    norms = np.append(chunk_state_norms, final_state_norm)
    ax.plot(positions, norms, "o", color="C3", zorder=3,
            label="fwd_pass_state: entering each chunk, and final")
    for a, b, ha, hb in zip(positions[:-1], positions[1:], norms[:-1], norms[1:]):
        ax.annotate("", xy=(b, hb), xytext=(a, ha),
                    arrowprops=dict(arrowstyle="->", color="C3", connectionstyle="arc3,rad=-0.3"))
    for edge in positions[1:-1]:
        ax.axvline(edge, color="k", linewidth=0.5, linestyle=":")
    ax.set_xlabel("tokens consumed")
    ax.set_ylabel("‖h‖ (Frobenius)")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
