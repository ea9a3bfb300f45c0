"""NaN and infinite parameters come out as the float64 recurrence says (issue #15, item 3).

The ``dt`` clamp used to ignore NaN (``maximum(NaN, 0) = 0``): a NaN ``dt`` skipped its token
and a NaN ``dt_bias[h]`` zeroed head ``h``, where the recurrence is NaN from that token on. A
NaN ``A`` was hidden the same way by the decays' clamp, and ``A = -inf`` (the recurrence just
forgets the state at every token) gave NaN through ``-inf - -inf`` in ``dA_cumsum``. Every path
of the plan is checked: NaN exactly where the reference has NaN, the rest within tolerance.
"""

import numpy as np
import pytest
import torch

from mamba2_tile.api import forward_with_options
from mamba2_tile.kernels import DEFAULT_OPTIONS
from mamba2_tile.tolerances import TOLERANCES, assert_close
from ssd_cases import Case, expected_output, make_case

PATHS = {
    "fused": DEFAULT_OPTIONS.with_switches(fuse_state_passing=True, segment_chunks=None),
    "three kernels": DEFAULT_OPTIONS.with_switches(fuse_state_passing=False),
    "sequence parallel": DEFAULT_OPTIONS.with_switches(fuse_state_passing=True,
                                                       segment_chunks=1),
}
NAN, INF = float("nan"), float("inf")


def dt_at(token, head):
    def poison(t):
        t["dt"][0, token, head] = NAN
    return poison


def dt_bias_of(head):
    def poison(t):
        t["dt_bias"][head] = NAN
    return poison


def A_of(head, value):
    def poison(t):
        t["A"][head] = value
    return poison


CASES = {
    "dt NaN mid-chunk": (dt_at(100, 1), {}),
    "dt NaN in the first chunk": (dt_at(10, 0), {}),
    "dt NaN, softplus": (dt_at(100, 1), dict(dt_softplus=True)),
    "dt NaN, dt_limit": (dt_at(70, 0), dict(dt_limit=(0.02, 0.15))),
    "dt_bias NaN": (dt_bias_of(1), {}),
    "A NaN": (A_of(0, NAN), {}),
    "A -inf": (A_of(1, -INF), {}),
}


def run(case, poison, path):
    t = make_case(case)
    poison(t)
    y, final_states = forward_with_options(chunk_size=64, options=PATHS[path],
                                           return_final_states=True, dt_softplus=case.dt_softplus,
                                           dt_limit=case.dt_limit, **t)
    return (y, final_states), expected_output(case)


def check(got, expected, tol, what, exact_nan=True):
    got, expected = got.float().numpy(), np.asarray(expected)
    nan, expected_nan = np.isnan(got), np.isnan(expected)
    if exact_nan:
        assert np.array_equal(nan, expected_nan), (
            f"{what}: NaN at {nan.sum()} places, the recurrence at {expected_nan.sum()}")
    else:
        assert np.all(nan[expected_nan]), f"{what}: a NaN of the recurrence was swallowed"
    finite = ~(nan | expected_nan)
    assert_close(got[finite], expected[finite], tol, what)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name", CASES)
def test_matches_the_recurrence(name, path):
    poison, options = CASES[name]
    case = Case(seqlen=150, nheads=2, dt_bias=True, seed=1, **options)
    (y, final_states), (ref_y, ref_final) = run(case, poison, path)
    tol = TOLERANCES[torch.float32]
    check(y, ref_y, tol, f"y, {name}")
    check(final_states, ref_final, tol, f"final_states, {name}")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_16_bit_inputs_propagate_nan_dt(dtype):
    case = Case(seqlen=150, nheads=2, dtype=dtype, seed=2)
    (y, final_states), (ref_y, ref_final) = run(case, dt_at(90, 1), "fused")
    check(y, ref_y, TOLERANCES[dtype], "y")
    check(final_states, ref_final, TOLERANCES[dtype], "final_states")


def test_nan_x_is_never_swallowed():
    # Inside a chunk, a NaN x_j also reaches the earlier rows: their causal-mask zeros
    # multiply it in the matrix product (0 * NaN = NaN). Never fewer NaN than the recurrence.
    case = Case(seqlen=150, nheads=2, seed=3)

    def poison(t):
        t["x"][0, 30, 1, 2] = NAN
    (y, final_states), (ref_y, ref_final) = run(case, poison, "fused")
    check(y, ref_y, TOLERANCES[torch.float32], "y", exact_nan=False)
    check(final_states, ref_final, TOLERANCES[torch.float32], "final_states")


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("value", [INF, -INF, NAN], ids=str)
@pytest.mark.parametrize("name", ["x", "B", "C", "z", "dt", "dt_bias", "D", "initial_states"])
def test_infinite_inputs_raise_no_numpy_warning(name, value):
    # The GPU's arithmetic is silent IEEE; the interpreter used to leak NumPy's
    # "invalid value encountered in matmul" RuntimeWarning from its ops.
    case = Case(seqlen=100, D="head", z=True, dt_bias=True, initial_states=True, seed=4)
    t = make_case(case)
    t[name].view(-1)[0] = value
    forward_with_options(chunk_size=64, options=PATHS["three kernels"], dt_softplus=True, **t)
    forward_with_options(chunk_size=64, options=PATHS["fused"], dt_softplus=True, **t)
