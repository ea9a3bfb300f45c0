"""The plan of a forward pass: which kernels run it and with which tiles, from the problem's sizes.

    from mamba2_tile.kernels.plan import plan
    options = plan(batch=1, seqlen=32768, nheads=80, headdim=64, ngroups=1, dstate=128,
                   chunk_size=256, dtype=torch.bfloat16, sm_count=132)

:func:`plan` is a pure function: the sizes, the GPU's SM count and the caller's base options in,
the :class:`~mamba2_tile.kernels.options.ForwardOptions` that will run out, with the path decided
(``fuse_state_passing`` True or False, never ``None``) and every tile of that path's kernels set.
No tensor, no device, no tuning, so a test can ask what any GPU would run without one.
:func:`plan_for` reads the sizes off the tensors and the SM count off their device; the public
API plans every call with it (memoised: one dictionary lookup for a shape seen before).

The autotuner (:mod:`mamba2_tile.autotune`) is a plug-in above the plan, which never imports
it: with ``MAMBA2_TILE_AUTOTUNE=1`` and CUDA tensors the API hands it the planned options, and
it searches tiles, hints and switches on the planned path, keeping the path and the numerics.

The rule:

1. **Path.** ``base.fuse_state_passing`` True or False is obeyed (with ``base.segment_chunks``
   as given). ``None`` (what :data:`~mamba2_tile.kernels.options.DEFAULT_OPTIONS` says) runs the
   fused kernel, one block per (batch, head, headdim tile), when that launch has at least one
   block per SM, ``batch * nheads * ceil(headdim / block_p) >= sm_count`` (``block_p``:
   :func:`~mamba2_tile.kernels.fused_state_out.fused_block_p`, the widest headdim tile whose
   state fits in registers). Below that, SMs would idle while each block walks the whole
   sequence alone (at batch 1, 8 heads, seqlen 16384 on an H200: 0.79 ms, against 0.43 ms for
   the three kernels, ``data/h200_probe.txt``), so the sequence is cut into segments that run in
   parallel (:mod:`~mamba2_tile.kernels.sequence_parallel`, ``segment_chunks`` from
   :func:`~mamba2_tile.kernels.sequence_parallel.choose_segment_chunks`), unless it is a single
   chunk. At batch 1, 80 heads, seqlen 32768, chunk 256 that path took 0.79 ms and the three
   kernels 2.28 ms (``data/h200_probe_sequence_parallel.json``).
2. **Tiles.** A tile the base sets is kept (``block_m`` at most the chunk); one left at ``None``
   gets its launcher's rule, the ``*_tiles`` function beside each kernel, so a launch from the
   plan and a launcher called directly use the same tiles.
3. **TF32 only where it acts**: float32 inputs. For 16-bit inputs the plan says ``tf32=False``,
   which is what the kernels run anyway. Float32 without TF32 multiplies as split TF32, three
   TF32 products per float32 one (:mod:`~mamba2_tile.kernels.split_tf32`). Float32 operand
   tiles, TF32 or split, take twice the registers of 16-bit ones: the fused kernel then runs
   :data:`~mamba2_tile.kernels.fused_state_out.FLOAT32_WORKER_WARPS` worker warps at one block
   an SM, and split TF32 smaller tiles still
   (:data:`~mamba2_tile.kernels.fused_state_out.SPLIT_MAX_STATE_ELEMENTS`); rule 1 counts its
   blocks with those tiles.

CPU tensors (the interpreter) are planned for :data:`REFERENCE_SM_COUNT` SMs, so the interpreter
runs the path an H200 would. ``ngroups`` takes part in no rule yet; it is in the signature
because the plan is a function of the whole problem.
"""

from dataclasses import replace
from functools import lru_cache

import torch

from mamba2_tile.kernels.chunk_cumsum import chunk_cumsum_block_h
from mamba2_tile.kernels.compute_out import compute_out_tiles
from mamba2_tile.kernels.fused_state_out import (fused_block_p, fused_occupancy, fused_tiles,
                                                 splits)
from mamba2_tile.kernels.fwd_pass_state import fwd_pass_state_tiles
from mamba2_tile.kernels.launching import cdiv
from mamba2_tile.kernels.options import DEFAULT_OPTIONS
from mamba2_tile.kernels.sequence_parallel import choose_segment_chunks

