"""Checks for notebook 03, the chunked algorithm, one head at a time: the chunk-local running sum
(stage 1), the jump that carries the state over a chunk (stage 2) and a chunk's output
(stage 3).

Every check includes a sequence whose length is not a multiple of ``chunk_size``, so the zero
padding of the last chunk is exercised, and compares with the package's stages or with the
recurrence they must reproduce.
"""

import numpy as np

from mamba2_tile.course.checks.feedback import NOT_DONE, attempt, compare, exercise
from mamba2_tile.reference import chunk_cumsum, compute_out, ssd_recurrent


def _one(t):
    """One sequence, one head: (l, ...) -> (1, l, 1, ...)."""
    return t[None, :, None]


def _one_chunk(t):
    """The chunk-stage layout for one sequence, head and chunk: (...) -> (1, 1, 1, ...)."""
    return t[None, None, None]


# Exercise 1's catalogue of likely mistakes: (what the learner computed, from the padded
# (nchunks, chunk_size) terms dt * A, and the diagnosis). The first match names the mistake.
CUMSUM_MISTAKES = [
    (lambda terms, A: np.cumsum(terms).reshape(terms.shape),
     "the running sum restarts at every chunk: cumsum along the chunk axis only."),
    (lambda terms, A: np.cumsum(terms, axis=-1) - terms,
     "the sum is exclusive (off by one): dA_cumsum[c, i] includes token i itself, "
     "so dA_cumsum[c, 0] = dt[c*s] A, not 0; np.cumsum already does this."),
    (lambda terms, A: np.cumsum(terms, axis=0) if len(terms) > 1 else None,
     "the sum ran down the chunks (axis 0) instead of along each chunk: in the "
     "(nchunks, chunk_size) array the positions in a chunk are axis -1, "
     "so np.cumsum(..., axis=-1)."),
    (lambda terms, A: np.cumsum(terms, axis=-1) / A,
     "sum dt * A, not dt: the decay rate A belongs inside the sum."),
]


