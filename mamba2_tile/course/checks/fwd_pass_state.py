"""Checks for notebook 06, the ``fwd_pass_state`` kernel (stage 2 of the chunked SSD).

Each check launches the learner's ``@ct.kernel`` through :func:`mamba2_tile.dispatch.launch` on
small seeded inputs (``seqlen`` not a multiple of the chunk size, ``ngroups > 1``, ``headdim`` /
``dstate`` that are not powers of two), feeding it ``dt`` and ``dA_cumsum`` from the stage-1
reference, and compares ``chunk_states`` (b, h, c, p, n) and ``final_states`` (b, h, p, n) with
:func:`mamba2_tile.reference.fwd_pass_state`. On a mismatch it replays the walk with the usual
mistakes to name the likely one.

The kernels' signatures (the notebook defines them in this order)::

    fwd_pass_state_simple_kernel(x, B, dt, dA_cumsum, chunk_states, final_states,
                                 CHUNK_SIZE, BLOCK_P, BLOCK_N)           grid (b, h, 1)
    fwd_pass_state_tiled_kernel / fwd_pass_state_mma_kernel(
        x, B, dt, dA_cumsum, initial_states, chunk_states, final_states,
        CHUNK_SIZE, BLOCK_P, BLOCK_N, HAS_INITIAL_STATES)                grid (b*h, p/BLOCK_P, n/BLOCK_N)

the last two with the signature of the package's own kernel.
"""

import numpy as np
import torch

from mamba2_tile import dispatch, reference
from mamba2_tile.course.checks.feedback import (NOT_DONE, attempt, compare, exercise,
                                                 launch_exercise)
from mamba2_tile.kernels.launching import cdiv, next_power_of_2
from mamba2_tile.tolerances import GPU_TOLERANCES, TOLERANCES





def _np(t):
    return t.detach().to("cpu", torch.float64).numpy()


def _inputs(rng, batch, seqlen, nheads, headdim, ngroups, dstate, chunk_size, dtype, device):
    """Stage-2 inputs as torch tensors; dt and dA_cumsum come from the stage-1 reference."""
    x = torch.tensor(rng.standard_normal((batch, seqlen, nheads, headdim)), dtype=dtype,
                     device=device)
    B = torch.tensor(rng.standard_normal((batch, seqlen, ngroups, dstate)) * 0.5, dtype=dtype,
                     device=device)
    dA_cumsum, dt = reference.chunk_cumsum(rng.uniform(0.01, 0.3, (batch, seqlen, nheads)),
                                           -rng.uniform(0.2, 2.0, nheads), chunk_size)
    as_f32 = lambda a: torch.tensor(a, dtype=torch.float32, device=device)   # noqa: E731
    initial_states = as_f32(rng.standard_normal((batch, nheads, headdim, dstate)))
    return x, B, as_f32(dt), as_f32(dA_cumsum), initial_states


def _outputs(x, B, nchunks, device):
    """Outputs filled with NaN, so a tile the kernel never stores shows up as NaN."""
    batch, _, nheads, headdim = x.shape
    dstate = B.shape[3]
    nan = float("nan")
    return (torch.full((batch, nheads, nchunks, headdim, dstate), nan, device=device),
            torch.full((batch, nheads, headdim, dstate), nan, device=device))


def _walk(x, B, dt, dA_cumsum, h0, *, store_after=False, decay_state=True, weight="jump",
          group="div"):
    """The chunk walk of the reference, with one deliberate mistake switched on (for hints)."""
    batch, nheads, nchunks, chunk = dA_cumsum.shape
    ngroups = B.shape[2]
    pad = nchunks * chunk - x.shape[1]
    xc = np.pad(x, ((0, 0), (0, pad), (0, 0), (0, 0))).reshape(batch, nchunks, chunk, nheads, -1)
    Bc = np.pad(B, ((0, 0), (0, pad), (0, 0), (0, 0))).reshape(batch, nchunks, chunk, ngroups, -1)
    heads = np.arange(nheads)
    groups = heads // (nheads // ngroups) if group == "div" else heads % ngroups
    Bc = Bc[:, :, :, groups]
    state = np.zeros((batch, nheads, x.shape[3], B.shape[3])) if h0 is None else h0.copy()
    states = np.empty((batch, nheads, nchunks) + state.shape[2:])
    for c in range(nchunks):
        if not store_after:
            states[:, :, c] = state
        dA = dA_cumsum[:, :, c]
        last = dA[..., -1:]
        w = {"jump": np.exp(last - dA) * dt[:, :, c], "no_dt": np.exp(last - dA),
             "from_start": np.exp(dA) * dt[:, :, c]}[weight]
        inflow = np.einsum("bhs,bshp,bshn->bhpn", w, xc[:, c], Bc[:, c])
        state = (np.exp(last)[..., None] if decay_state else 1.0) * state + inflow
        if store_after:
            states[:, :, c] = state
    return states, state


_MISTAKES = [
    (dict(store_after=True),
     "chunk_states[c] is the state *entering* chunk c: store it before the update, not after."),
    (dict(decay_state=False),
     "the old state must decay across the chunk: multiply it by exp(dA_last) before adding."),
    (dict(weight="from_start"),
     "token i decays from its own position to the chunk's end: weight exp(dA_last - dA_i) * dt_i, "
     "not exp(dA_i)."),
    (dict(weight="no_dt"), "each token enters the state scaled by its step: weight * dt_i."),
    (dict(group="mod"),
     "head h reads the B of group h // (nheads // ngroups) (consecutive heads share a group)."),
]


