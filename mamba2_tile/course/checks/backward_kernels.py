"""Checks for notebook 12, the backward pass as cuTile kernels.

Each check launches the learner's ``@ct.kernel`` through the course's dispatch point on small
seeded inputs (``seqlen`` not a multiple of the chunk size, ``ngroups > 1``, ``headdim`` /
``dstate`` that are not powers of two), outputs filled with NaN so that a tile never stored shows,
and compares with :mod:`mamba2_tile.reference_backward` (float64). On a mismatch it names the
(batch, head) pairs and the chunks that are wrong, and replays the computation with the usual
mistakes switched on to name the likely one.

The kernels' signatures (the notebook defines them)::

    bwd_state_pass_simple_kernel(dy, C, dA_cumsum, dfinal_states,
                                 dchunk_states, dinitial_states,
                                 CHUNK_SIZE, BLOCK_P, BLOCK_N)            grid (batch, nheads, 1)
    dC_from_states_kernel(dy, dA_cumsum, chunk_states, dC,
                          CHUNK_SIZE, BLOCK_P, BLOCK_N)         grid (batch * nchunks, nheads, 1)

``dchunk_states[b, h, c]`` is the gradient of the state *entering* chunk ``c`` (notebook 11's
``bwd_pass_state``); ``dC`` is per head, ``(batch, seqlen, nheads, dstate)``, the part of ``dC``
that comes from the entering states, ``dC_i = exp(dA_i) h_cᵀ dy_i``.
"""

import numpy as np
import torch

from mamba2_tile import dispatch, reference
from mamba2_tile.course.checks.feedback import (NOT_DONE, attempt, compare, exercise,
                                                 launch_exercise)
from mamba2_tile.kernels.launching import next_power_of_2
from mamba2_tile.reference_backward import bwd_pass_state, compute_out_backward
from mamba2_tile.tolerances import GPU_TOLERANCES, TOLERANCES, to_numpy

# A replayed mistake "is" the learner's answer when it agrees this closely (the mistakes differ
# from the right answer by O(1), far more than any rounding).
_SAME = 1e-2


def _listed(indices, limit=8):
    shown = ", ".join(str(int(i)) for i in indices[:limit])
    return shown + (f" and {len(indices) - limit} more" if len(indices) > limit else "")


def wrong_chunks(got, expected, tol):
    """``{(batch, head): [chunks]}`` where ``got`` (b, h, c, ...) differs from ``expected``."""
    got, expected = to_numpy(got), to_numpy(expected)
    scale = np.sqrt(np.mean(expected ** 2)) if expected.size else 0.0
    with np.errstate(invalid="ignore"):
        bad = ~(np.abs(got - expected) <= tol * (np.abs(expected) + scale))
    bad = bad.reshape(bad.shape[:3] + (-1,)).any(axis=-1)
    return {(int(b), int(h)): [int(c) for c in np.flatnonzero(bad[b, h])]
            for b, h in zip(*np.nonzero(bad.any(axis=-1)))}


def _by_chunk(t, chunk_size):
    """(b, l, h, n) -> (b, h, c, s, n), zero past seqlen: per-token arrays in the layout that
    :func:`wrong_chunks` reads, so Exercise 2's report names chunks as Exercise 1's does."""
    return _chunked(t, chunk_size).transpose(0, 3, 1, 2, 4)


def _print_wrong_chunks(wrong, nchunks):
    pairs = list(wrong.items())
    for (b, h), chunks in pairs[:6]:
        print(f"   batch {b}, head {h}: wrong at chunks {_listed(chunks)} (of 0..{nchunks - 1})")
    if len(pairs) > 6:
        print(f"   ... and {len(pairs) - 6} more (batch, head) pairs.")


def _compare(name, got, expected, tol, hint, axes):
    scale = float(np.sqrt(np.mean(expected ** 2))) if expected.size else 0.0
    return compare(name, got, expected, rtol=tol, atol=tol * scale, hint=hint, axes=axes)


