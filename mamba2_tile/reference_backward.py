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

How the gradients are derived (the recipe both forms follow). The loss depends on the inputs
only through ``out`` and ``final_states``, and its gradients with respect to those are given;
every other gradient is the chain rule applied to one line of the forward at a time, last line
first:

1. the gate ``out = y * silu(z)`` is elementwise: ``dy = dout * silu(z)``,
   ``dz = dout * y * silu'(z)``;
2. the skip ``y += D x`` sends ``D dy`` to ``dx`` and ``dy * x`` (summed over what ``D`` does
   not index) to ``dD``;
3. a product ``u = v w`` sends ``du * w`` to ``v`` and ``v * du`` to ``w``; an outer product
   ``x ⊗ B`` becomes a matrix-vector product in reverse (``dx = G B``, ``dB = Gᵀ x``);
4. a linear map in time runs backward in time: ``h_t`` is used by ``y_t`` and by ``h_{t+1}``,
   so its gradient gathers from both, i.e. from the *future* (the state gradient flows from the
   last token to the first);
5. ``d exp(dt A) / d dt = A exp(dt A)`` and ``/ d A = dt exp(dt A)``: the decay gives both
   ``ddt`` and ``dA`` from the same number, ``<g, h_{t-1}> exp(dt A)``;
6. a value used at several places (``A`` by every token, ``B`` by the heads of a group,
   ``dt_bias`` by every token) gets the sum of the gradients of all its uses.

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
    compute_out,
    fwd_pass_state,
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


# --------------------------------------------------------------------------------------------
# 2. The chunked algorithm, backward: the three stages in reverse
# --------------------------------------------------------------------------------------------
#
# Notation inside chunk c (positions i, j = 0 .. s-1): dA_i = dA_cumsum[..., c, i], the running
# sum of dt A in the chunk, and Δ = dA_{s-1}; S_c = chunk_states[..., c], the state entering the
# chunk. The forward stages computed
#
#     S_{c+1} = exp(Δ) S_c + sum_j exp(Δ - dA_j) dt_j x_j ⊗ B_j                (fwd_pass_state)
#     y_i     = exp(dA_i) S_c C_i + sum_{j<=i} exp(dA_i - dA_j) (C_i·B_j) dt_j x_j  (compute_out)
#
# With seq_idx, every exp(·) above is multiplied by the 0/1 mask the forward uses (see
# reference.fwd_pass_state and reference.compute_out); a masked factor m exp(u) has derivative
# m exp(u), so the backward below is the same with the masks applied to the same factors.


def _packing_masks(seq_idx, batch, seqlen, chunk_size):
    """The forward's 0/1 masks, (b, 1, c, ...) so they broadcast over heads.

    ``inflow`` (b,1,c,s): token j counts in the jump (its sequence is the chunk's last one);
    ``carry`` (b,1,c): the entering state survives the jump; ``inter`` (b,1,c,s): token i reads
    the entering state; ``intra`` (b,1,c,s,s): tokens i, j share a sequence.
    """
    if seq_idx is None:
        seq_idx = np.zeros((batch, seqlen), dtype=np.int64)
    seq_chunks, seq_prev = chunk_seq_idx(seq_idx, chunk_size)           # (b, c, s), (b, c)
    seq_last = seq_chunks[:, :, -1]
    return dict(
        inflow=(seq_chunks == seq_last[..., None])[:, None],
        carry=(seq_prev == seq_last)[:, None],
        inter=(seq_chunks == seq_prev[..., None])[:, None],
        intra=(seq_chunks[..., :, None] == seq_chunks[..., None, :])[:, None],
    )


