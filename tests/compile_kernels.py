"""What the compiler tests compile: small course-style kernels, and the package's kernels.

The small kernels exercise the compiler check, one per kind of tile operation the course uses;
they import the real `cuda.tile` (not `mamba2_tile.tile`) because only the real package has a
compiler. `examples()` pairs each with arguments shaped like a real launch.
`package_examples()` lists representative launches of every kernel of `mamba2_tile.kernels`, so
that a test can compile each for every GPU architecture.
"""

import itertools

import numpy as np
import torch

import cuda.tile as ct
from mamba2_tile.kernels import (DEFAULT_OPTIONS, ForwardOptions, FusedStateOutOptions,
                                 chunk_cumsum_launch, chunk_scores_launch, compute_out_launch,
                                 fused_state_out_launch, fwd_pass_state_launch,
                                 segment_pass_launch, segment_states_launch,
                                 selective_state_update_launch)
from mamba2_tile.kernels.bwd_chunk import bwd_chunk_launch
from mamba2_tile.kernels.bwd_chunk_cumsum import bwd_chunk_cumsum_launch
from mamba2_tile.kernels.bwd_state_pass import bwd_state_pass_launch
from mamba2_tile.kernels.fused_state_out import fused_block_m, scores_given
from mamba2_tile.kernels.varlen_states import varlen_states_launch


@ct.kernel
def scale_add(x, y, out, alpha, TILE: ct.Constant[int]):
    """out = alpha * x + y on 1-D tiles; the last tile is partial when TILE does not divide n."""
    i = ct.bid(0)
    a = ct.load(x, index=(i,), shape=(TILE,), padding_mode=ct.PaddingMode.ZERO)
    b = ct.load(y, index=(i,), shape=(TILE,), padding_mode=ct.PaddingMode.ZERO)
    ct.store(out, index=(i,), tile=alpha * a + b)


@ct.kernel
def row_cumsum(x, out, ROWS: ct.Constant[int], COLS: ct.Constant[int]):
    """Running sum along each row of a (ROWS, COLS) tile: the scan at the heart of chunk_cumsum."""
    i = ct.bid(0)
    tile = ct.load(x, index=(i, 0), shape=(ROWS, COLS), padding_mode=ct.PaddingMode.ZERO)
    ct.store(out, index=(i, 0), tile=ct.cumsum(tile.astype(ct.float32), axis=1))


@ct.kernel
def matmul(a, b, c, TM: ct.Constant[int], TN: ct.Constant[int], TK: ct.Constant[int]):
    """c = a @ b: one (TM, TN) output tile per block, accumulated over K in float32 by ct.mma."""
    i, j = ct.bid(0), ct.bid(1)
    acc = ct.zeros((TM, TN), dtype=ct.float32)
    for k in range(ct.num_tiles(a, axis=1, shape=(TM, TK))):
        a_tile = ct.load(a, index=(i, k), shape=(TM, TK), padding_mode=ct.PaddingMode.ZERO)
        b_tile = ct.load(b, index=(k, j), shape=(TK, TN), padding_mode=ct.PaddingMode.ZERO)
        acc = ct.mma(a_tile, b_tile, acc)
    ct.store(c, index=(i, j), tile=acc.astype(c.dtype))


@ct.kernel
def causal_matmul(s, v, out, TM: ct.Constant[int], TN: ct.Constant[int]):
    """out = tril(s) @ v (the primer's Exercise 4): tiles up to the diagonal, the diagonal masked."""
    i = ct.bid(0)
    acc = ct.zeros((TM, TN), dtype=ct.float32)
    rows = ct.reshape(i * TM + ct.arange(TM, dtype=ct.int32), (TM, 1))
    for k in range(i + 1):
        s_tile = ct.load(s, index=(i, k), shape=(TM, TM), padding_mode=ct.PaddingMode.ZERO)
        v_tile = ct.load(v, index=(k, 0), shape=(TM, TN), padding_mode=ct.PaddingMode.ZERO)
        cols = ct.reshape(k * TM + ct.arange(TM, dtype=ct.int32), (1, TM))
        acc = ct.mma(ct.where(rows >= cols, s_tile, 0.0), v_tile, acc)
    ct.store(out, index=(i, 0), tile=acc.astype(out.dtype))


