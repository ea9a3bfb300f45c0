"""The three NumPy references compute one function: recurrence = quadratic = chunked."""

import re
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


# --------------------------------------------------------------------------------------------
# Packed sequences: seq_idx, cu_seqlens, varlen_states
# --------------------------------------------------------------------------------------------

def packing(lengths):
    """``(seq_idx (1, l), cu_seqlens)`` of sequences of these lengths packed in one row."""
    cu_seqlens = np.concatenate([[0], np.cumsum(lengths)])
    seq_idx = np.repeat(np.arange(len(lengths)), lengths)[None]
    return seq_idx.astype(np.int32), cu_seqlens.astype(np.int32)


@st.composite
def packed_problems(draw):
    """One row of several sequences (lengths 1 up to a few chunks), shapes and a chunk size."""
    chunk_size = draw(st.sampled_from([1, 3, 8, 16, 32, 64]))
    lengths = draw(st.lists(st.integers(1, 3 * chunk_size + 2), min_size=1, max_size=5))
    nheads = draw(st.sampled_from([1, 2, 4]))
    shape = dict(batch=1, seqlen=sum(lengths), nheads=nheads, headdim=draw(st.integers(1, 4)),
                 ngroups=draw(st.sampled_from([g for g in (1, 2) if nheads % g == 0])),
                 dstate=draw(st.integers(1, 5)),
                 d_shape=draw(st.sampled_from([None, "per_head", "per_channel"])),
                 with_state=draw(st.booleans()))
    return shape, lengths, chunk_size, draw(st.integers(0, 2**32 - 1))


@settings(max_examples=60, deadline=None)
@given(packed_problems())
def test_packed_sequences_equal_separate_runs(problem):
    """Each packed sequence gets what it gets alone: a fresh state (initial_states for the
    first), its own y, and its last state in varlen_states; all three forms agree."""
    shape, lengths, chunk_size, seed = problem
    inputs = random_inputs(np.random.default_rng(seed), **shape)
    seq_idx, cu_seqlens = packing(lengths)
    packed = dict(seq_idx=seq_idx, cu_seqlens=cu_seqlens, return_final_states=True,
                  return_varlen_states=True)
    results = [ssd_recurrent(**inputs, **packed), ssd_quadratic(**inputs, **packed),
               ssd_chunked(**inputs, chunk_size=chunk_size, **packed)]
    for i, (start, stop) in enumerate(zip(cu_seqlens[:-1], cu_seqlens[1:])):
        alone = {name: value[:, start:stop] if name in "x dt B C" else value
                 for name, value in inputs.items() if name != "initial_states"}
        if i == 0 and "initial_states" in inputs:
            alone["initial_states"] = inputs["initial_states"]
        y_alone, h_alone = ssd_recurrent(**alone, return_final_states=True)
        for y, final_states, varlen in results:
            np.testing.assert_allclose(y[:, start:stop], y_alone, rtol=1e-10, atol=1e-10)
            np.testing.assert_allclose(varlen[i], h_alone[0], rtol=1e-10, atol=1e-10)
            if i == len(lengths) - 1:
                np.testing.assert_allclose(final_states, h_alone, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("first", [0, 3])
def test_initial_states_belong_to_sequence_zero(first):
    """As in mamba_ssm: a row whose seq_idx starts above 0 ignores initial_states."""
    inputs = random_inputs(np.random.default_rng(1), 2, 12, 2, 3, 1, 4, with_state=True)
    seq_idx = np.array([[first] * 5 + [first + 1] * 7, [first] * 12])
    with_state = ssd_chunked(**inputs, chunk_size=4, seq_idx=seq_idx)
    inputs.pop("initial_states")
    without = ssd_chunked(**inputs, chunk_size=4, seq_idx=seq_idx)
    assert np.allclose(with_state, without) == (first != 0)
    assert np.allclose(with_state[:, 5:][0], without[:, 5:][0])     # the second sequence


def test_return_order_follows_mamba_ssm():
    inputs = random_inputs(np.random.default_rng(2), 1, 10, 2, 3, 1, 4)
    seq_idx, cu_seqlens = packing([4, 6])
    packed = dict(seq_idx=seq_idx, cu_seqlens=cu_seqlens)
    for form in (ssd_recurrent, ssd_quadratic,
                 lambda **k: ssd_chunked(**k, chunk_size=4)):
        y, varlen = form(**inputs, **packed, return_varlen_states=True)
        y2, final, varlen2 = form(**inputs, **packed, return_final_states=True,
                                  return_varlen_states=True)
        assert varlen.shape == (2, 2, 3, 4) and final.shape == (1, 2, 3, 4)
        np.testing.assert_allclose(varlen2, varlen)
        np.testing.assert_allclose(final[0], varlen[-1])
        # Without return_varlen_states, cu_seqlens is not used (as in mamba_ssm).
        assert isinstance(form(**inputs, seq_idx=seq_idx, cu_seqlens=[5]), np.ndarray)


BAD_PACKING = [
    (dict(seq_idx=np.array([[0, 0, 1, 0, 1, 1]])), ValueError, "nondecreasing"),
    (dict(seq_idx=np.array([[0, 0, 1]])), ValueError, "(batch, seqlen) = (1, 6)"),
    (dict(seq_idx=np.zeros((1, 6)) + 0.5), TypeError, "integers"),
    (dict(seq_idx=np.array([[-1, 0, 0, 1, 1, 1]])), ValueError, "non-negative"),
    (dict(return_varlen_states=True), ValueError, "needs cu_seqlens"),
    (dict(cu_seqlens=[0, 2, 6], return_varlen_states=True), ValueError, "needs seq_idx"),
    (dict(cu_seqlens=[0, 3, 7], seq_idx=np.array([[0, 0, 0, 1, 1, 1]]),
          return_varlen_states=True), ValueError, "from 0 to seqlen (6)"),
    (dict(cu_seqlens=[0, 3, 3, 6], seq_idx=np.array([[0, 0, 0, 1, 1, 1]]),
          return_varlen_states=True), ValueError, "rise strictly"),
    (dict(cu_seqlens=[0, 2, 6], seq_idx=np.array([[0, 0, 0, 1, 1, 1]]),
          return_varlen_states=True), ValueError, "does not match where seq_idx changes"),
    (dict(cu_seqlens=np.array([0.0, 6.0]), return_varlen_states=True), TypeError, "integers"),
]


@pytest.mark.parametrize("changes, error, words", BAD_PACKING)
def test_bad_packing_is_refused(changes, error, words):
    inputs = random_inputs(np.random.default_rng(3), 1, 6, 2, 3, 1, 4)
    for form in (ssd_recurrent, ssd_quadratic, lambda **k: ssd_chunked(**k, chunk_size=4)):
        with pytest.raises(error, match=re.escape(words)):
            form(**inputs, **changes)


def test_cu_seqlens_needs_batch_one():
    inputs = random_inputs(np.random.default_rng(4), 2, 6, 2, 3, 1, 4)
    with pytest.raises(ValueError, match="batch 1"):
        ssd_recurrent(**inputs, seq_idx=np.zeros((2, 6), dtype=int), cu_seqlens=[0, 6],
                      return_varlen_states=True)


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