def bwd_pass_state(dy, C, dA_cumsum, dfinal_states=None, seq_idx=None):
    """Stage 2 backward: walk the chunks from last to first, accumulating the state gradient.

    ``S_c`` reaches the loss through the outputs of chunk c (``y_i = exp(dA_i) S_c C_i + ...``)
    and through the next state (``S_{c+1} = exp(Δ) S_c + ...``). So the gradient with respect
    to the state entering chunk c is the transposed jump formula::

        dS_c = exp(Δ) dS_{c+1} + sum_i exp(dA_i) dy_i ⊗ C_i        dS_nchunks = dfinal_states

    (the jump's matrix ``exp(Δ)`` is a scalar per head, so transposing only reverses the walk).
    ``dy`` (b, l, h, p) is the gradient of ``y`` before the gate. Returns
    ``(dchunk_states, dinitial_states)``: (b, h, c, p, n), the gradient of each entering state,
    and that of the state entering chunk 0, (b, h, p, n).
    """
    batch, nheads, nchunks, chunk_size = dA_cumsum.shape
    Cc = _chunked(_per_head(np.asarray(C, dtype=np.float64), nheads), chunk_size)
    dyc = _chunked(np.asarray(dy, dtype=np.float64), chunk_size)        # (b, c, s, h, p)
    masks = _packing_masks(seq_idx, batch, dy.shape[1], chunk_size)
    read = np.exp(dA_cumsum) * masks["inter"]                           # (b, h, c, s)
    carry = np.exp(dA_cumsum[..., -1]) * masks["carry"]                 # (b, h, c)
    from_outputs = np.einsum("bhcs,bcshp,bcshn->bhcpn", read, dyc, Cc, optimize=True)
    dstates = np.zeros((batch, nheads, dy.shape[3], Cc.shape[-1]))
    if dfinal_states is not None:
        dstates = np.asarray(dfinal_states, dtype=np.float64).copy()
    dchunk_states = np.empty_like(from_outputs)
    for c in reversed(range(nchunks)):
        dstates = carry[:, :, c, None, None] * dstates + from_outputs[:, :, c]
        dchunk_states[:, :, c] = dstates
    return dchunk_states, dstates


def chunk_state_backward(x, B, dt, dA_cumsum, chunk_states, dchunk_states, dfinal_states=None,
                         seq_idx=None):
    """The jump formula's gradients, per chunk, given the gradient of the state leaving it.

    With ``G = dS_{c+1}`` (``dfinal_states`` after the last chunk) and
    ``w_j = exp(Δ - dA_j) dt_j``, ``S_{c+1} = exp(Δ) S_c + sum_j w_j x_j ⊗ B_j`` gives::

        dx_j = w_j G B_j          dB_j = w_j Gᵀ x_j          q_j = x_jᵀ G B_j
        ddt_j = exp(Δ - dA_j) q_j
        ddA_cumsum_j -= w_j q_j    ddA_cumsum_{s-1} += sum_j w_j q_j + exp(Δ) <G, S_c>

    (the last term through ``Δ = dA_{s-1}``: ``Δ`` appears in the decay of every token and of
    the entering state). Returns ``(dx, dB, ddt, ddA_cumsum)`` in chunk layout: (b, c, s, h, p),
    (b, c, s, h, n) per head, (b, h, c, s), (b, h, c, s).
    """
    batch, nheads, nchunks, chunk_size = dA_cumsum.shape
    xc = _chunked(np.asarray(x, dtype=np.float64), chunk_size)
    Bc = _chunked(_per_head(np.asarray(B, dtype=np.float64), nheads), chunk_size)
    masks = _packing_masks(seq_idx, batch, x.shape[1], chunk_size)
    leaving = np.zeros_like(dchunk_states[:, :, :1])
    if dfinal_states is not None:
        leaving = np.asarray(dfinal_states, dtype=np.float64)[:, :, None]
    G = np.concatenate([dchunk_states[:, :, 1:], leaving], axis=2)      # (b, h, c, p, n)
    decay_to_end = np.exp(dA_cumsum[..., -1:] - dA_cumsum) * masks["inflow"]
    w = decay_to_end * dt                                               # (b, h, c, s)
    GB = np.einsum("bhcpn,bcshn->bcshp", G, Bc, optimize=True)          # G B_j
    dx = w.transpose(0, 2, 3, 1)[..., None] * GB
    dB = w.transpose(0, 2, 3, 1)[..., None] * np.einsum("bhcpn,bcshp->bcshn", G, xc,
                                                         optimize=True)
    q = np.einsum("bcshp,bcshp->bhcs", GB, xc)
    ddt = decay_to_end * q
    ddA_cumsum = -w * q
    carry = np.exp(dA_cumsum[..., -1]) * masks["carry"]
    ddA_cumsum[..., -1] += (w * q).sum(-1) + carry * np.einsum("bhcpn,bhcpn->bhc", G,
                                                               chunk_states)
    return dx, dB, ddt, ddA_cumsum


