"""Benchmark the SSD forward pass on a GPU: this package vs mamba_ssm's Triton vs plain PyTorch.

    python -m mamba2_tile.bench                      # the default sweep, bf16
    python -m mamba2_tile.bench --preset accuracy    # the correctness sweep (bf16 and fp32)
    python -m mamba2_tile.bench --seqlen 4096 --dstate 128 --chunk-size 64 --ngroups 1
    python -m mamba2_tile.bench --ablation           # the optimizations one by one (see below)

For every shape it prints one row: per-kernel and total time of this package, mamba_ssm's
``mamba_chunk_scan_combined`` (when importable) and the PyTorch baseline
(:mod:`mamba2_tile.torch_reference`, float32); the speed-ups, measured side by side in this run;
the achieved bandwidth on the minimal bytes (read x, dt, B, C once, write y once) and as a
fraction of a device-to-device copy measured in the same run (the faster of a memcpy and a copy
kernel, see :func:`copy_bandwidth`); and the error of each
implementation against a float64 reference.

Timing: each implementation is captured in a CUDA graph after warm-up (so Python launch overhead
is not measured), then replayed ``--reps`` times with the L2 cache flushed before each replay;
the median is reported. Results go to ``data/<name>.csv`` and ``.json`` with the GPU, driver,
CUDA, torch, cuda-tile, tileiras and Triton versions and the date.

Ablation (``--ablation``, preset ``ablation`` unless ``--preset`` is given): for every shape, one
row per step of the ladder in :data:`LADDER`, each step adding one optimization to the previous
(baseline = the three kernels with every switch off, +latency hints, +operand swap, +transposed
layout, +tf32 for float32 inputs, +autotune, then beyond: +low-precision states for 16-bit
inputs, +fused (stages 2 and 3 in one kernel), +fused_autotune), each with its time, its
speed-up over the baseline and over mamba_ssm, and its error against float64. The autotune
steps tune the shape (or read ``mamba2_tile.autotune``'s cache) whatever
``MAMBA2_TILE_AUTOTUNE`` says, and record how long that took (``autotune_s``) and how long
reading the choice back from the cache file then takes (``autotune_cached_s``).

``--resume`` keeps the rows already in the output file and measures only the missing shapes, so a
sweep cut short (a time limit) continues where it stopped.
"""

import argparse
import csv
import dataclasses
import datetime
import itertools
import json
import math
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch

from mamba2_tile.autotune import LATENCY_HINT
from mamba2_tile.cost import Problem, minimal_bytes
from mamba2_tile.kernels import DEFAULT_OPTIONS, ForwardOptions
from mamba2_tile.kernels.fused_state_out import uses_fused
from mamba2_tile.torch_reference import mamba_chunk_scan_torch

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
L2_FLUSH_BYTES = 256 * 1024 * 1024      # > 4x the H200's 60 MB L2


@dataclasses.dataclass(frozen=True)
class Shape:
    batch: int
    seqlen: int
    nheads: int
    headdim: int
    dstate: int
    ngroups: int
    chunk_size: int
    dtype: str

    def label(self):
        return (f"b{self.batch} l{self.seqlen} h{self.nheads} p{self.headdim} n{self.dstate} "
                f"g{self.ngroups} c{self.chunk_size} {self.dtype}")


