"""The three cuTile kernels of the chunked SSD forward pass, one file each, host launcher beside.

    chunk_cumsum    dt -> (dA_cumsum, dt)                          stage 1
    fwd_pass_state  (x, B, dt, dA_cumsum) -> (chunk_states, final)  stage 2
    compute_out     (x, dt, dA_cumsum, B, C, chunk_states) -> y     stage 3

    fused_state_out (x, dt, dA_cumsum, B, C) -> (y, final)         stages 2 + 3, state on chip

:func:`mamba2_tile.api.mamba_chunk_scan_combined` chains stage 1 with stages 2 and 3, or with the
fused kernel (see :data:`DEFAULT_OPTIONS`). ``compile_examples()`` lists
representative launches so that a test can compile every kernel for every GPU architecture.
"""

import itertools

import torch

from mamba2_tile.kernels.chunk_cumsum import chunk_cumsum, chunk_cumsum_launch
from mamba2_tile.kernels.compute_out import compute_out, compute_out_launch
from mamba2_tile.kernels.fused_state_out import fused_state_out, fused_state_out_launch
from mamba2_tile.kernels.fwd_pass_state import fwd_pass_state, fwd_pass_state_launch
from mamba2_tile.kernels.options import DEFAULT_OPTIONS, ForwardOptions, KernelOptions

__all__ = [
    "chunk_cumsum", "chunk_cumsum_launch",
    "fwd_pass_state", "fwd_pass_state_launch",
    "compute_out", "compute_out_launch",
    "fused_state_out", "fused_state_out_launch",
    "ForwardOptions", "KernelOptions", "DEFAULT_OPTIONS",
    "compile_examples",
]

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
CHUNK_SIZES = (64, 128, 256)
# The optimized variants CI compiles: every switch on at once (bfloat16), and TF32 (float32,
# the one switch that only exists for float32 inputs). One each keeps the compile test short.
ALL_SWITCHES = ForwardOptions.uniform(latency=4, swap_operands=True, occupancy=2,
                                      transposed_layout=True, low_precision_states=True)
TF32_ONLY = ForwardOptions.uniform(tf32=True)


def _example_launches(dtype, chunk_size, options, headdim=64, dstate=64,
                      forward=DEFAULT_OPTIONS):
    """The three launches of one forward pass on small CPU tensors (never run, only compiled)."""
    batch, seqlen, nheads, ngroups = 1, chunk_size + 3, 4, 2
    x = torch.zeros(batch, seqlen, nheads, headdim, dtype=dtype)
    dt = torch.zeros(batch, seqlen, nheads, dtype=dtype)
    A = torch.zeros(nheads)
    B = torch.zeros(batch, seqlen, ngroups, dstate, dtype=dtype)
    C = torch.zeros_like(B)
    D = torch.zeros(nheads, headdim) if options else None
    z = torch.zeros_like(x) if options else None
    dt_bias = torch.zeros(nheads) if options else None
    initial_states = torch.zeros(batch, nheads, headdim, dstate) if options else None

    cumsum, (dA_cumsum, dt_c) = chunk_cumsum_launch(
        dt, A, chunk_size, dt_bias=dt_bias, dt_softplus=options,
        dt_limit=(0.0, 100.0) if options else (0.0, float("inf")), options=forward.chunk_cumsum)
    state, (chunk_states, _) = fwd_pass_state_launch(
        x, B, dt_c, dA_cumsum, initial_states, forward.fwd_pass_state,
        forward.transposed_layout, forward.low_precision_states)
    out, _ = compute_out_launch(x, dt_c, dA_cumsum, B, C, chunk_states, D=D, z=z,
                                options=forward.compute_out,
                                transposed_layout=forward.transposed_layout)
    return {"chunk_cumsum": cumsum, "fwd_pass_state": state, "compute_out": out}


