"""How the SSD forward pass and attention scale with the sequence length, measured on a GPU.

    python -m mamba2_tile.tools.scaling         # seqlen 1k..256k, batch 1, 32 heads, bf16
    python -m mamba2_tile.tools.scaling --chunk-size 128 --max-ms 500
    python -m mamba2_tile.tools.scaling --seqlen 1024 4096 --methods mamba2_tile sdpa_attention

For every sequence length it runs three methods on the same number of heads and head size:

* ``mamba2_tile``: this package's ``mamba_chunk_scan_combined`` (``dstate``, ``ngroups`` and
  ``chunk_size`` as given): time linear in seqlen, and a state of fixed size;
* ``naive_attention``: causal softmax attention written out in plain torch, which materialises
  the ``seqlen x seqlen`` scores of every head: quadratic time and quadratic memory;
* ``sdpa_attention``: ``torch.nn.functional.scaled_dot_product_attention(is_causal=True)``, a
  FlashAttention kernel that never writes the scores: linear memory, still quadratic time.

Each gets its median time (:func:`mamba2_tile.tools.bench.measurement.median_ms`: CUDA-graph
replays with the L2 cache flushed before each one) and the peak GPU memory of one call above
what was allocated before it (the inputs), output included. A method that runs out of memory is recorded as
``"oom"`` and not run at longer sequences, and so is one whose single call took longer than
``--max-ms``: its later rows are ``"skipped"``. Results go to ``data/<name>.json`` after every
row (format: :mod:`mamba2_tile.tools.results`, ``load_scaling_results``).
"""

import argparse
import dataclasses
import datetime
import gc
import json
import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from tabulate import tabulate
from tqdm.auto import tqdm

from mamba2_tile.api import CHUNK_SIZES
from mamba2_tile.cost import final_states_bytes, format_bytes
from mamba2_tile.problem import KERNEL_DTYPES, Problem, seqlen_label
from mamba2_tile.tools import arguments
from mamba2_tile.tools.bench import measurement
from mamba2_tile.tools.results import DATA_DIR, SCALING_METHODS, SCALING_STATUSES, results_path

DEFAULT_SEQLENS = tuple(1024 * 2 ** k for k in range(9))      # 1k, 2k, ..., 256k
DEFAULT_NAME = "h200_scaling"
METHODS = SCALING_METHODS
SECONDS_PER_POINT = 10.0
"""A slow measurement gets fewer replays (at least 3), so that none takes much longer than this."""


DEFAULT_PROBLEM = Problem(batch=1, seqlen=DEFAULT_SEQLENS[0], nheads=32, headdim=64, dstate=128,
                          ngroups=1, chunk_size=64, dtype="bfloat16")
"""The sweep's sizes; its ``seqlen`` is replaced by each length swept."""


def check_sweep_problem(problem):
    """Refuse sizes the sweep cannot run, naming the field; returns ``problem``."""
    problem.validate()
    if problem.chunk_size not in CHUNK_SIZES:
        raise ValueError(f"chunk_size must be one of {CHUNK_SIZES}, got {problem.chunk_size!r}")
    return problem


def sweep_config(problem):
    """What the stored results record of the sizes: all but the swept ``seqlen``."""
    config = dataclasses.asdict(problem)
    del config["seqlen"]
    return config


# ------------------------------------------------------------------------------ the methods

def _check_qkv(q, k, v):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.ndim != 4:
            raise ValueError(f"{name} must be a 4-D tensor (batch, nheads, seqlen, headdim), "
                             f"got {getattr(t, 'shape', type(t).__name__)}")
    for name, t in (("k", k), ("v", v)):
        if t.shape != q.shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)}, q has {tuple(q.shape)}: "
                             "causal self-attention needs the same shape")


