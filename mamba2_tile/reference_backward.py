"""NumPy references for the gradients of Mamba-2's SSD layer (backward pass), in float64.

The layer, with the pre-processing of ``dt`` and the output gate that
:func:`mamba2_tile.api.mamba_chunk_scan_combined` applies (the conventions of ``mamba_ssm``)::

    dt_t  = clamp(softplus(dt_raw_t + dt_bias), *dt_limit)    softplus only if dt_softplus
    h_t   = exp(dt_t A) h_{t-1} + dt_t x_t ⊗ B_t               h_{-1} = initial_states
    y_t   = h_t C_t + D x_t
    out_t = y_t * silu(z_t)                                    only if z is given

Given ``dy`` (the gradient of the loss with respect to ``out``) and ``dfinal_states`` (with
respect to the state after the last token), this module returns the gradient with respect to
every input, two ways:

* ``ssd_recurrent_backward`` - the recurrence run backward in time, one token at a time;
* ``ssd_chunked_backward``   - the chunked algorithm run backward, as three stages mirroring the
  forward's: ``bwd_pass_state`` (the state gradient walks the chunks from last to first),
  ``chunk_state_backward`` and ``compute_out_backward`` (each chunk's own gradients), then
  ``chunk_cumsum_backward`` (back through the running sum and the ``dt`` pre-processing).

Conventions (as ``mamba_ssm``, and as torch autograd through the formulas above):

* softplus is ``log(1 + e^u)`` where ``u <= 20`` and ``u`` itself above (derivative 1 there);
* where the clamp to ``dt_limit`` changes ``dt``, ``dt`` gets no gradient (a value exactly on
  the limit keeps its gradient, like ``torch.clamp``);
* ``ddt_bias`` is ``ddt`` summed over batch and time, ``dA`` is summed per head, ``dD`` has
  ``D``'s shape, and ``dB``, ``dC`` sum the gradients of the heads that share a group.

Packed sequences (``seq_idx``) reset the state exactly as in :mod:`mamba2_tile.reference`; a
reset multiplies a decay by 0, so its gradient is masked the same way.
"""

from collections import namedtuple

import numpy as np

from mamba2_tile.problem import check_chunk_size
from mamba2_tile.reference import (
    _as_float64,
    _chunked,
    _per_head,
    _prepare,
    _same_as_previous,
    _skip,
    check_seq_idx,
    chunk_seq_idx,
)

SSDGradients = namedtuple(
    "SSDGradients", "dx ddt dA dB dC dD dz ddt_bias dinitial_states"
)
SSDGradients.__doc__ = """The gradients of the SSD layer, each with its input's shape (``None``
for an input not given: ``D``, ``z``, ``dt_bias``, ``initial_states``)."""

# Above this, softplus(u) is taken to be u (mamba_ssm's threshold).
_SOFTPLUS_THRESHOLD = 20.0


# --------------------------------------------------------------------------------------------
# Shared pieces: argument checks, the dt pre-processing, the gate, the group sum
# --------------------------------------------------------------------------------------------

def _prepare_backward(dy, x, dt, A, B, C, D, z, dt_bias, initial_states, dfinal_states,
                      dt_limit, seq_idx):
    dims, a = _prepare(x, dt, A, B, C, D, initial_states)
    extra = {name: _as_float64(name, value) for name, value in
             dict(dy=dy, z=z, dt_bias=dt_bias, dfinal_states=dfinal_states).items()}
    for name in ("dy", "z"):
        if extra[name] is not None and extra[name].shape != a["x"].shape:
            raise ValueError(f"{name} must have x's shape {a['x'].shape}, "
                             f"got {extra[name].shape}")
    if extra["dy"] is None:
        raise ValueError("dy (the gradient of the output) is required")
    if extra["dt_bias"] is not None and extra["dt_bias"].shape != (dims.nheads,):
        raise ValueError(f"dt_bias must have shape (nheads,) = ({dims.nheads},), "
                         f"got {extra['dt_bias'].shape}")
    state_shape = (dims.batch, dims.nheads, dims.headdim, dims.dstate)
    if extra["dfinal_states"] is not None and extra["dfinal_states"].shape != state_shape:
        raise ValueError(f"dfinal_states must have shape (batch, nheads, headdim, dstate) = "
                         f"{state_shape}, got {extra['dfinal_states'].shape}")
    if len(dt_limit) != 2 or not dt_limit[0] <= dt_limit[1]:
        raise ValueError(f"dt_limit must be a pair (low, high) with low <= high, got {dt_limit}")
    a.update(extra)
    return dims, a, check_seq_idx(seq_idx, dims.batch, dims.seqlen)


