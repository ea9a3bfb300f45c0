"""The cuTile kernels on a real GPU: against the float64 references and mamba_ssm's Triton kernels.

Skipped unless torch sees a CUDA device and the real ``cuda.tile`` imports. The cases mirror
``tests/kernels`` (whose helpers ``ssd_cases`` / ``tolerances`` this file reuses), plus
realistic Mamba-2 sizes that would be too slow on the interpreter. The comparison with
``mamba_ssm.ops.triton.ssd_combined.mamba_chunk_scan_combined`` is skipped when mamba_ssm is not
installed. The API's cases run on every path (the three kernels; stage 1 + the fused stages
2-3; the same cut into segments run in parallel), forced with ``ForwardOptions``; and the
default rule's paths over dstate 16-256, every chunk size, batch 1 and 8.
"""

import dataclasses
import importlib
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "kernels"))  # ssd_cases

from ssd_cases import Case, api_kwargs, expected_output, make_case, prepared_dt  # noqa: E402
from mamba2_tile.tolerances import GPU_TOLERANCES, assert_close, relative_errors, to_numpy  # noqa: E402

from mamba2_tile import dispatch, reference  # noqa: E402
from mamba2_tile.api import forward_with_options, mamba_chunk_scan_combined  # noqa: E402
from mamba2_tile.kernels import (DEFAULT_OPTIONS, chunk_cumsum, compute_out,  # noqa: E402
                                 fwd_pass_state)
from mamba2_tile.kernels.fused_state_out import scores_given  # noqa: E402
from mamba2_tile.kernels.plan import plan_for  # noqa: E402
from mamba2_tile.torch_reference import mamba_chunk_scan_torch  # noqa: E402

pytestmark = pytest.mark.skipif(not dispatch.gpu_available(),
                                reason="needs a GPU that cuTile supports and the real cuda.tile")

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
CHUNK_SIZES = [64, 128, 256]


# The API's paths, forced: three kernels; the fused kernel, one block per head; the fused kernel
# with the sequence cut into segments of two chunks (sequence parallel).
PATHS = {"three_kernel": dict(fuse_state_passing=False),
         "fused": dict(fuse_state_passing=True),
         "sequence_parallel": dict(fuse_state_passing=True, segment_chunks=2)}


def run_gpu(case, chunk_size, path=None):
    """The public API; or, with ``path``, forced onto the three-kernel or the fused path."""
    t = case.tensors or make_case(case, device="cuda")
    if path is None:
        y, final_states = mamba_chunk_scan_combined(
            chunk_size=chunk_size, return_final_states=True, **t, **api_kwargs(case))
    else:
        options = DEFAULT_OPTIONS.with_switches(**PATHS[path])
        y, final_states = forward_with_options(chunk_size=chunk_size, options=options,
                                               return_final_states=True, **t,
                                               **api_kwargs(case))
    torch.cuda.synchronize()
    assert dispatch.last_backend() == dispatch.CUTILE, "the kernels did not run on cuTile"
    assert y.is_cuda and y.dtype == case.dtype and final_states.dtype == torch.float32
    return y, final_states


def check_gpu(case, chunk_size, path=None):
    y, final_states = run_gpu(case, chunk_size, path)
    ref_y, ref_final = expected_output(case)
    tol = GPU_TOLERANCES[case.dtype]
    assert_close(y, ref_y, tol, f"y (chunk {chunk_size}, {case.dtype})")
    assert_close(final_states, ref_final, tol, f"final_states (chunk {chunk_size}, {case.dtype})")


# --- the interpreter suite's cases, on the GPU -----------------------------------------------

