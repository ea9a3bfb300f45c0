"""Scaling pictures for notebook 10: the SSD against attention as the sequence grows.

* ``plot_costs``: counted FLOPs and bytes moved vs sequence length, for any set of methods
  (the counts: :mod:`mamba2_tile.cost`, :func:`mamba2_tile.cost.attention_cost`);
* ``plot_scaling``: the measured time and peak memory of the scaling sweep
  (``python -m mamba2_tile.tools.scaling``, loaded with
  :func:`mamba2_tile.tools.results.load_scaling_results`), out-of-memory points marked.

Both are log-log: a cost that grows as ``seqlen^k`` is a straight line of slope ``k``.
"""

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.transforms import blended_transform_factory

from mamba2_tile.cost import format_bytes
from mamba2_tile.problem import seqlen_label
from mamba2_tile.tools.results import SCALING_METHODS

STYLE = {  # method -> (legend label, colour, marker)
    "mamba2_tile": ("Mamba-2 SSD (mamba2-tile, cuTile)", "tab:green", "o"),
    "naive_attention": ("attention, naive (scores in memory)", "tab:red", "^"),
    "sdpa_attention": ("attention, SDPA (FlashAttention)", "tab:blue", "s"),
}


def _seqlen_axis(ax, seqlens):
    ax.set_xscale("log", base=2)
    ax.set_xticks(seqlens, [seqlen_label(s) for s in seqlens], fontsize=8)
    ax.minorticks_off()
    ax.set_xlim(seqlens[0] / 1.3, seqlens[-1] * 1.3)
    ax.set_xlabel("sequence length (tokens)")
    ax.grid(True, which="major", alpha=0.3)


def _bytes_axis(ax, low, high):
    """Log axis in bytes, ticks at powers of 32 (1 KiB, 32 KiB, 1 MiB, ...) within the data."""
    ax.set_yscale("log", base=2)
    exponents = range(int(np.floor(np.log2(low))), int(np.ceil(np.log2(high))) + 1)
    ticks = [2.0 ** e for e in exponents if e % 5 == 0]
    ax.set_yticks(ticks, [format_bytes(t) for t in ticks], fontsize=8)
    ax.minorticks_off()
    ax.set_ylim(low / 2, high * 8)     # room at the top for the out-of-memory marks


def plot_costs(seqlens, costs, title="Counted cost of one layer"):
    """FLOPs and bytes moved vs seqlen; ``costs`` maps a name to one ``Cost`` per seqlen.

    The sweep's method names (``"mamba2_tile"``, ...) get the labels and colours of
    :func:`plot_scaling`; any other name is its own label.
    """
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8), dpi=90)
    for name, series in costs.items():
        label, color, marker = STYLE.get(name, (name, None, "o"))
        style = dict(marker=marker, ms=3, color=color, label=label)
        left.plot(seqlens, [c.flops for c in series], **style)
        right.plot(seqlens, [c.bytes for c in series], **style)
    for ax in (left, right):
        _seqlen_axis(ax, list(seqlens))
        ax.set_yscale("log")
    left.set_ylabel("FLOPs")
    left.set_title("arithmetic", fontsize=10)
    right.set_ylabel("bytes read + written")
    right.set_title("memory traffic", fontsize=10)
    left.legend(fontsize=8, loc="upper left")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def _mark_failures(ax, rows, method, color, marker_row):
    """An "x" at the top of the axis where ``method`` ran out of memory, with a note."""
    top = blended_transform_factory(ax.transData, ax.transAxes)
    seqlens = sorted({r["seqlen"] for r in rows})
    for row in rows:
        if row["method"] == method and row["status"] == "oom":
            height = 0.95 - 0.07 * marker_row
            # The note goes on the side of the marker with room for it.
            left = seqlens.index(row["seqlen"]) > 0.6 * (len(seqlens) - 1)
            ax.plot([row["seqlen"]], [height], "x", color=color, ms=8, mew=2, transform=top)
            ax.annotate(f"out of memory at {seqlen_label(row['seqlen'])}",
                        (row["seqlen"], height), xycoords=top, xytext=(-7 if left else 7, 0),
                        textcoords="offset points", ha="right" if left else "left",
                        va="center", fontsize=8, color=color)