def dt_transform(dt, dt_bias=None, dt_softplus=False, dt_limit=(0.0, np.inf)):
    """The ``dt`` the layer uses, and its derivative with respect to the ``dt`` given.

    ``u = dt + dt_bias``; ``v = softplus(u)`` (or ``u``, also where ``u > 20``);
    ``dt_used = clamp(v, *dt_limit)``. The derivative is ``sigmoid(u)`` (or 1) where the clamp
    leaves ``v`` alone and 0 where it changes it. Returns ``(dt_used, ddt_used_ddt)``, both the
    shape of ``dt``; the chain rule then gives ``ddt = ddt_used * ddt_used_ddt``.
    """
    u = dt if dt_bias is None else dt + dt_bias
    v, dv_du = u, np.ones_like(u)
    if dt_softplus:
        soft = u <= _SOFTPLUS_THRESHOLD
        v = np.where(soft, np.logaddexp(0.0, u), u)
        dv_du = np.where(soft, 0.5 * (1.0 + np.tanh(0.5 * u)), 1.0)      # sigmoid, no overflow
    inside = (v >= dt_limit[0]) & (v <= dt_limit[1])
    return np.clip(v, dt_limit[0], dt_limit[1]), dv_du * inside


def _gate_backward(dout, y, z):
    """``out = y * silu(z)``: returns ``(dy, dz)`` from ``dout``; ``dz`` is None without ``z``.

    ``silu(z) = z σ(z)`` and ``silu'(z) = σ(z) (1 + z (1 - σ(z)))``.
    """
    if z is None:
        return dout, None
    sig = 0.5 * (1.0 + np.tanh(0.5 * z))
    return dout * z * sig, dout * y * sig * (1.0 + z * (1.0 - sig))


def _skip_backward(dy, x, D):
    """``y += D x``: returns ``(dx_skip, dD)`` (``dD`` with ``D``'s shape, None without it)."""
    if D is None:
        return 0.0, None
    if D.ndim == 1:
        return dy * D[:, None], np.einsum("blhp,blhp->h", dy, x)
    return dy * D, np.einsum("blhp,blhp->hp", dy, x)