# SMs of the GPUs the course measures on (H100 / H200 SXM).
REFERENCE_SM_COUNT = 132


def fused_fills_gpu(batch, nheads, headdim, dstate, sm_count, block_p=None, split=False):
    """True when the fused kernel's launch has at least one block per SM (rule 1)."""
    tiles = cdiv(headdim, fused_block_p(headdim, dstate, block_p, split))
    return batch * nheads * tiles >= sm_count


def fuses(batch, nheads, headdim, dstate, sm_count, base=DEFAULT_OPTIONS):
    """Rule 1 alone: does ``base`` run the fused kernel (cut into segments or not)? Only a
    caller's ``fuse_state_passing=False`` says no."""
    return base.fuse_state_passing is not False


def segments(batch, seqlen, nheads, headdim, dstate, chunk_size, sm_count, base=DEFAULT_OPTIONS,
             dtype=torch.bfloat16):
    """Rule 1's segments on the fused path: ``segment_chunks``, or ``None`` for one segment."""
    if base.fuse_state_passing is not None:
        return base.segment_chunks
    kernel = base.fused_state_out
    split = splits(dtype, kernel)
    if fused_fills_gpu(batch, nheads, headdim, dstate, sm_count, kernel.block_p, split):
        return None
    nchunks = cdiv(seqlen, chunk_size)
    block_p = fused_block_p(headdim, dstate, kernel.block_p, split)
    chunks = choose_segment_chunks(
        batch, nheads, headdim, dstate, nchunks, sm_count, chunk_size, block_p,
        blocks_per_sm=fused_occupancy(dstate, block_p, kernel.occupancy,
                                      dtype == torch.float32) or 1)
    return None if chunks >= nchunks else chunks


@lru_cache(maxsize=1024)
def plan(batch, seqlen, nheads, headdim, ngroups, dstate, chunk_size, dtype, sm_count,
         base=DEFAULT_OPTIONS):
    """The :class:`ForwardOptions` a forward pass of these sizes runs (see the module doc)."""
    tf32 = dtype == torch.float32

    def numerics(options):
        return replace(options, tf32=options.tf32 and tf32)

    cumsum = replace(base.chunk_cumsum, block_h=chunk_cumsum_block_h(nheads, base.chunk_cumsum))
    if fuses(batch, nheads, headdim, dstate, sm_count, base):
        fused = numerics(base.fused_state_out)
        block_m, block_p = fused_tiles(headdim, dstate, chunk_size, fused, splits(dtype, fused))
        fused = replace(fused, block_m=block_m, block_p=block_p)
        segment_chunks = segments(batch, seqlen, nheads, headdim, dstate, chunk_size, sm_count,
                                  base, dtype)
        return replace(base, chunk_cumsum=cumsum, fused_state_out=fused, fuse_state_passing=True,
                       segment_chunks=segment_chunks)
    state_p, state_n = fwd_pass_state_tiles(headdim, dstate, base.fwd_pass_state)
    out_m, out_p = compute_out_tiles(headdim, chunk_size, base.compute_out)
    return replace(
        base, chunk_cumsum=cumsum,
        fwd_pass_state=replace(numerics(base.fwd_pass_state), block_p=state_p, block_n=state_n),
        compute_out=replace(numerics(base.compute_out), block_m=out_m, block_p=out_p),
        fuse_state_passing=False,
    )


@lru_cache(maxsize=None)
def _cuda_sm_count(device_index):
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def device_sm_count(device):
    """The SMs of a CUDA device (looked up once per GPU); :data:`REFERENCE_SM_COUNT` for any
    other device."""
    if device.type != "cuda":
        return REFERENCE_SM_COUNT
    return _cuda_sm_count(torch.cuda.current_device() if device.index is None else device.index)


def plan_for(x, B, chunk_size, base=DEFAULT_OPTIONS):
    """:func:`plan` for the API's tensors ``x`` (b, l, h, p) and ``B`` (b, l, g, n)."""
    batch, seqlen, nheads, headdim = x.shape
    return plan(batch, seqlen, nheads, headdim, B.shape[2], B.shape[3], chunk_size, x.dtype,
                device_sm_count(x.device), base)
