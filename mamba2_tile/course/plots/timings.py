"""Speed charts: the package's forward pass against mamba_ssm's Triton kernels, per configuration.

Reads rows in the format of :mod:`mamba2_tile.tools.results` (one dict per measured configuration).
"""

import matplotlib.pyplot as plt
import numpy as np

OURS = "mamba2-tile (cuTile)"
THEIRS = "mamba_ssm (Triton)"


_LABELS = (("batch", "b={}"), ("seqlen", "L={}"), ("nheads", "h={}"), ("headdim", "p={}"),
           ("dstate", "n={}"), ("ngroups", "g={}"), ("chunk_size", "chunk {}"), ("dtype", "{}"))


def row_labels(rows):
    """One x-axis label per row, naming only the fields that vary between the rows."""
    varying = [(key, fmt) for key, fmt in _LABELS if len({row[key] for row in rows}) > 1]
    varying = varying or [("seqlen", "L={}")]
    return ["\n".join(fmt.format(row[key]) for key, fmt in varying) for row in rows]


def plot_forward_times(rows, title="Forward pass on an NVIDIA H200"):
    """Grouped bars of milliseconds per configuration; the speed-up over mamba_ssm on top.

    Configurations without a mamba_ssm measurement show the cuTile bar alone. The time axis is
    logarithmic: the rows span more than three decades (0.02 ms to 52 ms on the H200), and on a
    linear axis the short bars would be invisible under the longest one.
    """
    positions = np.arange(len(rows))
    width = 0.38
    ours = np.array([row["mamba2_tile_ms"] for row in rows], dtype=float)
    theirs = np.array([np.nan if row["mamba_ssm_ms"] is None else row["mamba_ssm_ms"]
                       for row in rows], dtype=float)
    fig, ax = plt.subplots(figsize=(max(5.0, 1.1 * len(rows) + 2.0), 3.6), dpi=90)
    ax.bar(positions - width / 2, ours, width, label=OURS, color="tab:green")
    if not np.isnan(theirs).all():
        ax.bar(positions + width / 2, theirs, width, label=THEIRS, color="tab:gray")
    for x, mine, other in zip(positions, ours, theirs):
        if not np.isnan(other):
            ax.text(x, max(mine, other) * 1.1, f"{other / mine:.2f}x", ha="center",
                    va="bottom", fontsize=8)
    ax.set_xticks(positions, row_labels(rows), fontsize=8)
    ax.set_ylabel("time (ms, log scale), lower is better")
    ax.set_yscale("log")
    both = np.concatenate([ours, theirs])
    ax.set_ylim(np.nanmin(both) / 2, np.nanmax(both) * 4)     # room for the labels on top
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    return fig