@ct.kernel
def broken_mma(x, out, TILE: ct.Constant[int]):
    """Does not compile: ct.mma needs 2-D tiles (matrices), this passes 1-D ones."""
    t = ct.load(x, index=(0,), shape=(TILE,))
    ct.store(out, index=(0,), tile=ct.mma(t, t, t))


def examples():
    """(name, kernel, args) triples, like `package_examples()`."""
    x = np.zeros(1000, np.float32)
    rows = np.zeros((48, 64), np.float32)
    a = np.zeros((128, 96), np.float16)
    b = np.zeros((96, 64), np.float16)
    c = np.zeros((128, 64), np.float32)
    return [
        ("scale_add", scale_add, (x, x, x, 2.0, 256)),
        ("row_cumsum", row_cumsum, (rows, rows, 16, 64)),
        ("matmul", matmul, (a, b, c, 64, 64, 32)),
        ("causal_matmul", causal_matmul, (np.zeros((96, 96), np.float16), b,
                                          np.zeros((96, 64), np.float32), 32, 64)),
    ]


# --- the package's kernels ------------------------------------------------------------------

# Examples whose sm_90 cubin keeps no local memory (no spilled registers): the float32 backward,
# whose tiles were chosen for that (kernels/split_tf32.py). tests/test_compiler.py reads it off
# the cubin. (On sm_80, without Hopper's wgmma, the same kernels spill. At chunk 256 the float32
# bwd_chunk keeps 56 bytes with a partial last chunk, whose loops over row blocks have a length
# known only at run time: data/h100_bwd_row_block_fix_2026-12-06.txt.)
NO_SPILLS_ON_SM90 = frozenset(
    ["bwd_chunk[float32-chunk64-p40-n48]", "bwd_state_pass[float32-chunk64-p40-n48]",
     "bwd_chunk[float32-chunk256-n256-whole]", "bwd_state_pass[float32-chunk256-p64-n256]"]
    # Float32 operands summed 64 positions at a time (fwd_pass_state.FLOAT32_ROWS): a whole
    # 256-position chunk at once spilled 296 bytes a thread.
    + [f"fwd_pass_state[float32-chunk{chunk}-p64-n64]" for chunk in (128, 256)]
    # TF32's tiles and hints (kernels/fused_state_out.py): 328 and 808 local bytes a thread
    # with the 16-bit ones.
    + [f"fused_state_out[float32-chunk256-tf32-n{dstate}]" for dstate in (128, 256)])

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
    scores = None
    if scores_given(dstate):                  # C Bᵀ precomputed, as the forward pass does there
        _, scores = chunk_scores_launch(B, B.clone(), fused_block_m(chunk_size, options),
                                        options.tf32)
    launch, _ = fused_state_out_launch(
        x, dA_cumsum, dA_cumsum, B, B.clone(),
        initial_states=torch.zeros(batch, nheads, headdim, dstate) if full else None,
        D=torch.zeros(nheads, headdim) if full else torch.zeros(nheads),
        z=torch.zeros_like(x) if full else None, options=options, scores=scores)
    return launch