def _group_sum(dBC, ngroups):
    """(b, l, h, n) -> (b, l, g, n): the heads of a group share B and C, so add their gradients."""
    b, l, h, n = dBC.shape
    return dBC.reshape(b, l, ngroups, h // ngroups, n).sum(axis=3)


def _finish_dt(ddt_used, ddt_used_ddt, dt_bias):
    """Back through :func:`dt_transform`: ``(ddt, ddt_bias)``."""
    ddt = ddt_used * ddt_used_ddt
    return ddt, None if dt_bias is None else ddt.sum(axis=(0, 1))


# --------------------------------------------------------------------------------------------
# 1. The recurrence, backward in time
# --------------------------------------------------------------------------------------------

def ssd_recurrent_backward(dy, x, dt, A, B, C, D=None, z=None, dt_bias=None,
                           initial_states=None, dt_softplus=False, dt_limit=(0.0, np.inf),
                           dfinal_states=None, seq_idx=None):
    """The gradients of the layer (module doc), token by token from the last to the first.

    Write ``a_t = exp(dt_t A)`` (0 at a ``seq_idx`` reset) and ``g_t`` for the gradient of the
    loss with respect to the state ``h_t``. The state ``h_t`` reaches the loss through ``y_t``
    and through the next state ``h_{t+1} = a_{t+1} h_t + ...``, so, starting from
    ``g_{l-1} = dy_{l-1} ⊗ C_{l-1} + dfinal_states``::

        g_{t-1} = a_t g_t + dy_{t-1} ⊗ C_{t-1}          (the transposed recurrence)

    and each token's inputs get, from ``h_t = a_t h_{t-1} + dt_t x_t ⊗ B_t`` and
    ``y_t = h_t C_t + D x_t``::

        dC_t = h_tᵀ dy_t                 dx_t = dt_t g_t B_t + D dy_t
        dB_t = dt_t g_tᵀ x_t             ddt_t = x_tᵀ g_t B_t + A a_t <g_t, h_{t-1}>
        dA  += dt_t a_t <g_t, h_{t-1}>   dinitial_states = a_0 g_0

    (``<·,·>`` sums over the state's (headdim, dstate) entries; ``dy`` here is the gradient of
    ``y``, i.e. after the gate: ``dy = dout * silu(z)``). ``ddt`` then goes back through the
    ``dt`` pre-processing. Returns :class:`SSDGradients`.
    """
    dims, a, seq_idx = _prepare_backward(dy, x, dt, A, B, C, D, z, dt_bias, initial_states,
                                         dfinal_states, dt_limit, seq_idx)
    x, A = a["x"], a["A"]
    dt, ddt_used_ddt = dt_transform(a["dt"], a["dt_bias"], dt_softplus, dt_limit)
    Bh, Ch = _per_head(a["B"], dims.nheads), _per_head(a["C"], dims.nheads)
    keep = _same_as_previous(seq_idx, dims.batch, dims.seqlen)
    decay = np.exp(dt * A) * keep[:, :, None]                            # a_t, (b, l, h)

    # Forward again, keeping every state: states[t + 1] = h_t, states[0] = initial_states.
    states = np.zeros((dims.seqlen + 1, dims.batch, dims.nheads, dims.headdim, dims.dstate))
    if a["initial_states"] is not None:
        states[0] = a["initial_states"]
    for t in range(dims.seqlen):
        inflow = (dt[:, t, :, None] * x[:, t])[..., None] * Bh[:, t, :, None, :]
        states[t + 1] = decay[:, t, :, None, None] * states[t] + inflow
    y = np.einsum("tbhpn,bthn->bthp", states[1:], Ch) + _skip(x, a["D"])

    dy, dz = _gate_backward(a["dy"], y, a["z"])
    dx, dD = _skip_backward(dy, x, a["D"])
    dx = dx + np.zeros_like(x)                  # a fresh array even without D
    dB, dC = np.zeros_like(Bh), np.zeros_like(Ch)
    ddt_used, dA = np.zeros_like(dt), np.zeros_like(A)
    g = np.zeros_like(states[0]) if a["dfinal_states"] is None else a["dfinal_states"].copy()
    for t in reversed(range(dims.seqlen)):
        g += dy[:, t, :, :, None] * Ch[:, t, :, None, :]                  # dy_t ⊗ C_t
        dC[:, t] = np.einsum("bhpn,bhp->bhn", states[t + 1], dy[:, t])
        gB = np.einsum("bhpn,bhn->bhp", g, Bh[:, t])                      # g_t B_t
        dx[:, t] += dt[:, t, :, None] * gB
        dB[:, t] = dt[:, t, :, None] * np.einsum("bhpn,bhp->bhn", g, x[:, t])
        d_decay = np.einsum("bhpn,bhpn->bh", g, states[t]) * decay[:, t]  # <g, h_{t-1}> a_t
        ddt_used[:, t] = np.einsum("bhp,bhp->bh", gB, x[:, t]) + d_decay * A
        dA += np.einsum("bh,bh->h", d_decay, dt[:, t])
        g = decay[:, t, :, None, None] * g                                # to h_{t-1}
    ddt, ddt_bias = _finish_dt(ddt_used, ddt_used_ddt, a["dt_bias"])
    return SSDGradients(
        dx=dx, ddt=ddt, dA=dA,
        dB=_group_sum(dB, dims.ngroups), dC=_group_sum(dC, dims.ngroups),
        dD=dD, dz=dz, ddt_bias=ddt_bias,
        dinitial_states=None if a["initial_states"] is None else g,
    )
