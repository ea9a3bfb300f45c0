"""Pictures of tile space: an array cut into tiles, and which block reads which tile.

A cuTile kernel never indexes single elements: `ct.load(x, index=(i, j), shape=(TM, TN))`
reads tile (i, j) of the grid of (TM, TN) tiles laid over `x`. These drawings make that
grid visible, including the padding a tile gets where it hangs over the array's edge.
"""

import math

import matplotlib
import matplotlib.pyplot as plt
from matplotlib.patches import Rectangle

_COLORS = matplotlib.colormaps["tab20"].colors
_PAD_STYLE = dict(facecolor="white", edgecolor="0.6", hatch="///", linewidth=0)


def tile_grid_shape(array_shape, tile_shape):
    """How many tiles cover the array along each axis (the last ones may be partial)."""
    return tuple(math.ceil(n / t) for n, t in zip(array_shape, tile_shape))


def plot_tile_grid(array_shape, tile_shape, *, ax=None, highlight=None, label=None, title=None):
    """Draw an array of `array_shape` split into tiles of `tile_shape` (1-D or 2-D).

    Each tile gets a colour and its tile-space index; the part of a tile outside the array is
    hatched (that is what `padding_mode` fills). `highlight` lists the tile indices to draw in
    colour (all of them by default); `label(index)` gives the text for a tile.
    """
    rows, cols, tile_rows, tile_cols = _as_2d(array_shape, tile_shape)
    grid = tile_grid_shape((rows, cols), (tile_rows, tile_cols))
    one_d = len(array_shape) == 1
    if ax is None:
        width = min(9.0, 1.5 + 0.4 * grid[1] * tile_cols)
        height = min(6.0, 0.9 + 0.4 * grid[0] * tile_rows)
        _, ax = plt.subplots(figsize=(width, height))
    label = label or (lambda index: f"tile {index[-1] if one_d else index}")

    for ti in range(grid[0]):
        for tj in range(grid[1]):
            index = (tj,) if one_d else (ti, tj)
            top, left = ti * tile_rows, tj * tile_cols
            shown = highlight is None or index in highlight
            color = _COLORS[(ti * grid[1] + tj) % len(_COLORS)] if shown else "0.93"
            inside_h, inside_w = min(tile_rows, rows - top), min(tile_cols, cols - left)
            ax.add_patch(Rectangle((left, top), inside_w, inside_h, facecolor=color, linewidth=0))
            if inside_w < tile_cols:
                ax.add_patch(Rectangle((left + inside_w, top), tile_cols - inside_w, tile_rows,
                                       **_PAD_STYLE))
            if inside_h < tile_rows:
                ax.add_patch(Rectangle((left, top + inside_h), inside_w, tile_rows - inside_h,
                                       **_PAD_STYLE))
            ax.add_patch(Rectangle((left, top), tile_cols, tile_rows, fill=False,
                                   edgecolor="black", linewidth=1.6))
            if shown:
                ax.text(left + inside_w / 2, top + inside_h / 2, label(index),
                        ha="center", va="center", fontsize=8)

    _element_grid(ax, rows, cols)
    ax.add_patch(Rectangle((0, 0), cols, rows, fill=False, edgecolor="crimson", linewidth=2))
    ax.set_xlim(-0.2, grid[1] * tile_cols + 0.2)
    ax.set_ylim(grid[0] * tile_rows + 0.2, -0.2)
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([])
    shape_text = f"({cols},)" if one_d else f"{array_shape}"
    tile_text = f"({tile_cols},)" if one_d else f"{tile_shape}"
    ax.set_title(title or f"array {shape_text} in tiles of {tile_text}: "
                          f"{grid[1] if one_d else grid} tiles", fontsize=10)
    return ax