def _sequence_parallel_examples():
    """The sequence-parallel path's launches (segments of 2 chunks, one partial), and the fused
    kernel reading precomputed scores at dstate 256 (never run, only compiled)."""
    for tag, dtype, chunk_size, dstate, options in [
        ("bfloat16-chunk256-n128", torch.bfloat16, 256, 128, DEFAULT_OPTIONS.fused_state_out),
        ("float32-chunk64-n256-tf32", torch.float32, 64, 256, FusedStateOutOptions(tf32=True)),
    ]:
        batch, nheads, headdim, nchunks = 1, 4, 64, 5
        seqlen = (nchunks - 1) * chunk_size + 3
        x = torch.zeros(batch, seqlen, nheads, headdim, dtype=dtype)
        B = torch.zeros(batch, seqlen, 1, dstate, dtype=dtype)
        dA_cumsum = torch.zeros(batch, nheads, nchunks, chunk_size)
        states, (local, decay) = segment_states_launch(x, B, dA_cumsum, dA_cumsum, 2, options)
        passing, entering = segment_pass_launch(local, decay,
                                                torch.zeros(batch, nheads, headdim, dstate))
        scoring, scores = chunk_scores_launch(B, B.clone(), 64, options.tf32)
        fused, _ = fused_state_out_launch(x, dA_cumsum, dA_cumsum, B, B.clone(), entering,
                                          D=torch.zeros(nheads), z=torch.zeros_like(x),
                                          options=options, scores=scores, segment_chunks=2)
        for name, launch in [("segment_states", states), ("segment_pass", passing),
                             ("chunk_scores", scoring), ("fused_state_out", fused)]:
            yield f"{name}[{tag}-segments]", launch.kernel, launch.args


def _packed_examples():
    """Every kernel that reads ``seq_idx`` (packed sequences), and ``varlen_states`` from each
    kind of state a path keeps (never run, only compiled)."""
    dtype, chunk_size, nheads, headdim, dstate, nchunks = torch.bfloat16, 64, 4, 64, 128, 5
    seqlen = (nchunks - 1) * chunk_size + 3
    x = torch.zeros(1, seqlen, nheads, headdim, dtype=dtype)
    B = torch.zeros(1, seqlen, 2, dstate, dtype=dtype)
    dA_cumsum = torch.zeros(1, nheads, nchunks, chunk_size)
    seq_idx = torch.zeros(1, seqlen, dtype=torch.int32)
    cu_seqlens = torch.tensor([0, 100, seqlen])          # int64, as torch.cumsum makes it
    state, (chunk_states, _) = fwd_pass_state_launch(x, B, dA_cumsum, dA_cumsum,
                                                     seq_idx=seq_idx)
    out, _ = compute_out_launch(x, dA_cumsum, dA_cumsum, B, B, chunk_states, seq_idx=seq_idx)
    fused, _ = fused_state_out_launch(x, dA_cumsum, dA_cumsum, B, B, seq_idx=seq_idx,
                                      options=DEFAULT_OPTIONS.fused_state_out)
    states, _ = segment_states_launch(x, B, dA_cumsum, dA_cumsum, 2, seq_idx=seq_idx)
    from_chunks, _ = varlen_states_launch(x, B, dA_cumsum, dA_cumsum, cu_seqlens, chunk_states,
                                          1, seq_idx)
    from_transposed, _ = varlen_states_launch(
        x, B, dA_cumsum, dA_cumsum, cu_seqlens.int(),
        torch.zeros(1, nheads, nchunks, dstate, headdim, dtype=dtype), 1, seq_idx, True)
    from_start, _ = varlen_states_launch(x, B, dA_cumsum, dA_cumsum, cu_seqlens[:2])
    for name, launch in [("fwd_pass_state", state), ("compute_out", out),
                         ("fused_state_out", fused), ("segment_states", states),
                         ("varlen_states", from_chunks),
                         ("varlen_states[transposed-bf16-anchors]", from_transposed),
                         ("varlen_states[no-anchors]", from_start)]:
        yield f"{name}[packed]", launch.kernel, launch.args


