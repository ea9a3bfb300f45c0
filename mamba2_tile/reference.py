"""NumPy references for Mamba-2's SSD layer (forward pass), in float64.

Three ways to compute the same function (names and shapes: docs/architecture.md), each the
ground truth for a later step:

* ``ssd_recurrent``  - the RNN: one state update per token (notebook 01);
* ``ssd_quadratic``  - the dual "attention" form ``y = (L ∘ C Bᵀ)(dt·x)`` (notebook 02);
* ``ssd_chunked``    - the chunked algorithm, as the three stages the GPU kernels implement:
  ``chunk_cumsum`` -> ``fwd_pass_state`` -> ``compute_out`` (notebook 03, then 05-07).

Layout (``b`` batch, ``l`` seqlen, ``h`` nheads, ``p`` headdim, ``g`` ngroups, ``n`` dstate,
``c`` nchunks, ``s`` chunk_size)::

    x (b, l, h, p)   dt (b, l, h)   A (h,)   B, C (b, l, g, n)   D (h,) or (h, p)
    initial_states / final_states (b, h, p, n)
    chunk-stage tensors: dt, dA_cumsum (b, h, c, s); chunk_states (b, h, c, p, n)

Inputs may be float16/32/64 arrays; everything is computed and returned in float64.
"""

import numpy as np

from mamba2_tile.problem import check_chunk_size, ssd_dims

_FLOAT_DTYPES = (np.float16, np.float32, np.float64)


def _as_float64(name, value):
    if value is None:
        return None
    if not isinstance(value, np.ndarray):
        raise TypeError(f"{name} must be a NumPy array, got {type(value).__name__}")
    if value.dtype not in _FLOAT_DTYPES:
        raise TypeError(
            f"{name} must be a float16, float32 or float64 array, got dtype {value.dtype}"
        )
    return value.astype(np.float64)


def _prepare(x, dt, A, B, C, D=None, initial_states=None):
    """Validate the arguments; return the sizes and float64 copies of the arrays."""
    arrays = {
        name: _as_float64(name, value)
        for name, value in dict(
            x=x, dt=dt, A=A, B=B, C=C, D=D, initial_states=initial_states
        ).items()
    }
    dims = ssd_dims(**arrays)
    return dims, arrays