def naive_attention(q, k, v):
    """Causal softmax attention, ``softmax(q kᵀ / √d + mask) v``, as one writes it in torch.

    q, k, v: ``(batch, nheads, seqlen, headdim)``. Writes the ``seqlen x seqlen`` scores of every
    head to memory (twice: the scores, then the probabilities), which is what makes it
    quadratic in memory. Scaling ``q`` first avoids a third matrix.
    """
    _check_qkv(q, k, v)
    seqlen, headdim = q.shape[-2:]
    scores = (q * headdim ** -0.5) @ k.transpose(-2, -1)
    future = torch.ones(seqlen, seqlen, dtype=torch.bool, device=q.device).triu_(1)
    scores.masked_fill_(future, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def sdpa_attention(q, k, v):
    """The same attention by ``scaled_dot_product_attention``: a fused (Flash) kernel on a GPU,
    which keeps each block of scores on chip and never writes the whole matrix."""
    _check_qkv(q, k, v)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def make_call(method, problem, seqlen, device="cuda", seed=0):
    """A function of no arguments that runs ``method`` once on fresh inputs, and those inputs.

    The inputs are created here, so that the memory measured afterwards is what one call adds.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    if method == "mamba2_tile":
        from mamba2_tile import api

        t = measurement.make_inputs(dataclasses.replace(problem, seqlen=seqlen), device=device,
                                    seed=seed)
        args = (t["x"], t["dt"], t["A"], t["B"], t["C"], problem.chunk_size)
        return (lambda: api.mamba_chunk_scan_combined(*args, D=t["D"])), t
    gen = torch.Generator(device=device).manual_seed(seed)
    q, k, v = (torch.randn(problem.batch, problem.nheads, seqlen, problem.headdim, device=device,
                           generator=gen, dtype=getattr(torch, problem.dtype)) for _ in range(3))
    attend = naive_attention if method == "naive_attention" else sdpa_attention
    return (lambda: attend(q, k, v)), dict(q=q, k=k, v=v)


# ------------------------------------------------------------------------------ measuring

def make_row(seqlen, method, status, ms=None, peak_bytes=None, state_bytes=None, note=None):
    """One result row (the fields :data:`mamba2_tile.tools.results.SCALING_ROW_KEYS` names)."""
    if status not in SCALING_STATUSES:
        raise ValueError(f"status must be one of {', '.join(SCALING_STATUSES)}, got {status!r}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    return dict(seqlen=seqlen, method=method, ms=ms, peak_bytes=peak_bytes, status=status,
                state_bytes=state_bytes, note=note)


def replays_for(probe_ms, reps, seconds=SECONDS_PER_POINT):
    """How many replays to time: ``reps``, fewer for slow calls, never fewer than 3."""
    return max(3, min(reps, int(seconds * 1000 / max(probe_ms, 1e-3))))


def _one_call(fn):
    """(ms, bytes) of one eager call: GPU time by CUDA events, and the peak memory it added."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    out = fn()
    end.record()
    end.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    del out
    return start.elapsed_time(end), peak


def _measure(method, problem, seqlen, reps, flush_buffer, max_ms):
    """(ms, peak bytes, note) of one method at one seqlen; the note names the SSD's path."""
    fn, inputs = make_call(method, problem, seqlen)
    # Which kernels the SSD runs decides its memory: the three-kernel path writes the state
    # entering every chunk, the fused one none (one per segment when cut into segments).
    note = (f"path: {measurement.forward_path(inputs['x'], inputs['B'], problem.chunk_size)}"
            if "x" in inputs else None)
    fn()                          # compiles the kernels, initialises cuBLAS: not measured
    probe_ms, peak = _one_call(fn)
    if probe_ms > max_ms:         # too slow to repeat: one eager call is the measurement
        return probe_ms, peak, note
    torch.cuda.empty_cache()
    # A CUDA graph gets its own memory pool, next to the blocks the eager warm-up left cached,
    # so capturing needs the call's working memory twice. Where that does not fit, time eagerly:
    # at that size the launch overhead the graph would hide is negligible.
    free, _ = torch.cuda.mem_get_info()
    graph = 2 * peak < 0.9 * free
    return (measurement.median_ms(fn, replays_for(probe_ms, reps), flush_buffer, graph=graph),
            peak, note)


def _is_oom(error):
    # A failed allocation inside graph capture can surface as a RuntimeError raised on leaving
    # the capture, with the OutOfMemoryError as its context.
    return (isinstance(error, torch.cuda.OutOfMemoryError)
            or isinstance(error.__context__, torch.cuda.OutOfMemoryError)
            or "out of memory" in str(error).lower())


def measure_point(method, problem, seqlen, reps, flush_buffer, max_ms=float("inf")):
    """One row: ``method`` at ``seqlen``, "ok" with time and peak memory, or "oom"."""
    state = final_states_bytes(problem) if method == "mamba2_tile" else None
    failure = None
    try:
        ms, peak, note = _measure(method, problem, seqlen, reps, flush_buffer, max_ms)
    except RuntimeError as error:     # torch.cuda.OutOfMemoryError is a RuntimeError
        if not _is_oom(error):
            raise
        failure = f"out of memory: {str(error).splitlines()[0][:160]}"
    if failure is not None:           # here the traceback, and the tensors it held, are gone
        gc.collect()
        torch.cuda.empty_cache()
        return make_row(seqlen, method, "oom", state_bytes=state, note=failure)
    torch.cuda.empty_cache()
    return make_row(seqlen, method, "ok", ms=ms, peak_bytes=peak, state_bytes=state, note=note)


def run_sweep(problem, seqlens=DEFAULT_SEQLENS, methods=METHODS, reps=30, max_ms=2000.0,
              flush_buffer=None, on_row=None):
    """Every method at every seqlen, shortest first; returns the rows.

    A method that ran out of memory, or whose call took longer than ``max_ms``, is not run at
    longer sequences: those rows are "skipped", with the reason in ``note``. ``on_row(rows)``
    is called after each row (the CLI saves and reports progress there).
    """
    if flush_buffer is None:
        flush_buffer = measurement.l2_flush_buffer()
    stopped = {}                      # method -> why it is not run any more
    rows = []
    for seqlen in sorted(seqlens):
        for method in methods:
            if method in stopped:
                row = make_row(seqlen, method, "skipped", note=stopped[method],
                               state_bytes=(final_states_bytes(problem)
                                            if method == "mamba2_tile" else None))
            else:
                row = measure_point(method, problem, seqlen, reps, flush_buffer, max_ms)
                if row["status"] == "oom":
                    stopped[method] = f"out of memory at {seqlen_label(seqlen)}"
                elif row["ms"] > max_ms:
                    stopped[method] = (f"{row['ms']:.0f} ms at {seqlen_label(seqlen)}, over the "
                                       f"{max_ms:g} ms budget")
            rows.append(row)
            if on_row is not None:
                on_row(rows)
    return rows


# ------------------------------------------------------------------------------ reporting

def loglog_slope(rows, method, key="ms"):
    """The growth exponent of ``key`` between the two longest "ok" rows of ``method``.

    1 means linear in seqlen, 2 quadratic, 0 constant; ``None`` with fewer than two rows.
    """
    points = sorted((r["seqlen"], r[key]) for r in rows
                    if r["method"] == method and r["status"] == "ok" and r[key])
    if len(points) < 2:
        return None
    (l1, v1), (l2, v2) = points[-2:]
    return math.log(v2 / v1) / math.log(l2 / l1)


def _cell(row, key):
    if row is None:
        return ""
    if row["status"] != "ok":
        return row["status"] if key == "ms" else "-"
    if key == "ms":
        return f"{row['ms']:.3f}" if row["ms"] < 100 else f"{row['ms']:.1f}"
    return format_bytes(row["peak_bytes"])


def format_table(rows):
    """A text table: one line per seqlen, time and peak memory of each method."""
    methods = [m for m in METHODS if any(r["method"] == m for r in rows)]
    by_key = {(r["seqlen"], r["method"]): r for r in rows}
    body = [[seqlen, *(_cell(by_key.get((seqlen, m)), key) for m in methods
                       for key in ("ms", "peak"))]
            for seqlen in sorted({r["seqlen"] for r in rows})]
    headers = ["seqlen", *(f"{m} {key}" for m in methods for key in ("ms", "peak"))]
    table = tabulate(body, headers=headers, disable_numparse=True, stralign="right")
    states = {r["state_bytes"] for r in rows if r["state_bytes"] is not None}
    if states:
        sizes = ", ".join(format_bytes(s) for s in sorted(states))
        table += f"\nSSD state carried to the next call: {sizes} at every seqlen"
    return table


def save(path, meta, rows):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**meta, "rows": rows}, indent=1) + "\n", encoding="utf-8")


