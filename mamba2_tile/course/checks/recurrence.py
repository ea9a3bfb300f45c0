"""Checks for notebook 01: one step of the recurrence, then the whole batched scan.

The expected answers come from ``mamba2_tile.reference.ssd_recurrent``. When an answer is wrong,
the check also computes the answers the most common mistakes would give (reading ``y`` from the
old state, forgetting ``dt`` or the decay, the wrong group for a head...) and, if the learner's
answer equals one of them, the hint names that mistake instead of a generic one.
"""

import numpy as np

from mamba2_tile.course.checks.feedback import NOT_DONE, attempt, compare, exercise, fail
from mamba2_tile.reference import ssd_recurrent

HEADDIM, DSTATE = 5, 3      # different, so a transposed state or outer product shows in its shape


def _likely_mistake(got, suspects, default):
    """The hint of the first wrong answer that ``got`` reproduces, else ``default``."""
    got = np.asarray(got, dtype=np.float64)
    for wrong, hint in suspects:
        if got.shape == wrong.shape and np.allclose(got, wrong, atol=1e-10, rtol=1e-8):
            return hint
    return default


# --------------------------------------------------------------------------------------------
# One token, one head
# --------------------------------------------------------------------------------------------

def _step_trials(seed=0):
    """Seeded single-token inputs; ``dt`` from tiny to large, so decay and input both matter."""
    rng = np.random.default_rng(seed)
    return [dict(state=rng.standard_normal((HEADDIM, DSTATE)),
                 x_t=rng.standard_normal(HEADDIM),
                 dt_t=float(dt_t),
                 A=float(-rng.uniform(0.5, 2.0)),
                 B_t=rng.standard_normal(DSTATE),
                 C_t=rng.standard_normal(DSTATE))
            for dt_t in (0.05, 0.3, 1.0, 2.5)]


def _reference_step(state, x_t, dt_t, A, B_t, C_t):
    """One token through the package's ``ssd_recurrent`` (batch, seqlen, nheads, ngroups = 1)."""
    y, new_state = ssd_recurrent(
        x_t[None, None, None], np.array([[[dt_t]]]), np.array([A]), B_t[None, None, None],
        C_t[None, None, None], initial_states=state[None, None], return_final_states=True)
    return new_state[0, 0], y[0, 0, 0]


# The usual mistakes in the state update, each with the hint that names it.
_UPDATE_MISTAKES = (
    (lambda state, x_t, dt_t, A, B_t: state + dt_t * np.outer(x_t, B_t),
     "the old state must shrink first: multiply it by exp(dt_t * A) (a number in (0, 1))."),
    (lambda state, x_t, dt_t, A, B_t: np.exp(A) * state + dt_t * np.outer(x_t, B_t),
     "the decay is exp(dt_t * A), not exp(A): dt_t is the step size of the update."),
    (lambda state, x_t, dt_t, A, B_t: np.exp(dt_t * A) * state + np.outer(x_t, B_t),
     "the new input is scaled by dt_t too: + dt_t * np.outer(x_t, B_t)."),
)


def _step_suspects(trials, right_states):
    """Per mistake: the (states, ys) it would produce over ``trials``, and its hint."""
    C = np.stack([t["C_t"] for t in trials])
    suspects = []
    for update, hint in _UPDATE_MISTAKES:
        states = np.stack([update(t["state"], t["x_t"], t["dt_t"], t["A"], t["B_t"])
                           for t in trials])
        suspects.append(((states, np.einsum("kpn,kn->kp", states, C)), hint))
    old_y = np.einsum("kpn,kn->kp", np.stack([t["state"] for t in trials]), C)
    suspects.append(((right_states, old_y),
                     "y_t reads the UPDATED state: compute the new state first, then "
                     "y_t = new_state @ C_t."))
    return suspects


@exercise("01.1")
def check_ssd_step(fn):
    """Check ``ssd_step(state, x_t, dt_t, A, B_t, C_t) -> (new_state, y_t)`` for one head."""
    trials = _step_trials()
    got_states, got_ys = [], []
    for trial in trials:
        given = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in trial.items()}
        result = attempt("ssd_step", fn, **given)
        if result is NOT_DONE:
            return False
        if not (isinstance(result, tuple) and len(result) == 2):
            fail("❌ ssd_step must return a pair: `return new_state, y_t`.")
            return False
        got_states.append(np.asarray(result[0]))
        got_ys.append(np.asarray(result[1]))
    expected = [_reference_step(**t) for t in trials]
    expected_states = np.stack([s for s, _ in expected])
    expected_ys = np.stack([y for _, y in expected])
    print(f"Tried {len(trials)} tokens (index [trial, ...]) with headdim={HEADDIM}, "
          f"dstate={DSTATE}, dt_t from {trials[0]['dt_t']} to {trials[-1]['dt_t']}.")
    suspects = _step_suspects(trials, expected_states)
    try:
        got_states, got_ys = np.stack(got_states), np.stack(got_ys)
    except ValueError:
        fail("❌ ssd_step returned arrays of different shapes for different tokens.")
        return False
    state_hint = _likely_mistake(
        got_states, [(states, hint) for (states, _), hint in suspects],
        "new_state = exp(dt_t * A) * state + dt_t * np.outer(x_t, B_t), shape (headdim, dstate).")
    y_hint = _likely_mistake(
        got_ys, [(ys, hint) for (_, ys), hint in suspects],
        "y_t = new_state @ C_t, shape (headdim,).")
    state_ok = compare("new_state", got_states, expected_states, hint=state_hint,
                       axes=("trial", "channel", "state"),
                       picture=("trial", ("channel", "state")))
    y_ok = compare("y_t", got_ys, expected_ys, hint=y_hint, axes=("trial", "channel"),
                   picture=("trial", "channel"))
    return state_ok and y_ok


