"""Gradients of mamba_chunk_scan_combined (backward kernels on the interpreter) against torch
autograd through an independent float64 recurrence, token by token."""

import pytest
import torch
import torch.nn.functional as F

from mamba2_tile.api import mamba_chunk_scan_combined
from ssd_cases import Case, api_kwargs, make_case

NAMES = ("x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_states")
# float32 kernels against the float64 recurrence: relative to each gradient's largest entry.
FLOAT32_TOLERANCE = 2e-4


def recurrence(x, dt, A, B, C, D=None, z=None, dt_bias=None, initial_states=None,
               dt_softplus=False, dt_limit=(0.0, float("inf"))):
    """``(y, final_states)`` of the SSD recurrence, one token at a time (float64, autograd)."""
    batch, seqlen, nheads, headdim = x.shape
    heads_per_group = nheads // B.shape[2]
    B = B.repeat_interleave(heads_per_group, dim=2)
    C = C.repeat_interleave(heads_per_group, dim=2)
    if dt_bias is not None:
        dt = dt + dt_bias
    if dt_softplus:
        dt = torch.where(dt <= 20.0, F.softplus(dt), dt)
    dt = dt.clamp(*dt_limit)
    state = (x.new_zeros(batch, nheads, headdim, B.shape[3]) if initial_states is None
             else initial_states)
    ys = []
    for t in range(seqlen):
        decay = torch.exp(dt[:, t] * A)[:, :, None, None]
        state = decay * state + (dt[:, t, :, None] * x[:, t])[..., None] * B[:, t, :, None, :]
        ys.append(torch.einsum("bhpn,bhn->bhp", state, C[:, t]))
    y = torch.stack(ys, dim=1)
    if D is not None:
        y = y + x * (D[:, None] if D.dim() == 1 else D)
    if z is not None:
        y = y * F.silu(z)
    return y, state


def gradients(case, chunk_size, with_final=True, seed=1):
    """Gradients of one random loss, from the kernels and from the float64 recurrence."""
    t = make_case(case)
    generator = torch.Generator().manual_seed(seed)
    out_y = torch.randn(t["x"].shape, generator=generator, dtype=torch.float64)
    out_final = torch.randn(case.batch, case.nheads, case.headdim, case.dstate,
                            generator=generator, dtype=torch.float64)

    def loss(y, final_states):
        value = (y.double() * out_y).sum()
        return value + (final_states.double() * out_final).sum() if with_final else value

    leaves = {k: v.clone().requires_grad_() for k, v in t.items()}
    y, final_states = mamba_chunk_scan_combined(chunk_size=chunk_size, return_final_states=True,
                                                **leaves, **api_kwargs(case))
    loss(y, final_states).backward()
    ours = {k: v.grad for k, v in leaves.items()}

    ref_leaves = {k: v.detach().double().requires_grad_() for k, v in t.items()}
    loss(*recurrence(**ref_leaves, **api_kwargs(case))).backward()
    return ours, {k: v.grad for k, v in ref_leaves.items()}, t


def check(case, chunk_size=64, tolerance=FLOAT32_TOLERANCE, **kwargs):
    ours, expected, inputs = gradients(case, chunk_size, **kwargs)
    for name, grad in ours.items():
        assert grad is not None, name
        assert grad.dtype == inputs[name].dtype and grad.shape == inputs[name].shape, name
        scale = expected[name].abs().max().item()
        error = (grad.double() - expected[name]).abs().max().item()
        assert error <= tolerance * max(scale, 1e-6), (
            f"d{name}: max error {error:.3g}, {error / max(scale, 1e-30):.3g} of its largest "
            f"entry {scale:.3g}")


def test_bare_partial_chunk():
    check(Case(seqlen=70, nheads=2, headdim=8, dstate=8))


def test_everything_two_chunks():
    check(Case(batch=2, seqlen=100, nheads=4, headdim=4, ngroups=2, dstate=16, D="channel",
               z=True, dt_bias=True, initial_states=True, dt_softplus=True,
               dt_limit=(0.02, 0.15), seed=4))


def test_head_skip_gate_group_of_two_long_chunk():
    # chunk 128: two row blocks of 64 inside a chunk, the off-diagonal pieces.
    check(Case(seqlen=150, nheads=2, headdim=16, ngroups=1, dstate=8, D="head", z=True,
               dt_bias=True, dt_softplus=True, seed=5), chunk_size=128)


def test_without_final_states_gradient():
    check(Case(seqlen=70, nheads=2, headdim=4, dstate=8, initial_states=True, seed=6),
          with_final=False)


def test_only_some_inputs_require_grad():
    case = Case(seqlen=70, D="head", z=True, seed=7)
    t = make_case(case)
    x = t["x"].clone().requires_grad_()
    y = mamba_chunk_scan_combined(**{**t, "x": x}, chunk_size=64)
    assert y.grad_fn is not None
    y.sum().backward()
    assert x.grad is not None and x.grad.shape == x.shape
    assert all(not v.requires_grad and v.grad is None for v in t.values())


def test_no_grad_path_unchanged():
    case = Case(seqlen=70, seed=8)
    t = make_case(case)
    y = mamba_chunk_scan_combined(**t, chunk_size=64)
    assert y.grad_fn is None and not y.requires_grad
    with torch.no_grad():
        x = t["x"].clone().requires_grad_()
        assert mamba_chunk_scan_combined(**{**t, "x": x}, chunk_size=64).grad_fn is None


@pytest.mark.parametrize("argument", ["seq_idx", "return_varlen_states"])
def test_unsupported_features_refused(argument):
    t = make_case(Case(seqlen=70, seed=9))
    x = t["x"].clone().requires_grad_()
    extra = (dict(seq_idx=torch.zeros(1, 70, dtype=torch.int32)) if argument == "seq_idx" else
             dict(cu_seqlens=torch.tensor([0, 70]), return_varlen_states=True))
    with pytest.raises(NotImplementedError, match=argument):
        mamba_chunk_scan_combined(**{**t, "x": x}, chunk_size=64, **extra)


def test_bfloat16_smoke():
    case = Case(seqlen=70, nheads=2, headdim=8, dstate=8, dtype=torch.bfloat16, D="head",
                z=True, initial_states=True, seed=10)
    # bfloat16 inputs, float32 kernels: the error is the inputs' rounding in the forward.
    check(case, tolerance=5e-2)