def parse_args(argv=None):
    """The options, checked: bad values, sizes the sweep cannot run, repeats and options that
    would do nothing are refused (exit status 2) before anything runs, with or without a GPU."""
    parser = argparse.ArgumentParser(prog="python -m mamba2_tile.tools.scaling",
                                     description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--seqlen", type=arguments.positive_int, nargs="+",
                        default=list(DEFAULT_SEQLENS),
                        help="sequence lengths (default: 1024, 2048, ..., 262144)")
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    for name in ("batch", "nheads", "headdim", "dstate", "ngroups"):
        parser.add_argument(f"--{name}", type=arguments.positive_int,
                            default=getattr(DEFAULT_PROBLEM, name))
    parser.add_argument("--chunk-size", type=arguments.chunk_size,
                        default=DEFAULT_PROBLEM.chunk_size)
    parser.add_argument("--dtype", choices=KERNEL_DTYPES, default=DEFAULT_PROBLEM.dtype)
    parser.add_argument("--reps", type=arguments.positive_int, default=30,
                        help="timed replays per measurement (fewer for slow calls, at least 3)")
    parser.add_argument("--max-ms", type=arguments.positive_float, default=2000.0,
                        help="stop running a method once one call takes longer than this")
    parser.add_argument("--name", type=arguments.file_stem,
                        help=f"output file stem under --data-dir (default: {DEFAULT_NAME})")
    parser.add_argument("--data-dir", type=Path, help=f"default: {DATA_DIR}")
    parser.add_argument("--no-save", action="store_true", help="print only, write no file")
    args = parser.parse_args(argv)
    arguments.refuse_repeats(parser, args, "seqlen", "methods")
    arguments.refuse_unused(parser, {"--name": args.name, "--data-dir": args.data_dir},
                            args.no_save, "with --no-save, which writes no file")
    args.name = args.name or DEFAULT_NAME
    args.data_dir = args.data_dir or DATA_DIR
    try:
        args.problem = check_sweep_problem(Problem(
            args.batch, args.seqlen[0], args.nheads, args.headdim, args.dstate, args.ngroups,
            args.chunk_size, args.dtype))
    except ValueError as error:
        parser.error(str(error))
    return args


