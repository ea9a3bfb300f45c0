"""Gradient checks shared by the interpreter and GPU backward tests: an independent float64
recurrence run token by token under torch autograd, and the comparison with the kernels'
gradients of the same random loss."""

import math

import torch
import torch.nn.functional as F

from mamba2_tile.api import mamba_chunk_scan_combined
from mamba2_tile.torch_reference import mamba_chunk_scan_torch
from ssd_cases import api_kwargs, make_case

# float32 kernels against the float64 recurrence: relative to each gradient's largest entry.
FLOAT32_TOLERANCE = 2e-4
# bfloat16 inputs, the same way (the GPU tests hold the kernels to it too).
BFLOAT16_TOLERANCE = 5e-2


def recurrence(x, dt, A, B, C, D=None, z=None, dt_bias=None, initial_states=None,
               dt_softplus=False, dt_limit=(0.0, float("inf")), seq_idx=None, last_tokens=()):
    """``(y, final_states, varlen_states)`` of the SSD recurrence, one token at a time (float64,
    autograd); with ``seq_idx`` the state is reset to zero where it changes, ``initial_states``
    belonging to sequence 0 (mamba_ssm's rule). ``varlen_states`` (len(last_tokens), h, p, n):
    row 0's state after each token of ``last_tokens``."""
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
    ys, kept = [], {}
    for t in range(seqlen):
        decay = torch.exp(dt[:, t] * A)[:, :, None, None]
        if seq_idx is not None:
            previous = seq_idx[:, t - 1] if t else torch.zeros_like(seq_idx[:, 0])
            decay = decay * (seq_idx[:, t] == previous).to(decay.dtype)[:, None, None, None]
        state = decay * state + (dt[:, t, :, None] * x[:, t])[..., None] * B[:, t, :, None, :]
        ys.append(torch.einsum("bhpn,bhn->bhp", state, C[:, t]))
        if t in last_tokens:
            kept[t] = state[0]
    y = torch.stack(ys, dim=1)
    if D is not None:
        y = y + x * (D[:, None] if D.dim() == 1 else D)
    if z is not None:
        y = y * F.silu(z)
    varlen_states = torch.stack([kept[t] for t in last_tokens]) if last_tokens else None
    return y, state, varlen_states


def gradients(case, chunk_size, with_final=True, seed=1, device="cpu", seq_idx=None,
              cu_seqlens=None):
    """Gradients of one random loss, from the kernels and from the float64 recurrence;
    ``seq_idx`` (batch, seqlen) int32 (moved to ``device``), or None; with ``cu_seqlens`` the
    loss weighs each sequence's last state (``return_varlen_states``) too."""
    t = make_case(case, device)
    generator = torch.Generator().manual_seed(seed)
    out_y = torch.randn(t["x"].shape, generator=generator, dtype=torch.float64).to(device)
    out_final = torch.randn(case.batch, case.nheads, case.headdim, case.dstate,
                            generator=generator, dtype=torch.float64).to(device)

    sequences = 0 if cu_seqlens is None else len(cu_seqlens) - 1
    out_varlen = torch.randn(sequences, case.nheads, case.headdim, case.dstate,
                             generator=generator, dtype=torch.float64).to(device)

    def loss(y, final_states, varlen_states=None):
        value = (y.double() * out_y).sum()
        if varlen_states is not None:
            value = value + (varlen_states.double() * out_varlen).sum()
        return value + (final_states.double() * out_final).sum() if with_final else value

    leaves = {k: v.clone().requires_grad_() for k, v in t.items()}
    if seq_idx is not None:
        seq_idx = seq_idx.to(device)
    packing = {} if seq_idx is None else dict(seq_idx=seq_idx)
    if cu_seqlens is not None:
        packing.update(cu_seqlens=cu_seqlens.to(device), return_varlen_states=True)
    loss(*mamba_chunk_scan_combined(chunk_size=chunk_size, return_final_states=True, **leaves,
                                    **api_kwargs(case), **packing)).backward()
    ours = {k: v.grad for k, v in leaves.items()}

    ref_leaves = {k: v.detach().double().requires_grad_() for k, v in t.items()}
    last_tokens = () if cu_seqlens is None else (cu_seqlens[1:] - 1).tolist()
    loss(*recurrence(**ref_leaves, **api_kwargs(case), seq_idx=seq_idx,
                     last_tokens=last_tokens)).backward()
    return ours, {k: v.grad for k, v in ref_leaves.items()}, t


def check(case, chunk_size=64, tolerance=FLOAT32_TOLERANCE, tolerances=None, **kwargs):
    """Every input's gradient exists, has the input's dtype and shape, and lies within
    ``tolerance`` (or its entry in ``tolerances``) of the reference's largest entry (per
    input)."""
    ours, expected, inputs = gradients(case, chunk_size, **kwargs)
    for name, grad in ours.items():
        tolerance_here = (tolerances or {}).get(name, tolerance)
        assert grad is not None, name
        assert grad.dtype == inputs[name].dtype and grad.shape == inputs[name].shape, name
        scale = expected[name].abs().max().item()
        error = (grad.double() - expected[name]).abs().max().item()
        assert error <= tolerance_here * max(scale, 1e-6), (
            f"d{name}: max error {error:.3g}, {error / max(scale, 1e-30):.3g} of its largest "
            f"entry {scale:.3g}")


# bfloat16: dA's and dt's errors against float64 at most this many times the worst of dx, dB,
# dC's (tests/kernels/test_backward.py says why).
DECAY_ERROR_RATIO = 1.5


def gradient_errors(batch, seqlen, nheads, headdim, dstate, chunk_size, device="cpu",
                    skip=False, dtype=torch.bfloat16):
    """``‖g − g_ref‖ / ‖g_ref‖`` per input (x, dt, A, B, C, and D with ``skip``: a float32 skip
    per head) of inputs in a trained layer's ranges (the benchmark's: dt in (1e-3, 1e-1), A in
    (-16, -1)), ``x``, ``B``, ``C`` and the output gradient in ``dtype``, the reference the
    float64 chunked PyTorch form under autograd."""
    generator = torch.Generator().manual_seed(0)

    def uniform(low, high, *shape):
        return low + (high - low) * torch.rand(shape, generator=generator)

    b, l, h, p, n = batch, seqlen, nheads, headdim, dstate
    t = dict(x=torch.randn(b, l, h, p, generator=generator).to(dtype),
             dt=torch.exp(uniform(math.log(1e-3), math.log(1e-1), b, l, h)),
             A=-torch.exp(uniform(0.0, math.log(16.0), h)),
             B=torch.randn(b, l, 1, n, generator=generator).to(dtype),
             C=torch.randn(b, l, 1, n, generator=generator).to(dtype))
    if skip:
        t["D"] = torch.randn(h, generator=generator)
    t = {name: v.to(device) for name, v in t.items()}
    dy = torch.randn(b, l, h, p, generator=generator).to(dtype).to(device)

    def grads(forward, dy):
        leaves = [v.clone().requires_grad_() for v in t.values()]
        return torch.autograd.grad(forward(*leaves), leaves, dy)

    def kernels(x, dt, A, B, C, D=None):
        return mamba_chunk_scan_combined(x, dt, A, B, C, chunk_size, D=D)

    def reference(x, dt, A, B, C, D=None):
        return mamba_chunk_scan_torch(x, dt, A, B, C, 64, D=D, compute_dtype=torch.float64)

    ours = grads(kernels, dy)
    expected = grads(reference, dy.double())
    return {name: ((g.double() - e).norm() / e.norm()).item()
            for name, g, e in zip(t, ours, expected)}
