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
    packed sequences: seq_idx (b, l) integers; cu_seqlens (num_sequences + 1,) integers

Inputs may be float16/32/64 arrays; everything is computed and returned in float64.

Packed sequences (mamba_ssm's ``seq_idx``): several sequences share one row of the batch, and
``seq_idx[b, t]`` says which one token ``t`` belongs to (non-negative, nondecreasing along the
row). The state is reset to zero wherever ``seq_idx`` changes, so no token sees another
sequence. As in mamba_ssm, the state before token 0 (``initial_states``) belongs to the
sequence numbered 0: a row whose ``seq_idx`` starts above 0 starts from a zero state. Written as
one rule with ``seq_idx[b, -1] = 0``::

    h_t = [seq_idx_t == seq_idx_{t-1}] exp(dt_t A) h_{t-1} + dt_t x_t ⊗ B_t

With ``cu_seqlens`` (batch 1; sequence ``i`` is tokens ``cu_seqlens[i]`` to
``cu_seqlens[i+1] - 1``) and ``return_varlen_states``, the state after each sequence's last token
is returned too, ``varlen_states`` (num_sequences, h, p, n). Every form returns like mamba_ssm:
``y``, then ``final_states`` if asked, then ``varlen_states`` if asked.
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


def _finish(y, final_states, return_final_states, varlen_states=None):
    """mamba_ssm's return order: ``y``, then ``final_states``, then ``varlen_states``."""
    extra = ((final_states,) if return_final_states else ()) + \
        (() if varlen_states is None else (varlen_states,))
    return (y, *extra) if extra else y


# --------------------------------------------------------------------------------------------
# Packed sequences
# --------------------------------------------------------------------------------------------

def check_seq_idx(seq_idx, batch, seqlen):
    """``seq_idx`` as an int64 array (b, l): integers, non-negative, nondecreasing along seqlen;
    ``None`` stays ``None``."""
    if seq_idx is None:
        return None
    seq_idx = np.asarray(seq_idx)
    if not np.issubdtype(seq_idx.dtype, np.integer):
        raise TypeError(f"seq_idx must hold integers, got dtype {seq_idx.dtype}")
    if seq_idx.shape != (batch, seqlen):
        raise ValueError(f"seq_idx must have shape (batch, seqlen) = ({batch}, {seqlen}), "
                         f"got {tuple(seq_idx.shape)}")
    if seq_idx.size and seq_idx.min() < 0:
        raise ValueError("seq_idx must be non-negative")
    decreasing = np.argwhere(np.diff(seq_idx, axis=1) < 0)
    if len(decreasing):
        b, t = decreasing[0]
        raise ValueError(f"seq_idx must be nondecreasing along seqlen (each sequence's tokens "
                         f"in one run): seq_idx[{b}, {t + 1}] = {seq_idx[b, t + 1]} follows "
                         f"{seq_idx[b, t]}")
    return seq_idx.astype(np.int64)


def check_cu_seqlens(cu_seqlens, batch, seqlen, seq_idx=None):
    """``cu_seqlens`` as an int64 array (num_sequences + 1,): integers from 0 to ``seqlen``,
    strictly increasing (no empty sequence), batch 1, and, given ``seq_idx``, the boundaries
    where it changes."""
    cu_seqlens = np.asarray(cu_seqlens)
    if not np.issubdtype(cu_seqlens.dtype, np.integer):
        raise TypeError(f"cu_seqlens must hold integers, got dtype {cu_seqlens.dtype}")
    if cu_seqlens.ndim != 1 or len(cu_seqlens) < 2:
        raise ValueError(f"cu_seqlens must be 1-D (num_sequences + 1,) with at least one "
                         f"sequence, got shape {tuple(cu_seqlens.shape)}")
    if batch != 1:
        raise ValueError(f"cu_seqlens needs batch 1 (all sequences packed in one row), "
                         f"got batch {batch}")
    if cu_seqlens[0] != 0 or cu_seqlens[-1] != seqlen or np.any(np.diff(cu_seqlens) <= 0):
        raise ValueError(f"cu_seqlens must rise strictly from 0 to seqlen ({seqlen}), got "
                         f"{cu_seqlens.tolist()}")
    if seq_idx is not None:
        changes = np.flatnonzero(np.diff(seq_idx[0])) + 1
        if not np.array_equal(changes, cu_seqlens[1:-1]):
            raise ValueError(f"cu_seqlens {cu_seqlens.tolist()} does not match where seq_idx "
                             f"changes (tokens {changes.tolist()})")
    return cu_seqlens.astype(np.int64)


def _check_packing(dims, seq_idx, cu_seqlens, return_varlen_states):
    seq_idx = check_seq_idx(seq_idx, dims.batch, dims.seqlen)
    if not return_varlen_states:
        return seq_idx, None            # as in mamba_ssm, cu_seqlens only serves varlen_states
    if cu_seqlens is None:
        raise ValueError("return_varlen_states needs cu_seqlens")
    cu_seqlens = check_cu_seqlens(cu_seqlens, dims.batch, dims.seqlen, seq_idx)
    if seq_idx is None and len(cu_seqlens) > 2:
        raise ValueError("cu_seqlens with several sequences needs seq_idx (without it the state "
                         "is not reset between them)")
    return seq_idx, cu_seqlens


def _same_as_previous(seq_idx, batch, seqlen):
    """(b, l) bool: token ``t`` continues the sequence of token ``t - 1`` (``seq_idx[-1] = 0``,
    the sequence ``initial_states`` belongs to); all True without ``seq_idx``."""
    if seq_idx is None:
        return np.ones((batch, seqlen), dtype=bool)
    previous = np.concatenate([np.zeros((batch, 1), dtype=seq_idx.dtype), seq_idx[:, :-1]], 1)
    return seq_idx == previous


# --------------------------------------------------------------------------------------------
# 1. The recurrence
# --------------------------------------------------------------------------------------------

def ssd_recurrent(x, dt, A, B, C, D=None, initial_states=None, return_final_states=False,
                  seq_idx=None, cu_seqlens=None, return_varlen_states=False):
    """Token by token: ``h_t = exp(dt_t A) h_{t-1} + dt_t x_t ⊗ B_t``, ``y_t = h_t C_t + D x_t``,
    the state reset where ``seq_idx`` changes (module doc).

    Returns ``y`` (b, l, h, p), then ``final_states`` if ``return_final_states``, then
    ``varlen_states`` (num_sequences, h, p, n) if ``return_varlen_states``.
    """
    dims, a = _prepare(x, dt, A, B, C, D, initial_states)
    seq_idx, cu_seqlens = _check_packing(dims, seq_idx, cu_seqlens, return_varlen_states)
    x, dt, A = a["x"], a["dt"], a["A"]
    B, C = _per_head(a["B"], dims.nheads), _per_head(a["C"], dims.nheads)
    keep = _same_as_previous(seq_idx, dims.batch, dims.seqlen)
    ends = set() if cu_seqlens is None else set((cu_seqlens[1:] - 1).tolist())
    state = np.zeros((dims.batch, dims.nheads, dims.headdim, dims.dstate))
    if a["initial_states"] is not None:
        state = a["initial_states"].copy()
    y = np.empty_like(x)
    varlen_states = []
    for t in range(dims.seqlen):
        decay = np.exp(dt[:, t] * A) * keep[:, t, None]            # (b, h), 0 at a reset
        dt_x = dt[:, t, :, None] * x[:, t]                         # (b, h, p)
        state = decay[:, :, None, None] * state + dt_x[..., None] * B[:, t, :, None, :]
        y[:, t] = np.einsum("bhpn,bhn->bhp", state, C[:, t])
        if t in ends:
            varlen_states.append(state[0].copy())
    return _finish(y + _skip(x, a["D"]), state, return_final_states,
                   np.stack(varlen_states) if return_varlen_states else None)


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


def ssd_quadratic(x, dt, A, B, C, D=None, initial_states=None, return_final_states=False,
                  seq_idx=None, cu_seqlens=None, return_varlen_states=False):
    """All tokens at once: ``y = (L ∘ C Bᵀ)(dt·x)`` with ``L = exp(segsum(dt A))``, and ``L``
    zero between tokens of different packed sequences.

    Memory grows as seqlen², like attention. Returns like :func:`ssd_recurrent`.
    """
    dims, a = _prepare(x, dt, A, B, C, D, initial_states)
    seq_idx, cu_seqlens = _check_packing(dims, seq_idx, cu_seqlens, return_varlen_states)
    x, dt, A = a["x"], a["dt"], a["A"]
    B, C = _per_head(a["B"], dims.nheads), _per_head(a["C"], dims.nheads)
    # Resets so far: tokens t and s share a sequence when as many resets precede both, and see
    # initial_states when none precedes them.
    resets = np.cumsum(~_same_as_previous(seq_idx, dims.batch, dims.seqlen), axis=1)  # (b, l)
    same = resets[:, None, :, None] == resets[:, None, None, :]     # (b, 1, l, l)
    dA = (dt * A).transpose(0, 2, 1)                                # (b, h, l)
    L = np.exp(segsum(dA)) * same                                   # (b, h, l, l)
    scores = np.einsum("blhn,bshn->bhls", C, B)                     # C Bᵀ
    dt_x = dt[..., None] * x                                        # (b, l, h, p)
    y = np.einsum("bhls,bshp->blhp", L * scores, dt_x, optimize=True)
    # The state after the last token and after each sequence's last: what every earlier token
    # of its sequence left in it.
    rows = np.array([dims.seqlen - 1] + ([] if cu_seqlens is None else list(cu_seqlens[1:] - 1)))
    states_after = np.einsum("bhts,bshp,bshn->bthpn", L[:, :, rows], dt_x, B, optimize=True)
    h0 = a["initial_states"]
    if h0 is not None:
        # Contribution of the state before token 0, to the tokens of its sequence.
        decay_from_start = np.exp(np.cumsum(dA, axis=-1)) * (resets == 0)[:, None, :]  # (b,h,l)
        y += np.einsum("bhpn,blhn,bhl->blhp", h0, C, decay_from_start, optimize=True)
        states_after += np.einsum("bht,bhpn->bthpn", decay_from_start[:, :, rows], h0)
    varlen_states = states_after[0, 1:] if return_varlen_states else None
    return _finish(y + _skip(x, a["D"]), states_after[:, 0], return_final_states,
                   varlen_states)


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


def chunk_seq_idx(seq_idx, chunk_size):
    """``seq_idx`` (b, l) cut into chunks: ``(seq_chunks, seq_prev)``, (b, c, s) and (b, c).

    Positions past seqlen repeat the last token's sequence, so ``seq_chunks[:, c, -1]`` is the
    sequence the state leaving chunk ``c`` belongs to; ``seq_prev[:, c]`` is the one the state
    entering it belongs to (the previous chunk's last, 0 before chunk 0: module doc).
    """
    pad = -seq_idx.shape[1] % chunk_size
    seq_chunks = np.pad(seq_idx, ((0, 0), (0, pad)), mode="edge")
    seq_chunks = seq_chunks.reshape(seq_idx.shape[0], -1, chunk_size)
    seq_prev = np.concatenate([np.zeros_like(seq_chunks[:, :1, -1]), seq_chunks[:, :-1, -1]], 1)
    return seq_chunks, seq_prev


def fwd_pass_state(x, B, dt, dA_cumsum, initial_states=None, seq_idx=None):
    """Stage 2: walk the chunks in order, recording the state that enters each one.

    The state jumps a whole chunk at a time (the "jump formula")::

        h_next = exp(dA_last) h + sum_i exp(dA_last - dA_i) dt_i x_i ⊗ B_i

    With ``seq_idx`` (packed sequences) the jump keeps only what belongs to the sequence of the
    chunk's last token: ``h`` only if that sequence entered the chunk, token ``i`` only if it
    is of that sequence. ``dt`` and ``dA_cumsum`` are the outputs of :func:`chunk_cumsum`.
    Returns ``(chunk_states, final_states)``: (b, h, c, p, n) and (b, h, p, n).
    """
    batch, nheads, nchunks, chunk_size = dA_cumsum.shape
    headdim, dstate = x.shape[3], B.shape[3]
    xc = _chunked(np.asarray(x, dtype=np.float64), chunk_size)      # (b, c, s, h, p)
    Bc = _chunked(_per_head(np.asarray(B, dtype=np.float64), nheads), chunk_size)
    state = np.zeros((batch, nheads, headdim, dstate))
    if initial_states is not None:
        state = np.asarray(initial_states, dtype=np.float64).copy()
    seq_chunks, seq_prev = chunk_seq_idx(
        np.zeros((batch, x.shape[1]), dtype=np.int64) if seq_idx is None else seq_idx,
        chunk_size)
    chunk_states = np.empty((batch, nheads, nchunks, headdim, dstate))
    for c in range(nchunks):
        chunk_states[:, :, c] = state
        dA = dA_cumsum[:, :, c]                                     # (b, h, s)
        dA_last = dA[:, :, -1]                                      # (b, h)
        seq_last = seq_chunks[:, c, -1:]                            # (b, 1)
        weight = np.exp(dA_last[..., None] - dA) * dt[:, :, c]      # (b, h, s)
        weight *= (seq_chunks[:, c] == seq_last)[:, None, :]
        inflow = np.einsum("bhs,bshp,bshn->bhpn", weight, xc[:, c], Bc[:, c], optimize=True)
        decay = np.exp(dA_last) * (seq_prev[:, c:c + 1] == seq_last)  # (b, h)
        state = decay[..., None, None] * state + inflow
    return chunk_states, state


def compute_out(x, dt, dA_cumsum, B, C, chunk_states, D=None, z=None, seq_idx=None):
    """Stage 3: each chunk's output from its entering state plus its own tokens.

    ``y_i = exp(dA_i) C_i h_enter + sum_{j<=i} exp(dA_i - dA_j) (C_i·B_j) dt_j x_j + D x_i``,
    then ``y * silu(z)`` if ``z`` is given. With ``seq_idx``, a term is kept only when its
    token ``j`` (or the entering state) belongs to the sequence of token ``i``.
    Returns ``y`` (b, l, h, p).
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
    if seq_idx is not None:
        seq_chunks, seq_prev = chunk_seq_idx(seq_idx, chunk_size)            # (b, c, s), (b, c)
        y_inter *= (seq_chunks == seq_prev[..., None])[..., None, None]
        decay = decay * (seq_chunks[..., :, None] == seq_chunks[..., None, :])[:, None]
    scores = np.einsum("bcihn,bcjhn->bhcij", Cc, Bc, optimize=True) * decay
    y_intra = np.einsum("bhcij,bhcj,bcjhp->bcihp", scores, dt, xc, optimize=True)
    y = (y_inter + y_intra).reshape(x.shape[0], -1, nheads, x.shape[3])[:, :seqlen]
    y = y + _skip(x, None if D is None else np.asarray(D, dtype=np.float64))
    if z is not None:
        z = np.asarray(z, dtype=np.float64)
        y = y * z / (1.0 + np.exp(-z))
    return y


def varlen_states(x, B, dt, dA_cumsum, chunk_states, cu_seqlens, seq_idx=None):
    """The state after each packed sequence's last token (batch 1), from the chunk it ends in.

    For the sequence ending at token ``e``, in chunk ``c`` at position ``k``: the state entering
    chunk ``c`` if it belongs to that sequence, plus the sequence's tokens of chunk ``c`` up to
    ``k``, all decayed to ``e`` (the jump formula of :func:`fwd_pass_state`, stopped at ``k``).
    Returns (num_sequences, h, p, n).
    """
    nheads, chunk_size = dA_cumsum.shape[1], dA_cumsum.shape[3]
    xc = _chunked(np.asarray(x, dtype=np.float64), chunk_size)[0]         # (c, s, h, p)
    Bc = _chunked(_per_head(np.asarray(B, dtype=np.float64), nheads), chunk_size)[0]
    if seq_idx is None:
        seq_idx = np.zeros((1, x.shape[1]), dtype=np.int64)
    seq_chunks, seq_prev = chunk_seq_idx(seq_idx, chunk_size)
    states = []
    for end in np.asarray(cu_seqlens)[1:] - 1:
        c, k = divmod(int(end), chunk_size)
        mine = seq_chunks[0, c, :k + 1] == seq_idx[0, end]                # (k + 1,)
        dA = dA_cumsum[0, :, c, :k + 1]                                   # (h, k + 1)
        weight = np.exp(dA[:, -1:] - dA) * dt[0, :, c, :k + 1] * mine     # (h, k + 1)
        state = np.einsum("hs,shp,shn->hpn", weight, xc[c, :k + 1], Bc[c, :k + 1])
        if seq_prev[0, c] == seq_idx[0, end]:
            state += np.exp(dA[:, -1])[:, None, None] * chunk_states[0, :, c]
        states.append(state)
    return np.stack(states)


def ssd_chunked(x, dt, A, B, C, chunk_size, D=None, initial_states=None,
                return_final_states=False, seq_idx=None, cu_seqlens=None,
                return_varlen_states=False):
    """The chunked algorithm: ``chunk_cumsum`` -> ``fwd_pass_state`` -> ``compute_out``
    (then ``varlen_states`` if asked).

    ``seqlen`` need not be a multiple of ``chunk_size``. Returns like :func:`ssd_recurrent`.

    A sequence shorter than ``chunk_size`` is one chunk of ``seqlen`` tokens: padding it to a
    full chunk would change no value (padded tokens have ``dt = 0``) but allocate
    ``chunk_size²`` decays per head, 190 MiB for 10 tokens at chunk 2000.
    """
    check_chunk_size(chunk_size)
    dims, a = _prepare(x, dt, A, B, C, D, initial_states)
    seq_idx, cu_seqlens = _check_packing(dims, seq_idx, cu_seqlens, return_varlen_states)
    chunk_size = min(chunk_size, max(dims.seqlen, 1))
    dA_cumsum, dt_chunks = chunk_cumsum(a["dt"], a["A"], chunk_size)
    chunk_states, final_states = fwd_pass_state(
        a["x"], a["B"], dt_chunks, dA_cumsum, a["initial_states"], seq_idx
    )
    y = compute_out(a["x"], dt_chunks, dA_cumsum, a["B"], a["C"], chunk_states, a["D"],
                    seq_idx=seq_idx)
    varlen = None
    if return_varlen_states:
        varlen = varlen_states(a["x"], a["B"], dt_chunks, dA_cumsum, chunk_states, cu_seqlens,
                               seq_idx)
    return _finish(y, final_states, return_final_states, varlen)