def _cumsum_hint(got, dt, A, chunk_size):
    nchunks = -(-len(dt) // chunk_size)
    if np.shape(got) != (nchunks, chunk_size):
        return (f"the result is (nchunks, chunk_size) = ({nchunks}, {chunk_size}): pad dt "
                "with zeros up to a whole number of chunks, then reshape.")
    terms = np.pad(dt * A, (0, nchunks * chunk_size - len(dt))).reshape(nchunks, chunk_size)
    for wrong_answer, hint in CUMSUM_MISTAKES:
        candidate = wrong_answer(terms, A)
        if candidate is not None and np.allclose(got, candidate):
            return hint
    return "dA_cumsum[c, i] = dt[c*s] A + ... + dt[c*s + i] A, with dt = 0 in the padding."


@exercise("03.1")
def check_chunk_cumsum_single_head(chunk_cumsum_single_head):
    """``chunk_cumsum_single_head(dt, A, chunk_size)`` against the package's stage 1."""
    rng = np.random.default_rng(5)
    for seqlen, chunk_size in [(8, 4), (300, 64), (5, 16)]:
        dt, A = rng.uniform(0.05, 0.5, seqlen), -float(rng.uniform(0.5, 2.0))
        got = attempt("chunk_cumsum_single_head", chunk_cumsum_single_head, dt.copy(), A,
                      chunk_size)
        if got is NOT_DONE:
            return False
        expected = chunk_cumsum(dt[None, :, None], np.array([A]), chunk_size)[0][0, 0]
        if not compare(f"chunk_cumsum_single_head, seqlen={seqlen} chunk_size={chunk_size}",
                       got, expected, hint=_cumsum_hint(got, dt, A, chunk_size),
                       axes=("chunk", "position in chunk"),
                       picture=("chunk", "position in chunk")):
            return False
    return True


def _chunk(rng, tokens, chunk_size, headdim, dstate):
    """One chunk of one head: ``tokens`` real positions, zero padding after them."""
    def pad(t):
        return np.pad(t, [(0, chunk_size - tokens)] + [(0, 0)] * (t.ndim - 1))

    x = pad(rng.standard_normal((tokens, headdim)))
    dt = pad(rng.uniform(0.05, 0.5, tokens))
    B = pad(rng.standard_normal((tokens, dstate)))
    C = pad(rng.standard_normal((tokens, dstate)))
    A = -float(rng.uniform(0.5, 2.0))
    return x, dt, A, B, C, np.cumsum(dt * A)


CHUNK_CASES = [
    # (real tokens, chunk_size, headdim, dstate)
    (16, 16, 4, 8),
    (5, 8, 3, 2),
]


def _inflow(weight, x, B):
    """sum_i weight_i x_i ⊗ B_i, the tokens' contribution to the state."""
    return np.einsum("s,sp,sn->pn", weight, x, B)


# Exercise 2's catalogue: (a wrong jump(state, x, dt, dA_cumsum, B), the diagnosis). The first
# entry whose answer matches the learner's names the mistake.
JUMP_MISTAKES = [
    (lambda state, x, dt, dA, B: state + _inflow(np.exp(dA[-1] - dA) * dt, x, B),
     "the old state decays over the chunk too: start from exp(dA_last) * h."),
    (lambda state, x, dt, dA, B: np.exp(dA[-1]) * state + _inflow(np.exp(dA) * dt, x, B),
     "token i decays from i to the chunk's end: weight exp(dA_last - dA_i), not exp(dA_i)."),
    (lambda state, x, dt, dA, B: np.exp(dA[-1]) * state + _inflow(np.exp(dA[-1] - dA), x, B),
     "each token enters as dt_i x_i ⊗ B_i: multiply the weight by dt_i."),
    (lambda state, x, dt, dA, B: np.exp(dA[-1]) * state + _inflow((dA[-1] - dA) * dt, x, B),
     "the weight is the exponent without its exp: exp(dA_last - dA_i), not dA_last - dA_i."),
    (lambda state, x, dt, dA, B: np.exp(dA[-1]) * state
     + _inflow(np.exp(dA[-1] - np.concatenate([[0.0], dA[:-1]])) * dt, x, B),
     "token i also decays over its own step (off by one): it enters after that step's "
     "decay, so its weight is exp(dA_last - dA_i), not exp(dA_last - dA_(i-1)); the last "
     "token enters undecayed."),
]


def _jump_hint(got, state, x, dt, dA, B):
    if np.shape(got) != state.shape:
        return (f"the state is (headdim, dstate) = {state.shape}: x_i ⊗ B_i is "
                "np.outer(x_i, B_i), so sum over i of weight_i * x[i, :, None] * B[i, None, :].")
    for wrong_answer, hint in JUMP_MISTAKES:
        if np.allclose(got, wrong_answer(state, x, dt, dA, B)):
            return hint
    return "h_next = exp(dA_last) h + sum_i exp(dA_last - dA_i) dt_i x_i ⊗ B_i."


@exercise("03.2")
def check_jump(jump):
    """``jump(state, x, dt, dA_cumsum, B)`` must equal running the recurrence over the chunk."""
    rng = np.random.default_rng(6)
    for tokens, chunk_size, headdim, dstate in CHUNK_CASES:
        x, dt, A, B, C, dA = _chunk(rng, tokens, chunk_size, headdim, dstate)
        state = rng.standard_normal((headdim, dstate))
        got = attempt("jump", jump, state.copy(), x.copy(), dt.copy(), dA.copy(), B.copy())
        if got is NOT_DONE:
            return False
        _, expected = ssd_recurrent(
            _one(x[:tokens]), _one(dt[:tokens]), np.array([A]), _one(B[:tokens]),
            _one(C[:tokens]), initial_states=state[None, None], return_final_states=True)
        label = f"jump, {tokens} tokens in a chunk of {chunk_size}"
        if not compare(label, got, expected[0, 0], hint=_jump_hint(got, state, x, dt, dA, B),
                       axes=("channel", "state"), picture=("channel", "state")):
            return False
    return True


def _pairwise(dA):
    """exp-argument of the intra-chunk decay: dA_i - dA_j on and below the diagonal, -inf above."""
    s = len(dA)
    return np.where(np.tril(np.ones((s, s), dtype=bool)), dA[:, None] - dA[None, :], -np.inf)


def _inter(dA, C, h_enter):
    """The entering state's share of each output row, exp(dA_i) C_i h_enter."""
    return np.exp(dA)[:, None] * (C @ h_enter.T)


def _intra(dA, B, C, dt, x, mask=0):
    """(L ∘ C Bᵀ)(dt x), the mask keeping j <= i (``mask=0``) or j < i (``mask=-1``)."""
    return (np.exp(_pairwise(dA)) * np.tril(C @ B.T, k=mask)) @ (dt[:, None] * x)


# Exercise 3's catalogue: (a wrong chunk_output(x, dt, dA_cumsum, B, C, h_enter), the diagnosis).
OUTPUT_MISTAKES = [
    (lambda x, dt, dA, B, C, h: _intra(dA, B, C, dt, x),
     "only the intra-chunk part: add the entering state's share, exp(dA_i) * (C_i · h_enter)."),
    (lambda x, dt, dA, B, C, h: _inter(dA, C, h),
     "only the inter-chunk part: add the chunk's own tokens, (L ∘ C Bᵀ)(dt x)."),
    (lambda x, dt, dA, B, C, h: _inter(dA, C, h) + _intra(dA, B, C, dt, x, mask=-1),
     "the causal mask leaves out the diagonal: token i reads its own input too, so keep "
     "j <= i (np.tril with k=0), not j < i."),
    (lambda x, dt, dA, B, C, h: C @ h.T + _intra(dA, B, C, dt, x),
     "the entering state decays before it reaches token i: scale C_i h_enter by exp(dA_i)."),
    (lambda x, dt, dA, B, C, h: dA[:, None] * (C @ h.T) + _intra(dA, B, C, dt, x),
     "the entering state's decay is dA_i itself, not its exponential: scale C_i h_enter by "
     "exp(dA_i)."),
    (lambda x, dt, dA, B, C, h: _inter(dA, C, h) + (np.exp(_pairwise(dA)) * (C @ B.T)) @ x,
     "each input j enters as dt_j x_j: multiply x by dt (per row) before the mixing."),
    (lambda x, dt, dA, B, C, h: _inter(dA, C, h)
     + (np.exp(_pairwise(dA)).T * (C @ B.T)) @ (dt[:, None] * x),
     "the decay mask is transposed: row i (the output) mixes columns j <= i, "
     "L[i, j] = exp(dA_i - dA_j)."),
]


def _output_hint(got, x, dt, dA, B, C, h_enter):
    if np.shape(got) != x.shape:
        return f"the output has the shape of x_chunk, (chunk_size, headdim) = {x.shape}."
    for wrong_answer, hint in OUTPUT_MISTAKES:
        with np.errstate(invalid="ignore", over="ignore"):
            candidate = wrong_answer(x, dt, dA, B, C, h_enter)
        if np.allclose(got, candidate):
            return hint
    return ("y_i = exp(dA_i) C_i h_enter + sum_{j<=i} exp(dA_i - dA_j) (C_i·B_j) dt_j x_j, "
            "with h_enter of shape (headdim, dstate).")


@exercise("03.3")
def check_chunk_output(chunk_output):
    """``chunk_output(x, dt, dA_cumsum, B, C, h_enter)`` against the package's stage 3."""
    rng = np.random.default_rng(7)
    for tokens, chunk_size, headdim, dstate in CHUNK_CASES:
        x, dt, A, B, C, dA = _chunk(rng, tokens, chunk_size, headdim, dstate)
        h_enter = rng.standard_normal((headdim, dstate))
        got = attempt("chunk_output", chunk_output, x.copy(), dt.copy(), dA.copy(), B.copy(),
                      C.copy(), h_enter.copy())
        if got is NOT_DONE:
            return False
        expected = compute_out(_one(x), _one_chunk(dt), _one_chunk(dA), _one(B), _one(C),
                               _one_chunk(h_enter))[0, :, 0]
        label = f"chunk_output, {tokens} tokens in a chunk of {chunk_size}"
        if not compare(label, got, expected, hint=_output_hint(got, x, dt, dA, B, C, h_enter),
                       axes=("position in chunk", "channel"),
                       picture=("position in chunk", "channel")):
            return False
    return True