def compute_out_backward(dy, x, dt, dA_cumsum, B, C, chunk_states, seq_idx=None):
    """Stage 3 backward: each chunk's gradients through its outputs (``D`` and gate apart).

    Inter-chunk, from ``y_i += exp(dA_i) S_c C_i``::

        dC_i += exp(dA_i) S_cᵀ dy_i          ddA_cumsum_i += exp(dA_i) dy_i·(S_c C_i)

    (``dS_c`` is :func:`bwd_pass_state`'s). Intra-chunk, from ``y_i += sum_{j<=i} K_ij
    (C_i·B_j) dt_j x_j`` with ``K_ij = exp(dA_i - dA_j)`` (0 above the diagonal), write
    ``M_ij = K_ij (C_i·B_j)`` and ``P_ij = M_ij dt_j (dy_i·x_j)``::

        dx_j = dt_j sum_i M_ij dy_i          ddt_j = sum_i M_ij (dy_i·x_j)
        dC_i = sum_j K_ij dt_j (dy_i·x_j) B_j          dB_j = sum_i K_ij dt_j (dy_i·x_j) C_i
        ddA_cumsum_i += sum_j P_ij           ddA_cumsum_j -= sum_i P_ij

    — the transpose of the forward's ``(L ∘ C Bᵀ)``, with ``dy·xᵀ`` in place of ``C Bᵀ`` for
    ``dB`` and ``dC``. Returns ``(dx, dB, dC, ddt, ddA_cumsum)`` in chunk layout as
    :func:`chunk_state_backward`.
    """
    batch, nheads, nchunks, chunk_size = dA_cumsum.shape
    xc = _chunked(np.asarray(x, dtype=np.float64), chunk_size)
    dyc = _chunked(np.asarray(dy, dtype=np.float64), chunk_size)
    Bc = _chunked(_per_head(np.asarray(B, dtype=np.float64), nheads), chunk_size)
    Cc = _chunked(_per_head(np.asarray(C, dtype=np.float64), nheads), chunk_size)
    masks = _packing_masks(seq_idx, batch, x.shape[1], chunk_size)

    read = np.exp(dA_cumsum) * masks["inter"]                           # (b, h, c, s)
    S_dy = np.einsum("bhcpn,bcihp->bcihn", chunk_states, dyc, optimize=True)   # S_cᵀ dy_i
    dC = read.transpose(0, 2, 3, 1)[..., None] * S_dy
    ddA_cumsum = read * np.einsum("bcihn,bcihn->bhci", S_dy, Cc)

    causal = np.tril(np.ones((chunk_size, chunk_size), dtype=bool))
    K = np.exp(np.where(causal, dA_cumsum[..., :, None] - dA_cumsum[..., None, :], -np.inf))
    K = K * masks["intra"]                                              # (b, h, c, i, j)
    M = K * np.einsum("bcihn,bcjhn->bhcij", Cc, Bc, optimize=True)
    dy_x = np.einsum("bcihp,bcjhp->bhcij", dyc, xc, optimize=True)      # dy_i·x_j
    dx = dt.transpose(0, 2, 3, 1)[..., None] * np.einsum("bhcij,bcihp->bcjhp", M, dyc,
                                                          optimize=True)
    ddt = np.einsum("bhcij,bhcij->bhcj", M, dy_x)
    dscores = K * dt[..., None, :] * dy_x                               # d(C_i·B_j)
    dC += np.einsum("bhcij,bcjhn->bcihn", dscores, Bc, optimize=True)
    dB = np.einsum("bhcij,bcihn->bcjhn", dscores, Cc, optimize=True)
    P = M * dt[..., None, :] * dy_x
    ddA_cumsum += P.sum(-1) - P.sum(-2)
    return dx, dB, dC, ddt, ddA_cumsum


def chunk_cumsum_backward(ddA_cumsum, ddt_chunks, dt, A, seqlen):
    """Stage 1 backward: through ``dA_cumsum_i = sum_{k<=i} dt_k A`` inside each chunk.

    A running sum's transpose is the running sum from the other end::

        d(dt_k A) = sum_{i>=k} ddA_cumsum_i          ddt_k += A d(dt_k A)
        dA = sum over batch, chunks, positions of dt_k d(dt_k A)

    ``ddt_chunks`` are the gradients ``dt`` received directly (as the weight of its token),
    ``dt`` (b, h, c, s) the pre-processed ``dt`` of the forward. Returns ``(ddt, dA)``: ``ddt``
    (b, l, h) with respect to the pre-processed ``dt`` (padding dropped), ``dA`` (h,).
    """
    d_dtA = np.flip(np.cumsum(np.flip(ddA_cumsum, -1), -1), -1)
    ddt = ddt_chunks + d_dtA * A[None, :, None, None]
    dA = np.einsum("bhcs,bhcs->h", d_dtA, dt)
    ddt = ddt.transpose(0, 2, 3, 1).reshape(ddt.shape[0], -1, ddt.shape[1])[:, :seqlen]
    return ddt, dA


