"""mamba_chunk_scan_combined on CPU tensors (kernels on the interpreter) against the references."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from mamba2_tile import reference
from mamba2_tile.api import forward_with_options, mamba_chunk_scan_combined
from ssd_cases import DTYPES, Case, api_kwargs, expected_output, make_case, random_cases
from mamba2_tile.tolerances import CHUNK_AGREEMENT, TOLERANCES, assert_close, to_numpy


def run(case, chunk_size):
    t = case.tensors or make_case(case)
    return mamba_chunk_scan_combined(chunk_size=chunk_size, return_final_states=True,
                                     **t, **api_kwargs(case))


def check(case, chunk_size):
    y, final_states = run(case, chunk_size)
    ref_y, ref_final = expected_output(case)
    tol = TOLERANCES[case.dtype]
    assert y.dtype == case.dtype and final_states.dtype == torch.float32
    assert_close(y, ref_y, tol, f"y (chunk {chunk_size})")
    assert_close(final_states, ref_final, tol, f"final_states (chunk {chunk_size})")
    return y, final_states


@settings(max_examples=40, deadline=None)
@given(case=random_cases(), chunk_size=st.sampled_from([64, 128, 256]))
def test_matches_recurrence(case, chunk_size):
    check(case, chunk_size)


def test_matches_chunked_reference():
    case = Case(batch=2, seqlen=150, nheads=4, ngroups=2, D="head", initial_states=True, seed=3)
    t = make_case(case)
    y, final_states = run(case, 64)
    ref_y, ref_final = reference.ssd_chunked(
        *(to_numpy(t[k]) for k in ("x", "dt", "A", "B", "C")), 64, D=to_numpy(t["D"]),
        initial_states=to_numpy(t["initial_states"]), return_final_states=True)
    assert_close(y, ref_y, TOLERANCES[torch.float32], "y")
    assert_close(final_states, ref_final, TOLERANCES[torch.float32], "final_states")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_chunk_sizes_agree(dtype):
    case = Case(seqlen=300, nheads=2, dtype=dtype, D="channel", z=True, initial_states=True,
                dt_softplus=True, dt_bias=True, seed=4)
    y64, f64 = run(case, 64)
    for chunk_size in (128, 256):
        y, f = run(case, chunk_size)
        assert_close(y, y64, CHUNK_AGREEMENT[dtype], f"y, chunk {chunk_size} vs 64")
        assert_close(f, f64, CHUNK_AGREEMENT[dtype], f"final_states, chunk {chunk_size} vs 64")


@pytest.mark.parametrize("seqlen,chunk_size", [
    (1, 64),            # one token
    (64, 64),           # exactly one chunk
    (63, 64), (65, 64), # chunk_size - 1, chunk_size + 1
    (127, 128), (257, 256),
])
def test_sequence_length_edges(seqlen, chunk_size):
    check(Case(seqlen=seqlen, nheads=2, D="head", initial_states=True, seed=seqlen), chunk_size)


def test_return_convention():
    case = Case(seqlen=10)
    t = make_case(case)
    y = mamba_chunk_scan_combined(chunk_size=64, **t)
    assert isinstance(y, torch.Tensor) and y.shape == t["x"].shape


def test_long_sequence():
    # 3000 tokens = 12 chunks of 256 (the last partial): the state is carried a long way.
    check(Case(seqlen=3000, nheads=1, headdim=4, dstate=4, initial_states=True, seed=5), 256)


def test_large_dt():
    # dt ~ 5-30 through softplus (identity above 20): exp(dt A) underflows to 0; state resets.
    check(Case(seqlen=100, dt_range=(5.0, 30.0), dt_softplus=True, seed=6), 64)


def test_very_negative_A():
    check(Case(seqlen=130, A_range=(-80.0, -20.0), initial_states=True, seed=7), 64)


def test_dt_limit_clamps_after_softplus():
    check(Case(seqlen=90, dt_range=(-4.0, 4.0), dt_softplus=True, dt_bias=True,
               dt_limit=(0.05, 0.3), seed=8), 64)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_half_precision_everything(dtype):
    check(Case(batch=2, seqlen=200, nheads=4, ngroups=2, headdim=16, dstate=16, dtype=dtype,
               D="channel", z=True, dt_bias=True, initial_states=True, dt_softplus=True,
               dt_range=(-3.0, 0.0), seed=9), 128)


# --- bad inputs: every error names the argument ----------------------------------------------

def good_inputs():
    return make_case(Case(batch=1, seqlen=20, nheads=4, headdim=4, ngroups=2, dstate=4,
                          D="head", z=True, dt_bias=True, initial_states=True))


def call(**changes):
    kwargs = dict(good_inputs(), chunk_size=64)
    kwargs.update(changes)
    return mamba_chunk_scan_combined(**kwargs)


BAD_INPUTS = [
    # (changes, exception, words the message must contain)
    (dict(x=np.zeros((1, 20, 4, 4), np.float32)), TypeError, ["x", "torch.Tensor"]),
    (dict(D=[1.0, 2.0, 3.0, 4.0]), TypeError, ["D", "torch.Tensor"]),
    (dict(x=torch.zeros(1, 20, 4, 4, dtype=torch.float64)), TypeError, ["x", "dtype"]),
    (dict(x=torch.zeros(1, 20, 4, 4, dtype=torch.int32)), TypeError, ["x", "dtype"]),
    (dict(B=torch.zeros(1, 20, 2, 4, dtype=torch.float16)), TypeError, ["B", "dtype of x"]),
    (dict(C=torch.zeros(1, 20, 2, 4, dtype=torch.bfloat16)), TypeError, ["C", "dtype of x"]),
    (dict(z=torch.zeros(1, 20, 4, 4, dtype=torch.float16)), TypeError, ["z", "dtype of x"]),
    (dict(dt=torch.zeros(1, 20, 4, dtype=torch.int64)), TypeError, ["dt", "dtype"]),
    (dict(A=torch.zeros(4, dtype=torch.int32)), TypeError, ["A", "dtype"]),
    (dict(dt_bias=torch.zeros(4, dtype=torch.float64)), TypeError, ["dt_bias", "dtype"]),
    (dict(x=torch.zeros(1, 20, 4)), ValueError, ["x", "4-D"]),
    (dict(dt=torch.zeros(1, 21, 4)), ValueError, ["dt", "(batch, seqlen, nheads)"]),
    (dict(A=torch.zeros(3)), ValueError, ["A", "(nheads,)"]),
    (dict(A=torch.zeros(4, 1)), ValueError, ["A", "(nheads,)"]),
    (dict(B=torch.zeros(1, 20, 3, 4), C=torch.zeros(1, 20, 3, 4)), ValueError, ["ngroups", "nheads"]),
    (dict(C=torch.zeros(1, 20, 2, 5)), ValueError, ["C", "dstate"]),
    (dict(D=torch.zeros(4, 5)), ValueError, ["D", "(nheads, headdim)"]),
    (dict(z=torch.zeros(1, 20, 4, 5)), ValueError, ["z"]),
    (dict(dt_bias=torch.zeros(5)), ValueError, ["dt_bias"]),
    (dict(initial_states=torch.zeros(1, 4, 4, 5)), ValueError, ["initial_states"]),
    (dict(x=torch.zeros(1, 0, 4, 4), dt=torch.zeros(1, 0, 4), B=torch.zeros(1, 0, 2, 4),
          C=torch.zeros(1, 0, 2, 4), z=None), ValueError, ["seqlen"]),
    (dict(chunk_size=100), ValueError, ["chunk_size", "64, 128, 256"]),
    (dict(chunk_size=32), ValueError, ["chunk_size"]),
    (dict(chunk_size=64.0), TypeError, ["chunk_size"]),
    (dict(dt_limit=0.1), TypeError, ["dt_limit"]),
    (dict(dt_limit=(0.0, 1.0, 2.0)), TypeError, ["dt_limit"]),
    (dict(dt_limit=(0.5, 0.1)), ValueError, ["dt_limit"]),
    (dict(dt_limit=("0", 1.0)), TypeError, ["dt_limit"]),
    (dict(x=None), TypeError, ["x"]),
    (dict(chunk_size=np.float64(64)), TypeError, ["chunk_size"]),
    (dict(chunk_size=True), TypeError, ["chunk_size"]),
    (dict(chunk_size=np.int64(100)), ValueError, ["chunk_size", "64, 128, 256"]),
    (dict(dt_softplus="yes"), TypeError, ["dt_softplus", "True or False"]),
    (dict(dt_softplus=1), TypeError, ["dt_softplus"]),
    (dict(return_final_states="no"), TypeError, ["return_final_states"]),
    (dict(dt_limit=(np.float32(0.5), np.float64(0.1))), ValueError, ["dt_limit"]),
    (dict(dt_limit=(True, 1.0)), TypeError, ["dt_limit"]),
    (dict(A=torch.tensor([-1.0, 0.5, -1.0, 2.0])), ValueError, ["A", "<= 0", "[1, 3]"]),
]


@pytest.mark.parametrize("changes,error,words", BAD_INPUTS,
                         ids=[f"{i}-{','.join(c)}" for i, (c, _, _) in enumerate(BAD_INPUTS)])
def test_bad_inputs_are_refused(changes, error, words):
    with pytest.raises(error) as info:
        call(**changes)
    for word in words:
        assert word in str(info.value), f"{word!r} not in {str(info.value)!r}"


def test_numpy_scalars_are_numbers():
    # A chunk size or a dt_limit read from a NumPy array or config is as good as a Python one.
    kwargs = dict(good_inputs(), dt_softplus=True)
    expected = mamba_chunk_scan_combined(chunk_size=64, dt_limit=(0.01, 0.5), **kwargs)
    for chunk_size, limit in ((np.int64(64), (np.float64(0.01), np.float32(0.5))),
                              (np.int32(64), [0.01, np.float64(0.5)])):
        got = mamba_chunk_scan_combined(chunk_size=chunk_size, dt_limit=limit, **kwargs)
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
    assert torch.equal(forward_with_options(chunk_size=np.int64(64), dt_limit=(0.01, 0.5),
                                            **kwargs), expected)


def test_zero_A_is_no_decay():
    # The edge of the allowed range: the state only accumulates.
    check(Case(seqlen=70, nheads=2, A_range=(0.0, 0.0), seed=12), 64)


def test_devices_must_match():
    meta = torch.zeros(4, device="meta")
    with pytest.raises(ValueError, match="same device"):
        call(A=meta)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_realistic_tile_sizes(dtype):
    # headdim 64 and dstate 128 as in Mamba-2 models: full 64-wide tiles, dstate as one tile.
    check(Case(seqlen=200, nheads=2, headdim=64, dstate=128, dtype=dtype, D="channel", z=True,
               initial_states=True, seed=10), 128)
