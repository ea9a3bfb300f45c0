"""NumPy reference (float64) for the decode step, ``selective_state_update``.

One token per sequence, with the shapes of mamba_ssm's
``mamba_ssm.ops.triton.selective_state_update.selective_state_update`` (its documented
semantics, read there; this is our own code)::

    state (b, h, p, n)   x (b, h, p)   dt (b, h, p)   A (h, p, n)   B, C (b, g, n)
    D (h, p)   z (b, h, p)   dt_bias (h, p)   state_batch_indices (b,) integers

    dt    = softplus(dt + dt_bias)            (bias and softplus optional)
    state = exp(dt A) * state + (dt x) ⊗ B    (head h reads group h // (h / g))
    y     = state C + D x,   then  y *= silu(z)

``state_batch_indices[i]`` names the row of ``state`` that batch entry ``i`` reads and
updates (a cache of more slots than the batch). This reference returns
``(y, new_state)`` and leaves its inputs untouched; the kernel updates ``state`` in place.
"""

import numpy as np


def _f64(name, value, shape):
    if value is None:
        return None
    if not isinstance(value, np.ndarray) or value.dtype.kind != "f":
        raise TypeError(f"{name} must be a floating NumPy array, got {type(value).__name__}")
    if value.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {value.shape}")
    return value.astype(np.float64)


def selective_state_update(state, x, dt, A, B, C, D=None, z=None, dt_bias=None,
                           dt_softplus=False, state_batch_indices=None):
    """One decode step; returns ``y`` (b, h, p) and the updated state (rows of ``state``
    not named by ``state_batch_indices`` are copied unchanged)."""
    if not isinstance(x, np.ndarray) or x.ndim != 3:
        raise ValueError("x must be a (batch, nheads, headdim) NumPy array")
    batch, nheads, headdim = x.shape
    if not isinstance(B, np.ndarray) or B.ndim != 3 or B.shape[0] != batch:
        raise ValueError(f"B must be (batch={batch}, ngroups, dstate)")
    ngroups, dstate = B.shape[1:]
    if ngroups == 0 or nheads % ngroups:
        raise ValueError(f"nheads ({nheads}) must be a multiple of ngroups ({ngroups})")
    x = _f64("x", x, (batch, nheads, headdim))
    dt = _f64("dt", dt, (batch, nheads, headdim))
    A = _f64("A", A, (nheads, headdim, dstate))
    B = _f64("B", B, (batch, ngroups, dstate))
    C = _f64("C", C, (batch, ngroups, dstate))
    D = _f64("D", D, (nheads, headdim))
    z = _f64("z", z, (batch, nheads, headdim))
    dt_bias = _f64("dt_bias", dt_bias, (nheads, headdim))
    if not isinstance(state, np.ndarray) or state.ndim != 4 or state.shape[1:] != (
            nheads, headdim, dstate):
        raise ValueError(f"state must be (slots, {nheads}, {headdim}, {dstate})")
    if state_batch_indices is None:
        if state.shape[0] != batch:
            raise ValueError(f"state must have batch={batch} rows without state_batch_indices")
        rows = np.arange(batch)
    else:
        rows = np.asarray(state_batch_indices)
        if rows.shape != (batch,) or rows.dtype.kind not in "iu":
            raise ValueError(f"state_batch_indices must be ({batch},) integers")
        if rows.min() < 0 or rows.max() >= state.shape[0] or len(set(rows.tolist())) != batch:
            raise ValueError("state_batch_indices must be distinct rows of state")
    new_state = state.astype(np.float64)
    if dt_bias is not None:
        dt = dt + dt_bias
    if dt_softplus:
        dt = np.logaddexp(0.0, dt)
    per_head = nheads // ngroups
    Bh = np.repeat(B, per_head, axis=1)                              # (b, h, n)
    Ch = np.repeat(C, per_head, axis=1)
    h = new_state[rows]
    h = np.exp(dt[..., None] * A) * h + (dt * x)[..., None] * Bh[:, :, None, :]
    new_state[rows] = h
    y = np.einsum("bhpn,bhn->bhp", h, Ch)
    if D is not None:
        y = y + D * x
    if z is not None:
        y = y * z / (1.0 + np.exp(-z))
    return y, new_state