def _inputs(rng, batch, seqlen, nheads, headdim, ngroups, dstate, chunk_size, dtype, device):
    """dy (float32, as the package's backward hands it over), C in ``dtype``, dA_cumsum from the
    stage-1 reference, dfinal_states, and the forward's chunk_states (float32 tensors)."""
    as_f32 = lambda a: torch.tensor(a, dtype=torch.float32, device=device)   # noqa: E731
    dy = as_f32(rng.standard_normal((batch, seqlen, nheads, headdim)))
    C = torch.tensor(rng.standard_normal((batch, seqlen, ngroups, dstate)) * 0.5, dtype=dtype,
                     device=device)
    dA_cumsum, dt = reference.chunk_cumsum(rng.uniform(0.01, 0.3, (batch, seqlen, nheads)),
                                           -rng.uniform(0.2, 2.0, nheads), chunk_size)
    x = rng.standard_normal((batch, seqlen, nheads, headdim))
    B = rng.standard_normal((batch, seqlen, ngroups, dstate)) * 0.5
    chunk_states, _ = reference.fwd_pass_state(x, B, dt, dA_cumsum)
    dfinal = as_f32(rng.standard_normal((batch, nheads, headdim, dstate)))
    return dy, C, as_f32(dA_cumsum), dfinal, as_f32(chunk_states)


def _per_head(C, nheads, group="div"):
    """(b, l, g, n) -> (b, l, h, n): head h reads group h // (nheads // ngroups)."""
    heads = np.arange(nheads)
    ngroups = C.shape[2]
    groups = heads // (nheads // ngroups) if group == "div" else heads % ngroups
    return C[:, :, groups]


def _chunked(t, chunk_size):
    """(b, l, ...) -> (b, c, s, ...), zero past seqlen."""
    pad = -t.shape[1] % chunk_size
    t = np.pad(t, [(0, 0), (0, pad)] + [(0, 0)] * (t.ndim - 2))
    return t.reshape(t.shape[0], -1, chunk_size, *t.shape[2:])


# ---------------------------------------------------------------------------------------------
# Exercise 1: the reverse state pass
# ---------------------------------------------------------------------------------------------

def state_pass_walk(dy, C, dA_cumsum, dfinal, *, order="reverse", carry="own", read="start",
                    store="entering", start="dfinal", group="div"):
    """The reverse state pass in float64, with one deliberate mistake switched on (for hints).

    Returns ``(dchunk_states, dinitial_states)`` as the kernel should store them. The switches:
    ``order`` "forward"; ``carry`` "none" (no decay between chunks), "next" (the decay of the
    chunk visited before, c+1), "after" (the chunk's own term decayed too); ``read`` "none" (no
    exp(dA_i) on dy_i), "jump" (the forward jump's weight exp(dA_last - dA_i)); ``store``
    "leaving" (stored before the update); ``start`` "zero" (dfinal_states ignored); ``group``
    "mod" (head h reading group h % ngroups).
    """
    batch, nheads, nchunks, chunk_size = dA_cumsum.shape
    dyc = _chunked(dy, chunk_size)                                      # (b, c, s, h, p)
    Cc = _chunked(_per_head(C, nheads, group), chunk_size)              # (b, c, s, h, n)
    weight = {"start": np.exp(dA_cumsum), "none": np.ones_like(dA_cumsum),
              "jump": np.exp(dA_cumsum[..., -1:] - dA_cumsum)}[read]    # (b, h, c, s)
    from_outputs = np.einsum("bhcs,bcshp,bcshn->bhcpn", weight, dyc, Cc)
    decay = np.exp(dA_cumsum[..., -1])[..., None, None]                 # (b, h, c, 1, 1)
    g = dfinal.copy() if start == "dfinal" else np.zeros_like(dfinal)
    out = np.empty_like(from_outputs)
    chunks = range(nchunks) if order == "forward" else reversed(range(nchunks))
    previous = None
    for c in chunks:
        if store == "leaving":
            out[:, :, c] = g
        if carry == "own":
            g = decay[:, :, c] * g + from_outputs[:, :, c]
        elif carry == "none":
            g = g + from_outputs[:, :, c]
        elif carry == "next":
            g = (1.0 if previous is None else decay[:, :, previous]) * g + from_outputs[:, :, c]
        else:                                                           # "after"
            g = decay[:, :, c] * (g + from_outputs[:, :, c])
        if store == "entering":
            out[:, :, c] = g
        previous = c
    return out, g


