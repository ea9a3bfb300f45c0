"""Stages 2 and 3 fused (the state kept on chip), on the interpreter, against the float64
recurrence. When the public API takes this path: tests/kernels/test_plan.py."""

import pytest
import torch
from hypothesis import given, settings, strategies as st

from mamba2_tile import reference
from mamba2_tile.api import forward_with_options
from mamba2_tile.kernels import DEFAULT_OPTIONS, ForwardOptions, FusedStateOutOptions
from mamba2_tile.kernels.fused_state_out import (FLOAT32_WORKER_WARPS, MAX_LARGE_STATE_ELEMENTS,
                                                 MAX_STATE_ELEMENTS, SPLIT_MAX_STATE_ELEMENTS,
                                                 fused_block_p, fused_state_out_kernel,
                                                 fused_state_out_launch)
from mamba2_tile.kernels.chunk_cumsum import chunk_cumsum
from mamba2_tile.kernels.launching import with_hints
from mamba2_tile.kernels.sequence_parallel import sequence_parallel_states
from mamba2_tile.tolerances import TF32_TOLERANCE, TOLERANCES, assert_close
from ssd_cases import DTYPES, Case, api_kwargs, expected_output, make_case, random_cases

FUSED = DEFAULT_OPTIONS.with_switches(fuse_state_passing=True)
THREE_KERNELS = DEFAULT_OPTIONS.with_switches(fuse_state_passing=False)


def run(case, chunk_size, options=FUSED):
    t = case.tensors or make_case(case)
    return forward_with_options(chunk_size=chunk_size, options=options, return_final_states=True,
                                **t, **api_kwargs(case))


def check(case, chunk_size, options=FUSED, tol=None):
    y, final_states = run(case, chunk_size, options)
    ref_y, ref_final = expected_output(case)
    tol = tol or TOLERANCES[case.dtype]
    assert y.dtype == case.dtype and final_states.dtype == torch.float32
    assert_close(y, ref_y, tol, f"y (fused, chunk {chunk_size})")
    assert_close(final_states, ref_final, tol, f"final_states (fused, chunk {chunk_size})")
    return y, final_states


@settings(max_examples=30, deadline=None)
@given(case=random_cases(nheads=(1, 2, 4), headdims=(4, 6, 24, 72),  # 72: two tiles
                         dstates=(4, 10, 32), max_seqlen=400),
       chunk_size=st.sampled_from([64, 128, 256]))
def test_matches_recurrence(case, chunk_size):
    check(case, chunk_size)


@pytest.mark.parametrize("chunk_size", [64, 128, 256])
@pytest.mark.parametrize("seqlen", [1, 63, 64, 65, 129, 300])
def test_sequence_length_edges(seqlen, chunk_size):
    # Row blocks wholly past seqlen in the last chunk (chunk 256 holds four 64-row blocks).
    check(Case(seqlen=seqlen, nheads=2, headdim=8, dstate=8, dtype=torch.float32,
               initial_states=True, D="channel", z=True, seed=seqlen), chunk_size)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def test_agrees_with_the_three_kernels(dtype):
    case = Case(batch=2, seqlen=333, nheads=4, ngroups=2, headdim=24, dstate=10, dtype=dtype,
                D="head", z=True, dt_bias=True, dt_softplus=True, initial_states=True, seed=5)
    y, final_states = run(case, 128)
    y3, final3 = run(case, 128, THREE_KERNELS)
    # Same roundings, different summation order: within the dtype's tolerance of each other.
    assert_close(y, y3, TOLERANCES[dtype], "fused vs three kernels, y")
    assert_close(final_states, final3, TOLERANCES[dtype], "fused vs three kernels, final")


@pytest.mark.parametrize("name, switches", [
    ("latency+occupancy", dict(latency=4, occupancy=3)),
    ("small_tiles", dict(block_p=8, block_m=16)),
])
def test_switches_keep_the_results(name, switches):
    case = Case(seqlen=150, nheads=4, headdim=12, ngroups=2, dstate=10, dtype=torch.bfloat16,
                D="channel", z=True, initial_states=True, seed=9)
    check(case, 64, FUSED.with_switches(**switches))


