"""What the kernels of a call compile to, without a GPU: registers, shared memory, spills.

    python -m mamba2_tile.tools.resources                          # the models preset, sm_90
    python -m mamba2_tile.tools.resources --dtype float32 --tf32   # its float32 row, TF32
    python -m mamba2_tile.tools.resources --preset training --backward --target sm_100

A kernel that runs out of registers keeps the rest in *local memory* (spills): per-thread
memory that lives in DRAM behind the caches, so a spilled value costs a store and, wherever it is
needed again, a load. It shows in the compiled cubin, which cuTile's compiler makes on a
machine with no GPU; so a tile size or hint that spills can be seen, and avoided, before any GPU
time is spent.

For each problem of a benchmark preset (:mod:`mamba2_tile.tools.bench.presets`) the tool makes
the call the benchmark makes (a forward pass; with ``--backward`` a training step, forward and
backward) on uninitialised CPU tensors of the problem's real shapes, with every launch stopped
before the GPU (:func:`mamba2_tile.tools.host_overhead.stubbed_launches`): the API plans it as on
an H200 (132 SMs, :func:`mamba2_tile.kernels.plan.plan`) and no kernel runs, so no data is
touched. Each kernel launched is compiled for ``--target``
(:func:`mamba2_tile.compiler.compile_kernel`).

One row a kernel launched: threads a block (the compiler fixes them, from cuTile's warp hints;
registers a thread times threads is what a block takes of an SM's 64 K registers), registers a
thread, shared memory a block, local memory (spilled registers) a thread, where ``nvdisasm`` is
installed the spill loads and stores inside the kernel's loops (:mod:`mamba2_tile.tools.sass`:
the ones that cost a trip to memory every time round), and compile seconds. Kernels compiled
with the same constants and hints for an earlier row are not compiled again.
"""

import argparse

import torch
from tabulate import tabulate
from tqdm.auto import tqdm

from mamba2_tile import api
from mamba2_tile.compiler import TARGETS, compilation_key, compile_kernel, compiler_available
from mamba2_tile.kernels import DEFAULT_OPTIONS
from mamba2_tile.kernels.plan import REFERENCE_SM_COUNT
from mamba2_tile.problem import KERNEL_DTYPES
from mamba2_tile.tools.bench.presets import PRESETS, sweep
from mamba2_tile.tools.host_overhead import make_inputs, stubbed_launches
from mamba2_tile.tools.sass import disassemble, find_nvdisasm, loop_spills


def planned_launches(problem, tf32=False, backward=False):
    """The ``(kernel, args)`` of each launch the API makes for ``problem``, in launch order: a
    forward pass, or with ``backward`` a training step (the forward, then the backward of every
    input the benchmark passes). ``tf32`` runs float32 inputs with TF32 products, as the
    benchmark's TF32 rows do (a forward switch: the public API, and so training, has none)."""
    if tf32 and backward:
        raise ValueError("tf32 is a forward option (forward_with_options); the backward has none")
    (x, dt, A, B, C, chunk_size), kwargs = make_inputs(problem)
    with stubbed_launches() as launched:
        if backward:
            for tensor in (x, dt, A, B, C, kwargs["D"]):
                tensor.requires_grad_()
            y = api.mamba_chunk_scan_combined(x, dt, A, B, C, chunk_size, **kwargs)
            y.backward(torch.empty_like(y))
        else:
            options = DEFAULT_OPTIONS.with_switches(tf32=True) if tf32 else DEFAULT_OPTIONS
            api.forward_with_options(x, dt, A, B, C, chunk_size, options=options, **kwargs)
    return [(kernel, args) for _grid, kernel, args in launched]


def resource_rows(problems, target="sm_90", tf32=False, backward=False, progress=True,
                  nvdisasm=None):
    """One row a kernel launched, for each problem: ``[problem, kernel, threads, registers,
    shared KiB, local bytes, compile s]``, and with ``nvdisasm`` (its path) the spill loads and
    stores inside the kernel's loops (:func:`mamba2_tile.tools.sass.loop_spills`) as
    ``"loads/stores"``. A kernel compiled for an earlier row is not compiled again (its compile
    time shows as ``-``)."""
    seen = {}
    rows = []
    for problem in tqdm(problems, disable=not progress, desc="compiling"):
        for kernel, args in planned_launches(problem, tf32, backward):
            key = compilation_key(kernel, args)
            fresh = key not in seen
            if fresh:
                result = compile_kernel(kernel, args, target)
                spills = (loop_spills(disassemble(result.cubin, nvdisasm))
                          if nvdisasm else None)
                seen[key] = result, spills
            result, spills = seen[key]
            row = [problem.label(), result.kernel_name, result.threads, result.registers,
                   f"{result.shared_bytes / 1024:.1f}", result.local_bytes]
            if nvdisasm:
                row.append("/".join(map(str, spills)))
            rows.append(row + [f"{result.seconds:.1f}" if fresh else "-"])
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
    parser.add_argument("--backward", action="store_true",
                        help="a training step's kernels (forward, then backward) instead of the "
                             "forward's")
    parser.add_argument("--target", choices=TARGETS, default="sm_90",
                        help="the GPU architecture to compile for (default: sm_90, the H200)")
    args = parser.parse_args(argv)
    if args.tf32 and args.dtype and "float32" not in args.dtype:
        parser.error("--tf32 acts on float32 inputs only; add float32 to --dtype")
    if args.tf32 and args.backward:
        parser.error("--tf32 is a forward option; the backward has none")
    return args


def main(argv=None):
    args = parse_args(argv)
    if not compiler_available():
        print("cuTile's compiler (cuda-tile[tileiras]) is not installed: nothing to compile.")
        return 1
    problems = sweep(args.preset, {"dtype": args.dtype})
    nvdisasm = find_nvdisasm()
    rows = resource_rows(problems, args.target, args.tf32, args.backward, nvdisasm=nvdisasm)
    step = "a training step" if args.backward else "a forward pass"
    print(f"The kernels of {step}, as planned for an H200 ({REFERENCE_SM_COUNT} SMs), compiled "
          f"for {args.target}{' (float32 with TF32)' if args.tf32 else ''}:")
    headers = ["problem", "kernel", "threads", "registers", "shared KiB", "local bytes"]
    headers += ["spills in loops (LDL/STL)"] if nvdisasm else []
    print(tabulate(rows, headers=headers + ["compile s"], disable_numparse=True))
    if not nvdisasm:
        print("(no nvdisasm here: `pip install nvidia-cuda-nvdisasm` adds the spill loads and "
              "stores inside each kernel's loops)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