def _view_examples():
    """The cumsum and the fused kernel on views of one fused projection, as a Mamba-2 layer
    passes them, and stride-0 per-head parameters (never run, only compiled)."""
    batch, seqlen, nheads, headdim, ngroups, dstate, chunk_size = 1, 131, 4, 64, 1, 128, 64
    dim, bc = nheads * headdim, ngroups * dstate
    zxbcdt = torch.zeros(batch, seqlen, 2 * dim + 2 * bc + nheads, dtype=torch.bfloat16)
    z, x, B, C, dt = torch.split(zxbcdt, [dim, dim, bc, bc, nheads], dim=-1)
    x, z = x.unflatten(-1, (nheads, headdim)), z.unflatten(-1, (nheads, headdim))
    B, C = B.unflatten(-1, (ngroups, dstate)), C.unflatten(-1, (ngroups, dstate))
    per_head = torch.zeros(1).expand(nheads)
    cumsum, (dA_cumsum, dt_c) = chunk_cumsum_launch(dt, per_head, chunk_size, dt_bias=per_head,
                                                    dt_softplus=True)
    fused, _ = fused_state_out_launch(x, dt_c, dA_cumsum, B, C, D=per_head, z=z,
                                      options=DEFAULT_OPTIONS.fused_state_out)
    for name, launch in [("chunk_cumsum", cumsum), ("fused_state_out", fused)]:
        yield f"{name}[views]", launch.kernel, launch.args


def package_examples():
    """Yield ``(name, kernel, args)`` for representative configurations of every kernel.

    Every input dtype x every chunk size with all optional inputs present, plus the bare
    forward pass (no optional inputs, D of shape (nheads,)) and headdim / dstate that are not
    powers of two (padded tiles), and the optimized variants (``ALL_SWITCHES``, ``TF32_ONLY``).
    Arrays are small CPU tensors: only their metadata matters.
    """
    configs = [(dtype, chunk, True, 64, 64)
               for dtype, chunk in itertools.product(DTYPES, CHUNK_SIZES)]
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
    # (fp16, chunk 128), TF32 (fp32, chunk 256, C Bᵀ formed in the kernel and precomputed), split
    # TF32 (fp32 without tf32: a smaller state tile) and padded headdim / dstate.
    for tag, dtype, chunk_size, full, options, headdim, dstate in [
        ("bfloat16-chunk64", torch.bfloat16, 64, True, DEFAULT_OPTIONS.fused_state_out, 64, 64),
        ("float16-chunk128-bare", torch.float16, 128, False, FusedStateOutOptions(), 64, 128),
        *[(f"float32-chunk256-tf32-n{dstate}", torch.float32, 256, True,
           FusedStateOutOptions(tf32=True), 64, dstate) for dstate in (64, 128, 256)],
        ("float32-chunk256-split-n128", torch.float32, 256, True, FusedStateOutOptions(), 64,
         128),
        ("bfloat16-chunk64-p80-n48", torch.bfloat16, 64, True, FusedStateOutOptions(latency=4),
         80, 48),
    ]:
        launch = _fused_example(dtype, chunk_size, full, options, headdim, dstate)
        yield f"fused_state_out[{tag}]", launch.kernel, launch.args
    yield from _sequence_parallel_examples()
    yield from _decode_examples()
    yield from _packed_examples()
    yield from _view_examples()
    yield from _backward_examples()
    # D of shape (nheads,): the other branch of compute_out.
    x = torch.zeros(1, 70, 4, 64, dtype=torch.bfloat16)
    B = torch.zeros(1, 70, 1, 128, dtype=torch.bfloat16)
    dA_cumsum = torch.zeros(1, 4, 2, 64)
    chunk_states = torch.zeros(1, 4, 2, 64, 128)
    launch, _ = compute_out_launch(x, dA_cumsum, dA_cumsum, B, B, chunk_states, D=torch.zeros(4))
    yield "compute_out[bfloat16-chunk64-D_per_head-n128]", launch.kernel, launch.args