def test_tf32_for_float32():
    case = Case(seqlen=150, nheads=2, headdim=16, dstate=16, dtype=torch.float32, seed=10)
    check(case, 64, FUSED.with_switches(tf32=True), tol=TF32_TOLERANCE)


@pytest.mark.parametrize("chunk_size", [64, 256])     # 256: four row blocks hand the state over
def test_long_sequence_and_extreme_decay(chunk_size):
    check(Case(seqlen=3000, nheads=1, headdim=8, dstate=8, initial_states=True, seed=12), chunk_size)
    check(Case(seqlen=300, A_range=(-80.0, -20.0), initial_states=True, seed=14), chunk_size)
    check(Case(seqlen=300, dt_range=(5.0, 30.0), dt_softplus=True, seed=13), chunk_size)


@pytest.mark.parametrize("block_m", [32, 128])
def test_any_row_block_size_gives_the_same_output(block_m):
    # 128: one row block per chunk; 32: four, handing the state over inside each chunk.
    case = Case(seqlen=300, nheads=2, headdim=16, dstate=16, dtype=torch.float32,
                initial_states=True, D="head", z=True, seed=15)
    check(case, 128, FUSED.with_switches(block_m=block_m))


def test_the_state_tile_fits_in_registers():
    assert fused_block_p(64, 128) == 64 and fused_block_p(64, 256) == 64
    assert fused_block_p(80, 64) == 64 and fused_block_p(6, 10) == 8
    assert fused_block_p(64, 128, block_p=16) == 16
    for dstate in (16, 64, 128):
        assert fused_block_p(64, dstate) * dstate <= MAX_STATE_ELEMENTS
    for dstate in (256, 512):                  # C Bᵀ precomputed: one block an SM, a larger state
        assert fused_block_p(64, dstate) * dstate <= MAX_LARGE_STATE_ELEMENTS


def test_float32_inputs_get_their_own_tiles_and_hints():
    # Float32 operand tiles take twice the registers: 8 worker warps at one block an SM, TF32 or
    # not; split TF32 operands (kernels/split_tf32.py) double them again, hence smaller tiles.
    from mamba2_tile.kernels.plan import plan
    tf32 = DEFAULT_OPTIONS.with_switches(tf32=True)
    for dstate, split_tiles, tf32_tiles in [(64, (32, 64), (64, 64)), (128, (32, 32), (64, 64)),
                                            (256, (64, 16), (64, 64))]:
        options = plan(8, 8192, 64, 64, 1, dstate, 256, torch.float32, 132).fused_state_out
        assert (options.block_m, options.block_p) == split_tiles
        assert options.block_p * dstate <= SPLIT_MAX_STATE_ELEMENTS
        options = plan(8, 8192, 64, 64, 1, dstate, 256, torch.float32, 132, tf32).fused_state_out
        assert (options.block_m, options.block_p) == tf32_tiles
    options = plan(8, 8192, 64, 64, 1, 128, 256, torch.bfloat16, 132).fused_state_out
    assert (options.block_m, options.block_p) == (64, 64)
    x = torch.zeros(1, 70, 2, 64)
    B = torch.zeros(1, 70, 1, 128)
    dA = torch.zeros(1, 2, 2, 64)
    for options in [FusedStateOutOptions(occupancy=2), FusedStateOutOptions(occupancy=2, tf32=True)]:
        launch, _ = fused_state_out_launch(x, dA, dA, B, B, options=options)
        assert launch.kernel is with_hints(fused_state_out_kernel, None, FLOAT32_WORKER_WARPS)
    launch, _ = fused_state_out_launch(x.bfloat16(), dA, dA, B.bfloat16(), B.bfloat16(),
                                       options=FusedStateOutOptions(occupancy=2))
    assert launch.kernel is with_hints(fused_state_out_kernel, 2, None)
    # Worker warps the options set (the autotuner searches 4 and 8) win over the rule.
    for dtype, warps in [(torch.bfloat16, 8), (torch.float32, 4)]:
        launch, _ = fused_state_out_launch(x.to(dtype), dA, dA, B.to(dtype), B.to(dtype),
                                           options=FusedStateOutOptions(worker_warps=warps))
        assert launch.kernel is with_hints(fused_state_out_kernel, None, warps)


