"""Checks for notebook 10, scaling and the backward pass.

* ``check_attention_scores_bytes``: the memory of attention's ``seqlen x seqlen`` scores;
* ``check_state_pass_backward``: the reverse walk over the chunks that carries the gradient of
  the loss with respect to the state, from the last chunk to the first.

``state_pass_backward`` is the package's version of the second exercise (float64 NumPy), which
the notebook uses after the check and compares with ``torch.autograd``.
"""

import numpy as np

from mamba2_tile.course.checks.feedback import (NOT_DONE, attempt, compare, compare_counts,
                                                 exercise)
from mamba2_tile.cost import attention_scores_bytes

# --------------------------------------------------------------------------------------------
# Exercise 1: the scores of naive attention
# --------------------------------------------------------------------------------------------

_SCORES_CASES = [  # seqlen, nheads, bytes_per_value; distinct primes show every factor
    dict(seqlen=32768, nheads=32, bytes_per_value=2),
    dict(seqlen=1031, nheads=7, bytes_per_value=4),
    dict(seqlen=4099, nheads=3, bytes_per_value=2),
    dict(seqlen=1, nheads=5, bytes_per_value=1),
]


def _scores_hint(got):
    def matches(fn):
        return np.allclose(got, [fn(**case) for case in _SCORES_CASES])

    if matches(lambda seqlen, nheads, bytes_per_value: seqlen * nheads * bytes_per_value):
        return ("that grows linearly, like a KV cache; the scores hold one number per PAIR of "
                "tokens (query i, key j): seqlen x seqlen per head.")
    if matches(lambda seqlen, nheads, bytes_per_value: seqlen * seqlen * bytes_per_value):
        return "every head has its own scores: multiply by nheads."
    if matches(lambda seqlen, nheads, bytes_per_value: seqlen * seqlen * nheads):
        return "that counts entries; multiply by bytes_per_value for bytes."
    if matches(lambda seqlen, nheads, bytes_per_value: seqlen * (seqlen + 1) // 2 * nheads
               * bytes_per_value):
        return ("only the lower triangle is *used*, but the naive code writes the whole square "
                "(the future positions hold -inf): seqlen * seqlen.")
    return "seqlen * seqlen * nheads * bytes_per_value: one square matrix per head."


@exercise("10.1")
def check_attention_scores_bytes(fn):
    """Check ``attention_scores_bytes(seqlen, nheads, bytes_per_value)``."""
    return compare_counts("attention_scores_bytes", fn, attention_scores_bytes, _SCORES_CASES,
                          hint=_scores_hint)


# --------------------------------------------------------------------------------------------
# Exercise 2: the reverse state pass
# --------------------------------------------------------------------------------------------

def state_pass_backward(decay, grad_local, grad_final):
    """Gradients of the loss with respect to the state entering each chunk.

    The forward pass walks ``h[c + 1] = decay[c] * h[c] + inflow[c]`` for ``c = 0 .. nchunks-1``
    (``h[0]`` the initial state, ``h[nchunks]`` the final one). ``grad_local[c]`` is the
    gradient reaching ``h[c]`` directly, from chunk ``c``'s outputs; ``grad_final`` the one
    reaching the final state. The total gradient of ``h[c]`` adds what flows back through every
    later chunk: ``g[c] = grad_local[c] + decay[c] * g[c + 1]``, from ``g[nchunks] = grad_final``.

    decay (..., nchunks); grad_local (..., nchunks, headdim, dstate); grad_final
    (..., headdim, dstate). Returns ``g[0 .. nchunks-1]`` like ``grad_local`` (``g[0]`` is the
    gradient of the initial state).
    """
    decay, grad_local = np.asarray(decay, np.float64), np.asarray(grad_local, np.float64)
    grads = np.empty_like(grad_local)
    grad = np.asarray(grad_final, np.float64)
    for c in reversed(range(grad_local.shape[-3])):
        grad = grad_local[..., c, :, :] + decay[..., c, None, None] * grad
        grads[..., c, :, :] = grad
    return grads


def _backward_variant(decay, grad_local, grad_final, *, reverse=True, shift=0, final=True,
                      local=True):
    """``state_pass_backward`` with the usual slips switched on, to name them in a hint."""
    nchunks = grad_local.shape[-3]
    grads = np.empty_like(grad_local)
    grad = grad_final if final else np.zeros_like(grad_final)
    order = reversed(range(nchunks)) if reverse else range(nchunks)
    for c in order:
        a = decay[..., min(c + shift, nchunks - 1), None, None]
        grad = (grad_local[..., c, :, :] if local else 0.0) + a * grad
        grads[..., c, :, :] = grad
    return grads


def _backward_cases(seed=10):
    rng = np.random.default_rng(seed)
    cases = []
    for lead, nchunks, headdim, dstate in [((), 1, 2, 3), ((2, 3), 5, 4, 6), ((1,), 7, 3, 5)]:
        cases.append(dict(
            decay=rng.uniform(0.2, 0.95, (*lead, nchunks)),
            grad_local=rng.standard_normal((*lead, nchunks, headdim, dstate)),
            grad_final=rng.standard_normal((*lead, headdim, dstate)),
        ))
    return cases


def _backward_hint(got, case):
    def close(**slips):
        candidate = _backward_variant(**case, **slips)
        return np.shape(got) == candidate.shape and np.allclose(got, candidate)

    if close(reverse=False):
        return ("the walk went forwards: gradients flow from the LAST chunk to the first, "
                "for c in reversed(range(nchunks)).")
    if close(shift=1):
        return ("g[c] picks up decay[c] * g[c + 1]: chunk c's own decay, the one that took h[c] "
                "to h[c + 1] in the forward pass, not decay[c + 1].")
    if close(final=False):
        return "start the walk from grad_final (the gradient of the final state), not from zero."
    if close(local=False):
        return "each g[c] also gets grad_local[c], the gradient from chunk c's own outputs."
    return ("g = grad_final; then for c = nchunks-1 down to 0: g = grad_local[c] + decay[c] * g, "
            "and store it as the result for chunk c.")


@exercise("10.2")
def check_state_pass_backward(fn):
    """Check ``state_pass_backward(decay, grad_local, grad_final)`` in float64."""
    name = "state_pass_backward"
    for case in _backward_cases():
        got = attempt(name, fn, **{k: v.copy() for k, v in case.items()})
        if got is NOT_DONE:
            return False
        expected = state_pass_backward(**case)
        nchunks = case["decay"].shape[-1]
        label = f"{name}, decay shape {case['decay'].shape}, {nchunks} chunk(s)"
        hint = None if got is None else _backward_hint(got, case)
        if not compare(label, got, expected, hint=hint):
            return False
    return True
