"""Notebook 09 in pictures: what each optimization changes, and what it bought on an H200.

From measured results (a dict as :func:`mamba2_tile.results.load_results` returns, or its list
of rows; the rows as ``python -m mamba2_tile.bench`` writes them):

* ``ablation_table`` / ``plot_ablation``: the ablation ladder (``bench --ablation``), one step
  after the other, per shape, with mamba_ssm's time for reference;
* ``speedup_summary`` / ``plot_speedups``: the default sweep against mamba_ssm, with the
  course's targets (:data:`SPEEDUP_TARGETS`, :data:`COPY_FRACTION_TARGET`);
* ``roofline_points`` / ``plot_roofline``: achieved TFLOP/s against arithmetic intensity, under
  the H200's memory and compute roofs.

Drawings of the optimizations (no data):

* ``plot_latency_hiding``: loads issued one at a time vs several in flight;
* ``plot_operand_swap``: which operand of the tensor-core product gets transposed;
* ``plot_transposed_layout``: the entering state as strided columns vs a contiguous box;
* ``traffic_breakdown`` / ``fusion_table`` / ``plot_fusion``: the chunk states' bytes, written
  and read by two kernels vs kept in registers by one.
"""

import math

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import FancyArrowPatch, Rectangle

from mamba2_tile.cost import (H200_BF16_DENSE_FLOPS, H200_HBM_BANDWIDTH, Problem,
                              chunk_states_bytes, chunked_cost, forward_cost, minimal_bytes,
                              ridge_point)

# The ablation ladder in order (``mamba2_tile.bench``): each step adds to the one before, except
# "+fused", which swaps stages 2 and 3 for the fused kernel. Unknown names are drawn after these.
VARIANTS = ("baseline", "+latency", "+swap", "+transposed", "+tf32", "+autotune",
            "+bf16_states", "+fused", "+fused_autotune")
SPEEDUP_TARGETS = {64: 2.5, 128: 1.5}
"""The course's goal per chunk size: geomean speed-up over mamba_ssm on the default sweep."""
COPY_FRACTION_TARGET = 0.35
"""... and at least this fraction of the copy bandwidth, on the minimal bytes, for the long
sequences (seqlen >= 4096) with dstate 64."""

SHAPE_KEYS = ("batch", "seqlen", "nheads", "headdim", "dstate", "ngroups", "chunk_size", "dtype")
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
_DTYPE_SHORT = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
OURS = "mamba2-tile (cuTile)"
THEIRS = "mamba_ssm (Triton)"
_MEMORY, _COMPUTE, _STATE = "tab:blue", "tab:orange", "tab:purple"


# --------------------------------------------------------------------------------------------
# Rows in, checked
# --------------------------------------------------------------------------------------------

def _rows(results, required=("mamba2_tile_ms",)):
    """The rows of ``results`` (a results dict or a list of rows), each checked for the shape
    fields and ``required``; a clear ``ValueError`` / ``TypeError`` otherwise."""
    if isinstance(results, dict):
        if "rows" not in results:
            raise ValueError("results must be a dict with 'rows' (as load_results returns) "
                             "or a list of rows")
        rows = results["rows"]
    elif isinstance(results, (list, tuple)):
        rows = results
    else:
        raise TypeError(f"results must be a dict with 'rows' or a list of rows, got "
                        f"{type(results).__name__} (did load_results return None? then the "
                        "file is not in data/ yet)")
    if not rows:
        raise ValueError("results has no rows")
    for number, row in enumerate(rows):
        if not isinstance(row, dict):
            raise TypeError(f"row {number} must be a dict, got {type(row).__name__}")
        missing = [key for key in (*SHAPE_KEYS, *required) if row.get(key) is None]
        if missing:
            raise ValueError(f"row {number} lacks {', '.join(missing)}")
        if row["dtype"] not in DTYPE_BYTES:
            raise ValueError(f"row {number}: unknown dtype {row['dtype']!r} "
                             f"(expected one of {', '.join(DTYPE_BYTES)})")
    return list(rows)


def shape_of(row):
    return tuple(row[key] for key in SHAPE_KEYS)


def shape_label(row):
    """``b8 L4096 h64 p64 n128 g1 c64 bf16``: batch, seqlen, heads, headdim, dstate, groups,
    chunk size, dtype."""
    return (f"b{row['batch']} L{row['seqlen']} h{row['nheads']} p{row['headdim']} "
            f"n{row['dstate']} g{row['ngroups']} c{row['chunk_size']} "
            f"{_DTYPE_SHORT.get(row['dtype'], row['dtype'])}")


def problem_of(row):
    """The :class:`mamba2_tile.cost.Problem` a result row measured."""
    return Problem(row["batch"], row["seqlen"], row["nheads"], row["headdim"], row["dstate"],
                   row["ngroups"], row["chunk_size"], dtype_bytes=DTYPE_BYTES[row["dtype"]])


