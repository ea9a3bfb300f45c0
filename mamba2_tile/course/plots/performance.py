"""Notebook 09 in pictures: what each optimization changes, and what it bought on an H200.

From measured results (a dict as :func:`mamba2_tile.tools.results.load_results` returns, or its
list of rows; the rows as ``python -m mamba2_tile.tools.bench`` writes them, read back by
:mod:`mamba2_tile.tools.bench.reporting`, which also prints them as text):

* ``plot_ablation``: the ablation ladder (``bench --ablation``), one step after the other, per
  shape, with mamba_ssm's time for reference;
* ``plot_speedups``: the default sweep against mamba_ssm, with the course's targets
  (``SPEEDUP_TARGETS``);
* ``plot_roofline``: achieved TFLOP/s against arithmetic intensity, under the H200's memory and
  compute roofs.

Drawings of the optimizations (no data):

* ``plot_latency_hiding``: loads issued one at a time vs several in flight;
* ``plot_operand_swap``: which operand of the tensor-core product gets transposed;
* ``plot_transposed_layout``: the entering state as strided columns vs a contiguous box;
* ``plot_fusion``: the chunk states' bytes (:func:`mamba2_tile.cost.traffic_breakdown`), written
  and read by two kernels vs kept in registers by one.
"""

import math
from statistics import geometric_mean

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import FancyArrowPatch, Rectangle

from mamba2_tile.cost import (H200_BF16_DENSE_FLOPS, H200_HBM_BANDWIDTH, minimal_bytes,
                              ridge_point, traffic_breakdown)
from mamba2_tile.problem import Problem
from mamba2_tile.tools.bench.presets import STEPS
from mamba2_tile.tools.bench.reporting import (COPY_FRACTION_TARGET, SPEEDUP_TARGETS,
                                               ablation_groups, roofline_points, speedup)
from mamba2_tile.tools.results import bench_rows

OURS = "mamba2-tile (cuTile)"
THEIRS = "mamba_ssm (Triton)"
_MEMORY, _COMPUTE, _STATE = "tab:blue", "tab:orange", "tab:purple"


# --------------------------------------------------------------------------------------------
# Rows in, checked
# --------------------------------------------------------------------------------------------

# --------------------------------------------------------------------------------------------
# The ablation
# --------------------------------------------------------------------------------------------

_VARIANT_COLORS = dict(zip(STEPS, ("0.55", "tab:blue", "tab:cyan", "tab:green", "tab:olive",
                                       "tab:orange", "tab:pink", "tab:purple", "tab:red")))


def _variant_color(name):
    return _VARIANT_COLORS.get(name, "0.8")


def plot_ablation(results, metric="speedup", ncols=3, title=None):
    """One panel per shape, one bar per ladder step.

    ``metric="speedup"``: the baseline's time over the step's (higher is better), mamba_ssm's
    speed on the same scale as a dashed line; ``metric="ms"``: the times themselves, mamba_ssm's
    time as the dashed line.
    """
    if metric not in ("speedup", "ms"):
        raise ValueError(f"metric must be 'speedup' or 'ms', got {metric!r}")
    groups = ablation_groups(results)
    ncols = min(ncols, len(groups))
    nrows = math.ceil(len(groups) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.9 * ncols, 3.3 * nrows), dpi=90,
                             squeeze=False)
    for ax, (base, variants) in zip(axes.flat, groups):
        base_ms = base["mamba2_tile_ms"]
        names = list(variants)
        values = [base_ms / variants[n]["mamba2_tile_ms"] if metric == "speedup"
                  else variants[n]["mamba2_tile_ms"] for n in names]
        bars = ax.bar(range(len(names)), values, color=[_variant_color(n) for n in names])
        for bar, value in zip(bars, values):
            ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height(),
                    f"{value:.2f}{'x' if metric == 'speedup' else ''}", ha="center",
                    va="bottom", fontsize=7)
        theirs = next((r["mamba_ssm_ms"] for r in variants.values() if r.get("mamba_ssm_ms")),
                      None)
        top = max(values)
        if theirs is not None:
            reference = base_ms / theirs if metric == "speedup" else theirs
            ax.axhline(reference, color="black", ls="--", lw=1.2, label=THEIRS)
            top = max(top, reference)
        if metric == "speedup":
            ax.axhline(1.0, color="0.4", lw=0.8)
        ax.set_ylim(0, top * 1.18)
        ax.set_xticks(range(len(names)), names, rotation=45, ha="right", fontsize=8)
        ax.set_title(Problem.from_row(base).label(), fontsize=9)
        ax.grid(True, axis="y", alpha=0.3)
        ax.tick_params(axis="y", labelsize=8)
    for ax in axes.flat[len(groups):]:
        ax.axis("off")
    for row_axes in axes:
        row_axes[0].set_ylabel("speed-up over baseline" if metric == "speedup"
                               else "time (ms), lower is better", fontsize=9)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="upper right", fontsize=8)
    fig.suptitle(title or "The optimizations one by one (each step adds to the one before)",
                 fontsize=10)
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------------------------
# Against mamba_ssm, over the default sweep
# --------------------------------------------------------------------------------------------