GRIDS = {
    # The sweep the performance targets are stated on (batch 8, 64 heads, headdim 64).
    "default": dict(batch=[8], seqlen=[1024, 4096, 16384], nheads=[64], headdim=[64],
                    dstate=[64, 128], ngroups=[1, 8], chunk_size=[64, 128], dtype=["bfloat16"]),
    "quick": dict(batch=[2], seqlen=[1024], nheads=[8], headdim=[64], dstate=[64],
                  ngroups=[1], chunk_size=[64], dtype=["bfloat16"]),
}
# Correctness against float64 and mamba_ssm over varied shapes (odd seqlen included), each in
# bf16 and fp32: (batch, seqlen, nheads, headdim, dstate, ngroups, chunk_size).
ACCURACY_SHAPES = [
    (1, 256, 8, 64, 64, 1, 64), (8, 2048, 64, 64, 128, 1, 64), (2, 1000, 16, 64, 64, 8, 64),
    (1, 16384, 8, 64, 128, 1, 64), (4, 4096, 32, 64, 128, 8, 128), (8, 2048, 64, 64, 64, 8, 128),
    (1, 256, 8, 64, 128, 8, 64), (2, 16384, 64, 64, 64, 8, 256),
]
# The ablation's shapes: the targets' batch / heads / headdim at dstate 128, chunk 64 with one
# group and chunk 128 with eight, and float32 (where TF32 is the step that matters). Three, so
# the whole ladder (two autotune steps each) fits in a few minutes of GPU time.
ABLATION_SHAPES = [
    ((8, 4096, 64, 64, 128, 1, 64), "bfloat16"), ((8, 4096, 64, 64, 128, 8, 128), "bfloat16"),
    ((8, 2048, 64, 64, 128, 1, 64), "float32"),
]
PRESETS = sorted([*GRIDS, "accuracy", "ablation"])

# (name, switches added to the previous step, which input dtypes the step applies to).
LADDER = [
    ("baseline", {}, None),
    ("+latency", dict(latency=LATENCY_HINT), None),
    ("+swap", dict(swap_operands=True), None),
    ("+transposed", dict(transposed_layout=True), None),
    ("+tf32", dict(tf32=True), ("float32",)),
    ("+autotune", "autotune", None),
    ("+bf16_states", dict(low_precision_states=True), ("bfloat16", "float16")),
    ("+fused", dict(fuse_state_passing=True), None),
    ("+fused_autotune", "autotune", None),
]


def ladder(dtype):
    """``[(step name, switches or "autotune")]`` for one input dtype, in order."""
    return [(name, change) for name, change, dtypes in LADDER if dtypes is None or dtype in dtypes]


def sweep(preset, overrides):
    """The shapes of a preset; ``overrides`` (axis -> values) replace a grid preset's axes."""
    if preset == "ablation":
        for dims, dtype in ABLATION_SHAPES:
            yield Shape(*dims, dtype)
        return
    if preset == "accuracy":
        for dims, dtype in itertools.product(ACCURACY_SHAPES, ["bfloat16", "float32"]):
            yield Shape(*dims, dtype)
        return
    axes = {**GRIDS[preset], **{k: v for k, v in overrides.items() if v}}
    for values in itertools.product(*axes.values()):
        shape = Shape(**dict(zip(axes, values)))
        if shape.nheads % shape.ngroups == 0:
            yield shape


# ------------------------------------------------------------------------------ measuring