STATE_PASS_MISTAKES = [
    (dict(order="forward"),
     "you walked the chunks forward (0, 1, ...): the state entering chunk c is used by the "
     "*later* chunks, so its gradient comes from the future. Loop k over range(nchunks) and "
     "work on chunk c = nchunks - 1 - k."),
    (dict(store="leaving"),
     "off by one chunk: you stored the gradient before the update, i.e. that of the state "
     "*leaving* chunk c. Store after the update: dchunk_states[c] is dS_c, of the state entering "
     "chunk c."),
    (dict(carry="none"),
     "no decay between chunks: the state entering chunk c reaches the next chunk multiplied by "
     "exp(dA_last), so the gradient coming back is multiplied by it too: "
     "dstate = ct.exp(dA_last) * dstate + ..."),
    (dict(carry="next"),
     "decay off by one chunk: the factor on dS_{c+1} is chunk c's own exp(dA_last) (the jump the "
     "state entering chunk c goes through), loaded in the same iteration, not the one of the "
     "chunk visited before."),
    (dict(carry="after"),
     "the decay multiplies only the gradient coming from the later chunks: chunk c's own outputs "
     "read the state entering it directly. dstate = ct.exp(dA_last) * dstate + (the chunk's sum), "
     "not ct.exp(dA_last) * (dstate + the chunk's sum)."),
    (dict(read="none"),
     "token i of the chunk reads the entering state decayed by exp(dA_cumsum[i]) (y_i = "
     "exp(dA_i) S_c C_i + ...): weight dy_i by ct.exp(dA) before the sum."),
    (dict(read="jump"),
     "that is the forward jump's weight, exp(dA_last - dA_i), which decays a token *to the end* "
     "of the chunk. Here token i *reads* the state from the chunk's start: weight exp(dA_i)."),
    (dict(start="zero"),
     "the walk starts from dfinal_states[b, h] (the gradient of the final state, as float32), "
     "not from zeros."),
    (dict(group="mod"),
     "head h reads the C of group h // (nheads // ngroups) (consecutive heads share a group)."),
]


def _state_pass_hint(got_states, got_initial, dy, C, dA_cumsum, dfinal):
    got_states, got_initial = to_numpy(got_states), to_numpy(got_initial)
    if np.isnan(got_states).any():
        return ("some tiles of dchunk_states were never stored (still NaN): store the block's "
                "(1, 1, 1, BLOCK_P, BLOCK_N) tile at (b, h, c, 0, 0) for every chunk.")
    if np.isnan(got_initial).any():
        return ("dinitial_states was never stored (still NaN): after the loop, store the "
                "gradient that reached the start, a (1, 1, BLOCK_P, BLOCK_N) tile at (b, h, 0, 0).")
    args = [to_numpy(t) for t in (dy, C, dA_cumsum, dfinal)]
    right, _ = state_pass_walk(*args)
    for mistake, hint in STATE_PASS_MISTAKES:
        states, _ = state_pass_walk(*args, **mistake)
        # A mistake that changes nothing on these inputs (group "mod" with one group) names none.
        if not np.allclose(states, right, rtol=_SAME, atol=_SAME) and \
                np.allclose(got_states, states, rtol=_SAME, atol=_SAME):
            return hint
    return ("per chunk, last to first: dstate = exp(dA_last) * dstate + sum_i exp(dA_i) "
            "dy_i ⊗ C_i, then store it at chunk c; after the loop, store dinitial_states.")