def plot_speedups(results, title=None):
    """Speed-up over mamba_ssm per shape (its time over ours), grouped by chunk size, with a
    line at 1x (as fast) and each chunk size's target (:data:`SPEEDUP_TARGETS`)."""
    rows = [r for r in bench_rows(results) if speedup(r) is not None]
    if not rows:
        raise ValueError("no row has a mamba_ssm time: nothing to compare with")
    rows.sort(key=lambda r: (r["chunk_size"], r["dstate"], r["ngroups"], r["seqlen"]))
    speedups = [speedup(r) for r in rows]
    chunks = sorted({r["chunk_size"] for r in rows})
    colors = dict(zip(chunks, ["tab:green", "tab:olive", "tab:cyan", "tab:purple"]))
    fig, ax = plt.subplots(figsize=(max(6.0, 0.42 * len(rows) + 2.5), 3.8), dpi=90)
    ax.bar(range(len(rows)), speedups, color=[colors.get(r["chunk_size"], "0.5") for r in rows])
    for k, value in enumerate(speedups):
        ax.text(k, value, f"{value:.2f}", ha="center", va="bottom", fontsize=6.5)
    ax.axhline(1.0, color="black", lw=1)
    for chunk in chunks:
        members = [k for k, r in enumerate(rows) if r["chunk_size"] == chunk]
        left, right = members[0] - 0.45, members[-1] + 0.45
        mean = geometric_mean(speedups[members[0]:members[-1] + 1])
        target = SPEEDUP_TARGETS.get(chunk)
        ax.plot([left, right], [mean, mean], color="black", lw=1.6, ls="-.")
        if target:
            ax.plot([left, right], [target, target], color="crimson", ls="--", lw=1.4)
        ax.bar([members[0]], [0], color=colors.get(chunk, "0.5"),
               label=f"chunk {chunk}: geomean {mean:.2f}x (-.-)"
                     + (f", target {target}x (red --)" if target else ""))
    labels = [f"L{r['seqlen']}\nn{r['dstate']} g{r['ngroups']}" for r in rows]
    ax.set_xticks(range(len(rows)), labels, fontsize=7)
    ax.set_ylim(0, max(max(speedups), *SPEEDUP_TARGETS.values()) * 1.3)
    ax.set_ylabel("speed-up over mamba_ssm\n(its time / ours; higher is better)", fontsize=9)
    base = rows[0]
    ax.set_title(title or f"Forward pass, batch {base['batch']}, {base['nheads']} heads of "
                 f"{base['headdim']}, {base['dtype']}: mamba2-tile vs mamba_ssm", fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------------------------
# The roofline
# --------------------------------------------------------------------------------------------

def plot_roofline(results, peak_flops=H200_BF16_DENSE_FLOPS, peak_bandwidth=H200_HBM_BANDWIDTH,
                  marks=None, title=None):
    """Log-log roofline: achieved TFLOP/s against FLOP/byte, one point per row (and one for
    mamba_ssm where it was timed), under the compute roof (``peak_flops``, 16-bit dense tensor
    cores) and the memory roofs (the copy bandwidth measured in the run, ``copy_gbps``, and the
    datasheet's ``peak_bandwidth``). ``marks``, ``{label: FLOP/byte}``, draws dotted vertical
    lines (e.g. the intensity of each pipeline on the bytes it really moves)."""
    points = roofline_points(results)
    copy_gbps = results.get("copy_gbps") if isinstance(results, dict) else None
    intensities = np.array([p["intensity"] for p in points])
    ridge = ridge_point(peak_flops, peak_bandwidth)
    every = [*intensities, *(marks or {}).values()]
    x = np.geomspace(min(min(every) / 4, 1.0), max(max(every) * 4, ridge * 4), 200)
    fig, ax = plt.subplots(figsize=(7.0, 4.4), dpi=90)
    ax.plot(x, np.minimum(peak_flops, x * peak_bandwidth) / 1e12, color="black", lw=1.8,
            label=f"roof: {peak_bandwidth / 1e12:.1f} TB/s HBM, {peak_flops / 1e12:.0f} "
                  "TFLOP/s bf16")
    if copy_gbps:
        copy = copy_gbps * 1e9
        ax.plot(x, np.minimum(peak_flops, x * copy) / 1e12, color="0.4", ls="--", lw=1.2,
                label=f"measured copy bandwidth, {copy / 1e12:.2f} TB/s")
        ax.plot(x, np.minimum(peak_flops, x * copy * COPY_FRACTION_TARGET) / 1e12, color="0.6",
                ls=":", lw=1.2, label=f"{COPY_FRACTION_TARGET:.0%} of the copy bandwidth")
    ax.axvline(ridge, color="0.75", lw=0.8)
    for k, (label, intensity) in enumerate((marks or {}).items()):
        ax.axvline(intensity, color="tab:purple", ls=":", lw=1.2)
        ax.text(intensity, peak_flops / 1e12 * 0.7 / 2.2 ** k, f" {label}", color="tab:purple",
                fontsize=7.5, va="top")
    ax.annotate(f"ridge: {ridge:.0f} FLOP/byte", (ridge, peak_flops / 1e12 / 30),
                xytext=(4, 0), textcoords="offset points", fontsize=8, color="0.4")
    markers = dict(zip(sorted({p["chunk_size"] for p in points}), "os^Dv"))
    for chunk, marker in markers.items():
        mine = [p for p in points if p["chunk_size"] == chunk]
        ax.scatter([p["intensity"] for p in mine], [p["tflops"] for p in mine], marker=marker,
                   color="tab:green", s=28, zorder=3, label=f"{OURS}, chunk {chunk}")
        theirs = [p for p in mine if p["mamba_ssm_tflops"]]
        if theirs:
            ax.scatter([p["intensity"] for p in theirs], [p["mamba_ssm_tflops"] for p in theirs],
                       marker=marker, facecolor="none", edgecolor="0.35", s=28, zorder=3,
                       label=f"{THEIRS}, chunk {chunk}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(x[0], x[-1])
    ax.set_xlabel("arithmetic intensity (FLOPs / minimal bytes)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.set_title(title or "Roofline: where the forward pass sits on an H200", fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------------------------
# Drawings of the optimizations
# --------------------------------------------------------------------------------------------

def _box(ax, x, y, w, h, color, text=None, fontsize=8, **style):
    ax.add_patch(Rectangle((x, y), w, h, facecolor=color, edgecolor="black", linewidth=0.8,
                           **style))
    if text:
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=fontsize)


def _arrow(ax, start, end, color="0.3", **style):
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=11, color=color,
                                 **style))