def _per_head(BC, nheads):
    """(b, l, g, n) -> (b, l, h, n): head h reads group h // (nheads // ngroups)."""
    return np.repeat(BC, nheads // BC.shape[2], axis=2)


def _skip(x, D):
    """The ``D * x`` skip connection, D of shape (h,) or (h, p)."""
    if D is None:
        return 0.0
    return x * (D[:, None] if D.ndim == 1 else D)


def _finish(y, final_states, return_final_states):
    return (y, final_states) if return_final_states else y


# --------------------------------------------------------------------------------------------
# 1. The recurrence
# --------------------------------------------------------------------------------------------

def ssd_recurrent(x, dt, A, B, C, D=None, initial_states=None, return_final_states=False):
    """Token by token: ``h_t = exp(dt_t A) h_{t-1} + dt_t x_t ⊗ B_t``, ``y_t = h_t C_t + D x_t``.

    Returns ``y`` (b, l, h, p), or ``(y, final_states)`` if ``return_final_states``.
    """
    dims, a = _prepare(x, dt, A, B, C, D, initial_states)
    x, dt, A = a["x"], a["dt"], a["A"]
    B, C = _per_head(a["B"], dims.nheads), _per_head(a["C"], dims.nheads)
    state = np.zeros((dims.batch, dims.nheads, dims.headdim, dims.dstate))
    if a["initial_states"] is not None:
        state = a["initial_states"].copy()
    y = np.empty_like(x)
    for t in range(dims.seqlen):
        decay = np.exp(dt[:, t] * A)                               # (b, h)
        dt_x = dt[:, t, :, None] * x[:, t]                         # (b, h, p)
        state = decay[:, :, None, None] * state + dt_x[..., None] * B[:, t, :, None, :]
        y[:, t] = np.einsum("bhpn,bhn->bhp", state, C[:, t])
    return _finish(y + _skip(x, a["D"]), state, return_final_states)


# --------------------------------------------------------------------------------------------
# 2. The quadratic ("attention") form
# --------------------------------------------------------------------------------------------

def segsum(a):
    """Segment sums of ``a`` along its last axis, computed without cancellation or overflow.

    ``segsum(a)[..., t, s] = a[s+1] + ... + a[t]`` for ``t >= s`` (0 on the diagonal) and
    ``-inf`` above it, so that ``exp(segsum(dt * A))`` is the 1-semiseparable decay mask ``L``.
    Each entry is summed directly from the ``a`` it covers; nothing is ever a difference of two
    long prefix sums, and nothing positive is exponentiated.
    """
    T = a.shape[-1]
    covered = np.tril(np.ones((T, T), dtype=bool), k=-1)           # r > s
    terms = np.where(covered, a[..., :, None], 0.0)                 # terms[..., r, s] = a[r]
    sums = np.cumsum(terms, axis=-2)                                # sum over s < r <= t
    return np.where(np.tril(np.ones((T, T), dtype=bool)), sums, -np.inf)


def ssd_quadratic(x, dt, A, B, C, D=None, initial_states=None, return_final_states=False):
    """All tokens at once: ``y = (L ∘ C Bᵀ)(dt·x)`` with ``L = exp(segsum(dt A))``.

    Memory grows as seqlen², like attention. Returns like :func:`ssd_recurrent`.
    """
    dims, a = _prepare(x, dt, A, B, C, D, initial_states)
    x, dt, A = a["x"], a["dt"], a["A"]
    B, C = _per_head(a["B"], dims.nheads), _per_head(a["C"], dims.nheads)
    dA = (dt * A).transpose(0, 2, 1)                                # (b, h, l)
    L = np.exp(segsum(dA))                                          # (b, h, l, l)
    scores = np.einsum("blhn,bshn->bhls", C, B)                     # C Bᵀ
    dt_x = dt[..., None] * x                                        # (b, l, h, p)
    y = np.einsum("bhls,bshp->blhp", L * scores, dt_x, optimize=True)
    # Contribution of the state before token 0, and the state after the last token.
    h0 = a["initial_states"]
    total_decay = np.exp(dA.sum(-1))                                # (b, h)
    final_states = np.einsum("bhs,bshp,bshn->bhpn", L[:, :, -1, :], dt_x, B, optimize=True)
    if h0 is not None:
        decay_from_start = np.exp(np.cumsum(dA, axis=-1))           # (b, h, l)
        y += np.einsum("bhpn,blhn,bhl->blhp", h0, C, decay_from_start, optimize=True)
        final_states += total_decay[:, :, None, None] * h0
    return _finish(y + _skip(x, a["D"]), final_states, return_final_states)


# --------------------------------------------------------------------------------------------
# 3. The chunked algorithm, as the three kernel stages
# --------------------------------------------------------------------------------------------

def _pad_to_chunks(t, chunk_size, axis=1):
    """Zero-pad ``axis`` (seqlen) up to a whole number of chunks."""
    pad = -t.shape[axis] % chunk_size
    widths = [(0, 0)] * t.ndim
    widths[axis] = (0, pad)
    return np.pad(t, widths)


def _chunked(t, chunk_size):
    """(b, l, ...) -> (b, c, s, ...), zero-padded."""
    t = _pad_to_chunks(t, chunk_size)
    return t.reshape(t.shape[0], -1, chunk_size, *t.shape[2:])


def chunk_cumsum(dt, A, chunk_size, dt_bias=None, dt_softplus=False, dt_limit=(0.0, np.inf)):
    """Stage 1: the running sum of ``dt * A`` inside each chunk.

    ``dt`` first gets the optional ``dt_bias``, ``softplus`` and clamp to ``dt_limit`` (in that
    order, as ``mamba_ssm`` does). Positions past ``seqlen`` in the last chunk get ``dt = 0``,
    so they add nothing to any sum.

    Returns ``(dA_cumsum, dt)``, both (b, h, c, s): ``dA_cumsum[..., i] = sum_{j<=i} dt_j A``.
    """
    check_chunk_size(chunk_size)
    dt = _as_float64("dt", dt)
    A = _as_float64("A", A)
    if dt.ndim != 3 or A.shape != (dt.shape[2],):
        raise ValueError(
            f"dt must be (batch, seqlen, nheads) and A (nheads,), got {dt.shape} and {A.shape}"
        )
    if dt_bias is not None:
        dt = dt + _as_float64("dt_bias", dt_bias)
    if dt_softplus:
        dt = np.logaddexp(0.0, dt)
    dt = np.clip(dt, dt_limit[0], dt_limit[1])
    dt = _chunked(dt, chunk_size).transpose(0, 3, 1, 2)             # (b, h, c, s)
    dA_cumsum = np.cumsum(dt * A[None, :, None, None], axis=-1)
    return dA_cumsum, dt


def fwd_pass_state(x, B, dt, dA_cumsum, initial_states=None):
    """Stage 2: walk the chunks in order, recording the state that enters each one.

    The state jumps a whole chunk at a time (the "jump formula")::

        h_next = exp(dA_last) h + sum_i exp(dA_last - dA_i) dt_i x_i ⊗ B_i

    ``dt`` and ``dA_cumsum`` are the outputs of :func:`chunk_cumsum`.
    Returns ``(chunk_states, final_states)``: (b, h, c, p, n) and (b, h, p, n).
    """
    batch, nheads, nchunks, chunk_size = dA_cumsum.shape
    headdim, dstate = x.shape[3], B.shape[3]
    xc = _chunked(np.asarray(x, dtype=np.float64), chunk_size)      # (b, c, s, h, p)
    Bc = _chunked(_per_head(np.asarray(B, dtype=np.float64), nheads), chunk_size)
    state = np.zeros((batch, nheads, headdim, dstate))
    if initial_states is not None:
        state = np.asarray(initial_states, dtype=np.float64).copy()
    chunk_states = np.empty((batch, nheads, nchunks, headdim, dstate))
    for c in range(nchunks):
        chunk_states[:, :, c] = state
        dA = dA_cumsum[:, :, c]                                     # (b, h, s)
        dA_last = dA[:, :, -1]                                      # (b, h)
        weight = np.exp(dA_last[..., None] - dA) * dt[:, :, c]      # (b, h, s)
        inflow = np.einsum("bhs,bshp,bshn->bhpn", weight, xc[:, c], Bc[:, c], optimize=True)
        state = np.exp(dA_last)[..., None, None] * state + inflow
    return chunk_states, state


def compute_out(x, dt, dA_cumsum, B, C, chunk_states, D=None, z=None):
    """Stage 3: each chunk's output from its entering state plus its own tokens.

    ``y_i = exp(dA_i) C_i h_enter + sum_{j<=i} exp(dA_i - dA_j) (C_i·B_j) dt_j x_j + D x_i``,
    then ``y * silu(z)`` if ``z`` is given. Returns ``y`` (b, l, h, p).
    """
    seqlen, nheads = x.shape[1], x.shape[2]
    chunk_size = dA_cumsum.shape[-1]
    x = np.asarray(x, dtype=np.float64)
    xc = _chunked(x, chunk_size)                                    # (b, c, s, h, p)
    Bc = _chunked(_per_head(np.asarray(B, dtype=np.float64), nheads), chunk_size)
    Cc = _chunked(_per_head(np.asarray(C, dtype=np.float64), nheads), chunk_size)
    # Inter-chunk: what the state entering the chunk contributes, decayed to position i.
    y_inter = np.einsum("bcihn,bhcpn->bcihp", Cc, chunk_states, optimize=True)
    y_inter *= np.exp(dA_cumsum).transpose(0, 2, 3, 1)[..., None]
    # Intra-chunk: the quadratic form restricted to the chunk. The difference is <= 0 on and
    # below the diagonal; above it the mask is -inf, so exp never sees a positive number.
    causal = np.tril(np.ones((chunk_size, chunk_size), dtype=bool))
    decay = np.exp(np.where(causal, dA_cumsum[..., :, None] - dA_cumsum[..., None, :], -np.inf))
    scores = np.einsum("bcihn,bcjhn->bhcij", Cc, Bc, optimize=True) * decay
    y_intra = np.einsum("bhcij,bhcj,bcjhp->bcihp", scores, dt, xc, optimize=True)
    y = (y_inter + y_intra).reshape(x.shape[0], -1, nheads, x.shape[3])[:, :seqlen]
    y = y + _skip(x, None if D is None else np.asarray(D, dtype=np.float64))
    if z is not None:
        z = np.asarray(z, dtype=np.float64)
        y = y * z / (1.0 + np.exp(-z))
    return y


def ssd_chunked(x, dt, A, B, C, chunk_size, D=None, initial_states=None,
                return_final_states=False):
    """The chunked algorithm: ``chunk_cumsum`` -> ``fwd_pass_state`` -> ``compute_out``.

    ``seqlen`` need not be a multiple of ``chunk_size``. Returns like :func:`ssd_recurrent`.

    A sequence shorter than ``chunk_size`` is one chunk of ``seqlen`` tokens: padding it to a
    full chunk would change no value (padded tokens have ``dt = 0``) but allocate
    ``chunk_size²`` decays per head, 190 MiB for 10 tokens at chunk 2000.
    """
    check_chunk_size(chunk_size)
    dims, a = _prepare(x, dt, A, B, C, D, initial_states)
    chunk_size = min(chunk_size, max(dims.seqlen, 1))
    dA_cumsum, dt_chunks = chunk_cumsum(a["dt"], a["A"], chunk_size)
    chunk_states, final_states = fwd_pass_state(
        a["x"], a["B"], dt_chunks, dA_cumsum, a["initial_states"]
    )
    y = compute_out(a["x"], dt_chunks, dA_cumsum, a["B"], a["C"], chunk_states, a["D"])
    return _finish(y, final_states, return_final_states)
