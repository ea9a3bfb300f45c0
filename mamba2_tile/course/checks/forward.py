"""Checks for notebook 08, the assembled forward pass.

* ``check_ssd_forward``: the three stage kernels chained into ``(y, final_states)``;
* ``check_forward_in_two_parts``: a sequence processed in two calls, the state handed over;
* ``report_match``: one verdict line comparing a forward pass with a reference, at the
  tolerance documented for the input dtype.

Every comparison uses the kernels' documented bound (``mamba2_tile.tolerances``): elementwise
``|got - expected| <= tol * (|expected| + rms(expected))``, with ``tol`` per input dtype, looser
for float32 on a GPU, where ``ct.mma`` on float32 may run in TF32.
"""

import numpy as np
import torch

from mamba2_tile import dispatch, reference
from mamba2_tile.course.checks.feedback import NOT_DONE, attempt, compare, exercise, fail
from mamba2_tile.tolerances import GPU_TOLERANCES, TOLERANCES



def tolerance(dtype, device):
    """The relative tolerance for outputs computed from inputs of ``dtype`` on ``device``."""
    table = GPU_TOLERANCES if str(device).startswith("cuda") else TOLERANCES
    return table[dtype]


def _np(t):
    return None if t is None else t.detach().to("cpu", torch.float64).numpy()


def report_match(name, got, expected, dtype, device, hint=None):
    """Print ✅/❌ for ``got`` against the float64 ``expected`` at the dtype's tolerance."""
    expected = np.asarray(expected, dtype=np.float64)
    tol = tolerance(dtype, device)
    scale = float(np.sqrt(np.mean(expected ** 2))) if expected.size else 0.0
    return compare(name, got, expected, rtol=tol, atol=tol * scale, hint=hint)


def random_inputs(seed, batch, seqlen, nheads, headdim, ngroups, dstate, dtype=torch.float32,
                  device=None, D=True, z=False, initial_states=False):
    """Seeded SSD inputs as torch tensors: x, B, C (and z) in ``dtype``, the rest float32."""
    device = device or dispatch.default_device()
    rng = np.random.default_rng(seed)

    def tensor(values, dtype=torch.float32):
        return torch.tensor(values, dtype=dtype, device=device)

    inputs = dict(
        x=tensor(rng.standard_normal((batch, seqlen, nheads, headdim)), dtype),
        dt=tensor(rng.uniform(0.01, 0.2, (batch, seqlen, nheads))),
        A=tensor(-rng.uniform(0.5, 2.0, nheads)),
        B=tensor(rng.standard_normal((batch, seqlen, ngroups, dstate)) * 0.5, dtype),
        C=tensor(rng.standard_normal((batch, seqlen, ngroups, dstate)) * 0.5, dtype),
    )
    if D:
        inputs["D"] = tensor(rng.standard_normal(nheads))
    if z:
        inputs["z"] = tensor(rng.standard_normal((batch, seqlen, nheads, headdim)), dtype)
    if initial_states:
        inputs["initial_states"] = tensor(rng.standard_normal((batch, nheads, headdim, dstate)))
    return inputs


def expected_forward(x, dt, A, B, C, D=None, z=None, initial_states=None):
    """``(y, final_states)`` in float64 by the recurrence, with the optional gate applied."""
    y, final_states = reference.ssd_recurrent(
        _np(x), _np(dt), _np(A), _np(B), _np(C), D=_np(D), initial_states=_np(initial_states),
        return_final_states=True,
    )
    if z is not None:
        z = _np(z)
        y = y * z / (1.0 + np.exp(-z))
    return y, final_states


def _close(got, candidate, tol):
    if got is None:
        return False
    got = _np(got) if isinstance(got, torch.Tensor) else np.asarray(got, dtype=np.float64)
    scale = float(np.sqrt(np.mean(candidate ** 2)))
    return got.shape == candidate.shape and np.allclose(got, candidate, rtol=tol, atol=tol * scale)


def _call_for_pair(name, fn, *args, **kwargs):
    """Run the learner's function, which must return ``(y, final_states)``; None otherwise."""
    result = attempt(name, fn, *args, **kwargs)
    if result is NOT_DONE:
        return None
    if not (isinstance(result, (tuple, list)) and len(result) == 2):
        fail(f"❌ {name}: expected a pair (y, final_states), got {type(result).__name__}.")
        return None
    return result


# --------------------------------------------------------------------------------------------
# Exercise 1: chain the three stages
# --------------------------------------------------------------------------------------------