STATE_PASS_CASES = [  # batch, seqlen, nheads, headdim, ngroups, dstate, chunk, dtype of C
    (1, 40, 2, 8, 1, 16, 16, torch.float32),
    (2, 45, 4, 6, 2, 12, 16, torch.float16),
]


@exercise("12.1")
def check_bwd_state_pass_simple(kernel, device=None):
    """The learner's reverse state pass (one block per (batch, head)) against the reference."""
    device = device or dispatch.default_device()
    tolerances = GPU_TOLERANCES if device == "cuda" else TOLERANCES
    rng = np.random.default_rng(120)
    name = "bwd_state_pass_simple_kernel"
    for batch, seqlen, nheads, headdim, ngroups, dstate, chunk, dtype in STATE_PASS_CASES:
        dy, C, dA_cumsum, dfinal, _ = _inputs(rng, batch, seqlen, nheads, headdim, ngroups,
                                              dstate, chunk, dtype, device)
        nchunks = dA_cumsum.shape[2]
        dchunk_states = torch.full((batch, nheads, nchunks, headdim, dstate), float("nan"),
                                   device=device)
        dinitial_states = torch.full((batch, nheads, headdim, dstate), float("nan"),
                                     device=device)
        args = (dy, C, dA_cumsum, dfinal, dchunk_states, dinitial_states, chunk,
                next_power_of_2(headdim), next_power_of_2(dstate))
        if attempt(name, launch_exercise, (batch, nheads, 1), kernel, args) is NOT_DONE:
            return False
        expected_states, expected_initial = bwd_pass_state(
            to_numpy(dy), to_numpy(C), to_numpy(dA_cumsum), to_numpy(dfinal))
        label = (f"C {str(dtype)[6:]}, seqlen={seqlen} nheads={nheads} ngroups={ngroups} "
                 f"headdim={headdim} dstate={dstate} chunk={chunk}")
        hint = _state_pass_hint(dchunk_states, dinitial_states, dy, C, dA_cumsum, dfinal)
        tol = tolerances[dtype]
        if not _compare(f"{name} dchunk_states, {label}", dchunk_states, expected_states, tol,
                        hint, ("batch", "head", "chunk", "headdim", "dstate")):
            if not np.isnan(to_numpy(dchunk_states)).all():
                _print_wrong_chunks(wrong_chunks(dchunk_states, expected_states, tol), nchunks)
            return False
        if not _compare(f"{name} dinitial_states, {label}", dinitial_states, expected_initial,
                        tol, hint, ("batch", "head", "headdim", "dstate")):
            return False
    return True


# ---------------------------------------------------------------------------------------------
# Exercise 2: dC from the entering states
# ---------------------------------------------------------------------------------------------

def dC_from_states_reference(dy, dA_cumsum, chunk_states, seqlen):
    """``dC_i = exp(dA_i) h_cᵀ dy_i`` per head, (b, l, h, n): the reference's ``dC`` with ``B``
    set to 0, which removes the intra-chunk part and leaves exactly this one."""
    batch, nheads, nchunks, chunk_size = dA_cumsum.shape
    dstate = chunk_states.shape[-1]
    zeros = np.zeros((batch, seqlen, 1, dstate))
    dt = np.zeros_like(dA_cumsum)
    _, _, dC, _, _ = compute_out_backward(dy, dy, dt, dA_cumsum, zeros, zeros, chunk_states)
    return dC.reshape(batch, nchunks * chunk_size, nheads, dstate)[:, :seqlen]


def dC_walk(dy, dA_cumsum, chunk_states, seqlen, *, weight="start"):
    """``dC`` from the states with one mistake switched on: ``weight`` "none", "jump"
    (exp(dA_last - dA_i)) or "last" (exp(dA_last)). (Reading chunk c + 1's state instead is no
    silent mistake: the last chunk's load falls outside the tile grid and the launch says so.)"""
    batch, nheads, nchunks, chunk_size = dA_cumsum.shape
    dyc = _chunked(dy, chunk_size)                                      # (b, c, s, h, p)
    w = {"start": np.exp(dA_cumsum), "none": np.ones_like(dA_cumsum),
         "jump": np.exp(dA_cumsum[..., -1:] - dA_cumsum),
         "last": np.broadcast_to(np.exp(dA_cumsum[..., -1:]), dA_cumsum.shape)}[weight]
    dC = np.einsum("bhcs,bcshp,bhcpn->bcshn", w, dyc, chunk_states)
    return dC.reshape(batch, nchunks * chunk_size, nheads, -1)[:, :seqlen]


