"""Strided views on a real GPU: a Mamba-2 layer's split projection and stride-0 per-head values
run uncopied through cuTile (the kernels specialise on the strides), with the results of
contiguous inputs, on every path. Skipped without a CUDA GPU and the real ``cuda.tile``."""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "kernels"))  # ssd_cases

from ssd_cases import Case, expected_output, make_case  # noqa: E402
from test_views import (INPUTS, PATHS, contiguous_copies, launches,  # noqa: E402
                        projection_views, the_same)
from mamba2_tile import dispatch  # noqa: E402
from mamba2_tile.api import forward_with_options  # noqa: E402
from mamba2_tile.tolerances import GPU_TOLERANCES, assert_close  # noqa: E402

pytestmark = pytest.mark.skipif(not dispatch.gpu_available(),
                                reason="needs a GPU that cuTile supports and the real cuda.tile")


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dstate", [64, 256])
def test_split_projection_on_the_gpu(monkeypatch, path, dstate):
    case = Case(batch=2, seqlen=1000, nheads=16, headdim=64, ngroups=2, dstate=dstate,
                dtype=torch.bfloat16, D="head", z=True, dt_bias=True, initial_states=True,
                dt_softplus=True, seed=dstate)
    t = make_case(case, device="cuda")
    views = projection_views(t)
    seen = launches(monkeypatch)
    y, final_states = forward_with_options(**views, chunk_size=128, options=PATHS[path],
                                           dt_softplus=True, return_final_states=True)
    torch.cuda.synchronize()
    assert dispatch.last_backend() == dispatch.CUTILE
    for kernel, args in seen:
        name_of = dispatch.kernel_function(kernel).__name__
        if name_of == "chunk_cumsum_kernel":
            for name in ("dt", "A", "dt_bias"):
                assert the_same(args[name], views[name]), f"{name} copied"
        if name_of in ("fused_state_out_kernel", "compute_out_kernel"):
            for name in ("x", "B", "C", "z", "D"):
                assert the_same(args[name], views[name]), f"{name} copied for {name_of}"
    want = forward_with_options(**contiguous_copies(views), chunk_size=128, options=PATHS[path],
                                dt_softplus=True, return_final_states=True)
    tol = GPU_TOLERANCES[torch.bfloat16]
    assert_close(y, want[0].double().cpu().numpy(), tol, f"y against contiguous ({path})")
    assert_close(final_states, want[1].double().cpu().numpy(), tol, f"final ({path})")
    # And against the float64 recurrence, on the values the views hold.
    case.tensors = {name: views[name] for name in INPUTS}
    case.tensors["dt"] = views["dt"].float()
    ref_y, ref_final = expected_output(case)
    assert_close(y, ref_y, tol, f"y against the reference ({path})")
    assert_close(final_states, ref_final, tol, f"final against the reference ({path})")