def latency_timelines(ntiles=4, latency=3.0, issue=0.5, compute=1.0, in_flight=3):
    """The schedules behind :func:`plot_latency_hiding`, as ``{case: (loads, computes)}``,
    each a list of ``(start, end)`` per tile, and how many loads may be in flight.

    A load takes ``latency`` from issue to data; a new one can be issued every ``issue``
    (bandwidth) as long as fewer than ``in_flight`` are pending; tile ``i`` is computed once
    it has arrived and tile ``i - 1`` is done. Without a hint one load is in flight at a time.
    """
    schedules = {}
    for case, depth in (("one load at a time", 1), (f"up to {in_flight} loads in flight",
                                                      in_flight)):
        loads, computes = [], []
        for i in range(ntiles):
            start = i * issue if i else 0.0
            if i >= depth:                      # a buffer frees when its tile is consumed
                start = max(start, computes[i - depth][1])
            if loads:
                start = max(start, loads[-1][0] + issue)
            loads.append((start, start + latency))
            begin = max(loads[i][1], computes[-1][1] if computes else 0.0)
            computes.append((begin, begin + compute))
        schedules[case] = (loads, computes, depth)
    return schedules


def plot_latency_hiding(ntiles=4, latency=3.0, issue=0.5, compute=1.0, in_flight=3):
    """Two timelines of one block streaming ``ntiles`` tiles: loads waited for one by one, and
    loads issued ahead (the latency hint), overlapping the compute of earlier tiles."""
    schedules = latency_timelines(ntiles, latency, issue, compute, in_flight)
    end = max(c[-1][1] for _, c, _ in schedules.values())
    fig, axes = plt.subplots(2, 1, figsize=(9, 3.9), dpi=90, sharex=True)
    colors = plt.get_cmap("tab10").colors
    for ax, (case, (loads, computes, depth)) in zip(axes, schedules.items()):
        for i, ((l0, l1), (c0, c1)) in enumerate(zip(loads, computes)):
            lane = i % depth
            _box(ax, l0, 0.15 + 0.55 * lane, l1 - l0, 0.45, colors[i], f"load tile {i}",
                 fontsize=7, alpha=0.75)
            _box(ax, c0, 2.0, c1 - c0, 0.6, colors[i], f"mma {i}", fontsize=7)
        finish = computes[-1][1]
        ax.axvline(finish, color="crimson", lw=1.2)
        ax.text(finish, 2.75, f" done at t = {finish:g}", color="crimson", fontsize=8,
                va="bottom")
        ax.set_yticks([0.15 + 0.55 * (in_flight - 1) / 2 + 0.22, 2.3],
                      ["memory\n(loads in flight)", "tensor cores"], fontsize=8)
        ax.set_ylim(3.3, -0.1)
        ax.set_title(case, fontsize=9, loc="left")
        ax.grid(True, axis="x", alpha=0.3)
    axes[1].set_xlim(0, end * 1.12)
    axes[1].set_xlabel(f"time (a load takes {latency:g} from issue to data, "
                       f"an mma on a tile {compute:g})")
    fig.suptitle("Latency hiding: issue the next loads before they are needed", fontsize=10)
    fig.tight_layout()
    return fig