def geomean(values):
    values = list(values)
    return math.exp(sum(map(math.log, values)) / len(values))


def _number(value, spec):
    return "-" if value is None else format(value, spec)


# --------------------------------------------------------------------------------------------
# The ablation
# --------------------------------------------------------------------------------------------

def ablation_groups(results):
    """``[(shape row, {variant: row})]`` in the order the shapes first appear, the variants in
    ladder order; each shape must have its ``baseline``."""
    rows = _rows(results, required=("mamba2_tile_ms", "variant"))
    groups = {}
    for row in rows:
        groups.setdefault(shape_of(row), {})[row["variant"]] = row
    ordered = []
    for variants in groups.values():
        if "baseline" not in variants:
            raise ValueError(f"{shape_label(next(iter(variants.values())))} has no 'baseline' "
                             "row: speed-ups are measured from it")
        names = sorted(variants, key=lambda v: (VARIANTS.index(v) if v in VARIANTS
                                                else len(VARIANTS)))
        ordered.append((variants["baseline"], {name: variants[name] for name in names}))
    return ordered


_ABLATION_COLUMNS = (  # header, width, cell
    ("variant", 15, lambda r, base: r["variant"]),
    ("ms", 8, lambda r, base: f"{r['mamba2_tile_ms']:.3f}"),
    ("x base", 7, lambda r, base: f"{base / r['mamba2_tile_ms']:.2f}"),
    ("x mamba_ssm", 11, lambda r, base: _number(
        r["mamba_ssm_ms"] / r["mamba2_tile_ms"] if r.get("mamba_ssm_ms") else None, ".2f")),
    ("rel err", 8, lambda r, base: _number(r.get("rel_err"), ".1e")),
    ("tune s", 6, lambda r, base: _number(r.get("autotune_s"), ".0f")),
    ("cached s", 8, lambda r, base: _number(r.get("autotune_cached_s"), ".3f")),
)


def ablation_table(results):
    """The ablation as fixed-width text: per shape (named once), one line per step.

    ``x base`` is the baseline's time over the step's (above 1: faster), ``x mamba_ssm``
    mamba_ssm's time over the step's, ``tune s`` the seconds the autotuner spent and
    ``cached s`` those it then took to read its choice back from the cache file; ``-`` where
    nothing was measured.
    """
    width = max(len(shape_label(base)) for base, _ in ablation_groups(results))
    def align(header):
        return "<" if header == "variant" else ">"

    lines = [f"{'shape':<{width}s}  "
             + "  ".join(f"{h:{align(h)}{w}s}" for h, w, _ in _ABLATION_COLUMNS)]
    for base, variants in ablation_groups(results):
        for k, row in enumerate(variants.values()):
            label = shape_label(base) if k == 0 else ""
            cells = [f"{cell(row, base['mamba2_tile_ms']):{align(h)}{w}s}"
                     for h, w, cell in _ABLATION_COLUMNS]
            lines.append(f"{label:<{width}s}  " + "  ".join(cells))
    return "\n".join(lines)


