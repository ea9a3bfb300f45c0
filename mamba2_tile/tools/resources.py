"""What the forward pass's kernels compile to, without a GPU: registers, shared memory, spills.

    python -m mamba2_tile.tools.resources                          # the models preset, sm_90
    python -m mamba2_tile.tools.resources --dtype float32 --tf32   # its float32 row, TF32
    python -m mamba2_tile.tools.resources --preset training --target sm_100

A kernel that runs out of registers keeps the rest in *local memory* (spills): per-thread
memory that lives in DRAM behind the caches, so every spilled value is a load and a store in the
loop that needed a register. It shows in the compiled cubin, which cuTile's compiler makes on a
machine with no GPU; so a tile size or hint that spills can be seen, and avoided, before any GPU
time is spent.

For each problem of a benchmark preset (:mod:`mamba2_tile.tools.bench.presets`) the tool plans
the call as the API would on an H200 (:func:`mamba2_tile.kernels.plan.plan`, 132 SMs), makes
that call on uninitialised CPU tensors with every launch stopped before the GPU
(:func:`mamba2_tile.tools.host_overhead.stubbed_launches`), and compiles each kernel launched
for ``--target`` (:func:`mamba2_tile.compiler.compile_kernel`). The tensors are two chunks long,
or two segments where the plan cuts the sequence (the plan is made for the real length): a
kernel is specialised on its arguments' dtypes and on whether sizes and strides divide by 16,
not on the sizes, so the cubin is the real one.

One row a kernel launched: registers a thread, shared memory a block, local memory (spilled
registers) a thread, and compile seconds. Kernels compiled with the same constants and hints
for an earlier row are not compiled again.
"""

import argparse
import dataclasses

import torch
from tabulate import tabulate
from tqdm.auto import tqdm

from mamba2_tile import api
from mamba2_tile.compiler import TARGETS, compile_kernel, compiler_available
from mamba2_tile.kernels import DEFAULT_OPTIONS
from mamba2_tile.kernels.plan import REFERENCE_SM_COUNT, plan
from mamba2_tile.problem import KERNEL_DTYPES
from mamba2_tile.tools.bench.presets import PRESETS, sweep
from mamba2_tile.tools.host_overhead import make_inputs, stubbed_launches

def short_seqlen(problem, segment_chunks=None):
    """Two segments of ``segment_chunks`` chunks (two chunks without segments), with the real
    length's remainder mod 16 (what the compiler specialises on); at most the real length."""
    chunks = 2 * (segment_chunks or 1)
    return min(problem.seqlen, chunks * problem.chunk_size + problem.seqlen % 16)


def planned_launches(problem, tf32=False):
    """The ``(kernel, args)`` of each launch the API makes for ``problem`` (planned for its real
    length, launched on :func:`short_seqlen` tokens), in launch order. ``tf32`` asks float32
    inputs for TF32 products, as the benchmark's TF32 rows do."""
    base = DEFAULT_OPTIONS.with_switches(tf32=True) if tf32 else DEFAULT_OPTIONS
    options = plan(problem.batch, problem.seqlen, problem.nheads, problem.headdim,
                   problem.ngroups, problem.dstate, problem.chunk_size,
                   getattr(torch, problem.dtype), REFERENCE_SM_COUNT, base)
    seqlen = short_seqlen(problem, options.segment_chunks)
    (x, dt, A, B, C, chunk_size), kwargs = make_inputs(dataclasses.replace(problem, seqlen=seqlen))
    with stubbed_launches() as launched:
        api.forward_with_options(x, dt, A, B, C, chunk_size, options=options, **kwargs)
    return [(kernel, args) for _grid, kernel, args in launched]


def _compile_key(kernel, args):
    """What a compilation depends on: the kernel (with its hints), and each argument's dtype,
    divisibility by 16 and contiguity, or its value for a scalar."""
    def describe(arg):
        if isinstance(arg, torch.Tensor):
            return (arg.dtype, arg.dim(), tuple(s % 16 == 0 for s in arg.shape),
                    tuple(s == 1 for s in arg.stride()))
        return arg
    return kernel, tuple(describe(arg) for arg in args)


def resource_rows(problems, target="sm_90", tf32=False, progress=True):
    """One row a kernel launched, for each problem: ``[problem, kernel, registers, shared KiB,
    local bytes, compile s]``; a kernel compiled for an earlier row is not compiled again (its
    compile time shows as ``-``)."""
    seen = {}
    rows = []
    for problem in tqdm(problems, disable=not progress, desc="compiling"):
        for kernel, args in planned_launches(problem, tf32):
            key = _compile_key(kernel, args)
            fresh = key not in seen
            if fresh:
                seen[key] = compile_kernel(kernel, args, target)
            result = seen[key]
            rows.append([problem.label(), result.kernel_name, result.registers,
                         f"{result.shared_bytes / 1024:.1f}", result.local_bytes,
                         f"{result.seconds:.1f}" if fresh else "-"])
    return rows


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m mamba2_tile.tools.resources",
                                     description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--preset", choices=sorted(PRESETS), default="models",
                        help="the benchmark preset whose problems to compile (default: models)")
    parser.add_argument("--dtype", nargs="+", choices=KERNEL_DTYPES,
                        help="keep the preset's problems with one of these dtypes")
    parser.add_argument("--tf32", action="store_true",
                        help="float32 problems with TF32 products (the benchmark's TF32 rows)")
    parser.add_argument("--target", choices=TARGETS, default="sm_90",
                        help="the GPU architecture to compile for (default: sm_90, the H200)")
    args = parser.parse_args(argv)
    if args.tf32 and args.dtype and "float32" not in args.dtype:
        parser.error("--tf32 acts on float32 inputs only; add float32 to --dtype")
    return args


def main(argv=None):
    args = parse_args(argv)
    if not compiler_available():
        print("cuTile's compiler (cuda-tile[tileiras]) is not installed: nothing to compile.")
        return 1
    problems = sweep(args.preset, {"dtype": args.dtype})
    rows = resource_rows(problems, args.target, args.tf32)
    print(f"Kernels as planned for an H200 ({REFERENCE_SM_COUNT} SMs), compiled for "
          f"{args.target}{' (float32 with TF32)' if args.tf32 else ''}:")
    print(tabulate(rows, headers=["problem", "kernel", "registers", "shared KiB",
                                  "local bytes", "compile s"], disable_numparse=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