def _matrix(ax, x, y, rows, cols, color, name, dims, scale, transposed=None):
    """An operand drawn to scale (``rows x cols`` at ``scale`` per element) with its name."""
    w, h = cols * scale, rows * scale
    _box(ax, x, y, w, h, color, alpha=0.85)
    ax.text(x + w / 2, y + h / 2, name, ha="center", va="center", fontsize=9, weight="bold")
    ax.text(x + w / 2, y + h + 0.12, dims, ha="center", va="top", fontsize=7)
    if transposed:
        good = transposed == "free"
        ax.text(x + w / 2, y - 0.12, "transposed by the load: free" if good
                else "transposed in registers: shuffles",
                ha="center", va="bottom", fontsize=7.5, color="green" if good else "crimson",
                weight="bold")
    return x + w


def plot_operand_swap(chunk_size=64, headdim=64, dstate=128):
    """Stage 2's tensor-core product, ``state += (x·w)ᵀ @ B``, as written and swapped.

    As written the transposed operand is ``x·w``, computed in registers; swapped
    (``stateᵀ += Bᵀ @ (x·w)``) it is ``B``, which comes from memory and can be read in either
    orientation, and the larger dimension (``dstate``) becomes the product's M.
    """
    scale = 1.6 / max(chunk_size, headdim, dstate)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), dpi=90)
    cases = [
        ("as written: state (p × n) += (x·w)ᵀ @ B",
         [("(x·w)ᵀ", headdim, chunk_size, _COMPUTE, f"M={headdim} × K={chunk_size}", "regs"),
          ("B", chunk_size, dstate, _MEMORY, f"K={chunk_size} × N={dstate}", None),
          ("state", headdim, dstate, _STATE, f"M={headdim} × N={dstate}", None)]),
        ("swapped: stateᵀ (n × p) += Bᵀ @ (x·w)",
         [("Bᵀ", dstate, chunk_size, _MEMORY, f"M={dstate} × K={chunk_size}", "free"),
          ("x·w", chunk_size, headdim, _COMPUTE, f"K={chunk_size} × N={headdim}", None),
          ("stateᵀ", dstate, headdim, _STATE, f"M={dstate} × N={headdim}", None)]),
    ]
    widths = []
    for ax, (title, operands) in zip(axes, cases):
        x = 0.1
        for k, (name, rows, cols, color, dims, transposed) in enumerate(operands):
            right = _matrix(ax, x, 0.5, rows, cols, color, name, dims, scale, transposed)
            if k < 2:
                ax.text(right + 0.15, 0.5 + 0.4, "@" if k == 0 else "→", fontsize=14,
                        va="center")
            x = right + 0.5
        widths.append(x)
        ax.axis("off")
        ax.set_title(title, fontsize=9)
    for ax in axes:                  # one scale for both panels
        ax.set_xlim(0, max(widths))
        ax.set_ylim(2.55, 0.0)
        ax.set_aspect("equal")
    handles = [Rectangle((0, 0), 1, 1, color=c, alpha=0.85) for c in (_MEMORY, _COMPUTE, _STATE)]
    fig.legend(handles, ["loaded from memory (B)", "computed in registers (x·w)",
                         "accumulator (the state, float32)"], loc="lower center", ncol=3,
               fontsize=8)
    fig.suptitle(f"The operand swap in stage 2 (chunk {chunk_size}, headdim {headdim}, "
                 f"dstate {dstate}): mma computes A (M×K) @ B (K×N)", fontsize=10)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    return fig


