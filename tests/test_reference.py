"""The three NumPy references compute one function: recurrence = quadratic = chunked."""

import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from mamba2_tile.reference import (
    chunk_cumsum, compute_out, fwd_pass_state, segsum, ssd_chunked, ssd_quadratic, ssd_recurrent,
)


def random_inputs(rng, batch, seqlen, nheads, headdim, ngroups, dstate, d_shape=None,
                  with_state=False, dt_range=(1e-3, 0.5), A_range=(0.1, 4.0)):
    inputs = dict(
        x=rng.standard_normal((batch, seqlen, nheads, headdim)),
        dt=rng.uniform(*dt_range, (batch, seqlen, nheads)),
        A=-rng.uniform(*A_range, nheads),
        B=rng.standard_normal((batch, seqlen, ngroups, dstate)),
        C=rng.standard_normal((batch, seqlen, ngroups, dstate)),
    )
    if d_shape == "per_head":
        inputs["D"] = rng.standard_normal(nheads)
    elif d_shape == "per_channel":
        inputs["D"] = rng.standard_normal((nheads, headdim))
    if with_state:
        inputs["initial_states"] = rng.standard_normal((batch, nheads, headdim, dstate))
    return inputs


@st.composite
def ssd_problems(draw):
    nheads = draw(st.sampled_from([1, 2, 4, 6]))
    ngroups = draw(st.sampled_from([g for g in (1, 2, 3, 6) if nheads % g == 0]))
    shape = dict(
        batch=draw(st.integers(1, 2)), seqlen=draw(st.integers(1, 70)), nheads=nheads,
        headdim=draw(st.integers(1, 5)), ngroups=ngroups, dstate=draw(st.integers(1, 6)),
        d_shape=draw(st.sampled_from([None, "per_head", "per_channel"])),
        with_state=draw(st.booleans()),
    )
    chunk_size = draw(st.sampled_from([1, 3, 8, 16, 64]))
    return shape, chunk_size, draw(st.integers(0, 2**32 - 1))


