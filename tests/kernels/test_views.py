"""Strided views in, nothing copied: the views a Mamba-2 layer hands over (torch.split of one
fused projection, stride-0 broadcasts of per-head values) give what contiguous inputs give, and
the kernels receive the very views (same memory, same strides), on every path."""

import pytest
import torch

from mamba2_tile import dispatch
from mamba2_tile.api import forward_with_options, mamba_chunk_scan_combined
from mamba2_tile.kernels import DEFAULT_OPTIONS
from ssd_cases import Case, make_case

PATHS = {
    "three-kernel": DEFAULT_OPTIONS.with_switches(fuse_state_passing=False),
    "fused": DEFAULT_OPTIONS.with_switches(fuse_state_passing=True, segment_chunks=None),
    "segmented": DEFAULT_OPTIONS.with_switches(fuse_state_passing=True, segment_chunks=1),
}
INPUTS = ("x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_states")


def projection_views(t):
    """The inputs of ``t`` rebuilt as views of one fused projection, as mamba_ssm's ``Mamba2``
    makes them: ``zxbcdt`` (b, l, z | x | B | C | dt), then ``torch.split`` along the last
    dimension and per-head reshapes. Also ``A``, ``D`` and ``dt_bias`` as stride-0 views of one
    value each, and ``initial_states`` broadcast over the batch."""
    x, B, z = t["x"], t["B"], t["z"]
    batch, seqlen, nheads, headdim = x.shape
    ngroups, dstate = B.shape[2:]
    zxbcdt = torch.cat([z.flatten(2), x.flatten(2), B.flatten(2), t["C"].flatten(2),
                        t["dt"].to(x.dtype)], dim=-1)
    dim, bc = nheads * headdim, ngroups * dstate
    z_v, x_v, B_v, C_v, dt_v = torch.split(zxbcdt, [dim, dim, bc, bc, nheads], dim=-1)
    views = dict(
        x=x_v.unflatten(-1, (nheads, headdim)), z=z_v.unflatten(-1, (nheads, headdim)),
        B=B_v.unflatten(-1, (ngroups, dstate)), C=C_v.unflatten(-1, (ngroups, dstate)),
        dt=dt_v,
        A=t["A"][:1].expand(nheads), D=t["D"][:1].expand(nheads),
        dt_bias=t["dt_bias"][:1].expand(nheads),
        initial_states=t["initial_states"][:1].expand(batch, -1, -1, -1),
    )
    assert not any(views[name].is_contiguous() for name in ("x", "z", "B", "C", "dt", "A"))
    return views


def contiguous_copies(views):
    return {name: value.contiguous() for name, value in views.items()}


def launches(monkeypatch):
    """Record every kernel launch: ``[(kernel, {parameter: argument})]``."""
    seen = []
    launch = dispatch.launch

    def recording(grid, kernel, args):
        seen.append((kernel, dict(zip(dispatch.parameter_names(kernel), args))))
        return launch(grid, kernel, args)

    monkeypatch.setattr(dispatch, "launch", recording)
    return seen


def the_same(a, b):
    return (a.data_ptr() == b.data_ptr() and a.stride() == b.stride() and a.shape == b.shape
            and a.dtype == b.dtype)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_split_projection_runs_uncopied(monkeypatch, path, dtype):
    case = Case(batch=2, seqlen=150, nheads=4, headdim=8, ngroups=2, dstate=8, dtype=dtype,
                D="head", z=True, dt_bias=True, initial_states=True, dt_softplus=True, seed=1)
    views = projection_views(make_case(case))
    expected = forward_with_options(**contiguous_copies(views), chunk_size=64,
                                    options=PATHS[path], dt_softplus=True,
                                    return_final_states=True)
    seen = launches(monkeypatch)
    got = forward_with_options(**views, chunk_size=64, options=PATHS[path], dt_softplus=True,
                               return_final_states=True)
    assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])
    assert got[0].is_contiguous()
    # Every kernel got the caller's views themselves: same memory, same strides.
    handed = {name for _, args in seen for name in args if name in INPUTS}
    assert {"x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_states"} <= handed
    for kernel, args in seen:
        kernel_name = dispatch.kernel_function(kernel).__name__
        for name, value in args.items():
            # Past stage 1, dt is stage 1's output; the fused kernel's initial_states is the
            # state entering each segment: the caller's view unsqueezed, or the segments'.
            own = not ((name == "dt" and kernel_name != "chunk_cumsum_kernel") or
                       (name == "initial_states" and kernel_name == "fused_state_out_kernel"))
            if name in INPUTS and own:
                assert the_same(value, views[name]), f"{name} copied for {kernel_name}"


@pytest.mark.parametrize("path", PATHS)
def test_other_layouts(path):
    """Heads before seqlen in memory, and a non-contiguous last dimension (mamba_ssm copies
    that one): taken as they are, same results."""
    case = Case(batch=1, seqlen=100, nheads=2, headdim=8, ngroups=2, dstate=8, z=True, seed=2)
    t = make_case(case)
    strided = dict(t)
    strided["x"] = t["x"].transpose(1, 2).contiguous().transpose(1, 2)      # (b, h, l, p) memory
    strided["B"] = t["B"].transpose(-1, -2).contiguous().transpose(-1, -2)  # dstate not last
    strided["z"] = torch.stack([t["z"], t["z"]], dim=-1)[..., 0]            # stride 2 in headdim
    assert not any(strided[name].is_contiguous() for name in ("x", "B", "z"))
    want = forward_with_options(**t, chunk_size=64, options=PATHS[path])
    got = forward_with_options(**strided, chunk_size=64, options=PATHS[path])
    assert torch.equal(got, want)


def test_broadcast_bfloat16_parameters_on_the_interpreter():
    """Stride-0 bfloat16 inputs: the interpreter's float32 working copy is never written back
    into them (it cannot be: their elements share memory)."""
    case = Case(batch=2, seqlen=40, nheads=4, headdim=4, dstate=4, dtype=torch.bfloat16,
                D="head", initial_states=True, seed=3)
    t = make_case(case)
    broadcast = dict(t, A=t["A"][:1].bfloat16().expand(4), D=t["D"][:1].bfloat16().expand(4),
                     initial_states=t["initial_states"][:1].bfloat16().expand(2, -1, -1, -1))
    y, final_states = mamba_chunk_scan_combined(**broadcast, chunk_size=64,
                                                return_final_states=True)
    want = mamba_chunk_scan_combined(**contiguous_copies(broadcast), chunk_size=64,
                                     return_final_states=True)
    assert torch.equal(y, want[0]) and torch.equal(final_states, want[1])


def test_packed_views():
    """seq_idx and cu_seqlens may be views too (a row of a larger index tensor)."""
    case = Case(batch=1, seqlen=30, nheads=2, headdim=4, dstate=4, seed=4)
    t = make_case(case)
    index = torch.tensor([[0] * 10 + [1] * 20, [0] * 30], dtype=torch.int32)
    seq_idx = index.t().contiguous().t()[:1]                  # strides (1, 2)
    cu_seqlens = torch.tensor([0, 0, 10, 0, 30, 0], dtype=torch.int32)[::2]
    assert not seq_idx.is_contiguous() and not cu_seqlens.is_contiguous()
    got = mamba_chunk_scan_combined(**t, chunk_size=64, seq_idx=seq_idx, cu_seqlens=cu_seqlens,
                                    return_varlen_states=True)
    want = mamba_chunk_scan_combined(**t, chunk_size=64, seq_idx=seq_idx.contiguous(),
                                     cu_seqlens=cu_seqlens.contiguous(),
                                     return_varlen_states=True)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
