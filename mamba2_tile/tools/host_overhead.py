"""The host side of an eager call, measured without a GPU: Python, checks, planning, allocations.

    python -m mamba2_tile.tools.host_overhead              # the shapes below, a table
    python -m mamba2_tile.tools.host_overhead --profile    # and cProfile's top entries per shape
    python -m mamba2_tile.tools.host_overhead --ops        # and the torch ops of one call
    python -m mamba2_tile.tools.host_overhead --gpu        # and on a GPU: eager vs graph time

An eager call of :func:`mamba2_tile.api.mamba_chunk_scan_combined` costs its kernels' time plus
the host's work in front of each launch; the benchmark's ``eager_ms`` minus its graph replay
``ms`` (:mod:`mamba2_tile.tools.bench.measurement`) shows that work where it outlasts what the
GPU has queued. This tool runs the whole host path of a CUDA call (argument checks, the plan,
each launcher's outputs and arguments, :func:`mamba2_tile.dispatch.launch`'s device rule) on
CPU tensors of the real shapes, with the one GPU step, ``ct.launch``, replaced by a stub
(:func:`stubbed_launches`), so it runs anywhere.

Per shape it reports: microseconds per call (CPU time, the fastest of ``--repeat`` rounds of
``--number`` calls) and per launch; the launches and their tensor arguments; the Python and C
function calls of one call (a count, the same on any machine); and the torch operators it
dispatches (``aten ops``): on a GPU each allocation costs host time, and each operator that is
not an allocation or a view (a fill, a copy, a cast) is a small kernel of its own, about 5 µs
(``kernel ops``).

What the CPU cannot show: ``ct.launch``'s own time (in C++: the compiled kernel's lookup, and
each torch tensor argument converted with ``torch._C._to_dlpack``, 0.4 µs a tensor on a CPU
like this one, hence the ``tensor args`` column), ``torch.cuda.current_stream()``, and the
environment read only CUDA calls make (``MAMBA2_TILE_AUTOTUNE``, once a call). ``--gpu`` times
the same calls on a GPU with real launches, as the benchmark does, beside the host's wall time
per call.

Inputs are ``torch.empty`` (only shapes, dtypes and strides matter to the host), except ``A``,
whose values the CPU path checks (CUDA calls skip that check; so does this tool). Allocations
reuse freed memory, as CUDA's caching allocator does (:func:`keep_freed_memory`).
"""

import argparse
import contextlib
import cProfile
import ctypes
import ctypes.util
import io
import os
import pstats
import sys
import time
import timeit
from collections import Counter
from unittest import mock

import torch
from tabulate import tabulate
from torch.utils._python_dispatch import TorchDispatchMode

from mamba2_tile import api, dispatch
from mamba2_tile.problem import Problem
from mamba2_tile.tools import arguments

# The eager row (b8 h64 L1024) at dstate 64 and 128 and chunk 64 / 256; dstate 256
# (C Bᵀ precomputed: one launch more); batch-1 prefill (the sequence-parallel path: four
# launches).
SHAPES = (
    Problem(8, 1024, 64, 64, 64, 1, 64),
    Problem(8, 1024, 64, 64, 128, 1, 256),
    Problem(8, 2048, 64, 64, 256, 1, 256),
    Problem(1, 8192, 80, 64, 128, 1, 256),
    Problem(1, 8192, 24, 64, 128, 1, 256),
)
# Operators that allocate or only describe a view: host work on a GPU too, but no kernel.
NO_KERNEL_OPS = frozenset({
    "empty.memory_format", "empty_strided.default", "empty_like.default", "new_empty.default", "unsqueeze.default",
    "view.default", "as_strided.default", "expand.default", "slice.Tensor", "select.int",
    "t.default", "transpose.int", "permute.default", "alias.default", "detach.default",
})


def make_inputs(problem, layer=False):
    """The benchmark's arguments (:func:`mamba2_tile.tools.bench.measurement.make_inputs`:
    ``x, dt, A, B, C``, ``D``) as uninitialised CPU tensors; ``layer`` adds what
    :class:`mamba2_tile.layer.Mamba2` passes (``z``, ``dt_bias``, ``dt_softplus``)."""
    dtype = getattr(torch, problem.dtype)
    b, l, h, p, g, n = (problem.batch, problem.seqlen, problem.nheads, problem.headdim,
                        problem.ngroups, problem.dstate)
    args = (torch.empty(b, l, h, p, dtype=dtype), torch.empty(b, l, h, dtype=torch.float32),
            torch.full((h,), -1.0), torch.empty(b, l, g, n, dtype=dtype),
            torch.empty(b, l, g, n, dtype=dtype), problem.chunk_size)
    kwargs = dict(D=torch.empty(h))
    if layer:
        kwargs.update(z=torch.empty(b, l, h, p, dtype=dtype), dt_bias=torch.empty(h),
                      dt_softplus=True)
    return args, kwargs


