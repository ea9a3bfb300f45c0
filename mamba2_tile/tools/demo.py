"""A short GPU demo for instructors: the finished forward pass timed on a few model shapes.

    python -m mamba2_tile.tools.demo                    # three shapes, bfloat16, 20 replays
    python -m mamba2_tile.tools.demo --dtype float16 --reps 50

Per shape it prints mamba2_tile's time and, if ``mamba_ssm`` is installed, its time and our
speed-up, measured as the benchmark measures (:mod:`mamba2_tile.tools.bench.measurement`: a
CUDA graph, the L2 cache flushed before each replay, the median). Nothing is saved; the stored
results live in ``data/`` (``python -m mamba2_tile.tools.bench``). Without a GPU that cuTile
supports it says what it would time and exits: timing the CPU interpreter would take minutes
per call and mean nothing.
"""

import argparse
import dataclasses
import sys

from mamba2_tile import api, dispatch
from mamba2_tile.problem import KERNEL_DTYPES, Problem
from mamba2_tile.tools import arguments
from mamba2_tile.tools.bench.measurement import (
    IMPLEMENTATIONS, l2_flush_buffer, load_implementations, make_inputs, median_ms,
)

# A batch of 2k-token sequences, the same at 16k, and one 128k-token sequence with Mamba-2
# 2.7B's 80 heads (all of data/h200_models.json's model preset).
SHAPES = (
    Problem(batch=8, seqlen=2048, nheads=64, headdim=64, dstate=128),
    Problem(batch=8, seqlen=16384, nheads=64, headdim=64, dstate=128),
    Problem(batch=1, seqlen=131072, nheads=80, headdim=64, dstate=128),
)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m mamba2_tile.tools.demo",
                                     description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--dtype", choices=KERNEL_DTYPES, default="bfloat16",
                        help="input dtype (default bfloat16)")
    parser.add_argument("--reps", type=arguments.positive_int, default=20,
                        help="timed replays per measurement (default 20)")
    args = parser.parse_args(argv)
    args.problems = [dataclasses.replace(shape, dtype=args.dtype) for shape in SHAPES]
    return args


def _ours(inputs, problem):
    args = tuple(inputs[name] for name in ("x", "dt", "A", "B", "C"))
    return lambda: api.mamba_chunk_scan_combined(*args, problem.chunk_size, D=inputs["D"])


def main(argv=None, out=print):
    args = parse_args(argv)
    if not dispatch.gpu_available():
        out("No GPU that cuTile supports here (an NVIDIA GPU of sm_80 or newer, with cuda-tile).")
        out(f"On one, this times the forward pass ({args.reps} replays, median) on:")
        for problem in args.problems:
            out(f"  {problem.label()}")
        out("against mamba_ssm if it is installed. The stored H200 results: data/h200_models.json.")
        return 0
    found, missing = load_implementations(
        [implementation for implementation in IMPLEMENTATIONS if implementation.name == "mamba_ssm"])
    if missing:
        out(f"mamba_ssm not timed ({missing['mamba_ssm']})")
    out(f"{dispatch.describe_backend()}; median of {args.reps} replays, L2 flushed")
    out(f"{'shape':<34} {'mamba2_tile':>12} {'mamba_ssm':>12} {'speed-up':>9}")
    flush = l2_flush_buffer()
    for problem in args.problems:
        inputs = make_inputs(problem)
        ours = median_ms(_ours(inputs, problem), args.reps, flush)
        line = f"{problem.label():<34} {ours:>9.3f} ms"
        if "mamba_ssm" in found:
            _, call = found["mamba_ssm"]
            theirs = median_ms(call(inputs, problem), args.reps, flush)
            line += f" {theirs:>9.3f} ms {theirs / ours:>8.2f}×"
        out(line)
        del inputs
    return 0


if __name__ == "__main__":
    sys.exit(main())