def main(argv=None):
    args = parse_args(argv)       # bad arguments are refused with or without a GPU
    if not torch.cuda.is_available():
        print("No CUDA GPU found: this sweep times GPU kernels and needs one. "
              "Stored H200 results are in data/h200_scaling.json (see notebook 10).")
        return 0
    device = torch.cuda.get_device_name()
    command = argv if argv is not None else sys.argv[1:]
    meta = {"device": device, "date": datetime.date.today().isoformat(),
            "versions": measurement.versions(), "reps": args.reps, "max_ms": args.max_ms,
            "gpu_memory_bytes": torch.cuda.get_device_properties(0).total_memory,
            "config": sweep_config(args.problem),
            "command": " ".join(["python -m mamba2_tile.tools.scaling", *command])}
    path = results_path(args.name, args.data_dir)
    progress = tqdm(total=len(args.seqlen) * len(args.methods), desc="scaling")

    def on_row(rows):
        last = rows[-1]
        if not args.no_save:      # after every row, so an interrupted sweep keeps its rows
            save(path, meta, rows)
        progress.set_postfix_str(f"{last['method']} {seqlen_label(last['seqlen'])}: "
                                 f"{last['status']}")
        progress.update()

    rows = run_sweep(args.problem, args.seqlen, args.methods, args.reps, args.max_ms,
                     on_row=on_row)
    progress.close()
    p = args.problem
    print(f"\n{device}; batch {p.batch}, {p.nheads} heads of {p.headdim}, dstate {p.dstate}, "
          f"chunk {p.chunk_size}, {p.dtype}; median ms of CUDA-graph replays, L2 flushed; "
          "peak memory above the inputs")
    print(format_table(rows))
    if not args.no_save:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