def _fused_example(dtype, chunk_size, full, options, headdim, dstate):
    """The fused kernel's launch on small CPU tensors (never run, only compiled)."""
    batch, seqlen, nheads, ngroups = 1, chunk_size + 3, 4, 2
    x = torch.zeros(batch, seqlen, nheads, headdim, dtype=dtype)
    B = torch.zeros(batch, seqlen, ngroups, dstate, dtype=dtype)
    dA_cumsum = torch.zeros(batch, nheads, 2, chunk_size)
    launch, _ = fused_state_out_launch(
        x, dA_cumsum, dA_cumsum, B, B.clone(),
        initial_states=torch.zeros(batch, nheads, headdim, dstate) if full else None,
        D=torch.zeros(nheads, headdim) if full else torch.zeros(nheads),
        z=torch.zeros_like(x) if full else None, options=options)
    return launch


def compile_examples():
    """Yield ``(name, kernel, args)`` for representative configurations of every kernel.

    Every input dtype x every chunk size with all optional inputs present, plus the bare
    forward pass (no optional inputs, D of shape (nheads,)) and headdim / dstate that are not
    powers of two (padded tiles), and the optimized variants (``ALL_SWITCHES``, ``TF32_ONLY``).
    Arrays are small CPU tensors: only their metadata matters.
    """
    configs = [(dtype, chunk, True, 64, 64) for dtype, chunk in itertools.product(DTYPES, CHUNK_SIZES)]
    configs.append((torch.float16, 64, False, 64, 64))
    configs.append((torch.bfloat16, 128, True, 80, 48))
    for dtype, chunk_size, options, headdim, dstate in configs:
        launches = _example_launches(dtype, chunk_size, options, headdim, dstate)
        tag = (f"{str(dtype).removeprefix('torch.')}-chunk{chunk_size}"
               f"{'' if options else '-bare'}-p{headdim}-n{dstate}")
        for name, launch in launches.items():
            yield f"{name}[{tag}]", launch.kernel, launch.args
    for tag, dtype, forward, names in [
        ("bfloat16-chunk64-all-switches", torch.bfloat16, ALL_SWITCHES,
         ("chunk_cumsum", "fwd_pass_state", "compute_out")),
        ("float32-chunk64-tf32", torch.float32, TF32_ONLY, ("fwd_pass_state", "compute_out")),
    ]:
        launches = _example_launches(dtype, 64, True, forward=forward)
        for name in names:
            yield f"{name}[{tag}]", launches[name].kernel, launches[name].args
    # The fused kernel: every optional input (bf16, chunk 64, the default occupancy hint), bare
    # (fp16, chunk 128), TF32 (fp32, chunk 256) and padded headdim / dstate.
    for tag, dtype, chunk_size, full, options, headdim, dstate in [
        ("bfloat16-chunk64", torch.bfloat16, 64, True, DEFAULT_OPTIONS.fused_state_out, 64, 64),
        ("float16-chunk128-bare", torch.float16, 128, False, KernelOptions(), 64, 128),
        ("float32-chunk256-tf32", torch.float32, 256, True, KernelOptions(tf32=True), 64, 64),
        ("bfloat16-chunk64-p80-n48", torch.bfloat16, 64, True, KernelOptions(latency=4), 80, 48),
    ]:
        launch = _fused_example(dtype, chunk_size, full, options, headdim, dstate)
        yield f"fused_state_out[{tag}]", launch.kernel, launch.args
    # D of shape (nheads,): the other branch of compute_out.
    x = torch.zeros(1, 70, 4, 64, dtype=torch.bfloat16)
    B = torch.zeros(1, 70, 1, 128, dtype=torch.bfloat16)
    dA_cumsum = torch.zeros(1, 4, 2, 64)
    chunk_states = torch.zeros(1, 4, 2, 64, 128)
    launch, _ = compute_out_launch(x, dA_cumsum, dA_cumsum, B, B, chunk_states, D=torch.zeros(4))
    yield "compute_out[bfloat16-chunk64-D_per_head-n128]", launch.kernel, launch.args