_VARIANT_COLORS = dict(zip(VARIANTS, ("0.55", "tab:blue", "tab:cyan", "tab:green", "tab:olive",
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
        ax.set_title(shape_label(base), fontsize=9)
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

def _speedup(row):
    if row.get("speedup") is not None:
        return row["speedup"]
    if row.get("mamba_ssm_ms"):
        return row["mamba_ssm_ms"] / row["mamba2_tile_ms"]
    return None


def _copy_fraction(row, copy_gbps):
    if row.get("copy_fraction") is not None:
        return row["copy_fraction"]
    if copy_gbps:
        return minimal_bytes(problem_of(row)) / (row["mamba2_tile_ms"] * 1e-3) / (copy_gbps * 1e9)
    return None


def speedup_summary(results):
    """Fixed-format text: the geomean speed-up over mamba_ssm per chunk size against
    :data:`SPEEDUP_TARGETS`, and the fraction of the copy bandwidth reached on the long
    dstate-64 sequences against :data:`COPY_FRACTION_TARGET`, the copy rate measured in the same
    run (``results["copy_gbps"]``), which the line names."""
    rows = _rows(results)
    copy_gbps = results.get("copy_gbps") if isinstance(results, dict) else None
    lines = [f"{'chunk':>5s}  {'shapes':>6s}  {'geomean':>7s}  {'min':>6s}  {'max':>6s}  "
             f"{'target':>6s}  met"]
    for chunk in sorted({row["chunk_size"] for row in rows}):
        ratios = [_speedup(r) for r in rows if r["chunk_size"] == chunk]
        ratios = [r for r in ratios if r is not None]
        target = SPEEDUP_TARGETS.get(chunk)
        if not ratios:
            lines.append(f"{chunk:5d}  {0:6d}  {'-':>7s}  {'-':>6s}  {'-':>6s}  "
                         f"{_number(target, '.1f') + 'x' if target else '-':>6s}  -")
            continue
        mean = geomean(ratios)
        met = "-" if target is None else ("yes" if mean >= target else "no")
        lines.append(f"{chunk:5d}  {len(ratios):6d}  {mean:6.2f}x  {min(ratios):5.2f}x  "
                     f"{max(ratios):5.2f}x  {f'{target:.1f}x' if target else '-':>6s}  {met}")
    long_rows = [r for r in rows if r["seqlen"] >= 4096 and r["dstate"] == 64]
    fractions = [f for f in (_copy_fraction(r, copy_gbps) for r in long_rows) if f is not None]
    if fractions:
        met = "yes" if min(fractions) >= COPY_FRACTION_TARGET else "no"
        yardstick = f" of a {copy_gbps:.0f} GB/s copy" if copy_gbps else ""
        lines.append(f"copy bandwidth{yardstick} reached, seqlen >= 4096 and dstate 64: "
                     f"{len(fractions)} shapes, min {min(fractions):.0%}, "
                     f"geomean {geomean(fractions):.0%} "
                     f"(target >= {COPY_FRACTION_TARGET:.0%} for every shape: {met})")
    else:
        lines.append("copy bandwidth reached, seqlen >= 4096 and dstate 64: not measured")
    return "\n".join(lines)


def plot_speedups(results, title=None):
    """Speed-up over mamba_ssm per shape (its time over ours), grouped by chunk size, with a
    line at 1x (as fast) and each chunk size's target (:data:`SPEEDUP_TARGETS`)."""
    rows = [r for r in _rows(results) if _speedup(r) is not None]
    if not rows:
        raise ValueError("no row has a mamba_ssm time: nothing to compare with")
    rows.sort(key=lambda r: (r["chunk_size"], r["dstate"], r["ngroups"], r["seqlen"]))
    speedups = [_speedup(r) for r in rows]
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
        mean = geomean(speedups[members[0]:members[-1] + 1])
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

def roofline_points(results):
    """Per row: the arithmetic intensity (FLOPs of the chunked algorithm over the minimal
    bytes) and the TFLOP/s each implementation achieved (the same FLOPs over its time).

    Both implementations do the same useful work on the same inputs, so they share the
    intensity; their heights differ by their speed.
    """
    points = []
    for row in _rows(results):
        problem = problem_of(row)
        flops, nbytes = chunked_cost(problem).flops, minimal_bytes(problem)
        theirs = row.get("mamba_ssm_ms")
        points.append(dict(
            label=shape_label(row), chunk_size=row["chunk_size"], flops=flops, bytes=nbytes,
            intensity=flops / nbytes,
            tflops=flops / (row["mamba2_tile_ms"] * 1e-3) / 1e12,
            mamba_ssm_tflops=None if not theirs else flops / (theirs * 1e-3) / 1e12))
    return points


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


def traffic_breakdown(problem):
    """Bytes through global memory for the three ways to run the forward pass, split into the
    chunk states (written by stage 2, read by stage 3) and everything else.

    Returns ``{pipeline: {"chunk states": bytes, "everything else": bytes}}`` for
    ``3 kernels, fp32 states``, ``3 kernels, 16-bit states`` and ``fused (states in registers)``.
    """
    half = problem.dtype_bytes
    pipelines = {
        "3 kernels, fp32 states": (forward_cost(problem), chunk_states_bytes(problem)),
        f"3 kernels, {8 * half}-bit states": (forward_cost(problem, states_bytes=half),
                                              chunk_states_bytes(problem, half)),
        "fused (states in registers)": (forward_cost(problem, fused=True), 0),
    }
    return {name: {"chunk states": states, "everything else": cost.bytes - states}
            for name, (cost, states) in pipelines.items()}


def fusion_table(problem):
    """:func:`traffic_breakdown` as fixed-format text, in GB, with the minimal bytes."""
    lines = [f"{'pipeline':<28s} {'chunk states':>12s} {'other':>8s} {'total':>8s}"]
    for name, parts in traffic_breakdown(problem).items():
        total = sum(parts.values())
        lines.append(f"{name:<28s} {parts['chunk states'] / 1e9:9.2f} GB "
                     f"{parts['everything else'] / 1e9:5.2f} GB {total / 1e9:5.2f} GB")
    lines.append(f"{'minimal (inputs once, y)':<28s} {'':>12s} {'':>8s} "
                 f"{minimal_bytes(problem) / 1e9:5.2f} GB")
    return "\n".join(lines)


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