def _unchunk(t, seqlen):
    """(b, c, s, ...) -> (b, l, ...), padding dropped."""
    return t.reshape(t.shape[0], -1, *t.shape[3:])[:, :seqlen]


def ssd_chunked_backward(dy, x, dt, A, B, C, chunk_size, D=None, z=None, dt_bias=None,
                         initial_states=None, dt_softplus=False, dt_limit=(0.0, np.inf),
                         dfinal_states=None, seq_idx=None):
    """The gradients of the layer (module doc) by the chunked algorithm, run in reverse.

    1. recompute the forward's ``dt``, ``dA_cumsum``, ``chunk_states`` and ``y`` before the
       gate (whether a kernel should store or recompute them is issue 13's question, not this
       reference's); back through the gate and ``D``;
    2. :func:`bwd_pass_state` - the state gradient, from the last chunk to the first;
    3. per chunk, :func:`compute_out_backward` (through the outputs) and
       :func:`chunk_state_backward` (through the jump to the next chunk);
    4. :func:`chunk_cumsum_backward`, then back through the ``dt`` pre-processing.

    ``seqlen`` need not be a multiple of ``chunk_size``. Returns :class:`SSDGradients`, equal
    to :func:`ssd_recurrent_backward`'s up to rounding.
    """
    check_chunk_size(chunk_size)
    dims, a, seq_idx = _prepare_backward(dy, x, dt, A, B, C, D, z, dt_bias, initial_states,
                                         dfinal_states, dt_limit, seq_idx)
    chunk_size = min(chunk_size, dims.seqlen)      # as reference.ssd_chunked: no chunk² waste
    x, A, B, C = a["x"], a["A"], a["B"], a["C"]
    dt_used, ddt_used_ddt = dt_transform(a["dt"], a["dt_bias"], dt_softplus, dt_limit)
    # Not reference.chunk_cumsum: it would clamp again to its default limit (0, inf).
    dt_chunks = _chunked(dt_used, chunk_size).transpose(0, 3, 1, 2)      # (b, h, c, s)
    dA_cumsum = np.cumsum(dt_chunks * A[None, :, None, None], axis=-1)
    chunk_states, _ = fwd_pass_state(x, B, dt_chunks, dA_cumsum, a["initial_states"], seq_idx)
    y = compute_out(x, dt_chunks, dA_cumsum, B, C, chunk_states, a["D"], seq_idx=seq_idx)

    dy, dz = _gate_backward(a["dy"], y, a["z"])
    dx_skip, dD = _skip_backward(dy, x, a["D"])
    dchunk_states, dinitial_states = bwd_pass_state(dy, C, dA_cumsum, a["dfinal_states"],
                                                    seq_idx)
    dx_out, dB_out, dC, ddt_out, ddA_out = compute_out_backward(
        dy, x, dt_chunks, dA_cumsum, B, C, chunk_states, seq_idx)
    dx_jump, dB_jump, ddt_jump, ddA_jump = chunk_state_backward(
        x, B, dt_chunks, dA_cumsum, chunk_states, dchunk_states, a["dfinal_states"], seq_idx)
    ddt_used, dA = chunk_cumsum_backward(ddA_out + ddA_jump, ddt_out + ddt_jump, dt_chunks, A,
                                         dims.seqlen)
    ddt, ddt_bias = _finish_dt(ddt_used, ddt_used_ddt, a["dt_bias"])
    return SSDGradients(
        dx=_unchunk(dx_out + dx_jump, dims.seqlen) + dx_skip,
        ddt=ddt, dA=dA,
        dB=_group_sum(_unchunk(dB_out + dB_jump, dims.seqlen), dims.ngroups),
        dC=_group_sum(_unchunk(dC, dims.seqlen), dims.ngroups),
        dD=dD, dz=dz, ddt_bias=ddt_bias,
        dinitial_states=None if a["initial_states"] is None else dinitial_states,
    )