def make_inputs(shape, device="cuda", seed=0):
    """Inputs in the ranges a trained Mamba-2 layer sees: dt in (1e-3, 1e-1), A in (-16, -1)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    dtype = getattr(torch, shape.dtype)
    b, l, h, p, g, n = (shape.batch, shape.seqlen, shape.nheads, shape.headdim, shape.ngroups,
                        shape.dstate)

    def randn(*size):
        return torch.randn(*size, device=device, generator=gen).to(dtype)

    def uniform(low, high, size):
        return low + (high - low) * torch.rand(size, device=device, generator=gen)

    return dict(
        x=randn(b, l, h, p),
        dt=torch.exp(uniform(math.log(1e-3), math.log(1e-1), (b, l, h))),
        A=-torch.exp(uniform(0.0, math.log(16.0), (h,))),
        B=randn(b, l, g, n),
        C=randn(b, l, g, n),
        D=torch.randn(h, device=device, generator=gen),
    )


def flush_l2(buffer):
    buffer.add_(1)


def median_ms(fn, reps, flush_buffer, graph=True):
    """Median time of ``fn`` replayed from a CUDA graph, L2 flushed before each replay.

    ``graph=False`` times eager calls instead, with no warm-up: for calls the caller has already
    warmed up and that are too big to capture (a graph keeps its own memory pool).
    """
    run = fn
    if graph:
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        captured = torch.cuda.CUDAGraph()
        with torch.cuda.graph(captured):
            fn()
        run = captured.replay
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(reps)]
    for start, end in events:
        flush_l2(flush_buffer)
        start.record()
        run()
        end.record()
    torch.cuda.synchronize()
    times = sorted(start.elapsed_time(end) for start, end in events)
    return times[len(times) // 2]


def copy_bandwidth(flush_buffer, reps, nbytes=2 * 1024**3):
    """Device-to-device copy rates in bytes/s (bytes read plus bytes written), measured two ways.

    Returns ``{"memcpy": ..., "kernel": ...}``: ``dst.copy_(src)`` (which a CUDA graph records as
    a memcpy node) and an elementwise kernel that reads and writes every byte once
    (``torch.neg``). On the H200 the memcpy node reached 2.77 TB/s, well under what kernels
    reach; the faster of the two is the yardstick (:func:`copy_reference`).
    """
    src = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda").normal_()
    dst = torch.empty_like(src)
    moved = 2 * src.numel() * src.element_size()
    rates = {"memcpy": moved / (median_ms(lambda: dst.copy_(src), reps, flush_buffer) * 1e-3),
             "kernel": moved / (median_ms(lambda: torch.neg(src, out=dst), reps, flush_buffer)
                                * 1e-3)}
    del src, dst
    torch.cuda.empty_cache()
    return rates


def copy_reference(rates):
    """The copy rate bandwidth fractions are stated against: the faster way to copy."""
    return max(rates.values())


def errors(out, ref):
    """``‖out − ref‖ / ‖ref‖``, ``max |out − ref|`` and that over ``max |ref|``, in float64."""
    ref = ref.double()
    diff = out.double() - ref
    max_abs = diff.abs().max().item()
    return (diff.norm() / ref.norm()).item(), max_abs, max_abs / ref.abs().max().item()


def load_triton():
    try:
        from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined
    except Exception as error:                       # noqa: BLE001 - any import failure counts
        return None, f"{type(error).__name__}: {error}"
    return mamba_chunk_scan_combined, None


def forward_path(x, B, options=DEFAULT_OPTIONS):
    """``"fused"`` or ``"three_kernel"``: which kernels ``options`` run for these inputs."""
    return "fused" if uses_fused(x, B, options) else "three_kernel"


def stage_times(args, D, reps, flush_buffer):
    """Each kernel of the default path timed on its own, fed by the previous stages' outputs."""
    from mamba2_tile import kernels

    x, dt, A, B, C, chunk_size = args
    dA_cumsum, dt_c = kernels.chunk_cumsum(dt, A, chunk_size)
    stages = {"chunk_cumsum": lambda: kernels.chunk_cumsum(dt, A, chunk_size)}
    if forward_path(x, B) == "fused":
        stages["fused_state_out"] = lambda: kernels.fused_state_out(
            x, dt_c, dA_cumsum, B, C, D=D, options=DEFAULT_OPTIONS.fused_state_out)
    else:
        chunk_states, _ = kernels.fwd_pass_state(x, B, dt_c, dA_cumsum)
        stages["fwd_pass_state"] = lambda: kernels.fwd_pass_state(x, B, dt_c, dA_cumsum)
        stages["compute_out"] = lambda: kernels.compute_out(x, dt_c, dA_cumsum, B, C,
                                                            chunk_states, D=D)
    return {f"{name}_ms": median_ms(fn, reps, flush_buffer) for name, fn in stages.items()}


def measure(shape, reps, flush_buffer, copy_rate, triton_fn, stages=True):
    """One row: times, speed-ups, bandwidth and errors for one shape."""
    from mamba2_tile import api

    inputs = make_inputs(shape)
    args = (inputs["x"], inputs["dt"], inputs["A"], inputs["B"], inputs["C"], shape.chunk_size)
    row = dataclasses.asdict(shape)
    row["path"] = forward_path(inputs["x"], inputs["B"])

    reference = mamba_chunk_scan_torch(*args, D=inputs["D"], compute_dtype=torch.float64)
    y = api.mamba_chunk_scan_combined(*args, D=inputs["D"])
    row["rel_err"], row["max_abs_err"], row["max_rel_err"] = errors(y, reference)
    row["mamba2_tile_ms"] = median_ms(lambda: api.mamba_chunk_scan_combined(*args, D=inputs["D"]),
                          reps, flush_buffer)

    if stages:
        row.update(stage_times(args, inputs["D"], reps, flush_buffer))
        row["torch_ms"] = median_ms(lambda: mamba_chunk_scan_torch(*args, D=inputs["D"]),
                                    reps, flush_buffer)
        row["torch_speedup"] = row["torch_ms"] / row["mamba2_tile_ms"]
    if triton_fn is not None:
        y_triton = triton_fn(*args, D=inputs["D"])
        (row["mamba_ssm_rel_err"], row["mamba_ssm_max_abs_err"],
         row["mamba_ssm_max_rel_err"]) = errors(y_triton, reference)
        row["vs_mamba_ssm_rel_diff"], row["vs_mamba_ssm_max_abs_diff"], _ = errors(y, y_triton)
        row["mamba_ssm_ms"] = median_ms(lambda: triton_fn(*args, D=inputs["D"]), reps,
                                        flush_buffer)
        row["speedup"] = row["mamba_ssm_ms"] / row["mamba2_tile_ms"]

    problem = Problem(shape.batch, shape.seqlen, shape.nheads, shape.headdim, shape.dstate,
                      shape.ngroups, shape.chunk_size, dtype_bytes=inputs["x"].element_size())
    row["minimal_bytes"] = minimal_bytes(problem)
    row["gbps"] = row["minimal_bytes"] / (row["mamba2_tile_ms"] * 1e-3) / 1e9
    row["copy_fraction"] = row["minimal_bytes"] / (row["mamba2_tile_ms"] * 1e-3) / copy_rate
    row["copy_gbps"] = copy_rate / 1e9
    del inputs, reference, y
    torch.cuda.empty_cache()
    return row


def measure_ablation(shape, reps, flush_buffer, triton_fn):
    """One row per step of the ladder for one shape (see the module doc)."""
    from mamba2_tile import api, autotune

    inputs = make_inputs(shape)
    args = (inputs["x"], inputs["dt"], inputs["A"], inputs["B"], inputs["C"], shape.chunk_size)
    reference = mamba_chunk_scan_torch(*args, D=inputs["D"], compute_dtype=torch.float64)
    triton_ms = (median_ms(lambda: triton_fn(*args, D=inputs["D"]), reps, flush_buffer)
                 if triton_fn is not None else None)
    rows, options, baseline_ms = [], ForwardOptions(), None
    for step, change in ladder(shape.dtype):
        row = {**dataclasses.asdict(shape), "variant": step}
        if change == "autotune":
            base, start = options, time.perf_counter()
            # Tuned on top of the numerics chosen so far (TF32 for float32).
            options = autotune.tuned_options(*args, base=base)
            row["autotune_s"] = time.perf_counter() - start
            autotune.clear_memory()                     # as a new process would: read the file
            start = time.perf_counter()
            autotune.tuned_options(*args, base=base)
            row["autotune_cached_s"] = time.perf_counter() - start
        else:
            options = options.with_switches(**change)
        row["options"] = json.dumps(options.to_dict(), sort_keys=True)
        row["path"] = forward_path(inputs["x"], inputs["B"], options)

        def run(options=options):
            return api.forward_with_options(*args, options=options, D=inputs["D"])
        row["rel_err"], row["max_abs_err"], row["max_rel_err"] = errors(run(), reference)
        row["mamba2_tile_ms"] = median_ms(run, reps, flush_buffer)
        baseline_ms = baseline_ms or row["mamba2_tile_ms"]
        row["vs_baseline"] = baseline_ms / row["mamba2_tile_ms"]
        if triton_ms is not None:
            row["mamba_ssm_ms"] = triton_ms
            row["speedup"] = triton_ms / row["mamba2_tile_ms"]
        rows.append(row)
    del inputs, reference
    torch.cuda.empty_cache()
    return rows


# ------------------------------------------------------------------------------ reporting