def _mark_budget_stop(ax, rows, method, key, color):
    """A note at the last point of a method that was stopped for taking too long."""
    mine = sorted((r for r in rows if r["method"] == method), key=lambda r: r["seqlen"])
    ok = [r for r in mine if r["status"] == "ok"]
    if not ok or not any(r["status"] == "skipped" for r in mine):
        return
    if any(r["status"] == "oom" for r in mine):
        return                        # the "x" already says why it stopped
    last = ok[-1]
    ax.annotate("stopped: too slow", (last["seqlen"], last[key]), xytext=(-6, 6),
                textcoords="offset points", ha="right", fontsize=8, color=color)


def plot_scaling(results, title=None):
    """Two log-log panels from the scaling sweep: time and peak memory vs sequence length.

    ``results`` is the dict ``load_scaling_results`` returns (``"rows"``, ``"device"``, and
    ``"gpu_memory_bytes"`` when the sweep recorded it). Out-of-memory points are an "x" at the
    top of each panel; the memory panel also shows the SSD's state, constant in seqlen, and the
    GPU's memory.
    """
    rows = results["rows"]
    seqlens = sorted({r["seqlen"] for r in rows})
    methods = [m for m in SCALING_METHODS if any(r["method"] == m for r in rows)]
    fig, (time_ax, mem_ax) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=90)
    failed = 0
    for method in methods:
        label, color, marker = STYLE[method]
        ok = sorted((r for r in rows if r["method"] == method and r["status"] == "ok"),
                    key=lambda r: r["seqlen"])
        if ok:
            x = [r["seqlen"] for r in ok]
            time_ax.plot(x, [r["ms"] for r in ok], marker + "-", ms=4, color=color, label=label)
            mem_ax.plot(x, [r["peak_bytes"] for r in ok], marker + "-", ms=4, color=color,
                        label=label)
        _mark_budget_stop(time_ax, rows, method, "ms", color)
        if any(r["method"] == method and r["status"] == "oom" for r in rows):
            for ax in (time_ax, mem_ax):
                _mark_failures(ax, rows, method, color, failed)
            failed += 1

    for ax in (time_ax, mem_ax):
        _seqlen_axis(ax, seqlens)
    time_ax.set_yscale("log")
    times = [r["ms"] for r in rows if r["status"] == "ok" and r["ms"]]
    if times:
        time_ax.set_ylim(min(times) / 2, max(times) * 8)
    time_ax.set_ylabel("time per call (ms)")
    time_ax.set_title("time of one call", fontsize=10)

    memory = [r["peak_bytes"] for r in rows if r["status"] == "ok" and r["peak_bytes"]]
    states = [r["state_bytes"] for r in rows if r["state_bytes"]]
    if states:
        mem_ax.axhline(states[0], color="tab:green", ls=":", lw=1.5)
        mem_ax.annotate(f"SSD state carried to the next call: {format_bytes(states[0])}, "
                        "at any length", (seqlens[-1], states[0]), xytext=(0, 4),
                        textcoords="offset points", ha="right", fontsize=8, color="tab:green")
    gpu = results.get("gpu_memory_bytes")
    if gpu:
        mem_ax.axhline(gpu, color="gray", ls="--", lw=1)
        mem_ax.annotate(f"all of the GPU's memory ({format_bytes(gpu)})", (seqlens[0], gpu),
                        xytext=(0, -11), textcoords="offset points", fontsize=8, color="gray")
    levels = memory + states + ([gpu] if gpu else [])
    if levels:
        _bytes_axis(mem_ax, min(levels), max(levels))
    mem_ax.set_ylabel("peak memory of one call, above its inputs")
    mem_ax.set_title("memory of one call", fontsize=10)
    handles, labels = time_ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8, frameon=False)
    fig.suptitle(title or f"Scaling on an {results['device']}", fontsize=10)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig
