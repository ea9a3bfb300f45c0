"""Checks for notebook 02, the quadratic ("attention") form: segsum, the decay mask, and
``y = (L ∘ C Bᵀ)(dt·x)`` for one head.

Each check tries the learner's function on a few seeded inputs, chosen to catch the classic
mistakes (an off-by-one segment, a transposed mask, prefix sums that lose precision or
overflow), stops at the first mismatch and names the likely cause.
"""

import numpy as np

from mamba2_tile.course.checks.feedback import NOT_DONE, attempt, compare, exercise
from mamba2_tile.reference import segsum as _segsum
from mamba2_tile.reference import ssd_quadratic


def _single_head(rng, seqlen, headdim, dstate):
    """x (l, p), dt (l,), A (a float < 0), B and C (l, n): one head of one sequence."""
    return (rng.standard_normal((seqlen, headdim)), rng.uniform(0.05, 0.5, seqlen),
            -float(rng.uniform(0.5, 2.0)), rng.standard_normal((seqlen, dstate)),
            rng.standard_normal((seqlen, dstate)))


def _close_on_lower(got, candidate):
    """Does ``got`` equal ``candidate`` on and below the diagonal (where both are finite)?"""
    T = got.shape[-1]
    lower = np.broadcast_to(np.tril(np.ones((T, T), dtype=bool)), got.shape)
    with np.errstate(invalid="ignore"):
        return bool(np.allclose(got[lower], candidate[lower], atol=1e-8))


def _future(a):
    """Boolean (..., T, T): True above the diagonal (s > t), where segsum is -inf."""
    T = a.shape[-1]
    return np.broadcast_to(np.triu(np.ones((T, T), dtype=bool), k=1), a.shape + (T,))


def _prefix_differences(a):
    prefix = np.cumsum(a, axis=-1)
    return prefix[..., :, None] - prefix[..., None, :]


_FUTURE_HINT = ("above the diagonal (s > t, the future) every entry must be -inf, "
                "so that exp(segsum) is 0 there.")
_CANCELLATION_HINT = (
    "the segments must be summed directly (mask the terms, then cumsum), not as "
    "cumsum[t] - cumsum[s]: after a huge step both prefix sums are enormous and "
    "their difference loses every small digit (or becomes -inf - -inf = NaN).")
_INCLUSIVE_HINT = ("the segment for (t, s) starts *after* s: a[s+1] + ... + a[t], so the "
                   "diagonal is 0 (no decay from a token to itself).")

# Exercise 1's catalogue: (a wrong segsum(a), the diagnosis); the first match names the mistake.
SEGSUM_MISTAKES = [
    (lambda a: np.tril(_segsum(a)), _FUTURE_HINT),             # np.tril puts 0, not -inf
    (lambda a: np.tril(_prefix_differences(a)), _FUTURE_HINT),
    (lambda a: np.where(_future(a), -np.inf, _prefix_differences(a)), _CANCELLATION_HINT),
    (lambda a: np.where(_future(a), -np.inf, _segsum(a) + a[..., None, :]), _INCLUSIVE_HINT),
]


def _segsum_hint(got, a):
    got = np.asarray(got, dtype=np.float64)
    T = a.shape[-1]
    if got.shape != a.shape + (T,):
        return "segsum adds one axis: a of shape (..., T) gives (..., T, T), indexed [..., t, s]."
    for wrong_answer, hint in SEGSUM_MISTAKES:
        with np.errstate(invalid="ignore"):
            if np.allclose(got, wrong_answer(a), atol=1e-8, equal_nan=True):
                return hint
    # Not in the catalogue: the upper triangle first, since a wrong future (0 instead of -inf)
    # says nothing about how the lower triangle was computed.
    if not np.isnan(got).any() and not np.all(got[_future(a)] == -np.inf):
        return _FUTURE_HINT
    if _close_on_lower(got, _prefix_differences(a)) or np.isnan(got).any():
        return _CANCELLATION_HINT
    if _close_on_lower(got, _prefix_differences(a) + a[..., None, :]):
        return _INCLUSIVE_HINT
    return "segsum(a)[..., t, s] = a[s+1] + ... + a[t] for t >= s, -inf above the diagonal."


def _pair_axes(ndim_a):
    """The axes of segsum(a) (and of the decay mask) for an ``a`` with ``ndim_a`` axes."""
    return tuple(f"axis {i} of a" for i in range(ndim_a - 1)) + _PAIR_PICTURE


_PAIR_PICTURE = ("t (output token)", "s (input token)")


@exercise("02.1")
def check_segsum(segsum):
    """``segsum(a)`` against the package's, including an input where naive prefix sums fail."""
    rng = np.random.default_rng(2)
    huge_step = -rng.uniform(0.05, 0.5, 12)
    huge_step[4] = -1e12                        # one token that erases the state completely
    cases = [
        ("a of shape (6,)", -rng.uniform(0.05, 0.5, 6)),
        ("a of shape (2, 3, 37)", -rng.uniform(0.05, 0.5, (2, 3, 37))),
        ("a of shape (12,) with a[4] = -1e12", huge_step),
    ]
    for label, a in cases:
        got = attempt("segsum", segsum, a.copy())
        if got is NOT_DONE:
            return False
        if not compare(f"segsum, {label}", got, _segsum(a), hint=_segsum_hint(got, a),
                       axes=_pair_axes(a.ndim), picture=_PAIR_PICTURE):
            return False
    return True