def versions():
    import numpy

    found = {"python": platform.python_version(), "torch": torch.__version__,
             "cuda": torch.version.cuda, "numpy": numpy.__version__}
    try:
        import cuda.tile
        found["cuda_tile"] = cuda.tile.__version__
    except ImportError:
        found["cuda_tile"] = None
    tileiras = shutil.which("tileiras")
    if tileiras:   # "Cuda compilation tools, release 13.4, V13.4.92" -> "13.4.92"
        banner = subprocess.run([tileiras, "--version"], capture_output=True, text=True).stdout
        found["tileiras"] = banner.rsplit(" V", 1)[-1].split()[0] if " V" in banner else banner
    else:
        found["tileiras"] = None
    try:
        import triton
        found["triton"] = triton.__version__
    except ImportError:
        found["triton"] = None
    try:
        import mamba_ssm
        found["mamba_ssm"] = getattr(mamba_ssm, "__version__", "unknown")
    except ImportError:
        found["mamba_ssm"] = None
    smi = shutil.which("nvidia-smi")
    found["driver"] = (subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                                      capture_output=True, text=True).stdout.strip().splitlines()[0]
                       if smi else None)
    return found


COLUMNS = [
    ("shape", "{}", 40), ("cumsum", "{:.3f}", 7), ("state", "{:.3f}", 7), ("out", "{:.3f}", 7),
    ("fused", "{:.3f}", 7),
    ("ms", "{:.3f}", 7), ("triton", "{:.3f}", 7), ("xTriton", "{:.2f}", 7),
    ("torch", "{:.3f}", 8), ("xTorch", "{:.1f}", 6), ("GB/s", "{:.0f}", 5), ("%copy", "{:.0%}", 5),
    ("rel_err", "{:.1e}", 8), ("triton_err", "{:.1e}", 10),
]
ROW_KEYS = {"cumsum": "chunk_cumsum_ms", "state": "fwd_pass_state_ms", "out": "compute_out_ms",
            "fused": "fused_state_out_ms",
            "ms": "mamba2_tile_ms", "triton": "mamba_ssm_ms", "xTriton": "speedup",
            "torch": "torch_ms", "xTorch": "torch_speedup", "GB/s": "gbps",
            "%copy": "copy_fraction", "triton_err": "mamba_ssm_rel_err"}


def _table(rows, columns, keys):
    """Fixed-width text table; ``keys`` maps a column header to its row field."""
    lines = [" ".join(f"{name:>{width}}" for name, _, width in columns)]
    for row in rows:
        cells = []
        for name, fmt, width in columns:
            value = shape_of(row).label() if name == "shape" else row.get(keys.get(name, name))
            cells.append(f"{'-' if value is None else fmt.format(value):>{width}}")
        lines.append(" ".join(cells))
    return "\n".join(lines)


def format_table(rows):
    return _table(rows, COLUMNS, ROW_KEYS)


ABLATION_COLUMNS = [("shape", "{}", 40), ("variant", "{}", 13), ("ms", "{:.3f}", 7),
                    ("xBase", "{:.2f}", 6), ("triton", "{:.3f}", 7), ("xTriton", "{:.2f}", 7),
                    ("rel_err", "{:.1e}", 8), ("tune_s", "{:.1f}", 6), ("cached_s", "{:.3f}", 8)]
ABLATION_KEYS = {"ms": "mamba2_tile_ms", "xBase": "vs_baseline", "triton": "mamba_ssm_ms",
                 "xTriton": "speedup", "tune_s": "autotune_s", "cached_s": "autotune_cached_s"}


def format_ablation(rows):
    return _table(rows, ABLATION_COLUMNS, ABLATION_KEYS)


def summary(rows):
    """Geomean speed-up over mamba_ssm per chunk size (per ladder step in an ablation)."""
    lines = []
    variants = sorted({r.get("variant") for r in rows},
                      key=lambda v: [name for name, _, _ in LADDER].index(v) if v else -1)
    for variant in variants:
        for chunk in sorted({r["chunk_size"] for r in rows}):
            ratios = [r["speedup"] for r in rows if r["chunk_size"] == chunk and r.get("speedup")
                      and r.get("variant") == variant]
            if ratios:
                geomean = math.exp(sum(map(math.log, ratios)) / len(ratios))
                lines.append(f"{variant + ': ' if variant else ''}chunk {chunk}: speed-up over "
                             f"mamba_ssm Triton geomean {geomean:.2f}x, min {min(ratios):.2f}x, "
                             f"max {max(ratios):.2f}x over {len(ratios)} shapes")
    return "\n".join(lines)