def plot_matmul_tiles(m, n, k, tile_m, tile_n, tile_k, block):
    """The tiles one block (i, j) of a tiled matmul touches: a row of A, a column of B, one of C."""
    i, j = block
    steps = math.ceil(k / tile_k)
    fig, axes = plt.subplots(1, 3, figsize=(10, 3.4),
                             gridspec_kw=dict(width_ratios=[k, n, n]))
    plot_tile_grid((m, k), (tile_m, tile_k), ax=axes[0],
                   highlight=[(i, s) for s in range(steps)],
                   label=lambda index: f"k={index[1]}", title=f"A: tiles ({i}, k)")
    plot_tile_grid((k, n), (tile_k, tile_n), ax=axes[1],
                   highlight=[(s, j) for s in range(steps)],
                   label=lambda index: f"k={index[0]}", title=f"B: tiles (k, {j})")
    plot_tile_grid((m, n), (tile_m, tile_n), ax=axes[2], highlight=[(i, j)],
                   label=lambda index: "acc", title=f"C: tile ({i}, {j})")
    fig.suptitle(f"block ({i}, {j}) loops k = 0..{steps - 1}: acc += A[{i}, k] @ B[k, {j}]",
                 fontsize=11)
    fig.tight_layout()
    return fig


def _as_2d(array_shape, tile_shape):
    if len(array_shape) != len(tile_shape) or len(array_shape) not in (1, 2):
        raise ValueError(f"need a 1-D or 2-D array and tile of the same rank, got "
                         f"{array_shape} and {tile_shape}")
    if len(array_shape) == 1:
        return 1, array_shape[0], 1, tile_shape[0]
    return (*array_shape, *tile_shape)


def _element_grid(ax, rows, cols):
    """Thin lines between elements, so a learner can count them (skipped for big arrays)."""
    if max(rows, cols) > 64:
        return
    for r in range(1, rows):
        ax.plot([0, cols], [r, r], color="white", linewidth=0.5)
    for c in range(1, cols):
        ax.plot([c, c], [0, rows], color="white", linewidth=0.5)


def block_tile(array_shape, tile_shape, block):
    """What block ``(i, j)`` reads with ``ct.load(x, index=(i, j), shape=tile_shape)`` from a 2-D
    array: the rows and columns of the array inside its tile (as ``range``s), and how many of
    the tile's elements lie outside the array (filled by ``padding_mode``)."""
    if len(array_shape) != 2 or len(tile_shape) != 2 or len(block) != 2:
        raise ValueError(f"need a 2-D array shape, tile shape and block index, got "
                         f"{array_shape}, {tile_shape} and {block}")
    if min(*array_shape, *tile_shape) < 1:
        raise ValueError(f"array_shape and tile_shape must be positive, got {array_shape} "
                         f"and {tile_shape}")
    grid = tile_grid_shape(array_shape, tile_shape)
    if not all(0 <= b < g for b, g in zip(block, grid)):
        raise ValueError(f"block must index the {grid} grid of tiles, got {block}")
    rows, cols = (range(b * t, min((b + 1) * t, n))
                  for b, t, n in zip(block, tile_shape, array_shape))
    padding = tile_shape[0] * tile_shape[1] - len(rows) * len(cols)
    return rows, cols, padding


def plot_block_tile(array_shape, tile_shape, block):
    """The array cut into tiles of ``tile_shape`` with only block ``(i, j)``'s tile in colour, and
    the load it makes written out; returns the figure."""
    rows, cols, padding = block_tile(array_shape, tile_shape, block)
    grid = tile_grid_shape(array_shape, tile_shape)
    fig, ax = plt.subplots(figsize=(7.5, 5.2), dpi=90)
    plot_tile_grid(array_shape, tile_shape, ax=ax, highlight=[tuple(block)],
                   label=lambda index: f"block\n{index}",
                   title=f"array {tuple(array_shape)}, tiles {tuple(tile_shape)}: "
                         f"a grid of {grid} blocks")
    i, j = block
    padded = f" + {padding} padding" if padding else ""
    ax.set_xlabel(f"block ({i}, {j}): ct.load(x, index=({i}, {j}), shape={tuple(tile_shape)})\n"
                  f"reads x[{rows.start}:{rows.stop}, {cols.start}:{cols.stop}]{padded}",
                  fontsize=10)
    fig.tight_layout()
    return fig