@pytest.mark.parametrize("chunk_size", CHUNK_SIZES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("options", ["bare", "all"])
@pytest.mark.parametrize("path", PATHS)
def test_small_cases(dtype, chunk_size, options, path):
    full = options == "all"
    for seed, seqlen in enumerate([1, chunk_size - 1, chunk_size, chunk_size + 1, 301]):
        check_gpu(Case(batch=2, seqlen=seqlen, nheads=4, ngroups=2, headdim=6, dstate=10,
                       dtype=dtype, D="channel" if full else None, z=full, dt_bias=full,
                       initial_states=full, dt_softplus=full, seed=seed), chunk_size, path)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_chunk_sizes_agree(dtype):
    case = Case(seqlen=1000, nheads=4, headdim=32, dstate=16, dtype=dtype, D="head",
                initial_states=True, seed=11)
    make_case(case, device="cuda")
    y64, f64 = run_gpu(case, 64)
    for chunk_size in (128, 256):
        y, f = run_gpu(case, chunk_size)
        assert_close(y, y64, 2 * GPU_TOLERANCES[dtype], f"y, chunk {chunk_size} vs 64")
        assert_close(f, f64, 2 * GPU_TOLERANCES[dtype], f"final_states, chunk {chunk_size} vs 64")


@pytest.mark.parametrize("name,case", [
    ("long", Case(seqlen=5000, nheads=2, headdim=16, dstate=16, initial_states=True, seed=12)),
    ("large_dt", Case(seqlen=300, dt_range=(5.0, 30.0), dt_softplus=True, seed=13)),
    ("very_negative_A", Case(seqlen=300, A_range=(-80.0, -20.0), initial_states=True, seed=14)),
    ("dt_limit", Case(seqlen=300, dt_range=(-4.0, 4.0), dt_softplus=True, dt_bias=True,
                      dt_limit=(0.05, 0.3), seed=15)),
    ("ngroups_between", Case(seqlen=200, nheads=8, ngroups=4, seed=16)),
    ("odd_sizes", Case(seqlen=333, headdim=72, dstate=66, D="channel", z=True, seed=17)),
])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("path", PATHS)
def test_edge_cases(name, case, dtype, path):
    check_gpu(dataclasses.replace(case, dtype=dtype, tensors={}), 128, path)


# --- the default rule's paths over the state sizes and chunk sizes models use ----------------

@pytest.mark.parametrize("batch", [1, 8])
@pytest.mark.parametrize("chunk_size", CHUNK_SIZES)
@pytest.mark.parametrize("dstate", [16, 64, 128, 256])
def test_default_paths_every_dstate(dstate, chunk_size, batch):
    # seqlen 1000: no multiple of any chunk size. 24 heads: batch 1 is too few blocks for the
    # GPU (the sequence-parallel path), batch 8 fills it (one fused block per head); dstate 256
    # reads C Bᵀ precomputed. Checked against the float64 chunked PyTorch reference.
    case = Case(batch=batch, seqlen=1000, nheads=24, headdim=64, dstate=dstate,
                dtype=torch.bfloat16, D="channel", z=True, initial_states=True, seed=dstate)
    t = make_case(case, device="cuda")
    assert (plan_for(t["x"], t["B"], chunk_size).segment_chunks is not None) == (batch == 1)
    assert scores_given(dstate) == (dstate == 256)
    y, final_states = run_gpu(case, chunk_size)
    # The same (bf16-valued) inputs as float64, so that y comes back in float64 too.
    ref_y, ref_final = mamba_chunk_scan_torch(
        t["x"].double(), t["dt"], t["A"], t["B"].double(), t["C"].double(), chunk_size,
        D=t["D"], z=t["z"].double(), initial_states=t["initial_states"],
        return_final_states=True, compute_dtype=torch.float64)
    tol = GPU_TOLERANCES[case.dtype]
    assert_close(y, ref_y, tol, f"y (dstate {dstate}, chunk {chunk_size}, batch {batch})")
    assert_close(final_states, ref_final, tol, f"final_states (dstate {dstate})")


# --- each stage against its reference, at a realistic Mamba-2 size --------------------------

REALISTIC = dict(batch=2, seqlen=1000, nheads=8, headdim=64, ngroups=1, dstate=128)


@pytest.mark.parametrize("chunk_size", CHUNK_SIZES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_stages_at_realistic_size(dtype, chunk_size):
    case = Case(**REALISTIC, dtype=dtype, D="head", z=True, dt_bias=True, dt_softplus=True,
                initial_states=True, dt_range=(-4.0, -1.0), seed=18)
    t = make_case(case, device="cuda")
    tol = GPU_TOLERANCES[dtype]
    n = {k: to_numpy(v) for k, v in t.items()}

    dA_cumsum, dt_chunks = chunk_cumsum(t["dt"], t["A"], chunk_size, dt_bias=t["dt_bias"],
                                        dt_softplus=True)
    ref_dA, ref_dt = reference.chunk_cumsum(n["dt"], n["A"], chunk_size, dt_bias=n["dt_bias"],
                                            dt_softplus=True)
    assert_close(dt_chunks, ref_dt, 1e-5, "dt")
    assert_close(dA_cumsum, ref_dA, 1e-5, "dA_cumsum")

    chunk_states, final_states = fwd_pass_state(t["x"], t["B"], dt_chunks, dA_cumsum,
                                                t["initial_states"])
    ref_states, ref_final = reference.fwd_pass_state(n["x"], n["B"], ref_dt, ref_dA,
                                                     n["initial_states"])
    assert_close(chunk_states, ref_states, tol, "chunk_states")
    assert_close(final_states, ref_final, tol, "final_states")

    y = compute_out(t["x"], dt_chunks, dA_cumsum, t["B"], t["C"], chunk_states, D=t["D"],
                    z=t["z"])
    ref_y = reference.compute_out(n["x"], ref_dt, ref_dA, n["B"], n["C"], ref_states,
                                  D=n["D"], z=n["z"])
    assert_close(y, ref_y, tol, "y")


# --- against mamba_ssm's Triton kernels --------------------------------------------------------

def _triton_combined():
    try:
        module = importlib.import_module("mamba_ssm.ops.triton.ssd_combined")
    except Exception as err:   # not installed, or installed without a working Triton
        pytest.skip(f"mamba_ssm's Triton kernels are not importable: {err}")
    return module.mamba_chunk_scan_combined


@pytest.mark.parametrize("chunk_size", CHUNK_SIZES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("path", PATHS)
def test_matches_mamba_ssm(dtype, chunk_size, path):
    triton_combined = _triton_combined()
    case = Case(**REALISTIC, dtype=dtype, D="channel", z=True, dt_bias=True, dt_softplus=True,
                initial_states=True, dt_range=(-4.0, -1.0), seed=19)
    t = make_case(case, device="cuda")
    ours, ours_final = run_gpu(case, chunk_size, path)
    theirs, theirs_final = triton_combined(chunk_size=chunk_size, return_final_states=True,
                                           **t, **api_kwargs(case))
    dt = prepared_dt(t["dt"], t["dt_bias"], case.dt_softplus, case.dt_limit)   # float64
    ref_y, ref_final = reference.ssd_chunked(
        to_numpy(t["x"]), dt, to_numpy(t["A"]),
        to_numpy(t["B"]), to_numpy(t["C"]), chunk_size, D=to_numpy(t["D"]),
        initial_states=to_numpy(t["initial_states"]), return_final_states=True)
    z = to_numpy(t["z"])
    ref_y = ref_y * z / (1.0 + np.exp(-z))
    # Ours must meet our bound; mamba_ssm is the yardstick, not held to it (its float32 path
    # runs tl.dot in TF32: on this case a few float32 outputs are ~1.5e-2 off). And ours must be
    # at least about as accurate as mamba_ssm, output by output.
    tol = GPU_TOLERANCES[dtype]
    for what, mine, triton, ref in (("y", ours, theirs, ref_y),
                                    ("final_states", ours_final, theirs_final, ref_final)):
        assert_close(mine, ref, tol, f"mamba2_tile {what} vs float64")
        ours_error = relative_errors(mine, ref).max()
        theirs_error = relative_errors(triton.float(), ref).max()
        print(f"{dtype} chunk {chunk_size} {what}: relative error mamba2_tile {ours_error:.3g}, "
              f"mamba_ssm {theirs_error:.3g}")
        assert ours_error <= max(tol / 2, 2 * theirs_error), (
            f"{what}: mamba2_tile is off by {ours_error:.3g} relative, mamba_ssm by "
            f"{theirs_error:.3g}")