def save(stem, meta, rows):
    stem.with_suffix(".json").write_text(json.dumps({**meta, "rows": rows}, indent=1) + "\n")
    with stem.with_suffix(".csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=sorted({k for r in rows for k in r}))
        writer.writeheader()
        writer.writerows(rows)


def shape_of(row):
    return Shape(**{f.name: row[f.name] for f in dataclasses.fields(Shape)})


def previous_rows(stem):
    """The rows of an earlier run's ``<stem>.json`` (none if there is no such file)."""
    path = stem.with_suffix(".json")
    return json.loads(path.read_text())["rows"] if path.exists() else []


def progress(done, total, label):
    width = 30
    filled = width * done // total
    sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {label:<60}")
    sys.stderr.flush()
    if done == total:
        sys.stderr.write("\n")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=PRESETS,
                        help="the shapes (default: 'ablation' with --ablation, else 'default')")
    parser.add_argument("--ablation", action="store_true",
                        help="time the optimizations one by one (see the module doc)")
    for axis in ("batch", "seqlen", "nheads", "headdim", "dstate", "ngroups", "chunk_size"):
        parser.add_argument(f"--{axis.replace('_', '-')}", type=int, nargs="+", dest=axis,
                            help=f"override the preset's {axis} values")
    parser.add_argument("--dtype", nargs="+", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--reps", type=int, default=30, help="timed replays per measurement")
    parser.add_argument("--name", help="output file stem under data/ (default: bench_<preset>)")
    parser.add_argument("--no-save", action="store_true", help="print only, write no files")
    parser.add_argument("--resume", action="store_true",
                        help="keep the rows already in the output file; measure only the rest")
    parser.add_argument("--totals-only", action="store_true",
                        help="skip the per-kernel times and the PyTorch baseline (faster)")
    args = parser.parse_args(argv)
    args.preset = args.preset or ("ablation" if args.ablation else "default")

    if not torch.cuda.is_available():
        print("No CUDA GPU found: this benchmark times GPU kernels and needs one. "
              "Stored H200 results are in data/ (see notebooks 08 and 09).")
        return 0
    shapes = list(sweep(args.preset, {k: getattr(args, k) for k in
                                      ("batch", "seqlen", "nheads", "headdim", "dstate",
                                       "ngroups", "chunk_size", "dtype")}))
    triton_fn, triton_missing = load_triton()
    if triton_missing:
        print(f"mamba_ssm's Triton kernels are not importable ({triton_missing}); "
              "their columns stay empty.")
    flush_buffer = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.float32, device="cuda")
    copy_rates = copy_bandwidth(flush_buffer, args.reps)
    copy_rate = copy_reference(copy_rates)
    device = torch.cuda.get_device_name()
    meta = {"device": device, "date": datetime.date.today().isoformat(),
            "versions": versions(), "copy_gbps": copy_rate / 1e9,
            "copy_gbps_by_method": {k: v / 1e9 for k, v in copy_rates.items()}, "reps": args.reps,
            "command": " ".join(["python -m mamba2_tile.bench", *sys.argv[1:]])}
    default_name = (f"bench_{args.preset}_ablation" if args.ablation and args.preset != "ablation"
                    else f"bench_{args.preset}")
    stem = DATA_DIR / (args.name or default_name)
    rows = previous_rows(stem) if args.resume else []
    done = {shape_of(row) for row in rows}
    for index, shape in enumerate(shapes):
        progress(index, len(shapes), shape.label())
        if shape in done:
            continue
        if args.ablation:
            rows.extend(measure_ablation(shape, args.reps, flush_buffer, triton_fn))
        else:
            rows.append(measure(shape, args.reps, flush_buffer, copy_rate, triton_fn,
                                stages=not args.totals_only))
        if not args.no_save:          # after every row, so an interrupted sweep keeps its rows
            save(stem, meta, rows)
    progress(len(shapes), len(shapes), "done")

    print(f"\n{device}; device-to-device copy {copy_rate / 1e9:.0f} GB/s; times in ms "
          f"(median of {args.reps} CUDA-graph replays, L2 flushed)")
    print(format_ablation(rows) if args.ablation else format_table(rows))
    print(summary(rows))
    if not args.no_save:
        print(f"wrote {stem.with_suffix('.json')} and .csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