def _backward_examples():
    """The backward kernels: every input dtype, the three chunk sizes, dstate up to 256 and
    padded headdim / dstate, packed (``seq_idx``, and ``return_varlen_states``' gradient) at
    chunk 64 and 128 (never run, only compiled); float32 (its own bwd_chunk kernel, dstate in
    blocks) padded at chunk 64, packed there too, and at chunk 256, dstate 256. All with a partial
    last chunk; then bwd_chunk's three forms in whole chunks, where their loops over row blocks
    have a fixed length (``WHOLE_CHUNKS``; the split form's dx kernel keeps its run-time count):
    the training benchmark's case."""
    for dtype, chunk_size, headdim, dstate in [(torch.bfloat16, 64, 64, 64),
                                               (torch.float16, 128, 64, 256),
                                               (torch.bfloat16, 256, 64, 64),
                                               (torch.float32, 64, 40, 48),
                                               (torch.float32, 256, 64, 256)]:
        batch, nheads, ngroups, nchunks = 1, 4, 2, 2
        seqlen = (nchunks - 1) * chunk_size + 3
        x = torch.zeros(batch, seqlen, nheads, headdim, dtype=dtype)
        B = torch.zeros(batch, seqlen, ngroups, dstate, dtype=dtype)
        dA_cumsum = torch.zeros(batch, nheads, nchunks, chunk_size)
        # dy: float32 behind a gate, as given (here bfloat16) without one.
        dy = torch.zeros(x.shape, dtype=dtype if dtype == torch.bfloat16 else torch.float32)
        states = torch.zeros(batch, nheads, nchunks, headdim, dstate)
        # chunk_states and dstates in the input dtype, as the backward uses them.
        low = states.to(dtype)
        tag = f"{str(dtype).removeprefix('torch.')}-chunk{chunk_size}-p{headdim}-n{dstate}"
        # Packed sequences (the seq_idx masks compiled in) below chunk 256.
        packings = [None] + ([torch.zeros(batch, seqlen, dtype=torch.int32)]
                             if chunk_size < 256 else [])
        for seq_idx in packings:
            passing, _ = bwd_state_pass_launch(dy, B, dA_cumsum, states[:, :, 0], seq_idx,
                                               low_precision_states=True)
            # D (the skip folded into dx), and two heads a block (a whole group) for 16-bit.
            chunk, _ = bwd_chunk_launch(x, dA_cumsum, dA_cumsum, B, B.clone(), low, low, dy,
                                        torch.zeros(nheads), seq_idx,
                                        heads_per_block=1 if dtype == torch.float32 else 2)
            suffix = "" if seq_idx is None else "-packed"
            for name, launch in [("bwd_state_pass", passing), *_bwd_chunk_names(chunk)]:
                yield f"{name}[{tag}{suffix}]", launch.kernel, launch.args
        if len(packings) > 1:
            # return_varlen_states: each sequence's last-state gradient (batch 1).
            cu_seqlens = torch.tensor([0, 5, seqlen])
            dvarlen = torch.zeros(2, nheads, headdim, dstate)
            passing, _ = bwd_state_pass_launch(dy, B, dA_cumsum, states[:, :, 0], packings[1],
                                               states, low_precision_states=True)
            chunk, _ = bwd_chunk_launch(x, dA_cumsum, dA_cumsum, B, B.clone(), low, low, dy,
                                        seq_idx=packings[1], dvarlen_states=dvarlen,
                                        cu_seqlens=cu_seqlens)
            for name, launch in [("bwd_state_pass", passing), *_bwd_chunk_names(chunk)]:
                yield f"{name}[{tag}-varlen]", launch.kernel, launch.args
    for dtype, chunk_size, dstate in [(torch.bfloat16, 64, 128), (torch.bfloat16, 256, 256),
                                      (torch.float32, 256, 256)]:
        seqlen, nchunks = 2 * chunk_size, 2
        x = torch.zeros(1, seqlen, 4, 64, dtype=dtype)
        B = torch.zeros(1, seqlen, 1, dstate, dtype=dtype)
        dA_cumsum = torch.zeros(1, 4, nchunks, chunk_size)
        states = torch.zeros(1, 4, nchunks, 64, dstate, dtype=dtype)
        chunk, _ = bwd_chunk_launch(x, dA_cumsum, dA_cumsum, B, B.clone(), states, states,
                                    torch.zeros_like(x))
        tag = f"{str(dtype).removeprefix('torch.')}-chunk{chunk_size}-n{dstate}-whole"
        for name, launch in _bwd_chunk_names(chunk):
            if name != "bwd_chunk_dscores":         # the same kernel as in partial chunks
                yield f"{name}[{tag}]", launch.kernel, launch.args
    yield from _varlen_one_block_a_chunk_example()
    yield from _training_forward_examples()
    yield from _bwd_chunk_cumsum_examples()


