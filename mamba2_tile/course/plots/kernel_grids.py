"""Pictures of the first two SSD kernels: which block owns which tiles, and what flows between them.

* ``plot_chunk_cumsum_grid``: stage 1 cuts ``dt`` (seqlen x nheads, one batch) into
  (chunk x head-block) tiles, one block each; the tail of the last chunk is padding.
* ``plot_state_flow``: stage 2 walks the chunks in order, carrying the state and storing the one
  that enters each chunk; different (batch, head, state tile) blocks walk side by side.
* ``plot_fwd_pass_state_tiles``: what one stage-2 block reads per chunk (a column tile of ``x``,
  a column tile of ``B``) and which tile of the state it owns.
"""

import math

import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, Rectangle

_COLORS = plt.get_cmap("tab20").colors
_PAD = dict(facecolor="white", edgecolor="0.55", hatch="///", linewidth=0)


def _box(ax, x, y, w, h, color, text=None, fontsize=8, **style):
    ax.add_patch(Rectangle((x, y), w, h, facecolor=color, edgecolor="black", linewidth=0.8,
                           **style))
    if text:
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=fontsize)


def _frame(ax, width, height, title):
    ax.set_xlim(-0.02 * width, width * 1.02)
    ax.set_ylim(height * 1.02, -0.02 * height)
    ax.set_title(title, fontsize=10)


def plot_chunk_cumsum_grid(seqlen=100, nheads=6, chunk_size=32, block_h=1):
    """``dt`` of one batch as positions x heads, cut into the tiles that stage-1 blocks load.

    Block ``(b, c, hb)`` loads positions ``c*chunk_size ...`` of heads ``hb*block_h ...``; the
    hatched part lies past ``seqlen`` (or past ``nheads``): the load pads it with zeros.
    """
    nchunks = math.ceil(seqlen / chunk_size)
    nblocks_h = math.ceil(nheads / block_h)
    width, height = nchunks * chunk_size, nblocks_h * block_h
    fig, ax = plt.subplots(figsize=(8.5, 0.9 + 0.28 * height), dpi=90)
    for c in range(nchunks):
        for hb in range(nblocks_h):
            color = _COLORS[(c * nblocks_h + hb) % len(_COLORS)]
            _box(ax, c * chunk_size, hb * block_h, chunk_size, block_h, color,
                 f"block (b, {c}, {hb})")
    ax.add_patch(Rectangle((seqlen, 0), width - seqlen, height, **_PAD))
    if height > nheads:
        ax.add_patch(Rectangle((0, nheads), width, height - nheads, **_PAD))
    for h in range(1, height):
        ax.axhline(h, color="0.3", linewidth=0.3)
    ax.axvline(seqlen, color="crimson", linewidth=1.5)
    _frame(ax, width, height, f"dt of one sequence: {nchunks} chunks × {nblocks_h} head blocks "
           f"(chunk_size={chunk_size}, BLOCK_H={block_h}); hatched = padding")
    ax.set_xlabel(f"position in the sequence (red line: seqlen = {seqlen}); "
                  "the cumsum runs left to right inside each chunk")
    ax.set_ylabel("head")
    ax.set_yticks([h + 0.5 for h in range(height)], [str(h) for h in range(height)], fontsize=7)
    fig.tight_layout()
    return fig


