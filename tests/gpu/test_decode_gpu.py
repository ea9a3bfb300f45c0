"""The decode step on a GPU through real cuTile, against the float64 reference: batch 1-256,
ngroups 1 and 8, mamba_ssm Mamba2's per-head broadcasts and state_batch_indices.

Skipped unless torch sees a CUDA device and the real ``cuda.tile`` imports.
"""

import sys
from pathlib import Path

import pytest
import torch

from mamba2_tile import dispatch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kernels"))
from test_decode import make_step, run_both  # noqa: E402
from mamba2_tile.tolerances import GPU_TOLERANCES, assert_close  # noqa: E402

pytestmark = pytest.mark.skipif(not dispatch.gpu_available(),
                                reason="needs a GPU that cuTile supports and the real cuda.tile")


def on_gpu(args):
    return {k: (v.cuda() if isinstance(v, torch.Tensor) else v) for k, v in args.items()}


@pytest.mark.parametrize("batch", [1, 2, 16, 64, 256])
@pytest.mark.parametrize("ngroups", [1, 8])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_decode_gpu(batch, ngroups, dtype):
    args = make_step(batch, 32, 64, ngroups, 128, dtype, seed=batch)
    gpu = on_gpu(args)
    # make_step's broadcasts stay broadcasts on the GPU only if re-expanded there
    gpu["dt"] = args["dt"][..., :1].cuda().expand_as(args["dt"])
    gpu["A"] = args["A"][:, :1, :1].cuda().expand_as(args["A"])
    gpu["D"] = args["D"][:, :1].cuda().expand_as(args["D"])
    gpu["dt_bias"] = args["dt_bias"][:, :1].cuda().expand_as(args["dt_bias"])
    y, state, y_ref, state_ref = run_both(gpu, dt_softplus=True)
    assert_close(y, y_ref, GPU_TOLERANCES[dtype], "y")
    assert_close(state, state_ref, GPU_TOLERANCES[dtype], "state")


@pytest.mark.parametrize("ngroups", [1, 8])
def test_decode_gpu_state_batch_indices(ngroups):
    batch, slots = 48, 300
    args = on_gpu(make_step(batch, 16, 64, ngroups, 64, torch.float16, per_head=False,
                            slots=slots, seed=7))
    indices = torch.randperm(slots)[:batch].to(torch.int32)
    before = args["state"].clone()
    y, state, y_ref, state_ref = run_both(args, dt_softplus=True,
                                          state_batch_indices=indices.cuda())
    assert_close(y, y_ref, GPU_TOLERANCES[torch.float16], "y")
    assert_close(state, state_ref, GPU_TOLERANCES[torch.float16], "state")
    untouched = torch.ones(slots, dtype=torch.bool)
    untouched[indices.long()] = False
    assert torch.equal(state[untouched.cuda()], before[untouched.cuda()])


@pytest.mark.parametrize("block_p", [1, 4, 8, 16, 32, 64])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_decode_gpu_every_block_p(block_p, dtype):
    """Each tile the benchmark's --block-p can time, headdim 80 (a partial last tile) and
    dstate 48 (padded), full per-channel parameters."""
    args = on_gpu(make_step(5, 8, 80, 2, 48, dtype, per_head=False, seed=block_p))
    y, state, y_ref, state_ref = run_both(args, dt_softplus=True, block_p=block_p)
    assert_close(y, y_ref, GPU_TOLERANCES[dtype], "y")
    assert_close(state, state_ref, GPU_TOLERANCES[dtype], "state")