def _bwd_chunk_cumsum_examples():
    """The backward of stage 1 at the three chunk sizes: 20 heads (a partial block of heads)
    and a partial last chunk; dt in bfloat16 with every step of its preparation (bias,
    softplus, a clamp), and in float32 with none."""
    for dtype, chunk_size, full in [(torch.bfloat16, 64, True), (torch.float32, 128, False),
                                    (torch.bfloat16, 256, True)]:
        batch, nheads, nchunks = 2, 20, 2
        dt = torch.zeros(batch, (nchunks - 1) * chunk_size + 3, nheads, dtype=dtype)
        A = torch.zeros(nheads)
        ddA_terms = torch.zeros(batch, nheads, nchunks, 3, chunk_size)
        ddt_direct = torch.zeros(batch, nheads, nchunks, chunk_size)
        options = dict(dt_bias=torch.zeros(nheads), dt_softplus=True,
                       dt_limit=(1e-3, 0.1)) if full else {}
        launch, _ = bwd_chunk_cumsum_launch(dt, A, ddA_terms, ddt_direct, **options)
        tag = f"{str(dtype).removeprefix('torch.')}-chunk{chunk_size}{'' if full else '-bare'}"
        yield f"bwd_chunk_cumsum[{tag}]", launch.kernel, launch.args


def _varlen_one_block_a_chunk_example():
    """The split form's dx kernel with the varlen terms at chunk 64 (one row block a chunk),
    dstate 256: a constant row-block count around their loop failed in tileiras 13.4 (the
    kernel's comment), and the GPU tests were the first to see it."""
    seqlen, nheads, dstate = 67, 4, 256
    x = torch.zeros(1, seqlen, nheads, 64, dtype=torch.bfloat16)
    B = torch.zeros(1, seqlen, 1, dstate, dtype=torch.bfloat16)
    dA_cumsum = torch.zeros(1, nheads, 2, 64)
    states = torch.zeros(1, nheads, 2, 64, dstate, dtype=torch.bfloat16)
    chunk, _ = bwd_chunk_launch(x, dA_cumsum, dA_cumsum, B, B.clone(), states, states,
                                torch.zeros(x.shape), torch.zeros(nheads),
                                seq_idx=torch.zeros(1, seqlen, dtype=torch.int32),
                                dvarlen_states=torch.zeros(2, nheads, 64, dstate),
                                cu_seqlens=torch.tensor([0, 5, seqlen]))
    launch = dict(_bwd_chunk_names(chunk))["bwd_chunk_dx"]
    yield "bwd_chunk_dx[bfloat16-chunk64-n256-varlen]", launch.kernel, launch.args