def plot_state_flow(nchunks=4, nblocks=3):
    """Top: one block's walk; the state enters chunk ``c``, is stored, then jumps to the next.

    Bottom: blocks for other (batch, head, state tile) run the same walk at the same time.
    """
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 4.6), dpi=90,
                                      gridspec_kw=dict(height_ratios=[1.2, 1]))
    step = 2.2
    for c in range(nchunks):
        x0 = 0.6 + c * step
        _box(top, x0, 0.2, 1.4, 0.8, "#cfe2f3", f"chunk {c}\n{c}·chunk_size …", fontsize=8)
        top.add_patch(FancyArrowPatch((x0 - 0.75, 0.6), (x0, 0.6), arrowstyle="-|>",
                                      mutation_scale=12, color="darkorange", linewidth=2))
        top.text(x0 - 0.4, 0.47, f"h{c}", color="darkorange", ha="center", fontsize=9)
        top.add_patch(FancyArrowPatch((x0 - 0.35, 0.62), (x0 - 0.35, 1.45), arrowstyle="-|>",
                                      mutation_scale=10, color="0.3"))
        top.text(x0 - 0.35, 1.55, f"chunk_states[…, {c}]", ha="center", va="top", fontsize=8)
    xe = 0.6 + nchunks * step
    top.add_patch(FancyArrowPatch((xe - 0.75, 0.6), (xe, 0.6), arrowstyle="-|>",
                                  mutation_scale=12, color="darkorange", linewidth=2))
    top.text(xe + 0.05, 0.6, f"h{nchunks} = final_states", va="center", fontsize=8,
             color="darkorange")
    top.text(0.0, -0.05, "h_next = exp(dA_last)·h + Σ_i exp(dA_last − dA_i)·dt_i·x_i ⊗ B_i",
             fontsize=9)
    top.set_xlim(-0.3, xe + 2.3)
    top.set_ylim(1.7, -0.3)
    top.set_title("one block: sequential over chunks (each needs the state from the one before)",
                  fontsize=10)
    for r in range(nblocks):
        for c in range(nchunks):
            _box(bottom, 0.6 + c * step, r, 1.4, 0.7, _COLORS[2 * r % len(_COLORS)],
                 f"chunk {c}", fontsize=7)
            if c:
                bottom.add_patch(FancyArrowPatch((0.6 + c * step - 0.8, r + 0.35),
                                                 (0.6 + c * step, r + 0.35), arrowstyle="-|>",
                                                 mutation_scale=9, color="darkorange"))
        bottom.text(0.5, r + 0.35, f"block {r}", ha="right", va="center", fontsize=8)
    bottom.text(0.5, nblocks + 0.1, "⋮", ha="right", va="top", fontsize=12)
    bottom.annotate("", xy=(xe, nblocks + 0.35), xytext=(0.6, nblocks + 0.35),
                    arrowprops=dict(arrowstyle="->"))
    bottom.text(xe, nblocks + 0.45, "time", ha="right", va="top", fontsize=8)
    bottom.set_xlim(-1.2, xe + 2.3)
    bottom.set_ylim(nblocks + 0.9, -0.2)
    bottom.set_title("the grid: one block per (batch, head, headdim tile, dstate tile), "
                     "all in parallel", fontsize=10)
    for ax in (top, bottom):
        ax.axis("off")
    fig.tight_layout()
    return fig


def plot_fwd_pass_state_tiles(chunk_size=16, headdim=24, dstate=20, block_p=8, block_n=8,
                              p_tile=1, n_tile=2):
    """What block ``(b*nheads + h, p_tile, n_tile)`` touches in one chunk.

    It reads the ``(chunk_size, block_p)`` column tile ``p_tile`` of the chunk's ``x`` and the
    ``(chunk_size, block_n)`` column tile ``n_tile`` of its ``B``, and owns tile
    ``(p_tile, n_tile)`` of the ``(headdim, dstate)`` state: ``state += (x·w)ᵀ B`` needs nothing
    else, which is why the state tiles are independent blocks.
    """
    fig, axes = plt.subplots(1, 3, figsize=(10, 3.4), dpi=90,
                             gridspec_kw=dict(width_ratios=[headdim, dstate, dstate]))
    panels = [
        (axes[0], chunk_size, headdim, (chunk_size, block_p), (0, p_tile), "x of chunk c (s × p)",
         "headdim p", "position i in chunk"),
        (axes[1], chunk_size, dstate, (chunk_size, block_n), (0, n_tile), "B of chunk c (s × n)",
         "dstate n", ""),
        (axes[2], headdim, dstate, (block_p, block_n), (p_tile, n_tile), "state h (p × n)",
         "dstate n", "headdim p"),
    ]
    for ax, rows, cols, (tr, tc), (hi, hj), title, xlabel, ylabel in panels:
        grid_r, grid_c = math.ceil(rows / tr), math.ceil(cols / tc)
        for i in range(grid_r):
            for j in range(grid_c):
                mine = (i, j) == (hi, hj)
                _box(ax, j * tc, i * tr, tc, tr, "tab:orange" if mine else "0.92",
                     f"({i},{j})" if mine or (grid_r * grid_c) <= 12 else None, fontsize=7)
        if grid_c * tc > cols:
            ax.add_patch(Rectangle((cols, 0), grid_c * tc - cols, grid_r * tr, **_PAD))
        if grid_r * tr > rows:
            ax.add_patch(Rectangle((0, rows), grid_c * tc, grid_r * tr - rows, **_PAD))
        _frame(ax, grid_c * tc, grid_r * tr, title)
        ax.set_xlabel(xlabel, fontsize=8)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.tick_params(labelsize=7)
    fig.suptitle(f"block (b·nheads + h, {p_tile}, {n_tile}): orange tiles are all it touches "
                 f"in chunk c (BLOCK_P={block_p}, BLOCK_N={block_n}; hatched = padding)",
                 fontsize=10)
    fig.tight_layout()
    return fig