def _hint(got_states, got_final, x, B, dt, dA_cumsum, h0):
    got_states, got_final = _np(got_states), _np(got_final)
    if np.isnan(got_states).any() or np.isnan(got_final).any():
        return ("some tiles were never stored (still NaN): every block stores its tile of "
                "chunk_states for every chunk, and of final_states after the loop.")
    args = (_np(x), _np(B), _np(dt), _np(dA_cumsum))
    if h0 is not None:
        ignored, _ = _walk(*args, None)
        if np.allclose(got_states, ignored, rtol=1e-2, atol=1e-2):
            return ("initial_states is ignored: when HAS_INITIAL_STATES the walk starts from "
                    "initial_states[b, h] (as float32), otherwise from zeros.")
    h0 = None if h0 is None else _np(h0)
    for mistake, hint in _MISTAKES:
        states, final = _walk(*args, h0, **mistake)
        if np.allclose(got_states, states, rtol=1e-2, atol=1e-2) and \
                np.allclose(got_final, final, rtol=1e-2, atol=1e-2):
            return hint
    return ("per chunk: store the state, then h = exp(dA_last) * h + sum_i w_i x_i ⊗ B_i with "
            "w_i = exp(dA_last - dA_i) * dt_i.")


# The two outputs' axes, named for the learner, and the two drawn when one is wrong: the state's
# entries (channel by state) along x, the chunk (or head) it belongs to along y.
_AXES = {
    "chunk_states": (("batch", "head", "chunk", "channel", "state"),
                     ("chunk", ("channel", "state"))),
    "final_states": (("batch", "head", "channel", "state"), ("head", ("channel", "state"))),
}


def _compare(name, what, label, got, expected, tol, hint):
    scale = float(np.sqrt(np.mean(expected ** 2))) if expected.size else 0.0
    axes, picture = _AXES[what]
    return compare(f"{name} {what}, {label}", got, expected, rtol=tol, atol=tol * scale,
                   hint=hint, axes=axes, picture=picture)


def _run(name, kernel, cases, tiled, device):
    device = device or dispatch.default_device()
    tolerances = GPU_TOLERANCES if device == "cuda" else TOLERANCES
    rng = np.random.default_rng(60 + tiled)
    for batch, seqlen, nheads, headdim, ngroups, dstate, chunk, block, dtype, with_h0 in cases:
        x, B, dt, dA_cumsum, h0 = _inputs(rng, batch, seqlen, nheads, headdim, ngroups, dstate,
                                          chunk, dtype, device)
        h0 = h0 if with_h0 else None
        chunk_states, final_states = _outputs(x, B, dA_cumsum.shape[2], device)
        if tiled:
            block_p, block_n = block
            grid = (batch * nheads, cdiv(headdim, block_p), cdiv(dstate, block_n))
            args = (x, B, dt, dA_cumsum, torch.zeros(1, device=device) if h0 is None else h0,
                    chunk_states, final_states, chunk, block_p, block_n, h0 is not None)
        else:
            block_p, block_n = next_power_of_2(headdim), next_power_of_2(dstate)
            grid = (batch, nheads, 1)
            args = (x, B, dt, dA_cumsum, chunk_states, final_states, chunk, block_p, block_n)
        if attempt(name, launch_exercise, grid, kernel, args) is NOT_DONE:
            return False
        expected = reference.fwd_pass_state(_np(x), _np(B), _np(dt), _np(dA_cumsum),
                                            None if h0 is None else _np(h0))
        label = (f"{str(dtype)[6:]}, seqlen={seqlen} nheads={nheads} ngroups={ngroups} "
                 f"headdim={headdim} dstate={dstate} chunk={chunk} tile={block_p}x{block_n}"
                 + (" +initial_states" if h0 is not None else ""))
        hint = _hint(chunk_states, final_states, x, B, dt, dA_cumsum, h0)
        tol = tolerances[dtype]
        for what, got, exp in [("chunk_states", chunk_states, expected[0]),
                               ("final_states", final_states, expected[1])]:
            if not _compare(name, what, label, got, exp, tol, hint):
                return False
    return True


@exercise("06.1")
def check_fwd_pass_state_simple(kernel, device=None):
    """One block per (batch, head) holding the whole (headdim, dstate) state; no initial state."""
    cases = [  # batch, seqlen, nheads, headdim, ngroups, dstate, chunk, block, dtype, h0
        (1, 40, 2, 8, 1, 16, 16, None, torch.float32, False),
        (2, 45, 4, 6, 2, 12, 16, None, torch.float16, False),
    ]
    return _run("fwd_pass_state_simple_kernel", kernel, cases, tiled=False, device=device)


@exercise("06.2")
def check_fwd_pass_state_tiled(kernel, device=None):
    """Blocks own (BLOCK_P, BLOCK_N) tiles of the state; optional initial_states."""
    cases = [
        (1, 40, 2, 8, 1, 16, 16, (4, 8), torch.float32, False),
        (2, 45, 4, 12, 2, 20, 16, (8, 8), torch.float32, True),
    ]
    return _run("fwd_pass_state_tiled_kernel", kernel, cases, tiled=True, device=device)


@exercise("06.3")
def check_fwd_pass_state_mma(kernel, device=None):
    """The tensor-core version, in float16 / bfloat16 (and float32) with per-dtype tolerances."""
    cases = [
        (1, 40, 2, 16, 1, 16, 16, (16, 16), torch.float16, False),
        (2, 45, 4, 24, 2, 20, 16, (16, 16), torch.bfloat16, True),
        (1, 50, 2, 16, 2, 32, 32, (16, 16), torch.float32, True),
    ]
    return _run("fwd_pass_state_mma_kernel", kernel, cases, tiled=True, device=device)