def _decay_mask_hint(got, dt, A):
    got = np.asarray(got, dtype=np.float64)
    expected = np.exp(_segsum(dt * A))
    if np.isnan(got).any() or np.isinf(got).any():
        return ("NaN or inf: exp of a long prefix sum underflows to 0 (or of a positive one "
                "overflows to inf), and 0/0 or inf*0 is NaN. Exponentiate segsum(dt * A), "
                "whose entries are never positive.")
    if got.shape == expected.shape and np.allclose(got, expected.T):
        return "the mask is transposed: row t (the output token) reads column s <= t."
    return "L = exp(segsum(dt * A)): L[t, s] = exp(dt[s+1] A + ... + dt[t] A), 0 above."


@exercise("02.2")
def check_decay_mask(decay_mask):
    """``decay_mask(dt, A)`` for one head, short and long (where the naive form breaks)."""
    rng = np.random.default_rng(3)
    cases = [(7, rng.uniform(0.05, 0.5, 7), -1.3), (2000, rng.uniform(0.1, 1.0, 2000), -1.0)]
    for seqlen, dt, A in cases:
        got = attempt("decay_mask", decay_mask, dt.copy(), A)
        if got is NOT_DONE:
            return False
        expected = np.exp(_segsum(dt * A))
        if not compare(f"decay_mask, seqlen={seqlen}", got, expected,
                       hint=_decay_mask_hint(got, dt, A), axes=_pair_axes(1),
                       picture=_PAIR_PICTURE):
            return False
    return True


def _one(t):
    """One sequence, one head: (l, ...) -> (1, l, 1, ...)."""
    return t[None, :, None]


def _quadratic_reference(x, dt, A, B, C):
    """The package's ssd_quadratic on a batch of one sequence and one head."""
    return ssd_quadratic(_one(x), _one(dt), np.array([A]), _one(B), _one(C))[0, :, 0]


def _mask(dt, A):
    return np.exp(_segsum(dt * A))


# Exercise 3's catalogue: (a wrong ssd_quadratic_single_head(x, dt, A, B, C), the diagnosis).
QUADRATIC_MISTAKES = [
    (lambda x, dt, A, B, C: (_mask(dt, A) * (C @ B.T)) @ x,
     "the values are dt·x: multiply each x[s] by dt[s] first."),
    (lambda x, dt, A, B, C: (_mask(dt, A) * (B @ C.T)) @ (dt[:, None] * x),
     "the scores are C Bᵀ: entry (t, s) is C[t]·B[s] (C plays the queries, B the keys)."),
    (lambda x, dt, A, B, C: (_mask(dt, A).T * (C @ B.T)) @ (dt[:, None] * x),
     "the mask is transposed: L is lower triangular, row t mixes tokens s <= t."),
    (lambda x, dt, A, B, C: (C @ B.T) @ (dt[:, None] * x),
     "the decay mask L is missing: use L ∘ (C Bᵀ)."),
    (lambda x, dt, A, B, C: (np.tril(_mask(dt, A), k=-1) * (C @ B.T)) @ (dt[:, None] * x),
     "the mask leaves out the diagonal: token t reads its own input too (L[t, t] = 1)."),
    (lambda x, dt, A, B, C: (np.tril(_segsum(dt * A)) * (C @ B.T)) @ (dt[:, None] * x),
     "L is segsum itself, not its exponential: L = exp(segsum(dt * A))."),
]


def _quadratic_hint(got, x, dt, A, B, C):
    got = np.asarray(got, dtype=np.float64)
    if got.shape == x.shape:
        for wrong_answer, hint in QUADRATIC_MISTAKES:
            with np.errstate(invalid="ignore"):
                candidate = wrong_answer(x, dt, A, B, C)
            if np.allclose(got, candidate):
                return hint
    return "y = (L ∘ C Bᵀ)(dt·x) with L = exp(segsum(dt * A)); y has the shape of x."


@exercise("02.3")
def check_ssd_quadratic_single_head(ssd_quadratic_single_head):
    """``ssd_quadratic_single_head(x, dt, A, B, C)`` against the package's ``ssd_quadratic``."""
    rng = np.random.default_rng(4)
    for seqlen, headdim, dstate in [(9, 3, 4), (50, 8, 16)]:
        x, dt, A, B, C = _single_head(rng, seqlen, headdim, dstate)
        got = attempt("ssd_quadratic_single_head", ssd_quadratic_single_head,
                      x.copy(), dt.copy(), A, B.copy(), C.copy())
        if got is NOT_DONE:
            return False
        label = f"ssd_quadratic_single_head, seqlen={seqlen} headdim={headdim} dstate={dstate}"
        if not compare(label, got, _quadratic_reference(x, dt, A, B, C),
                       hint=_quadratic_hint(got, x, dt, A, B, C), axes=("token", "channel"),
                       picture=("token", "channel")):
            return False
    return True
