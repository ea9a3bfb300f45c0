"""The plan (which path, which tiles) as a function of the sizes and the SM count, on the CPU: what
any GPU would run, without one; and the API running what the plan says."""

import pytest
import torch

from mamba2_tile import api
from mamba2_tile.kernels import (DEFAULT_OPTIONS, ForwardOptions, FusedStateOutOptions,
                                 chunk_cumsum_launch, compute_out_launch, fused_state_out_launch,
                                 fwd_pass_state_launch)
from mamba2_tile.kernels import plan as planning
from mamba2_tile.kernels.plan import REFERENCE_SM_COUNT, fused_fills_gpu, plan, plan_for
from ssd_cases import Case, api_kwargs, make_case

H200 = 132


def sizes(batch=8, seqlen=4096, nheads=64, headdim=64, ngroups=1, dstate=128, chunk_size=64,
          dtype=torch.bfloat16):
    return dict(batch=batch, seqlen=seqlen, nheads=nheads, headdim=headdim, ngroups=ngroups,
                dstate=dstate, chunk_size=chunk_size, dtype=dtype)


@pytest.mark.parametrize("shape, sm_count, fills", [
    (sizes(), H200, True),                                    # the benchmark's b8 h64: 512 blocks
    (sizes(batch=1, nheads=8, seqlen=16384), H200, False),    # 8 blocks on 132 SMs
    (sizes(batch=1, nheads=80, seqlen=32768, chunk_size=256), H200, False),   # batch-1 prefill
    (sizes(batch=1, nheads=132), H200, True),                 # exactly one block per SM
    (sizes(batch=1, nheads=131), H200, False),                # one short
    (sizes(batch=1, nheads=66, dstate=256), H200, False),     # dstate 256: one 64-wide tile too
    (sizes(batch=2, nheads=64), 100, True),                   # 128 blocks fill a smaller GPU
    (sizes(batch=2, nheads=64), 170, False),                  # ... not a larger one
])
def test_the_segments_follow_the_blocks_per_sm(shape, sm_count, fills):
    # The fused kernel either way; cut into segments when its blocks cannot fill the GPU.
    planned = plan(**shape, sm_count=sm_count)
    assert planned.fuse_state_passing is True
    assert (planned.segment_chunks is None) is fills
    assert fused_fills_gpu(shape["batch"], shape["nheads"], shape["headdim"], shape["dstate"],
                           sm_count) is fills


@pytest.mark.parametrize("forced", [True, False])
def test_a_path_the_caller_sets_is_obeyed(forced):
    base = DEFAULT_OPTIONS.with_switches(fuse_state_passing=forced)
    for shape in (sizes(), sizes(batch=1, nheads=2)):
        assert plan(**shape, sm_count=H200, base=base).fuse_state_passing is forced
    assert plan(**sizes(), sm_count=H200, base=ForwardOptions()).fuse_state_passing is False


def test_the_fused_tile_decides_how_many_blocks():
    # A narrower headdim tile doubles the blocks: 66 heads x 2 tiles fill 132 SMs.
    base = DEFAULT_OPTIONS.with_switches(block_p=32)
    assert plan(**sizes(batch=1, nheads=66), sm_count=H200, base=base).segment_chunks is None
    assert plan(**sizes(batch=1, nheads=66), sm_count=H200).segment_chunks is not None