def _training_forward_examples():
    """The fused kernel as a training forward runs it, writing the state entering each chunk
    for the backward (``mamba2_tile.autograd.keeps_chunk_states``): C Bᵀ formed in the kernel
    (dstate 128) and read (dstate 256, in segments; float32), a partial last chunk (never run,
    only compiled)."""
    for dtype, dstate, segment_chunks in [(torch.bfloat16, 128, None), (torch.bfloat16, 256, 2),
                                          (torch.float32, 256, None)]:
        chunk_size, nheads, headdim, nchunks = 256, 4, 64, 3
        options = DEFAULT_OPTIONS.fused_state_out
        x = torch.zeros(1, (nchunks - 1) * chunk_size + 3, nheads, headdim, dtype=dtype)
        B = torch.zeros(1, x.shape[1], 1, dstate, dtype=dtype)
        dA_cumsum = torch.zeros(1, nheads, nchunks, chunk_size)
        scores = None
        if scores_given(dstate):
            _, scores = chunk_scores_launch(B, B.clone(), fused_block_m(chunk_size, options),
                                            options.tf32)
        entering = None
        if segment_chunks is not None:
            entering = torch.zeros(1, nheads, 2, headdim, dstate)
        chunk_states = torch.zeros(1, nheads, nchunks, headdim, dstate, dtype=dtype)
        fused, _ = fused_state_out_launch(x, dA_cumsum, dA_cumsum, B, B.clone(), entering,
                                          D=torch.zeros(nheads), options=options, scores=scores,
                                          segment_chunks=segment_chunks,
                                          chunk_states=chunk_states)
        tag = f"{str(dtype).removeprefix('torch.')}-chunk{chunk_size}-n{dstate}"
        segments = "" if segment_chunks is None else "-segments"
        yield f"fused_state_out[{tag}{segments}-keeps-chunk-states]", fused.kernel, fused.args


def _bwd_chunk_names(launches):
    """bwd_chunk's launches by name: one, or the split form's three
    (kernels/bwd_chunk_split.py)."""
    names = (("bwd_chunk",) if len(launches) == 1
             else ("bwd_chunk_dx", "bwd_chunk_dscores", "bwd_chunk_dB_dC"))
    return list(zip(names, launches))


def _decode_examples():
    """The decode step: mamba_ssm Mamba2's per-head broadcasts with every option (bf16, 8 groups,
    state_batch_indices), and full tensors with none (fp32, padded headdim / dstate), at the
    narrow tiles this small grid gets; and, as the benchmark's layer (per-head parameters, z, D,
    no indices, exact tiles), the wide 8 KB tiles a large batch gets: 16 rows of a float32
    state, 32 of a bfloat16 one."""
    batch, nheads = 4, 16
    for tag, dtype, state_dtype, headdim, dstate, ngroups, full, indexed, block_p in [
        ("bfloat16-per-head-p64-n128-g8", torch.bfloat16, torch.bfloat16, 64, 128, 8, True,
         True, None),
        ("float32-bare-p80-n48-g1", torch.float32, torch.float32, 80, 48, 1, False, False, None),
        ("float32-state-per-head-p64-n128-wide", torch.bfloat16, torch.float32, 64, 128, 1, True,
         False, 16),
        ("bfloat16-per-head-p64-n128-wide", torch.bfloat16, torch.bfloat16, 64, 128, 1, True,
         False, 32),
    ]:
        x = torch.zeros(batch, nheads, headdim, dtype=dtype)
        if full:
            dt = torch.zeros(batch, nheads, 1, dtype=dtype).expand(batch, nheads, headdim)
            A = torch.zeros(nheads, 1, 1).expand(nheads, headdim, dstate)
            D = dt_bias = torch.zeros(nheads, 1).expand(nheads, headdim)
            z = x
        else:
            dt, A = torch.zeros(batch, nheads, headdim), torch.zeros(nheads, headdim, dstate)
            D = z = dt_bias = None
        indices = torch.zeros(batch, dtype=torch.int32) if indexed else None
        state = torch.zeros(batch, nheads, headdim, dstate, dtype=state_dtype)
        B = torch.zeros(batch, ngroups, dstate, dtype=dtype)
        launch, _ = selective_state_update_launch(state, x, dt, A, B, B, D, z, dt_bias, full,
                                                  indices, block_p)
        yield f"selective_state_update[{tag}]", launch.kernel, launch.args
