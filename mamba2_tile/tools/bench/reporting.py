"""The benchmark's rows: stored (JSON and CSV, resumable), shown (text tables, a summary), and
read back (the ablation grouped, the speed-ups against the course's targets, the roofline).

A row is one dict per measured problem (per ladder step in an ablation): the problem's fields
(:class:`mamba2_tile.problem.Problem`), then what :mod:`.measurement` measured. A file is
``{**meta, "rows": rows}`` (see :mod:`mamba2_tile.tools.results`, which reads it back).
"""

import csv
import json
from statistics import geometric_mean

from tabulate import tabulate

from mamba2_tile.cost import chunked_cost, minimal_bytes
from mamba2_tile.problem import Problem
from mamba2_tile.tools.bench.presets import STEPS
from mamba2_tile.tools.results import bench_rows


# ------------------------------------------------------------------------------ storage

def save(stem, meta, rows):
    """``<stem>.json`` (the meta and the rows) and ``<stem>.csv`` (the rows)."""
    stem.with_suffix(".json").write_text(json.dumps({**meta, "rows": rows}, indent=1) + "\n")
    # CSV has no nesting: {"ms": {"fla": 1.0}} becomes the column ms_fla.
    flat = [{f"{key}_{sub}" if isinstance(value, dict) else key: item
             for key, value in row.items()
             for sub, item in (value.items() if isinstance(value, dict) else [(None, value)])}
            for row in rows]
    with stem.with_suffix(".csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=sorted({k for r in flat for k in r}))
        writer.writeheader()
        writer.writerows(flat)


def previous_rows(stem):
    """The rows of an earlier run's ``<stem>.json`` (none if there is no such file)."""
    path = stem.with_suffix(".json")
    return json.loads(path.read_text())["rows"] if path.exists() else []


def measured_problems(rows):
    """The problems ``rows`` already hold (``--resume`` measures only the others)."""
    return {Problem.from_row(row) for row in rows}


# ------------------------------------------------------------------------------ tables

# (header, row field, format); "shape" is the problem's label.
COLUMNS = [
    ("shape", None, "{}"), ("cumsum", "chunk_cumsum_ms", "{:.3f}"),
    ("state", "fwd_pass_state_ms", "{:.3f}"), ("out", "compute_out_ms", "{:.3f}"),
    ("fused", "fused_state_out_ms", "{:.3f}"), ("ms", "mamba2_tile_ms", "{:.3f}"),
    ("triton", "mamba_ssm_ms", "{:.3f}"), ("xTriton", "speedup", "{:.2f}"),
    ("torch", "torch_ms", "{:.3f}"), ("xTorch", "torch_speedup", "{:.1f}"),
    ("GB/s", "gbps", "{:.0f}"), ("%copy", "copy_fraction", "{:.0%}"),
    ("rel_err", "rel_err", "{:.1e}"), ("triton_err", "mamba_ssm_rel_err", "{:.1e}"),
]
ABLATION_COLUMNS = [
    ("shape", None, "{}"), ("variant", "variant", "{}"), ("ms", "mamba2_tile_ms", "{:.3f}"),
    ("xBase", "vs_baseline", "{:.2f}"), ("triton", "mamba_ssm_ms", "{:.3f}"),
    ("xTriton", "speedup", "{:.2f}"), ("rel_err", "rel_err", "{:.1e}"),
    ("tune_s", "autotune_s", "{:.1f}"), ("cached_s", "autotune_cached_s", "{:.3f}"),
]


def _table(rows, columns):
    """One line per row, ``-`` where a field was not measured."""
    def cell(row, key, fmt):
        value = Problem.from_row(row).label() if key is None else row.get(key)
        return "-" if value is None else fmt.format(value)
    body = [[cell(row, key, fmt) for _, key, fmt in columns] for row in rows]
    return tabulate(body, headers=[header for header, _, _ in columns], disable_numparse=True,
                    colalign=("left", *["right"] * (len(columns) - 1)))


def format_table(rows):
    return _table(rows, COLUMNS)


MODELS_COLUMNS = [
    ("shape", None, "{}"), ("tf32", "tf32", "{}"), ("path", "path", "{}"),
    ("ms", "ms_mamba2_tile", "{:.3f}"), ("mamba_ssm", "ms_mamba_ssm", "{:.3f}"),
    ("fla", "ms_fla", "{:.3f}"), ("xPeer", "vs_best_peer", "{:.2f}"),
    ("%copy", "copy_fraction", "{:.0%}"), ("eager", "eager_ms", "{:.3f}"),
    ("err", "error_mamba2_tile", "{:.1e}"), ("ssm_err", "error_mamba_ssm", "{:.1e}"),
    ("fla_err", "error_fla", "{:.1e}"),
]


def format_models(rows):
    """The models preset's table: ms per implementation, ``xPeer`` = the faster peer's time over
    ours, errors against float64."""
    flat = [{**row, "path": row["path"].split("(")[0],
             **{f"{key}_{name}": value for key in ("ms", "error")
                for name, value in row[key].items()}} for row in rows]
    return _table(flat, MODELS_COLUMNS)


def models_summary(rows):
    """The speed-up over the faster peer: geomean, minimum, how many rows reach 1.5x."""
    ratios = [row["vs_best_peer"] for row in rows if row.get("vs_best_peer")]
    if not ratios:
        return "no other implementation measured"
    return (f"speed-up over the faster of the others: geomean {geometric_mean(ratios):.2f}x, "
            f"min {min(ratios):.2f}x, max {max(ratios):.2f}x; "
            f"{sum(r >= 1.5 for r in ratios)} of {len(ratios)} rows at 1.5x or more")


TRAINING_COLUMNS = [
    ("shape", None, "{}"), ("ms", "ms_mamba2_tile", "{:.3f}"),
    ("mamba_ssm", "ms_mamba_ssm", "{:.3f}"), ("fla", "ms_fla", "{:.3f}"),
    ("xPeer", "vs_best_peer", "{:.2f}"), ("MB", "peak_mb_mamba2_tile", "{:.0f}"),
    ("ssm_MB", "peak_mb_mamba_ssm", "{:.0f}"), ("fla_MB", "peak_mb_fla", "{:.0f}"),
    ("grad_err", "max_grad_error_mamba2_tile", "{:.1e}"),
    ("ssm_err", "max_grad_error_mamba_ssm", "{:.1e}"), ("fla_err", "max_grad_error_fla", "{:.1e}"),
]


def format_training(rows):
    """The ``--backward`` table: forward + backward ms per implementation, ``xPeer`` (the faster
    peer's time over ours), peak memory of a step, the worst gradient's error against float64."""
    keys = ("ms", "peak_mb", "max_grad_error")
    flat = [{**row, **{f"{key}_{name}": value for key in keys
                       for name, value in row[key].items()}} for row in rows]
    return _table(flat, TRAINING_COLUMNS)


def format_ablation(rows):
    return _table(rows, ABLATION_COLUMNS)


def summary(rows):
    """Geomean speed-up over mamba_ssm per chunk size (per ladder step in an ablation)."""
    lines = []
    variants = sorted({r.get("variant") for r in rows},
                      key=lambda v: STEPS.index(v) if v in STEPS else -1)
    for variant in variants:
        for chunk in sorted({r["chunk_size"] for r in rows}):
            ratios = [r["speedup"] for r in rows if r["chunk_size"] == chunk and r.get("speedup")
                      and r.get("variant") == variant]
            if ratios:
                lines.append(f"{variant + ': ' if variant else ''}chunk {chunk}: speed-up over "
                             f"mamba_ssm Triton geomean {geometric_mean(ratios):.2f}x, "
                             f"min {min(ratios):.2f}x, max {max(ratios):.2f}x "
                             f"over {len(ratios)} shapes")
    return "\n".join(lines)


# ------------------------------------------------------------------------------ read back
# Stored rows (``mamba2_tile.tools.results.load_results``) analysed: notebook 09 prints these
# and the course's plots draw them.

SPEEDUP_TARGETS = {64: 2.5, 128: 1.5}
"""The course's goal per chunk size: geomean speed-up over mamba_ssm on the default sweep."""
COPY_FRACTION_TARGET = 0.35
"""... and at least this fraction of the copy bandwidth, on the minimal bytes, for the long
sequences (seqlen >= 4096) with dstate 64."""


def _number(value, spec):
    return "-" if value is None else format(value, spec)


def ablation_groups(results):
    """``[(baseline row, {step: row})]`` in the order the shapes first appear, the steps in
    ladder order (unknown ones last); each shape must have its ``baseline``."""
    rows = bench_rows(results, required=("mamba2_tile_ms", "variant"))
    groups = {}
    for row in rows:
        groups.setdefault(Problem.from_row(row), {})[row["variant"]] = row
    ordered = []
    for problem, variants in groups.items():
        if "baseline" not in variants:
            raise ValueError(f"{problem.label()} has no 'baseline' row: speed-ups are measured "
                             "from it")
        names = sorted(variants, key=lambda v: STEPS.index(v) if v in STEPS else len(STEPS))
        ordered.append((variants["baseline"], {name: variants[name] for name in names}))
    return ordered


def ablation_table(results):
    """The ablation as a text table: per shape (named once), one line per step.

    ``x base`` is the baseline's time over the step's (above 1: faster), ``x mamba_ssm``
    mamba_ssm's time over the step's, ``tune s`` the seconds the autotuner spent and
    ``cached s`` those it then took to read its choice back from the cache file; ``-`` where
    nothing was measured.
    """
    body = []
    for base, variants in ablation_groups(results):
        for k, row in enumerate(variants.values()):
            ms = row["mamba2_tile_ms"]
            theirs = row.get("mamba_ssm_ms")
            body.append([Problem.from_row(base).label() if k == 0 else "", row["variant"],
                         f"{ms:.3f}", f"{base['mamba2_tile_ms'] / ms:.2f}",
                         _number(theirs / ms if theirs else None, ".2f"),
                         _number(row.get("rel_err"), ".1e"), _number(row.get("autotune_s"), ".0f"),
                         _number(row.get("autotune_cached_s"), ".3f")])
    return tabulate(body, headers=["shape", "variant", "ms", "x base", "x mamba_ssm", "rel err",
                                   "tune s", "cached s"],
                    disable_numparse=True, colalign=("left", "left", *["right"] * 6))


def speedup(row):
    """mamba_ssm's time over ours, or ``None`` where mamba_ssm was not timed."""
    if row.get("speedup") is not None:
        return row["speedup"]
    if row.get("mamba_ssm_ms"):
        return row["mamba_ssm_ms"] / row["mamba2_tile_ms"]
    return None


def _copy_fraction(row, copy_gbps):
    if row.get("copy_fraction") is not None:
        return row["copy_fraction"]
    if copy_gbps:
        return (minimal_bytes(Problem.from_row(row)) / (row["mamba2_tile_ms"] * 1e-3)
                / (copy_gbps * 1e9))
    return None


def speedup_summary(results):
    """Text: per chunk size, the geomean speed-up over mamba_ssm against :data:`SPEEDUP_TARGETS`
    (a table), then the fraction of the copy bandwidth reached on the long dstate-64 sequences
    against :data:`COPY_FRACTION_TARGET`, the copy rate measured in the same run
    (``results["copy_gbps"]``), which the line names."""
    rows = bench_rows(results)
    copy_gbps = results.get("copy_gbps") if isinstance(results, dict) else None
    body = []
    for chunk in sorted({row["chunk_size"] for row in rows}):
        ratios = [r for r in (speedup(r) for r in rows if r["chunk_size"] == chunk)
                  if r is not None]
        target = SPEEDUP_TARGETS.get(chunk)
        target_text = f"{target:.1f}x" if target else "-"
        if not ratios:
            body.append([chunk, 0, "-", "-", "-", target_text, "-"])
            continue
        mean = geometric_mean(ratios)
        met = "-" if target is None else ("yes" if mean >= target else "no")
        body.append([chunk, len(ratios), f"{mean:.2f}x", f"{min(ratios):.2f}x",
                     f"{max(ratios):.2f}x", target_text, met])
    lines = [tabulate(body, headers=["chunk", "shapes", "geomean", "min", "max", "target", "met"],
                      disable_numparse=True, stralign="right")]
    long_rows = [r for r in rows if r["seqlen"] >= 4096 and r["dstate"] == 64]
    fractions = [f for f in (_copy_fraction(r, copy_gbps) for r in long_rows) if f is not None]
    if fractions:
        met = "yes" if min(fractions) >= COPY_FRACTION_TARGET else "no"
        yardstick = f" of a {copy_gbps:.0f} GB/s copy" if copy_gbps else ""
        lines.append(f"copy bandwidth{yardstick} reached, seqlen >= 4096 and dstate 64: "
                     f"{len(fractions)} shapes, min {min(fractions):.0%}, "
                     f"geomean {geometric_mean(fractions):.0%} "
                     f"(target >= {COPY_FRACTION_TARGET:.0%} for every shape: {met})")
    else:
        lines.append("copy bandwidth reached, seqlen >= 4096 and dstate 64: not measured")
    return "\n".join(lines)


def roofline_points(results):
    """Per row: the arithmetic intensity (FLOPs of the chunked algorithm over the minimal
    bytes) and the TFLOP/s each implementation achieved (the same FLOPs over its time).

    Both implementations do the same useful work on the same inputs, so they share the
    intensity; their heights differ by their speed.
    """
    points = []
    for row in bench_rows(results):
        problem = Problem.from_row(row)
        flops, nbytes = chunked_cost(problem).flops, minimal_bytes(problem)
        theirs = row.get("mamba_ssm_ms")
        points.append(dict(
            label=problem.label(), chunk_size=row["chunk_size"], flops=flops, bytes=nbytes,
            intensity=flops / nbytes,
            tflops=flops / (row["mamba2_tile_ms"] * 1e-3) / 1e12,
            mamba_ssm_tflops=None if not theirs else flops / (theirs * 1e-3) / 1e12))
    return points
