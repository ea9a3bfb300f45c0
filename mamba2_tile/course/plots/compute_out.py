"""Stage 3 (``compute_out``) in pictures: what one block reads, and why its chunk x chunk matrix
never leaves the chip.

* ``interaction_matrix_bytes`` / ``traffic_rows`` / ``plot_traffic``: the bytes a
  ``compute_out`` moves when it is fused (the ``L ∘ C Bᵀ`` tile lives in registers) and when the
  interaction matrix goes through global memory instead, and what that costs at a bandwidth;
* ``plot_block_reads``: the tiles one block ``(batch, chunk, head, headdim tile)`` loads;
* ``plot_interaction_matrix``: ``L``, ``C Bᵀ`` and ``L ∘ C Bᵀ`` for one chunk of one head.
"""

import math

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Rectangle
from tabulate import tabulate

from mamba2_tile.cost import compute_out_cost, interaction_matrix_bytes
from mamba2_tile.problem import Problem
from mamba2_tile.reference import segsum

H200_COPY_BANDWIDTH = 4.3e12
"""Bytes/s an H200 sustains on a large device-to-device copy (measured, about 90% of the 4.8 TB/s
HBM3e peak NVIDIA lists)."""


def traffic_rows(batch, seqlen, nheads, headdim, dstate, ngroups=1, chunk_sizes=(64, 128, 256),
                 dtype="bfloat16", score_bytes=4, bandwidth=H200_COPY_BANDWIDTH):
    """For each chunk size: bytes (and seconds at ``bandwidth``) of three ways to run stage 3.

    * ``fused``: the ``compute_out`` kernel, reading its inputs and writing ``y``
      (:func:`mamba2_tile.cost.compute_out_cost`);
    * ``C Bᵀ via memory``: ``C Bᵀ`` computed by a separate kernel, once per *group*, written and
      read back (what mamba_ssm does: cheap when ngroups is small);
    * ``L ∘ C Bᵀ via memory``: the masked, decayed matrix written per *head* and read back, the
      way a naive unfused implementation would (the scores are per head once ``L`` is applied).
    """
    rows = []
    for chunk_size in chunk_sizes:
        problem = Problem(batch, seqlen, nheads, headdim, dstate, ngroups, chunk_size, dtype)
        fused = compute_out_cost(problem).bytes
        per_group = 2 * interaction_matrix_bytes(batch, seqlen, ngroups, chunk_size, score_bytes)
        per_head = 2 * interaction_matrix_bytes(batch, seqlen, nheads, chunk_size, score_bytes)
        bytes_ = {"fused": fused, "C Bᵀ via memory": fused + per_group,
                  "L ∘ C Bᵀ via memory": fused + per_head}
        rows.append(dict(chunk_size=chunk_size, bytes=bytes_,
                         seconds={name: b / bandwidth for name, b in bytes_.items()}))
    return rows


def traffic_table(rows):
    """The rows of :func:`traffic_rows` as a text table: GB moved and ms at the bandwidth."""
    names = list(rows[0]["bytes"])
    body = [[row["chunk_size"], *(f"{row['bytes'][n] / 1e9:.2f} GB {row['seconds'][n] * 1e3:.3f} ms"
                                  for n in names)] for row in rows]
    return tabulate(body, headers=["chunk", *names], disable_numparse=True, stralign="right")