def plot_transposed_layout(headdim=8, dstate=6, block_p=4):
    """One chunk's entering state in memory, and the ``(dstate, BLOCK_P)`` operand stage 3's
    inter-chunk product ``C @ hᵀ`` needs (K = dstate, N = a tile of headdim).

    Natural layout ``(headdim, dstate)``: a row of the operand is a column in memory, elements
    ``dstate`` apart (strided). Transposed layout ``(dstate, headdim)``: each row of the operand
    is ``BLOCK_P`` consecutive values, and the whole operand is one rectangular box with a
    contiguous inner dimension, which one TMA copy moves.
    """
    fig, axes = plt.subplots(2, 2, figsize=(10, 5.2), dpi=90,
                             gridspec_kw=dict(height_ratios=[max(headdim, dstate), 1.6]))
    cases = [("natural layout: chunk_states[..., headdim, dstate]", headdim, dstate, False),
             ("transposed layout: chunk_states[..., dstate, headdim]", dstate, headdim, True)]
    colors = plt.get_cmap("tab10").colors
    for (grid_ax, strip_ax), (title, rows, cols, transposed) in zip(axes.T, cases):
        for r in range(rows):
            for c in range(cols):
                p, n = (c, r) if transposed else (r, c)     # which state element this is
                mine = p < block_p
                _box(grid_ax, c, r, 1, 1, colors[n % 10] if mine else "0.93",
                     f"{p},{n}" if mine else None, fontsize=6, alpha=0.8 if mine else 1)
            _arrow(grid_ax, (-0.9, r + 0.5), (-0.1, r + 0.5), color="0.6")
        grid_ax.text(-1.0, -0.3, "memory order: along each row, then the next row",
                     fontsize=7.5, color="0.4")
        grid_ax.set_xlim(-1.2, max(headdim, dstate) + 0.2)
        grid_ax.set_ylim(max(headdim, dstate) + 0.2, -0.8)
        grid_ax.set_aspect("equal")
        grid_ax.axis("off")
        grid_ax.set_title(title, fontsize=9)
        # The same elements along the address line: colour = operand row (one dstate index n).
        for address in range(rows * cols):
            r, c = divmod(address, cols)
            p, n = (c, r) if transposed else (r, c)
            mine = p < block_p
            _box(strip_ax, address, 0, 1, 1, colors[n % 10] if mine else "0.93", alpha=0.8)
        strip_ax.set_xlim(-0.5, rows * cols + 0.5)
        strip_ax.set_ylim(1.3, -0.9)
        strip_ax.axis("off")
        note = (f"each operand row (one colour) is {block_p} consecutive values:\n"
                f"the {dstate} × {block_p} box is one TMA copy, already K × N" if transposed else
                f"each operand row (one colour) is {block_p} values {dstate} apart: read\n"
                "strided, or load the box the other way round and transpose in registers")
        strip_ax.set_title(f"the same values by address\n{note}", fontsize=8,
                           color="green" if transposed else "crimson")
    fig.suptitle(f"Stage 3 needs h_enter as a (dstate × BLOCK_P) operand, BLOCK_P = {block_p} "
                 f"(coloured: labels are (headdim p, dstate n))", fontsize=10)
    fig.tight_layout()
    return fig