# --------------------------------------------------------------------------------------------
# The whole sequence, batched over heads and groups
# --------------------------------------------------------------------------------------------

_SCAN_CASES = (
    # ngroups > 1 with several heads per group, both shapes of D, seqlen 1, with and without h0.
    dict(batch=2, seqlen=7, nheads=4, headdim=3, ngroups=2, dstate=5, D="(nheads,)", h0=True),
    dict(batch=1, seqlen=13, nheads=6, headdim=4, ngroups=3, dstate=2, D="(nheads, headdim)",
         h0=False),
    dict(batch=3, seqlen=1, nheads=2, headdim=2, ngroups=1, dstate=3, D=None, h0=False),
)


def _scan_inputs(case, rng):
    b, l, h, p, g, n = (case[k] for k in ("batch", "seqlen", "nheads", "headdim", "ngroups",
                                          "dstate"))
    D = {None: None, "(nheads,)": rng.standard_normal(h),
         "(nheads, headdim)": rng.standard_normal((h, p))}[case["D"]]
    return dict(
        x=rng.standard_normal((b, l, h, p)),
        dt=rng.uniform(0.05, 1.5, (b, l, h)),
        A=-rng.uniform(0.2, 2.0, h),
        B=rng.standard_normal((b, l, g, n)),
        C=rng.standard_normal((b, l, g, n)),
        D=D,
        initial_states=rng.standard_normal((b, h, p, n)) if case["h0"] else None,
    )


def _scan_suspects(inputs):
    """Per mistake: the (y, final_states) it would produce, and a hint naming it."""
    def run(**changes):
        return ssd_recurrent(**{**inputs, **changes}, return_final_states=True)

    nheads, ngroups = inputs["x"].shape[2], inputs["B"].shape[2]
    modulo = np.arange(nheads) % ngroups                                   # the wrong mapping
    suspects = [
        (run(B=inputs["B"][:, :, modulo], C=inputs["C"][:, :, modulo]),
         "head h reads group h // (nheads // ngroups) (consecutive heads share a group), "
         "not h % ngroups."),
        (run(D=None), "add the skip connection D * x (D is (nheads,) or (nheads, headdim): "
                      "broadcast it against x's last two axes)."),
    ]
    if inputs["initial_states"] is not None:
        suspects.append((run(initial_states=None),
                         "start from initial_states when it is given (a copy: do not modify "
                         "the caller's array), from zeros otherwise."))
    without_dt = run(x=inputs["x"] / inputs["dt"][..., None], D=None)
    if inputs["D"] is not None:
        D = inputs["D"]
        skip = inputs["x"] * (D[:, None] if D.ndim == 1 else D)
        without_dt = (without_dt[0] + skip, without_dt[1])
    suspects.append((without_dt, "the input written into the state is dt_t * x_t ⊗ B_t: "
                                 "scale x by dt."))
    return suspects


@exercise("01.2")
def check_ssd_scan(fn):
    """Check ``ssd_scan(x, dt, A, B, C, D=None, initial_states=None) -> (y, final_states)``."""
    rng = np.random.default_rng(1)
    for number, case in enumerate(_SCAN_CASES, start=1):
        inputs = _scan_inputs(case, rng)
        given = {k: v.copy() if v is not None else None for k, v in inputs.items()}
        result = attempt("ssd_scan", fn, **given)
        if result is NOT_DONE:
            return False
        if not (isinstance(result, tuple) and len(result) == 2):
            fail("❌ ssd_scan must return a pair: `return y, final_states`.")
            return False
        print(f"Case {number}/{len(_SCAN_CASES)}: batch={case['batch']}, "
              f"seqlen={case['seqlen']}, nheads={case['nheads']}, headdim={case['headdim']}, "
              f"ngroups={case['ngroups']}, dstate={case['dstate']}, "
              f"D {case['D'] or 'None'}, initial_states {'given' if case['h0'] else 'None'}")
        expected_y, expected_final = ssd_recurrent(**inputs, return_final_states=True)
        suspects = _scan_suspects(inputs)
        y_hint = _likely_mistake(
            result[0], [(y, hint) for (y, _), hint in suspects],
            "y has x's layout (batch, seqlen, nheads, headdim); y_t = h_t @ C_t + D * x_t, "
            "read from the state AFTER token t's update.")
        final_hint = _likely_mistake(
            result[1], [(final, hint) for (_, final), hint in suspects],
            "final_states is the state after the last token, (batch, nheads, headdim, dstate).")
        y_ok = compare("y", result[0], expected_y, hint=y_hint,
                       axes=("batch", "token", "head", "channel"),
                       picture=("token", ("head", "channel")))
        final_ok = compare("final_states", result[1], expected_final, hint=final_hint,
                           axes=("batch", "head", "channel", "state"),
                           picture=("head", ("channel", "state")))
        if not (y_ok and final_ok):
            return False
    return True
