"""Checks for notebook 11, the backward pass in NumPy, one head at a time: the state gradient
walking the tokens in reverse (with the ``dx`` it gives) and the state gradient walking the
chunks in reverse (``bwd_pass_state``).

Both compare with :mod:`mamba2_tile.reference_backward`. On a mismatch they name the tokens
(or chunks) that are wrong and recognise the usual mistakes: walking forward instead of in
reverse, and a decay that is missing or taken from the wrong token / chunk.
"""

import numpy as np

from mamba2_tile.course.checks.feedback import NOT_DONE, attempt, compare, exercise, fail
from mamba2_tile.reference_backward import bwd_pass_state, ssd_recurrent_backward


def _one(t):
    """One sequence, one head: (l, ...) -> (1, l, 1, ...)."""
    return t[None, :, None]


def _listed(indices, what, limit=8):
    shown = ", ".join(str(int(i)) for i in indices[:limit])
    more = f" and {len(indices) - limit} more" if len(indices) > limit else ""
    return f"{what} {shown}{more}"


def _wrong_along_first_axis(got, expected):
    """Indices along axis 0 where ``got`` and ``expected`` differ anywhere."""
    close = np.isclose(got, expected, atol=1e-10, rtol=1e-8)
    return np.flatnonzero(~close.reshape(len(close), -1).all(axis=1))


def state_gradients(dy, dt, A, C, dfinal_state=None):
    """The gradient of ``L = sum(dy * y)`` with respect to every state ``h_t`` of one head.

    ``dy`` (l, headdim), ``dt`` (l,), ``A`` a float, ``C`` (l, dstate); returns (l, headdim,
    dstate). Taken from the package's :func:`bwd_pass_state` with chunks of one token: there the
    gradient of the state *entering* token t is ``exp(dt_t A) dh_t``, so dividing by the decay
    (never 0) leaves ``dh_t``.
    """
    dA = (dt * A)[None, None, :, None]                                  # (1, 1, l, 1)
    dfinal = None if dfinal_state is None else dfinal_state[None, None]
    entering, _ = bwd_pass_state(_one(dy), _one(C), dA, dfinal)
    return entering[0, 0] / np.exp(dt * A)[:, None, None]


def _walk(dy, dt, A, C, order, decay_of):
    """A state-gradient walk in the given token order; ``decay_of(t, previous)`` the factor."""
    out, g, previous = np.zeros((len(dt),) + dy.shape[1:] + C.shape[1:]), 0.0, None
    for t in order:
        factor = 1.0 if previous is None else decay_of(t, previous)
        g = factor * g + np.outer(dy[t], C[t])
        out[t], previous = g, t
    return out


def _state_gradient_hint(got, dy, dt, A, C, expected):
    l = len(dt)
    decay = np.exp(dt * A)
    candidates = [
        (_walk(dy, dt, A, C, range(l), lambda t, prev: decay[t]),
         "you walked forward (t = 0, 1, ...): h_t is used by the *later* tokens, so its "
         "gradient gathers from the future; loop over reversed(range(seqlen))."),
        (_walk(dy, dt, A, C, reversed(range(l)), lambda t, prev: 1.0),
         "no decay: h_t reaches h_{t+1} multiplied by exp(dt_{t+1} A), so dh_{t+1} comes back "
         "multiplied by it too."),
        (_walk(dy, dt, A, C, reversed(range(l)), lambda t, prev: decay[t]),
         "off by one token: the factor between dh_{t+1} and dh_t is the decay of token t+1, "
         "exp(dt_{t+1} A) (the step that h_t goes through), not exp(dt_t A)."),
    ]
    for candidate, hint in candidates:
        if np.shape(got) == candidate.shape and np.allclose(got, candidate):
            return hint
    if np.shape(got) != expected.shape:
        return (f"dh is (seqlen, headdim, dstate) = {expected.shape}: dy_t ⊗ C_t is "
                "np.outer(dy[t], C[t]).")
    return "dh_t = np.outer(dy_t, C_t) + exp(dt_{t+1} A) dh_{t+1}, from the last token back."


def _dx_hint(got, dh, B, expected):
    if np.shape(got) != expected.shape:
        return f"dx has x's shape, (seqlen, headdim) = {expected.shape}."
    if np.allclose(got, np.einsum("tpn,tn->tp", dh, B)):
        return "x_t enters the state as dt_t x_t ⊗ B_t: multiply by dt_t."
    return "dx_t = dt_t * (dh_t @ B_t): the outer product x_t ⊗ B_t, read backward."


STATE_CASES = [
    # (seqlen, headdim, dstate)
    (12, 3, 4),
    (1, 2, 3),
]