def plot_traffic(rows, title="compute_out: bytes through global memory"):
    """Grouped bars, one group per chunk size: fused vs the two ways through memory."""
    names = list(rows[0]["bytes"])
    colors = ["tab:green", "tab:orange", "tab:red"]
    positions = np.arange(len(rows))
    width = 0.8 / len(names)
    fig, ax = plt.subplots(figsize=(6.5, 3.4), dpi=90)
    for k, (name, color) in enumerate(zip(names, colors)):
        ms = [row["seconds"][name] * 1e3 for row in rows]
        ax.bar(positions + (k - (len(names) - 1) / 2) * width, ms, width, label=name,
               color=color)
    ax.set_xticks(positions, [f"chunk {row['chunk_size']}" for row in rows])
    ax.set_ylabel("ms at 4.3 TB/s (memory time only)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------------------------
# Which tiles one block reads
# --------------------------------------------------------------------------------------------

def _array(ax, rows, cols, title, boxes, row_lines=(), col_lines=()):
    """An array as a grey rectangle; ``boxes`` are (top, left, height, width, color, text)."""
    ax.add_patch(Rectangle((0, 0), cols, rows, facecolor="0.93", edgecolor="black"))
    for r in row_lines:
        ax.plot([0, cols], [r, r], color="0.6", linewidth=0.6)
    for c in col_lines:
        ax.plot([c, c], [0, rows], color="0.6", linewidth=0.6)
    for top, left, height, width, color, text in boxes:
        ax.add_patch(Rectangle((left, top), width, height, facecolor=color, alpha=0.8,
                               edgecolor="black", linewidth=1.2))
        ax.text(left + width / 2, top + height / 2, text, ha="center", va="center", fontsize=8)
    ax.set_xlim(-0.5, cols + 0.5)
    ax.set_ylim(rows + 0.5, -0.5)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(title, fontsize=9)


def plot_block_reads(seqlen=200, chunk_size=64, headdim=64, dstate=32, block_p=32, chunk=2,
                     p_tile=1):
    """The tiles block ``(chunk, p_tile)`` of one (batch, head) reads, and the tile it writes.

    ``x`` and ``y`` are drawn as (seqlen, headdim), ``B``/``C`` as (seqlen, dstate) and the
    entering states as (nchunks * headdim, dstate): chunk ``c``'s state is rows
    ``c * headdim ...``. The right panel is the ``chunk x chunk`` tile that exists only on chip.
    """
    nchunks = math.ceil(seqlen / chunk_size)
    top = chunk * chunk_size
    height = min(chunk_size, seqlen - top)
    chunk_lines = [c * chunk_size for c in range(1, nchunks)]
    fig, axes = plt.subplots(1, 5, figsize=(10.5, 3.6), dpi=90,
                             gridspec_kw=dict(width_ratios=[headdim, dstate, dstate, dstate,
                                                            chunk_size]))
    _array(axes[0], seqlen, headdim, f"x and y ({seqlen}, {headdim})",
           [(top, p_tile * block_p, height, block_p, "tab:blue", "read x\nwrite y")],
           chunk_lines, range(block_p, headdim, block_p))
    _array(axes[1], seqlen, dstate, f"C ({seqlen}, {dstate})",
           [(top, 0, height, dstate, "tab:orange", "C")], chunk_lines)
    _array(axes[2], seqlen, dstate, f"B ({seqlen}, {dstate})",
           [(top, 0, height, dstate, "tab:orange", "B")], chunk_lines)
    state_rows = nchunks * headdim
    _array(axes[3], state_rows, dstate, f"chunk_states ({nchunks}×{headdim}, {dstate})",
           [(chunk * headdim + p_tile * block_p, 0, block_p, dstate, "tab:purple", "h")],
           [c * headdim for c in range(1, nchunks)])
    causal = np.tril(np.ones((chunk_size, chunk_size)))
    axes[4].imshow(causal, cmap="Greens", vmin=0, vmax=1.6, extent=(0, chunk_size, chunk_size, 0))
    axes[4].set_xticks([])
    axes[4].set_yticks([])
    axes[4].set_title(f"on chip: L ∘ C Bᵀ ({chunk_size}×{chunk_size})", fontsize=9)
    fig.suptitle(f"block (chunk {chunk}, headdim tile {p_tile}) of one (batch, head): "
                 f"rows {top}..{top + height - 1}", fontsize=10)
    fig.tight_layout()
    return fig


def plot_interaction_matrix(chunk_size=32, dstate=8, A=-0.5, seed=0):
    """``L``, ``C Bᵀ`` and their product ``L ∘ C Bᵀ`` for one chunk of one head."""
    rng = np.random.default_rng(seed)
    dt = rng.uniform(0.05, 0.3, chunk_size)
    B = rng.standard_normal((chunk_size, dstate))
    C = rng.standard_normal((chunk_size, dstate))
    L = np.exp(segsum(dt * A))
    scores = C @ B.T
    limit = np.abs(scores).max()
    fig, axes = plt.subplots(1, 3, figsize=(9, 3.2), dpi=90)
    panels = [(L, "L = exp(segsum(dt·A))", "Greens", 0, 1),
              (scores, "C Bᵀ", "RdBu_r", -limit, limit),
              (L * scores, "L ∘ C Bᵀ", "RdBu_r", -limit, limit)]
    for ax, (matrix, title, cmap, low, high) in zip(axes, panels):
        image = ax.imshow(matrix, cmap=cmap, vmin=low, vmax=high)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("j (input position)")
        ax.set_ylabel("i (output position)")
        fig.colorbar(image, ax=ax, shrink=0.8)
    fig.tight_layout()
    return fig