DC_MISTAKES = [
    (dict(weight="none"),
     "token i reads the entering state decayed by exp(dA_cumsum[i]): multiply dy_i (or the "
     "product's row i) by ct.exp(dA)."),
    (dict(weight="jump"),
     "that is the forward jump's weight exp(dA_last - dA_i) (a token decaying to the chunk's "
     "end); token i reads the state from the chunk's start: exp(dA_i)."),
    (dict(weight="last"),
     "each token has its own decay exp(dA_cumsum[i]) (a (CHUNK_SIZE, 1) column), not the "
     "chunk's total exp(dA_last)."),
]


def _dC_hint(got, dy, dA_cumsum, chunk_states, seqlen):
    got = to_numpy(got)
    if np.isnan(got).any():
        return ("some of dC was never stored (still NaN): each block stores its "
                "(1, CHUNK_SIZE, 1, BLOCK_N) tile at (b, c, h, 0).")
    args = [to_numpy(t) for t in (dy, dA_cumsum, chunk_states)]
    for mistake, hint in DC_MISTAKES:
        if np.allclose(got, dC_walk(*args, seqlen, **mistake), rtol=_SAME, atol=_SAME):
            return hint
    return ("dC_i = exp(dA_i) * (dy_i @ h_c): a (CHUNK_SIZE, BLOCK_P) @ (BLOCK_P, BLOCK_N) "
            "product with ct.mma, each row scaled by its token's decay.")


DC_CASES = [  # batch, seqlen, nheads, headdim, ngroups, dstate, chunk
    (1, 40, 2, 16, 1, 16, 16),
    (2, 45, 3, 12, 1, 20, 16),
]


@exercise("12.2")
def check_dC_from_states(kernel, device=None):
    """The learner's ``dC`` from the entering states (one block per chunk and head)."""
    device = device or dispatch.default_device()
    tol = (GPU_TOLERANCES if device == "cuda" else TOLERANCES)[torch.float32]
    rng = np.random.default_rng(121)
    name = "dC_from_states_kernel"
    for batch, seqlen, nheads, headdim, ngroups, dstate, chunk in DC_CASES:
        dy, _, dA_cumsum, _, chunk_states = _inputs(rng, batch, seqlen, nheads, headdim, ngroups,
                                                    dstate, chunk, torch.float32, device)
        nchunks = dA_cumsum.shape[2]
        dC = torch.full((batch, seqlen, nheads, dstate), float("nan"), device=device)
        args = (dy, dA_cumsum, chunk_states, dC, chunk, next_power_of_2(headdim),
                next_power_of_2(dstate))
        if attempt(name, launch_exercise, (batch * nchunks, nheads, 1), kernel,
                   args) is NOT_DONE:
            return False
        expected = dC_from_states_reference(to_numpy(dy), to_numpy(dA_cumsum),
                                            to_numpy(chunk_states), seqlen)
        label = f"seqlen={seqlen} nheads={nheads} headdim={headdim} dstate={dstate} chunk={chunk}"
        hint = _dC_hint(dC, dy, dA_cumsum, chunk_states, seqlen)
        if not _compare(f"{name}, {label}", dC, expected, tol, hint,
                        ("batch", "token", "head", "dstate")):
            got = to_numpy(dC)
            if not np.isnan(got).all():
                _print_wrong_chunks(wrong_chunks(_by_chunk(got, chunk), _by_chunk(expected, chunk),
                                                 tol), nchunks)
            return False
    return True