def plot_fusion(problem):
    """Left: the data flow of stages 2 and 3, as two kernels and fused. Right: the bytes each
    pipeline moves for ``problem`` (:func:`traffic_breakdown`), the chunk states on top."""
    fig, (flow, bars) = plt.subplots(1, 2, figsize=(11, 3.9), dpi=90,
                                     gridspec_kw=dict(width_ratios=[1.1, 1]))
    # Two kernels: stage 2 -> HBM -> stage 3.
    flow.text(2.6, 4.95, "two kernels: the state entering every chunk\nmakes a round trip "
              "through HBM", ha="center", va="top", fontsize=8.5)
    _box(flow, 0.2, 3.2, 1.6, 0.8, "#cfe2f3", "fwd_pass_state\n(stage 2)")
    _box(flow, 3.4, 3.2, 1.6, 0.8, "#cfe2f3", "compute_out\n(stage 3)")
    _box(flow, 1.9, 2.3, 1.4, 0.6, "#f4cccc", "chunk_states\nin HBM", fontsize=7.5)
    _arrow(flow, (1.4, 3.2), (2.1, 2.9), color="crimson")
    _arrow(flow, (3.1, 2.9), (3.8, 3.2), color="crimson")
    flow.text(1.6, 2.75, "write", color="crimson", fontsize=7.5, ha="right")
    flow.text(3.6, 2.75, "read", color="crimson", fontsize=7.5)
    # Fused: one kernel, the state in registers.
    flow.text(2.6, 1.95, "one kernel walks the chunks: only y and final_states\nare written",
              ha="center", va="top", fontsize=8.5)
    _box(flow, 0.9, 0.1, 3.4, 1.15, "#d9ead3")
    flow.text(2.6, 1.05, "fused_state_out (stages 2 + 3)", ha="center", va="center", fontsize=8)
    _box(flow, 1.6, 0.3, 2.0, 0.4, _STATE, "state in registers, chunk after chunk",
         fontsize=7, alpha=0.6)
    flow.set_xlim(0, 5.2)
    flow.set_ylim(0, 5.0)
    flow.axis("off")
    flow.set_title("where the chunk states live", fontsize=9)

    parts = traffic_breakdown(problem)
    names = list(parts)
    other = np.array([parts[n]["everything else"] for n in names]) / 1e9
    states = np.array([parts[n]["chunk states"] for n in names]) / 1e9
    positions = np.arange(len(names))
    bars.bar(positions, other, color="0.7", label="everything else")
    bars.bar(positions, states, bottom=other, color="crimson", alpha=0.75,
             label="chunk states (write + read)")
    for k, (o, s) in enumerate(zip(other, states)):
        bars.text(k, o + s, f"{o + s:.2f} GB", ha="center", va="bottom", fontsize=8)
    floor = minimal_bytes(problem) / 1e9
    bars.axhline(floor, color="black", ls="--", lw=1)
    bars.text(len(names) - 0.5, floor, "minimal bytes", ha="right", va="bottom", fontsize=8)
    bars.set_xticks(positions, [n.replace(", ", ",\n").replace(" (", "\n(") for n in names],
                    fontsize=8)
    bars.set_ylim(0, (other + states).max() * 1.18)
    bars.set_ylabel("GB through global memory")
    bars.legend(fontsize=8, loc="upper right")
    bars.grid(True, axis="y", alpha=0.3)
    p = problem
    bars.set_title(f"b{p.batch} L{p.seqlen} h{p.nheads} p{p.headdim} n{p.dstate} "
                   f"g{p.ngroups} chunk {p.chunk_size}, {8 * p.dtype_bytes}-bit inputs",
                   fontsize=9)
    fig.tight_layout()
    return fig
