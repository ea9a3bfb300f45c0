"""Where a training step's time goes, kernel by kernel: PyTorch's profiler on the forward +
backward step that ``python -m mamba2_tile.tools.bench --backward`` times.

    python -m mamba2_tile.tools.profile_backward            # b8 L2048 h64 p64 n128, chunk 64
    python -m mamba2_tile.tools.profile_backward --chunk-size 256 --peers mamba_ssm

One step is ``y = ssd(x, dt, A, B, C, D)`` and the gradients of ``sum(y * dy)`` with respect to
all six inputs, as in the benchmark (:mod:`mamba2_tile.tools.bench.training`). For each
implementation the tool runs a few warm-up steps (compilation, autotuning), then ``--steps``
steps under ``torch.profiler``, and prints one row per GPU kernel: launches and milliseconds
per step, and its share of the step's GPU time. PyTorch's own kernels (elementwise work, sums,
copies) show under their ATen names: that is where glue between the cuTile kernels shows up.

The times are eager (kernels launched one by one, the profiler on): for comparing kernels
within a step, not for speed claims, which come from the benchmark's CUDA-graph replays. It
needs a GPU; without one it says so and exits.
"""

import argparse

import torch
from tabulate import tabulate

from mamba2_tile.problem import KERNEL_DTYPES, Problem
from mamba2_tile.tools import arguments
from mamba2_tile.tools.bench.measurement import make_inputs
from mamba2_tile.tools.bench.training import IMPLEMENTATIONS, leaves, step_function

NAME_WIDTH = 60


def kernel_rows(events, steps):
    """``(name, launches per step, ms per step, share)`` rows from ``(name, launches,
    microseconds)`` triples summed over ``steps`` steps, the slowest first; and the step's total
    ms. Names are cut to ``NAME_WIDTH`` characters (cuTile's carry the specialisation)."""
    events = [(name, calls, us) for name, calls, us in events if us > 0]
    total_us = sum(us for _, _, us in events)
    rows = [(name[:NAME_WIDTH], calls / steps, us / steps / 1e3, us / total_us)
            for name, calls, us in sorted(events, key=lambda event: -event[2])]
    return rows, total_us / steps / 1e3


def profile_step(problem, implementation, steps, warmup=3):
    """The rows of :func:`kernel_rows` for one implementation (a key of the benchmark's
    ``IMPLEMENTATIONS``), or ``None`` and why it could not run."""
    forward, why = IMPLEMENTATIONS[implementation](problem)
    if forward is None:
        return None, why
    inputs = make_inputs(problem)
    step = step_function(forward, leaves(inputs), torch.randn_like(inputs["x"]))
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profiler:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    events = [(event.key, event.count, event.self_device_time_total)
              for event in profiler.key_averages()]
    return kernel_rows(events, steps), None


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m mamba2_tile.tools.profile_backward",
                                     description=__doc__.split("\n\n")[0].replace("\n", " "))
    defaults = Problem(8, 2048, 64, 64, 128, 1, 64)
    for axis in ("batch", "seqlen", "nheads", "headdim", "dstate", "ngroups"):
        parser.add_argument(f"--{axis}", type=arguments.positive_int,
                            default=getattr(defaults, axis))
    parser.add_argument("--chunk-size", type=arguments.chunk_size, default=defaults.chunk_size)
    parser.add_argument("--dtype", choices=KERNEL_DTYPES, default=defaults.dtype)
    parser.add_argument("--steps", type=arguments.positive_int, default=3,
                        help="profiled steps (after three warm-up steps)")
    parser.add_argument("--peers", nargs="*", default=[],
                        choices=[name for name in IMPLEMENTATIONS if name != "mamba2_tile"],
                        help="profile these implementations too")
    args = parser.parse_args(argv)
    try:
        args.problem = Problem(args.batch, args.seqlen, args.nheads, args.headdim, args.dstate,
                               args.ngroups, args.chunk_size, args.dtype).validate()
    except ValueError as error:
        parser.error(str(error))
    return args


def main(argv=None):
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("No CUDA GPU found: this tool profiles GPU kernels and needs one.")
        return 0
    for implementation in ["mamba2_tile", *args.peers]:
        result, why = profile_step(args.problem, implementation, args.steps)
        if result is None:
            print(f"{implementation}: not importable ({why})\n")
            continue
        rows, total_ms = result
        print(f"{implementation}, {args.problem}: {total_ms:.3f} ms of GPU time per step")
        print(tabulate([(name, f"{calls:g}", f"{ms:.3f}", f"{share:.0%}")
                        for name, calls, ms, share in rows],
                       headers=("kernel", "launches", "ms", "share")))
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