def inputs(shape):
    x = torch.zeros(shape["batch"], shape["seqlen"], shape["nheads"], shape["headdim"],
                    dtype=shape["dtype"])
    B = torch.zeros(shape["batch"], shape["seqlen"], shape["ngroups"], shape["dstate"],
                    dtype=shape["dtype"])
    nchunks = -(-shape["seqlen"] // shape["chunk_size"])
    dA = torch.zeros(shape["batch"], shape["nheads"], nchunks, shape["chunk_size"])
    return x, B, dA


@pytest.mark.parametrize("shape", [
    sizes(batch=1, seqlen=300, nheads=4, headdim=80, dstate=48, chunk_size=256),
    sizes(batch=1, seqlen=100, nheads=3, headdim=12, dstate=10, chunk_size=64),
    sizes(batch=1, seqlen=100, nheads=40, headdim=64, dstate=256, chunk_size=128),
])
@pytest.mark.parametrize("fused", [True, False])
def test_planned_tiles_are_the_launchers_own(shape, fused):
    # Launching with the planned options or with the launchers' own rules: the same launch.
    base = DEFAULT_OPTIONS.with_switches(fuse_state_passing=fused)
    planned = plan(**shape, sm_count=H200, base=base)
    x, B, dA = inputs(shape)
    dt = torch.zeros(x.shape[:3])
    pairs = [(chunk_cumsum_launch(dt, dt[0, 0], shape["chunk_size"],
                                  options=planned.chunk_cumsum)[0],
              chunk_cumsum_launch(dt, dt[0, 0], shape["chunk_size"],
                                  options=base.chunk_cumsum)[0])]
    if fused:
        pairs.append((fused_state_out_launch(x, dA, dA, B, B, options=planned.fused_state_out)[0],
                      fused_state_out_launch(x, dA, dA, B, B, options=base.fused_state_out)[0]))
        assert planned.fused_state_out.block_m and planned.fused_state_out.block_p
    else:
        states = fwd_pass_state_launch(x, B, dA, dA)[1][0]
        pairs.append((fwd_pass_state_launch(x, B, dA, dA, options=planned.fwd_pass_state)[0],
                      fwd_pass_state_launch(x, B, dA, dA, options=base.fwd_pass_state)[0]))
        pairs.append((compute_out_launch(x, dA, dA, B, B, states, options=planned.compute_out)[0],
                      compute_out_launch(x, dA, dA, B, B, states, options=base.compute_out)[0]))
        assert None not in (planned.fwd_pass_state.block_p, planned.fwd_pass_state.block_n,
                            planned.compute_out.block_m, planned.compute_out.block_p)
    assert planned.chunk_cumsum.block_h is not None
    for from_plan, from_launcher in pairs:
        assert from_plan.grid == from_launcher.grid
        assert from_plan.kernel is from_launcher.kernel
        assert [a for a in from_plan.args if not isinstance(a, torch.Tensor)] == \
            [a for a in from_launcher.args if not isinstance(a, torch.Tensor)]


def test_tiles_the_caller_sets_are_kept():
    base = ForwardOptions.uniform(block_m=128, block_p=16, block_n=32, block_h=4)
    planned = plan(**sizes(chunk_size=64), sm_count=H200, base=base)
    assert planned.compute_out.block_m == 64                 # at most the chunk
    assert planned.compute_out.block_p == 16 and planned.fwd_pass_state.block_n == 32
    assert planned.chunk_cumsum.block_h == 4


def test_planning_twice_changes_nothing():
    for shape in (sizes(), sizes(batch=1, nheads=4), sizes(dtype=torch.float32)):
        for base in (DEFAULT_OPTIONS, ForwardOptions.uniform(tf32=True, latency=3)):
            once = plan(**shape, sm_count=H200, base=base)
            assert plan(**shape, sm_count=H200, base=once) == once


def test_tf32_only_for_float32_inputs():
    base = ForwardOptions.uniform(tf32=True)
    assert plan(**sizes(dtype=torch.float32), sm_count=H200, base=base).compute_out.tf32
    assert not plan(**sizes(dtype=torch.bfloat16), sm_count=H200, base=base).compute_out.tf32


def test_cpu_tensors_are_planned_for_the_reference_gpu():
    shape = sizes(batch=1, seqlen=1000, nheads=REFERENCE_SM_COUNT)
    x, B, _ = inputs(shape)
    assert plan_for(x, B, 64) == plan(**shape, sm_count=REFERENCE_SM_COUNT)
    assert plan_for(x, B, 64).segment_chunks is None
    assert plan_for(x[:, :, 1:], B, 64).segment_chunks is not None


@pytest.mark.parametrize("sm_count, path", [(1, "fused_state_out"),
                                            (REFERENCE_SM_COUNT, "sequence_parallel_states")])
def test_the_api_runs_the_planned_path(monkeypatch, sm_count, path):
    # Two heads: one fused block per head on a one-SM GPU, segments on an H200; the interpreter
    # follows.
    monkeypatch.setattr(planning, "REFERENCE_SM_COUNT", sm_count)
    ran = []
    for name in ("fused_state_out", "sequence_parallel_states", "fwd_pass_state"):
        kernel = getattr(api, name)
        monkeypatch.setattr(api, name, lambda *a, kernel=kernel, name=name, **k:
                            ran.append(name) or kernel(*a, **k))
    case = Case(seqlen=100, nheads=2, headdim=8, dstate=8, dtype=torch.bfloat16, seed=1)
    t = make_case(case)
    api.mamba_chunk_scan_combined(chunk_size=64, **t, **api_kwargs(case))
    assert ran == [path]


def test_hints_the_caller_sets_are_kept():
    base = ForwardOptions(fused_state_out=FusedStateOutOptions(occupancy=3),
                          fuse_state_passing=None)
    planned = plan(**sizes(), sm_count=H200, base=base)
    assert planned.fused_state_out.occupancy == 3 and planned.fuse_state_passing