@settings(max_examples=60, deadline=None)
@given(ssd_problems())
def test_three_forms_agree(problem):
    shape, chunk_size, seed = problem
    inputs = random_inputs(np.random.default_rng(seed), **shape)
    y_rec, h_rec = ssd_recurrent(**inputs, return_final_states=True)
    y_quad, h_quad = ssd_quadratic(**inputs, return_final_states=True)
    y_chunk, h_chunk = ssd_chunked(**inputs, chunk_size=chunk_size, return_final_states=True)
    assert y_rec.shape == inputs["x"].shape and y_rec.dtype == np.float64
    assert h_rec.shape == (shape["batch"], shape["nheads"], shape["headdim"], shape["dstate"])
    for y, h in ((y_quad, h_quad), (y_chunk, h_chunk)):
        np.testing.assert_allclose(y, y_rec, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(h, h_rec, rtol=1e-10, atol=1e-10)


def test_recurrence_by_hand_for_one_token():
    """seqlen 1, zero state: y = dt (C·B) x + D x."""
    rng = np.random.default_rng(3)
    inp = random_inputs(rng, 1, 1, 1, 3, 1, 4, d_shape="per_head")
    expected = inp["dt"][0, 0, 0] * (inp["C"][0, 0, 0] @ inp["B"][0, 0, 0]) * inp["x"] \
        + inp["D"][0] * inp["x"]
    np.testing.assert_allclose(ssd_recurrent(**inp), expected, rtol=1e-14)


def test_return_convention():
    inp = random_inputs(np.random.default_rng(0), 1, 5, 2, 3, 1, 4)
    for fn, kw in ((ssd_recurrent, {}), (ssd_quadratic, {}), (ssd_chunked, {"chunk_size": 2})):
        assert isinstance(fn(**inp, **kw), np.ndarray)
        y, h = fn(**inp, **kw, return_final_states=True)
        assert h.shape == (1, 2, 3, 4)


def test_accepts_float32_and_float16_inputs():
    inp = random_inputs(np.random.default_rng(1), 1, 9, 2, 3, 1, 4)
    y64 = ssd_chunked(**inp, chunk_size=4)
    for dtype in (np.float32, np.float16):
        low = {k: v.astype(dtype) for k, v in inp.items()}
        y = ssd_chunked(**low, chunk_size=4)
        assert y.dtype == np.float64
        np.testing.assert_allclose(y, ssd_recurrent(**low), rtol=1e-10, atol=1e-10)
    assert np.abs(ssd_chunked(**{k: v.astype(np.float32) for k, v in inp.items()},
                              chunk_size=4) - y64).max() < 1e-4


def test_long_sequence_stays_finite_and_matches_recurrence():
    """100 000 tokens with strong decay and large dt: nothing overflows, no NaN."""
    rng = np.random.default_rng(7)
    inp = random_inputs(rng, 1, 100_000, 2, 2, 1, 2, with_state=True,
                        dt_range=(1e-3, 2.0), A_range=(0.5, 20.0))
    y, h = ssd_chunked(**inp, chunk_size=64, return_final_states=True)
    assert np.isfinite(y).all() and np.isfinite(h).all()
    y_rec, h_rec = ssd_recurrent(**inp, return_final_states=True)
    np.testing.assert_allclose(y, y_rec, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(h, h_rec, rtol=1e-9, atol=1e-9)


def test_quadratic_is_finite_where_naive_exponentials_overflow():
    """cumsum(dt*A) reaches -4000 here: exp of it is 0 and a ratio of two such is NaN."""
    rng = np.random.default_rng(5)
    inp = random_inputs(rng, 1, 2000, 1, 2, 1, 2, dt_range=(0.5, 1.5), A_range=(2.0, 2.0))
    cumsum = np.cumsum(inp["dt"][0, :, 0] * inp["A"][0])
    with np.errstate(all="ignore"):
        naive = np.exp(cumsum)[:, None] / np.exp(cumsum)[None, :]
    assert np.isnan(naive).any()
    y = ssd_quadratic(**inp)
    assert np.isfinite(y).all()
    np.testing.assert_allclose(y, ssd_recurrent(**inp), rtol=1e-10, atol=1e-10)


def test_segsum():
    a = np.array([1.0, 2.0, 3.0, 4.0])
    s = segsum(a)
    assert s[3, 1] == 3.0 + 4.0 and s[2, 2] == 0.0 and s[1, 0] == 2.0
    assert np.isneginf(s[0, 1]) and np.isneginf(s[1, 3])
    assert segsum(np.ones((2, 3, 5))).shape == (2, 3, 5, 5)


def test_stages_have_the_documented_shapes():
    rng = np.random.default_rng(2)
    inp = random_inputs(rng, 2, 10, 4, 3, 2, 5)
    dA_cumsum, dt = chunk_cumsum(inp["dt"], inp["A"], 4)
    assert dA_cumsum.shape == dt.shape == (2, 4, 3, 4)
    assert (dt[:, :, -1, 2:] == 0).all(), "positions past seqlen must get dt = 0"
    chunk_states, final = fwd_pass_state(inp["x"], inp["B"], dt, dA_cumsum)
    assert chunk_states.shape == (2, 4, 3, 3, 5) and final.shape == (2, 4, 3, 5)
    assert (chunk_states[:, :, 0] == 0).all()
    y = compute_out(inp["x"], dt, dA_cumsum, inp["B"], inp["C"], chunk_states)
    assert y.shape == inp["x"].shape


def test_chunk_cumsum_dt_transform():
    """dt_bias, then softplus, then the clamp — in that order."""
    dt = np.array([[[-3.0, 0.5]], [[1.0, 30.0]]]).transpose(1, 0, 2)   # (1, 2, 2)
    A = np.array([-1.0, -2.0])
    bias = np.array([0.5, -0.25])
    dA, dt_out = chunk_cumsum(dt, A, 2, dt_bias=bias, dt_softplus=True, dt_limit=(0.1, 5.0))
    expected = np.clip(np.logaddexp(0.0, dt + bias), 0.1, 5.0)
    np.testing.assert_allclose(dt_out[0, :, 0, :], expected[0].T)
    np.testing.assert_allclose(dA[0, :, 0, :], np.cumsum(expected[0].T * A[:, None], axis=-1))


def test_z_gating_in_compute_out():
    rng = np.random.default_rng(4)
    inp = random_inputs(rng, 1, 7, 2, 3, 1, 4, d_shape="per_head")
    z = rng.standard_normal(inp["x"].shape)
    dA_cumsum, dt = chunk_cumsum(inp["dt"], inp["A"], 4)
    states, _ = fwd_pass_state(inp["x"], inp["B"], dt, dA_cumsum)
    args = (inp["x"], dt, dA_cumsum, inp["B"], inp["C"], states, inp["D"])
    np.testing.assert_allclose(compute_out(*args, z=z),
                               compute_out(*args) * z / (1 + np.exp(-z)), rtol=1e-12)


# ------------------------------------------------------------------------------ bad input

def good_inputs():
    return random_inputs(np.random.default_rng(0), 2, 6, 4, 3, 2, 5,
                         d_shape="per_head", with_state=True)


@pytest.mark.parametrize("fn", [ssd_recurrent, ssd_quadratic, ssd_chunked])
@pytest.mark.parametrize("name, bad, error, message", [
    ("x", np.zeros((2, 6, 4)), ValueError, "x must be 4-D"),
    ("dt", np.zeros((2, 6, 3)), ValueError, "dt must have shape (batch, seqlen, nheads) = (2, 6, 4)"),
    ("A", np.zeros((4, 1)), ValueError, "A must have shape (nheads,) = (4,)"),
    ("B", np.zeros((2, 6, 3, 5)), ValueError, "ngroups=3, which must divide nheads=4"),
    ("C", np.zeros((2, 6, 2, 4)), ValueError, "C must have shape"),
    ("D", np.zeros(3), ValueError, "D must have shape (nheads,) = (4,) or (nheads, headdim)"),
    ("initial_states", np.zeros((2, 4, 3, 4)), ValueError, "initial_states must have shape"),
    ("x", [[1.0]], TypeError, "x must be a NumPy array, got list"),
    ("dt", np.ones((2, 6, 4), dtype=np.int64), TypeError, "dt must be a float16, float32 or float64"),
    ("x", np.zeros((2, 0, 4, 3)), ValueError, "at least one token"),
])
def test_bad_input_names_the_argument(fn, name, bad, error, message):
    inputs = good_inputs()
    inputs[name] = bad
    if name == "x" and isinstance(bad, np.ndarray) and bad.ndim == 4:
        inputs["dt"] = inputs["dt"][:, :0]
    kwargs = {"chunk_size": 4} if fn is ssd_chunked else {}
    with pytest.raises(error) as info:
        fn(**inputs, **kwargs)
    assert message in str(info.value)


@pytest.mark.parametrize("chunk_size, error", [(0, ValueError), (2.0, TypeError), (True, TypeError)])
def test_bad_chunk_size(chunk_size, error):
    with pytest.raises(error, match="chunk_size"):
        ssd_chunked(**good_inputs(), chunk_size=chunk_size)


@pytest.mark.parametrize("chunk_size", [2000, 100_001])
def test_short_sequence_allocates_by_its_tokens_not_the_chunk(chunk_size):
    """10 tokens at a huge chunk size: one chunk of 10 tokens, not chunk_size² decays (#15)."""
    inp = random_inputs(np.random.default_rng(8), 1, 10, 2, 3, 1, 4, with_state=True)
    tracemalloc.start()
    try:
        y, h = ssd_chunked(**inp, chunk_size=chunk_size, return_final_states=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2**20, f"peak {peak / 2**20:.1f} MiB for 10 tokens"
    y_rec, h_rec = ssd_recurrent(**inp, return_final_states=True)
    np.testing.assert_allclose(y, y_rec, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(h, h_rec, rtol=1e-12, atol=1e-12)