@exercise("11.1")
def check_recurrent_state_gradient(recurrent_state_gradient):
    """``recurrent_state_gradient(dy, x, dt, A, B, C) -> (dh, dx)`` against the package."""
    rng = np.random.default_rng(11)
    for seqlen, headdim, dstate in STATE_CASES:
        x, dy = rng.standard_normal((2, seqlen, headdim))
        B, C = rng.standard_normal((2, seqlen, dstate))
        dt, A = rng.uniform(0.2, 0.8, seqlen), -float(rng.uniform(0.5, 2.0))
        got = attempt("recurrent_state_gradient", recurrent_state_gradient, dy.copy(), x.copy(),
                      dt.copy(), A, B.copy(), C.copy())
        if got is NOT_DONE:
            return False
        if not (isinstance(got, tuple) and len(got) == 2):
            fail("❌ recurrent_state_gradient must return a pair (dh, dx).")
            return False
        dh, dx = got
        label = f"seqlen={seqlen} headdim={headdim} dstate={dstate}"
        expected_dh = state_gradients(dy, dt, A, C)
        dh = np.asarray(dh)
        if not compare(f"dh, {label}", dh, expected_dh,
                       hint=_state_gradient_hint(dh, dy, dt, A, C, expected_dh),
                       axes=("token", "channel", "state"),
                       picture=("token", ("channel", "state"))):
            if dh.shape == expected_dh.shape:
                print("   " + _listed(_wrong_along_first_axis(dh, expected_dh),
                                      "wrong at tokens") + f" (of 0..{seqlen - 1}; the first "
                                      "index above is the token).")
            return False
        expected_dx = ssd_recurrent_backward(_one(dy), _one(x), _one(dt), np.array([A]),
                                             _one(B), _one(C)).dx[0, :, 0]
        dx = np.asarray(dx)
        if not compare(f"dx, {label}", dx, expected_dx,
                       hint=_dx_hint(dx, expected_dh, B, expected_dx),
                       axes=("token", "channel"), picture=("token", "channel")):
            if dx.shape == expected_dx.shape:
                print("   " + _listed(_wrong_along_first_axis(dx, expected_dx),
                                      "wrong at tokens") + ".")
            return False
    return True


def _chunk_walk(from_outputs, dfinal, order, carry_of, record_before=False):
    """A chunk walk in the given order; ``carry_of(c)`` the factor applied when leaving chunk c."""
    out, g = np.zeros_like(from_outputs), dfinal.copy()
    for c in order:
        if record_before:
            out[c] = g
        g = carry_of(c) * g + from_outputs[c]
        if not record_before:
            out[c] = g
    return out


def _chunk_hint(got, dy, C, dA, dfinal, expected):
    n = len(dA)
    carry = np.exp(dA[:, -1])
    read = np.einsum("cs,csp,csn->cpn", np.exp(dA), dy, C)
    unread = np.einsum("csp,csn->cpn", dy, C)
    candidates = [
        (_chunk_walk(read, dfinal, range(n), lambda c: carry[c]),
         "you walked forward (chunk 0 first): the state entering chunk c is used by the later "
         "chunks, so start from dfinal_state after the last chunk and go back."),
        (_chunk_walk(read, dfinal, reversed(range(n)), lambda c: 1.0),
         "no carry decay: the state entering chunk c reaches the next one multiplied by "
         "exp(dA_cumsum[c, -1]), so dS_{c+1} comes back multiplied by it."),
        (_chunk_walk(read, dfinal, reversed(range(n)),
                     lambda c: carry[c + 1] if c + 1 < n else 1.0),
         "off by one chunk: the factor between dS_{c+1} and dS_c is chunk c's own total "
         "decay exp(dA_cumsum[c, -1]), the jump that S_c goes through."),
        (_chunk_walk(unread, dfinal, reversed(range(n)), lambda c: carry[c]),
         "token i of the chunk reads S_c decayed by exp(dA_cumsum[c, i]): weight dy_i ⊗ C_i "
         "by it."),
        (_chunk_walk(read, dfinal, reversed(range(n)), lambda c: carry[c],
                     record_before=True),
         "off by one chunk: you stored the gradient of the state *leaving* chunk c; store it "
         "after the jump, for the state entering it."),
    ]
    for candidate, hint in candidates:
        if np.shape(got) == candidate.shape and np.allclose(got, candidate):
            return hint
    if np.shape(got) != expected.shape:
        return f"the result is (nchunks, headdim, dstate) = {expected.shape}."
    return ("dS_c = exp(dA_cumsum[c, -1]) dS_{c+1} + sum_i exp(dA_cumsum[c, i]) dy_i ⊗ C_i, "
            "from dS_nchunks = dfinal_state back to chunk 0.")


CHUNK_CASES = [
    # (nchunks, chunk_size, headdim, dstate)
    (5, 4, 3, 2),
    (1, 8, 2, 3),
]


@exercise("11.2")
def check_bwd_pass_state(bwd_pass_state_single_head):
    """``bwd_pass_state_single_head(dy, C, dA_cumsum, dfinal_state)`` against the package."""
    rng = np.random.default_rng(12)
    for nchunks, chunk_size, headdim, dstate in CHUNK_CASES:
        dy = rng.standard_normal((nchunks, chunk_size, headdim))
        C = rng.standard_normal((nchunks, chunk_size, dstate))
        dt, A = rng.uniform(0.1, 0.5, (nchunks, chunk_size)), -float(rng.uniform(0.5, 2.0))
        dA = np.cumsum(dt * A, axis=-1)
        dfinal = rng.standard_normal((headdim, dstate))
        got = attempt("bwd_pass_state_single_head", bwd_pass_state_single_head, dy.copy(),
                      C.copy(), dA.copy(), dfinal.copy())
        if got is NOT_DONE:
            return False
        expected, _ = bwd_pass_state(_one(dy.reshape(-1, headdim)),
                                     _one(C.reshape(-1, dstate)), dA[None, None],
                                     dfinal[None, None])
        expected = expected[0, 0]
        got = np.asarray(got)
        label = f"bwd_pass_state_single_head, nchunks={nchunks} chunk_size={chunk_size}"
        if not compare(label, got, expected,
                       hint=_chunk_hint(got, dy, C, dA, dfinal, expected),
                       axes=("chunk", "channel", "state"),
                       picture=("chunk", ("channel", "state"))):
            if got.shape == expected.shape:
                print("   " + _listed(_wrong_along_first_axis(got, expected), "wrong at chunks")
                      + f" (of 0..{nchunks - 1}; the first index above is the chunk).")
            return False
    return True