def test_launch_can_be_inspected_without_running():
    x = torch.zeros(2, 300, 3, 80, dtype=torch.bfloat16)
    B = torch.zeros(2, 300, 1, 24, dtype=torch.bfloat16)
    dA_cumsum = torch.zeros(2, 3, 2, 256)
    launch, (y, final_states) = fused_state_out_launch(x, dA_cumsum, dA_cumsum, B, B,
                                                       options=FusedStateOutOptions(latency=3))
    assert launch.grid == (2 * 3, 2, 1)     # (batch x heads, headdim tiles, one segment)
    assert y.shape == x.shape and y.dtype == x.dtype
    assert final_states.shape == (2, 3, 80, 24) and final_states.dtype == torch.float32
    args = launch.named_args()
    assert args["y"] is y and args["final_states"] is final_states
    assert args["segment_blocks"] == 8      # the whole sequence: 2 chunks of 4 row blocks
    assert {k: args[k] for k in ("CHUNK_SIZE", "BLOCK_M", "BLOCK_P", "DSTATE", "LATENCY",
                                 "TF32", "HAS_INITIAL_STATES", "HAS_D", "HAS_Z")} == dict(
        CHUNK_SIZE=256, BLOCK_M=64, BLOCK_P=64, DSTATE=32, LATENCY=3, TF32=False,
        HAS_INITIAL_STATES=False, HAS_D=False, HAS_Z=False)


def test_bad_path_option_is_refused():
    with pytest.raises(ValueError, match="fuse_state_passing"):
        ForwardOptions(fuse_state_passing="yes")


# The state entering each chunk, written for the backward (mamba2_tile.autograd.
# keeps_chunk_states), against the float64 reference's stage 2: one segment and several, a
# partial last chunk, packed rows, initial states, padded dstate (24 -> 32), headdim in two
# tiles, chunk 128 (two row blocks a chunk, the state handed on inside it).
@pytest.mark.parametrize("dtype, chunk_size, segment_chunks, packed", [
    (torch.float32, 64, None, False), (torch.float32, 64, 2, True),
    (torch.bfloat16, 128, None, True), (torch.bfloat16, 64, 3, False)])
def test_chunk_states_written_for_the_backward(dtype, chunk_size, segment_chunks, packed):
    t = make_case(Case(batch=2, seqlen=330, nheads=2, headdim=80, dstate=24, initial_states=True,
                       dtype=dtype, seed=31))
    seq_idx = None
    if packed:
        seq_idx = torch.tensor([0] * 100 + [1] * 130 + [2] * 100, dtype=torch.int32)
        seq_idx = seq_idx.expand(2, -1).contiguous()
    dA_cumsum, dt = chunk_cumsum(t["dt"], t["A"], chunk_size)
    kept = torch.full((2, 2, dA_cumsum.shape[2], 80, 24), float("nan"), dtype=dtype)
    sequence_parallel_states(t["x"], dt, dA_cumsum, t["B"], t["C"], t["initial_states"],
                             segment_chunks=segment_chunks or dA_cumsum.shape[2],
                             seq_idx=seq_idx, chunk_states=kept)
    expected, _ = reference.fwd_pass_state(
        t["x"].double().numpy(), t["B"].double().numpy(), dt.double().numpy(),
        dA_cumsum.double().numpy(), t["initial_states"].double().numpy(),
        None if seq_idx is None else seq_idx.numpy())
    assert_close(kept, torch.from_numpy(expected), TOLERANCES[dtype], "chunk_states")
