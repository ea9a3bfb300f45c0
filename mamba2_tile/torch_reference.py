"""The chunked SSD algorithm in plain PyTorch: a baseline to time and a float64 reference on GPU.

Same arguments and return convention as :func:`mamba2_tile.api.mamba_chunk_scan_combined`, the
same three stages as :mod:`mamba2_tile.reference`, written with whole-tensor PyTorch ops so it runs
wherever the tensors live. The benchmark uses it twice: in float32 as the "what you would write
without custom kernels" baseline, and in float64 as the ground truth for problems too large for
the NumPy references.
"""

import torch
import torch.nn.functional as F


def _chunked(t, chunk_size):
    """(b, l, ...) -> (b, c, s, ...), zero-padded along seqlen."""
    pad = -t.shape[1] % chunk_size
    if pad:
        t = torch.cat([t, t.new_zeros(t.shape[0], pad, *t.shape[2:])], dim=1)
    return t.reshape(t.shape[0], -1, chunk_size, *t.shape[2:])


def mamba_chunk_scan_torch(x, dt, A, B, C, chunk_size, D=None, z=None, dt_bias=None,
                           initial_states=None, dt_softplus=False,
                           dt_limit=(0.0, float("inf")), return_final_states=False,
                           compute_dtype=torch.float32):
    """``y`` (and the final state) computed in ``compute_dtype``; returned in ``x.dtype``."""
    out_dtype = x.dtype
    x, dt, A, B, C = (t.to(compute_dtype) for t in (x, dt, A, B, C))
    seqlen, nheads = x.shape[1], x.shape[2]
    heads_per_group = nheads // B.shape[2]
    B = B.repeat_interleave(heads_per_group, dim=2)
    C = C.repeat_interleave(heads_per_group, dim=2)

    # Stage 1: dt transform and the in-chunk running sum of dt * A.
    if dt_bias is not None:
        dt = dt + dt_bias.to(compute_dtype)
    if dt_softplus:
        dt = torch.where(dt <= 20.0, F.softplus(dt), dt)
    dt = dt.clamp(dt_limit[0], dt_limit[1])
    dt = _chunked(dt, chunk_size).permute(0, 3, 1, 2)                       # (b, h, c, s)
    dA_cumsum = torch.cumsum(dt * A[None, :, None, None], dim=-1)

    xc, Bc, Cc = (_chunked(t, chunk_size) for t in (x, B, C))               # (b, c, s, h, .)

    # Stage 2: each chunk's own contribution, then the sequential walk over chunks.
    weight = torch.exp(dA_cumsum[..., -1:] - dA_cumsum) * dt                # (b, h, c, s)
    weighted_x = weight.permute(0, 2, 3, 1)[..., None] * xc                 # (b, c, s, h, p)
    local = torch.einsum("bcshp,bcshn->bchpn", weighted_x, Bc)
    state = (torch.zeros_like(local[:, 0]) if initial_states is None
             else initial_states.to(compute_dtype))
    chunk_decay = torch.exp(dA_cumsum[..., -1])                             # (b, h, c)
    entering = []
    for c in range(local.shape[1]):
        entering.append(state)
        state = chunk_decay[:, :, c, None, None] * state + local[:, c]
    chunk_states = torch.stack(entering, dim=1)                             # (b, c, h, p, n)

    # Stage 3: inter-chunk (entering state) plus intra-chunk (masked quadratic form).
    y = torch.einsum("bcihn,bchpn->bcihp", Cc, chunk_states)
    y = y * torch.exp(dA_cumsum).permute(0, 2, 3, 1)[..., None]
    s = chunk_size
    causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
    diff = dA_cumsum[..., :, None] - dA_cumsum[..., None, :]
    decay = torch.exp(diff.masked_fill(~causal, float("-inf")))            # (b, h, c, s, s)
    scores = torch.einsum("bcihn,bcjhn->bhcij", Cc, Bc) * decay * dt[..., None, :]
    y = y + torch.einsum("bhcij,bcjhp->bcihp", scores, xc)
    y = y.reshape(x.shape[0], -1, nheads, x.shape[3])[:, :seqlen]
    if D is not None:
        D = D.to(compute_dtype)
        y = y + x * (D[:, None] if D.dim() == 1 else D)
    if z is not None:
        y = y * F.silu(z.to(compute_dtype))
    y = y.to(out_dtype)
    return (y, state) if return_final_states else y