def _forward_hint(got_y, got_final, inputs, tol):
    y_no_h0, final_no_h0 = expected_forward(**{**inputs, "initial_states": None})
    if "initial_states" in inputs and _close(got_final, final_no_h0, tol):
        return ("the run ignored initial_states: pass it to fwd_pass_state, which starts the "
                "walk over the chunks from it.")
    if "D" in inputs and _close(got_y, expected_forward(**{**inputs, "D": None})[0], tol):
        return "the skip connection is missing: pass D to compute_out."
    if "z" in inputs and _close(got_y, expected_forward(**{**inputs, "z": None})[0], tol):
        return "the gate is missing: pass z to compute_out."
    return ("chunk_cumsum(dt, A, chunk_size) gives (dA_cumsum, dt in chunks); stage 2 and 3 take "
            "that chunked dt, not the raw one: fwd_pass_state(x, B, dt_c, dA_cumsum, "
            "initial_states) -> (chunk_states, final_states); compute_out(x, dt_c, dA_cumsum, B, "
            "C, chunk_states, D=D, z=z) -> y.")


@exercise("08.1")
def check_ssd_forward(ssd_forward, device=None):
    """``ssd_forward(x, dt, A, B, C, chunk_size, D=None, z=None, initial_states=None)``
    returning ``(y, final_states)``, against the float64 recurrence."""
    name = "ssd_forward"
    device = device or dispatch.default_device()
    cases = [  # seed, batch, seqlen, nheads, headdim, ngroups, dstate, chunk_size, options
        (80, 1, 100, 4, 8, 2, 8, 64, dict(initial_states=True)),
        (81, 2, 150, 2, 6, 1, 12, 64, dict(z=True)),
    ]
    for seed, batch, seqlen, nheads, headdim, ngroups, dstate, chunk_size, options in cases:
        inputs = random_inputs(seed, batch, seqlen, nheads, headdim, ngroups, dstate,
                               device=device, **options)
        tensors = {k: v for k, v in inputs.items() if k not in ("x", "dt", "A", "B", "C")}
        result = _call_for_pair(name, ssd_forward, inputs["x"], inputs["dt"], inputs["A"],
                                inputs["B"], inputs["C"], chunk_size, **tensors)
        if result is None:
            return False
        y, final_states = result
        expected_y, expected_final = expected_forward(**inputs)
        label = (f"seqlen={seqlen} nheads={nheads} ngroups={ngroups} chunk_size={chunk_size}, "
                 f"with {', '.join(sorted(tensors))}")
        tol = tolerance(torch.float32, device)
        hint = _forward_hint(y, final_states, inputs, tol)
        if not report_match(f"{name} final_states, {label}", final_states, expected_final,
                            torch.float32, device, hint=hint):
            return False
        if not report_match(f"{name} y, {label}", y, expected_y, torch.float32, device,
                            hint=hint):
            return False
    return True


# --------------------------------------------------------------------------------------------
# Exercise 2: one sequence, two calls
# --------------------------------------------------------------------------------------------

def _two_parts_hint(got_y, inputs, split, tol):
    expected_y, _ = expected_forward(**inputs)
    got = _np(got_y) if isinstance(got_y, torch.Tensor) else np.asarray(got_y, dtype=np.float64)
    if got.shape != expected_y.shape:
        return ("y must cover the whole sequence: concatenate the two parts' outputs along "
                "seqlen (dim 1).")
    second = {k: (v[:, split:] if k in ("x", "dt", "B", "C") else v) for k, v in inputs.items()}
    restarted, _ = expected_forward(**second)
    if _close(got[:, split:], restarted, tol):
        return ("the second part started from a zero state: pass the first part's final state "
                "as initial_states (call the first part with return_final_states=True).")
    return ("part 1: x[:, :split] etc. with return_final_states=True; part 2: x[:, split:] "
            "with initial_states = part 1's final state; then torch.cat the two y on dim 1.")


@exercise("08.2")
def check_forward_in_two_parts(forward_in_two_parts, device=None):
    """``forward_in_two_parts(x, dt, A, B, C, chunk_size, split)`` returning
    ``(y, final_states)`` for the whole sequence, against one float64 recurrence over it."""
    name = "forward_in_two_parts"
    device = device or dispatch.default_device()
    cases = [  # seed, batch, seqlen, nheads, headdim, ngroups, dstate, chunk_size, split
        (82, 1, 130, 2, 8, 1, 8, 64, 64),
        (83, 2, 150, 4, 4, 2, 8, 64, 37),        # a split inside a chunk
    ]
    for seed, batch, seqlen, nheads, headdim, ngroups, dstate, chunk_size, split in cases:
        inputs = random_inputs(seed, batch, seqlen, nheads, headdim, ngroups, dstate,
                               device=device, D=False)
        result = _call_for_pair(name, forward_in_two_parts, inputs["x"], inputs["dt"],
                                inputs["A"], inputs["B"], inputs["C"], chunk_size, split)
        if result is None:
            return False
        y, final_states = result
        expected_y, expected_final = expected_forward(**inputs)
        label = f"seqlen={seqlen} split={split} chunk_size={chunk_size}"
        tol = tolerance(torch.float32, device)
        hint = _two_parts_hint(y, inputs, split, tol)
        if not report_match(f"{name} y, {label}", y, expected_y, torch.float32, device,
                            hint=hint):
            return False
        if not report_match(f"{name} final_states, {label}", final_states, expected_final,
                            torch.float32, device,
                            hint="return the final state of the *second* call."):
            return False
    return True