@contextlib.contextmanager
def stubbed_launches():
    """Within it, kernel launches on CPU tensors take the GPU's path through
    :func:`mamba2_tile.dispatch.launch` (its device rule still runs) and stop where it would
    call ``ct.launch``, recording ``(grid, kernel, args)`` in the yielded list and running
    nothing; the API's check of ``A``'s values, which only CPU tensors get, is skipped."""
    launched = []
    device_rule = dispatch._argument_device

    def as_if_cuda(kernel, args):
        return "cuda" if device_rule(kernel, args) == "cpu" else None

    with mock.patch.object(dispatch, "_launch_cutile", lambda grid, kernel, args:
                           launched.append((grid, kernel, args))), \
            mock.patch.dict(os.environ, {dispatch.FORCE_ENV: ""}), \
            mock.patch.object(dispatch, "gpu_available", lambda: True), \
            mock.patch.object(dispatch, "_argument_device", as_if_cuda), \
            mock.patch.object(api, "_check_decay_rates", lambda A: None):
        yield launched


def keep_freed_memory():
    """Make the C allocator keep freed memory for the next allocation, as torch's CUDA caching
    allocator does, instead of returning large blocks to the system (glibc maps each block above
    a threshold afresh: 20 µs for an 8 MB ``torch.empty``, against 2 µs reused). Returns whether
    it could (glibc only)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
        return bool(libc.mallopt(M_MMAP_MAX, 0)) and bool(libc.mallopt(M_TRIM_THRESHOLD, 2**31 - 1))
    except (OSError, AttributeError):
        return False


class _OpCounter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func.overloadpacket.__name__) + "." + func._overloadname] += 1
        return func(*args, **(kwargs or {}))


def count_function_calls(fn):
    """Python and C functions ``fn()`` calls, itself excluded: a measure of its host work that,
    unlike a time, does not depend on what else the machine runs."""
    calls = 0

    def count(frame, event, arg):
        nonlocal calls
        calls += event in ("call", "c_call")

    sys.setprofile(count)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls - 1          # the call of fn itself


def measure(problem, layer=False, number=200, repeat=30):
    """``{"us_per_call", "launches", "us_per_launch", "function_calls", "tensor_args",
    "aten_ops", "kernel_ops", "ops"}`` for one problem (see the module doc): the time is the
    fastest of ``repeat`` rounds of ``number`` calls, in this process's CPU time (other
    processes only ever add to it, and less so to CPU time than to wall time); ``ops`` counts
    each torch operator of one call."""
    args, kwargs = make_inputs(problem, layer)

    def call():
        return api.mamba_chunk_scan_combined(*args, **kwargs)

    with stubbed_launches() as launched:
        call()                                           # plans, caches, placeholders
        launched.clear()
        call()
        launches = len(launched)
        tensor_args = sum(isinstance(arg, torch.Tensor) for _, _, args in launched for arg in args)
        function_calls = count_function_calls(call)
        with _OpCounter() as counter:
            call()
        launched.clear()
        # Timed with a launch that records nothing: holding the outputs would make every call
        # allocate afresh.
        with mock.patch.object(dispatch, "_launch_cutile", lambda grid, kernel, args: None):
            # CPU time of this process: a time slice given to another process does not count.
            timer = timeit.Timer(call, timer=time.process_time)
            seconds = min(timer.repeat(number=number, repeat=repeat)) / number
    ops = counter.ops
    return dict(us_per_call=seconds * 1e6, launches=launches,
                us_per_launch=seconds * 1e6 / max(launches, 1), function_calls=function_calls,
                tensor_args=tensor_args,
                aten_ops=sum(ops.values()),
                kernel_ops=sum(n for op, n in ops.items() if op not in NO_KERNEL_OPS), ops=ops)


def profile(problem, layer=False, calls=2000, top=15):
    """cProfile's ``top`` entries by own time over ``calls`` stubbed calls, as text."""
    args, kwargs = make_inputs(problem, layer)
    with stubbed_launches(), mock.patch.object(dispatch, "_launch_cutile",
                                               lambda grid, kernel, args: None):
        api.mamba_chunk_scan_combined(*args, **kwargs)
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(calls):
            api.mamba_chunk_scan_combined(*args, **kwargs)
        profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def measure_gpu(problem, layer=False, reps=50, number=20):
    """The same call on a GPU, real launches: ``{"graph_ms", "eager_ms", "host_us"}``.

    ``graph_ms`` and ``eager_ms`` are measured as the benchmark measures them
    (:func:`mamba2_tile.tools.bench.measurement.median_ms`, L2 flushed, on its inputs), so
    ``eager_ms - graph_ms`` is its number; ``host_us`` is the host's wall time per call alone:
    ``number`` calls back to back (their launches queue, nothing waits for the GPU), the GPU
    drained before each of ``reps`` rounds, the fastest round.
    """
    from mamba2_tile.tools.bench.measurement import l2_flush_buffer, median_ms
    from mamba2_tile.tools.bench.measurement import make_inputs as gpu_inputs

    inputs = gpu_inputs(problem)
    kwargs = dict(D=inputs["D"])
    if layer:
        kwargs.update(z=torch.randn_like(inputs["x"]), dt_bias=torch.zeros_like(inputs["D"]),
                      dt_softplus=True)

    def call():
        return api.mamba_chunk_scan_combined(inputs["x"], inputs["dt"], inputs["A"], inputs["B"],
                                             inputs["C"], problem.chunk_size, **kwargs)

    flush = l2_flush_buffer()
    graph_ms = median_ms(call, reps, flush)                  # warms up, then captures
    eager_ms = median_ms(call, reps, flush, graph=False)
    rounds = []
    for _ in range(reps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(number):
            call()
        rounds.append((time.perf_counter() - start) / number)
    torch.cuda.synchronize()
    del inputs, kwargs, flush
    torch.cuda.empty_cache()
    return dict(graph_ms=graph_ms, eager_ms=eager_ms, host_us=min(rounds) * 1e6)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m mamba2_tile.tools.host_overhead",
                                     description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--number", type=arguments.positive_int, default=200,
                        help="calls per timed round (default 200)")
    parser.add_argument("--repeat", type=arguments.positive_int, default=30,
                        help="timed rounds; the fastest counts (default 30)")
    parser.add_argument("--gpu", action="store_true",
                        help="also time the calls on the GPU, real launches: the benchmark's "
                             "graph and eager times and the host's time per call (needs a GPU "
                             "cuTile supports)")
    parser.add_argument("--reps", type=arguments.positive_int, default=50,
                        help="with --gpu: timed replays or rounds per measurement (default 50)")
    parser.add_argument("--layer", action="store_true",
                        help="call as Mamba2 does (z, dt_bias, dt_softplus) instead of as the "
                             "benchmark does (D only)")
    parser.add_argument("--profile", action="store_true", help="print cProfile's top entries")
    parser.add_argument("--ops", action="store_true", help="print the torch ops of one call")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if not keep_freed_memory():
        print("note: this C library cannot be told to keep freed memory; allocations of large "
              "outputs include mapping fresh memory, which a GPU's caching allocator avoids")
    rows = []
    for problem in SHAPES:
        result = measure(problem, args.layer, args.number, args.repeat)
        rows.append([problem.label(), result["launches"], result["tensor_args"],
                     f"{result['us_per_call']:.1f}",
                     f"{result['us_per_launch']:.1f}", result["function_calls"],
                     result["aten_ops"],
                     result["kernel_ops"]])
        if args.ops:
            print(problem.label(), dict(result["ops"]))
        if args.profile:
            print(problem.label())
            print(profile(problem, args.layer, args.number))
    print("Host path with the GPU launch stubbed, on this CPU (µs: CPU time, fastest round):")
    print(tabulate(rows, headers=["problem", "launches", "tensor args", "µs/call", "µs/launch",
                                  "function calls", "aten ops", "kernel ops"]))
    if args.gpu:
        print()
        if not dispatch.gpu_available():
            print("--gpu: no GPU that cuTile supports here; nothing timed on a GPU.")
            return 0
        gpu_rows = []
        for problem in SHAPES:
            result = measure_gpu(problem, args.layer, args.reps)
            gpu_rows.append([problem.label(), f"{result['graph_ms']:.3f}",
                             f"{result['eager_ms']:.3f}",
                             f"{(result['eager_ms'] - result['graph_ms']) * 1e3:.1f}",
                             f"{result['host_us']:.1f}"])
        print(f"On {torch.cuda.get_device_name()}, real launches (median of {args.reps}, L2 "
              f"flushed; host: wall time per call, fastest of {args.reps} rounds):")
        print(tabulate(gpu_rows, headers=["problem", "graph ms", "eager ms",
                                          "eager - graph µs", "host µs/call"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
