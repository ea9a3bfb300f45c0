"""The NumPy gradients of the SSD layer against torch autograd, finite differences and each other.

The independent reference is a float64 torch recurrence written here, token by token, with the
dt pre-processing, the gate and ``seq_idx`` resets; autograd differentiates it.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from mamba2_tile.reference_backward import (
    SSDGradients,
    ssd_chunked_backward,
    ssd_recurrent_backward,
)

NAMES = ("x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_states")


def torch_layer(x, dt, A, B, C, D=None, z=None, dt_bias=None, initial_states=None,
                dt_softplus=False, dt_limit=(0.0, float("inf")), seq_idx=None):
    """``(out, final_states)``, one token at a time (the module doc of reference_backward)."""
    batch, seqlen, nheads, headdim = x.shape
    per_group = nheads // B.shape[2]
    B, C = B.repeat_interleave(per_group, 2), C.repeat_interleave(per_group, 2)
    if dt_bias is not None:
        dt = dt + dt_bias
    if dt_softplus:
        dt = torch.where(dt <= 20.0, F.softplus(dt), dt)
    dt = dt.clamp(dt_limit[0], dt_limit[1])
    h = x.new_zeros(batch, nheads, headdim, B.shape[3]) if initial_states is None \
        else initial_states
    ys = []
    for t in range(seqlen):
        decay = torch.exp(dt[:, t] * A)
        if seq_idx is not None:
            previous = seq_idx[:, t - 1] if t else torch.zeros_like(seq_idx[:, 0])
            decay = decay * (seq_idx[:, t] == previous)[:, None]
        h = decay[..., None, None] * h + (dt[:, t, :, None] * x[:, t])[..., None] \
            * B[:, t, :, None, :]
        ys.append(torch.einsum("bhpn,bhn->bhp", h, C[:, t]))
    y = torch.stack(ys, 1)
    if D is not None:
        y = y + x * (D[:, None] if D.dim() == 1 else D)
    if z is not None:
        y = y * F.silu(z)
    return y, h


def make_problem(rng, batch, seqlen, nheads, headdim, ngroups, dstate, D_shape=None,
                 with_z=False, with_bias=False, with_h0=False, with_dfinal=False,
                 softplus=False, packed=False):
    """Inputs, ``dy`` and options; dt spread so that clamping/threshold cases occur."""
    inputs = dict(
        x=rng.standard_normal((batch, seqlen, nheads, headdim)),
        dt=rng.uniform(-1.0, 1.0, (batch, seqlen, nheads)) if softplus
        else rng.uniform(0.05, 0.6, (batch, seqlen, nheads)),
        A=-rng.uniform(0.2, 1.5, nheads),
        B=rng.standard_normal((batch, seqlen, ngroups, dstate)),
        C=rng.standard_normal((batch, seqlen, ngroups, dstate)),
    )
    if D_shape is not None:
        inputs["D"] = rng.standard_normal(D_shape)
    if with_z:
        inputs["z"] = rng.standard_normal(inputs["x"].shape)
    if with_bias:
        inputs["dt_bias"] = rng.uniform(-0.5, 0.5, nheads)
    if with_h0:
        inputs["initial_states"] = rng.standard_normal((batch, nheads, headdim, dstate))
    options = {}
    if softplus:
        # softplus of [-1.5, 1.5] spans [0.20, 1.70]: this limit clamps some entries each side.
        options.update(dt_softplus=True, dt_limit=(0.3, 1.2))
    if with_dfinal:
        options["dfinal_states"] = rng.standard_normal((batch, nheads, headdim, dstate))
    if packed:
        cuts = np.sort(rng.integers(0, seqlen + 1, (batch, 2)), axis=1)
        t = np.arange(seqlen)
        options["seq_idx"] = (t >= cuts[:, :1]).astype(np.int64) + (t >= cuts[:, 1:])
    dy = rng.standard_normal(inputs["x"].shape)
    return inputs, dy, options


def autograd_gradients(inputs, dy, options):
    """The gradients torch autograd finds through :func:`torch_layer`, as NumPy arrays."""
    tensors = {k: torch.tensor(v, requires_grad=True) for k, v in inputs.items()}
    extra = {k: v for k, v in options.items() if k != "dfinal_states"}
    if "seq_idx" in extra:
        extra["seq_idx"] = torch.tensor(extra["seq_idx"])
    out, final = torch_layer(**tensors, **extra)
    loss = (out * torch.tensor(dy)).sum()
    if "dfinal_states" in options:
        loss = loss + (final * torch.tensor(options["dfinal_states"])).sum()
    loss.backward()
    return {k: t.grad.numpy() for k, t in tensors.items()}


def assert_gradients(grads, expected, inputs, rtol=1e-9, atol=1e-10):
    assert isinstance(grads, SSDGradients)
    for name in NAMES:
        got = getattr(grads, "d" + name)
        if name not in inputs:
            assert got is None, f"d{name} should be None without {name}"
            continue
        assert got.shape == inputs[name].shape, f"d{name} shape {got.shape}"
        np.testing.assert_allclose(got, expected[name], rtol=rtol, atol=atol,
                                   err_msg=f"d{name}")


def loss(inputs, dy, options):
    """The scalar whose gradient is being checked: <dy, out> + <dfinal_states, final_states>."""
    extra = {k: v for k, v in options.items() if k != "dfinal_states"}
    if "seq_idx" in extra:
        extra["seq_idx"] = torch.tensor(extra["seq_idx"])
    with torch.no_grad():
        out, final = torch_layer(**{k: torch.tensor(v) for k, v in inputs.items()}, **extra)
    total = float((out * torch.tensor(dy)).sum())
    if "dfinal_states" in options:
        total += float((final * torch.tensor(options["dfinal_states"])).sum())
    return total


FULL = dict(D_shape=(3, 2), with_z=True, with_bias=True, with_h0=True, with_dfinal=True,
            softplus=True)


def test_recurrent_matches_autograd_everything_on():
    rng = np.random.default_rng(0)
    inputs, dy, options = make_problem(rng, 2, 9, 3, 2, 3, 4, **FULL)
    assert_gradients(ssd_recurrent_backward(dy, **inputs, **options),
                     autograd_gradients(inputs, dy, options), inputs)


def test_recurrent_without_optional_inputs_gives_none():
    rng = np.random.default_rng(1)
    inputs, dy, options = make_problem(rng, 1, 5, 2, 3, 1, 2)
    grads = ssd_recurrent_backward(dy, **inputs, **options)
    assert grads.dD is None and grads.dz is None and grads.ddt_bias is None
    assert grads.dinitial_states is None
    assert_gradients(grads, autograd_gradients(inputs, dy, options), inputs)


def test_recurrent_clamped_dt_gets_no_gradient():
    rng = np.random.default_rng(2)
    inputs, dy, options = make_problem(rng, 1, 12, 2, 2, 1, 2, softplus=True)
    grads = ssd_recurrent_backward(dy, **inputs, **options)
    soft = np.logaddexp(0.0, inputs["dt"])
    clamped = (soft < 0.3) | (soft > 1.2)
    assert clamped.any() and (~clamped).any()
    assert np.all(grads.ddt[clamped] == 0.0)
    assert np.all(grads.ddt[~clamped] != 0.0)


def test_recurrent_softplus_threshold():
    """Above 20, softplus is the identity: derivative exactly 1 there, as mamba_ssm."""
    rng = np.random.default_rng(3)
    inputs, dy, options = make_problem(rng, 1, 3, 1, 2, 1, 2, with_bias=True)
    inputs["A"] = np.array([-0.01])
    inputs["dt"] = np.array([[[19.0], [21.0], [25.0]]])
    options = dict(dt_softplus=True)
    assert_gradients(ssd_recurrent_backward(dy, **inputs, **options),
                     autograd_gradients(inputs, dy, options), inputs)


def chunked_by_4(dy, **arguments):
    return ssd_chunked_backward(dy, chunk_size=4, **arguments)


@pytest.mark.parametrize("backward", [ssd_recurrent_backward, chunked_by_4])
@pytest.mark.parametrize("seed", [0, 1])
def test_matches_finite_differences(seed, backward):
    rng = np.random.default_rng(seed)
    inputs, dy, options = make_problem(rng, 2, 7, 2, 2, 1, 3, D_shape=(2,), with_z=True,
                                       with_bias=True, with_h0=True, with_dfinal=True,
                                       packed=True)
    grads = backward(dy, **inputs, **options)
    eps = 1e-6
    for name in inputs:
        for _ in range(3):
            index = tuple(rng.integers(0, n) for n in inputs[name].shape)
            shifted = []
            for sign in (1.0, -1.0):
                moved = {k: v.copy() for k, v in inputs.items()}
                moved[name][index] += sign * eps
                shifted.append(loss(moved, dy, options))
            numeric = (shifted[0] - shifted[1]) / (2 * eps)
            analytic = getattr(grads, "d" + name)[index]
            assert abs(numeric - analytic) <= 1e-6 * (1 + abs(analytic)), \
                f"d{name}{index}: finite differences {numeric}, backward {analytic}"


def test_bad_arguments_are_named():
    rng = np.random.default_rng(4)
    inputs, dy, options = make_problem(rng, 1, 4, 2, 2, 1, 2)
    with pytest.raises(ValueError, match="dy must have x's shape"):
        ssd_recurrent_backward(dy[:, :2], **inputs)
    with pytest.raises(ValueError, match="dt_bias must have shape"):
        ssd_recurrent_backward(dy, **inputs, dt_bias=np.zeros(3))
    with pytest.raises(ValueError, match="dfinal_states must have shape"):
        ssd_recurrent_backward(dy, **inputs, dfinal_states=np.zeros((1, 2, 2, 3)))
    with pytest.raises(ValueError, match="dt_limit"):
        ssd_recurrent_backward(dy, **inputs, dt_limit=(1.0, 0.5))


problems = st.fixed_dictionaries(dict(
    seed=st.integers(0, 2**32 - 1),
    batch=st.integers(1, 2), seqlen=st.integers(1, 11), nheads_per_group=st.integers(1, 2),
    ngroups=st.integers(1, 2), headdim=st.integers(1, 3), dstate=st.integers(1, 4),
    D=st.sampled_from([None, "h", "hp"]), with_z=st.booleans(), with_bias=st.booleans(),
    with_h0=st.booleans(), with_dfinal=st.booleans(), softplus=st.booleans(),
    packed=st.booleans(),
))


def build(p):
    nheads = p["nheads_per_group"] * p["ngroups"]
    D_shape = {None: None, "h": (nheads,), "hp": (nheads, p["headdim"])}[p["D"]]
    return make_problem(np.random.default_rng(p["seed"]), p["batch"], p["seqlen"], nheads,
                        p["headdim"], p["ngroups"], p["dstate"], D_shape=D_shape,
                        with_z=p["with_z"], with_bias=p["with_bias"], with_h0=p["with_h0"],
                        with_dfinal=p["with_dfinal"], softplus=p["softplus"],
                        packed=p["packed"])


@settings(max_examples=25, deadline=None)
@given(problems)
def test_recurrent_matches_autograd_odd_shapes(p):
    inputs, dy, options = build(p)
    assert_gradients(ssd_recurrent_backward(dy, **inputs, **options),
                     autograd_gradients(inputs, dy, options), inputs)


@pytest.mark.parametrize("chunk_size", [1, 4, 16])
def test_chunked_matches_autograd_everything_on(chunk_size):
    rng = np.random.default_rng(5)
    inputs, dy, options = make_problem(rng, 2, 9, 3, 2, 3, 4, **FULL)
    assert_gradients(ssd_chunked_backward(dy, **inputs, chunk_size=chunk_size, **options),
                     autograd_gradients(inputs, dy, options), inputs)


def test_chunked_packed_sequences_match_autograd():
    rng = np.random.default_rng(6)
    inputs, dy, options = make_problem(rng, 2, 13, 2, 2, 1, 3, D_shape=(2,), with_h0=True,
                                       with_dfinal=True, with_z=True)
    options["seq_idx"] = np.array([[0] * 3 + [1] * 7 + [2] * 3, [1] * 5 + [2] * 8])
    assert_gradients(ssd_chunked_backward(dy, **inputs, chunk_size=4, **options),
                     autograd_gradients(inputs, dy, options), inputs)


def test_chunked_rejects_bad_chunk_size():
    rng = np.random.default_rng(7)
    inputs, dy, options = make_problem(rng, 1, 4, 1, 1, 1, 1)
    with pytest.raises((TypeError, ValueError), match="chunk_size"):
        ssd_chunked_backward(dy, **inputs, chunk_size=0)


@settings(max_examples=25, deadline=None)
@given(problems, st.integers(1, 8))
def test_chunked_matches_recurrent_odd_shapes(p, chunk_size):
    """Both forms on the same odd problem (seqlen rarely a multiple of the chunk)."""
    inputs, dy, options = build(p)
    recurrent = ssd_recurrent_backward(dy, **inputs, **options)
    chunked = ssd_chunked_backward(dy, **inputs, chunk_size=chunk_size, **options)
    assert_gradients(chunked, {k: getattr(recurrent, "d" + k) for k in inputs}, inputs)


@settings(max_examples=10, deadline=None)
@given(problems, st.integers(1, 8))
def test_chunked_matches_autograd_odd_shapes(p, chunk_size):
    inputs, dy, options = build(p)
    assert_gradients(ssd_chunked_backward(dy, **inputs, chunk_size=chunk_size, **options),
                     autograd_gradients(inputs, dy, options), inputs)


@pytest.mark.parametrize("backward", [ssd_recurrent_backward, chunked_by_4])
def test_negative_dt_inside_a_negative_limit(backward):
    """dt_limit below 0 lets negative dt through: no second clamp to (0, inf) anywhere."""
    rng = np.random.default_rng(8)
    inputs, dy, options = make_problem(rng, 1, 9, 2, 2, 1, 2, with_dfinal=True)
    inputs["dt"] = rng.uniform(-0.4, 0.4, inputs["dt"].shape)
    options["dt_limit"] = (-0.2, np.inf)
    assert_gradients(backward(dy, **inputs, **options),
                     autograd_gradients(inputs, dy, options), inputs)


@pytest.mark.parametrize("backward", [ssd_recurrent_backward, chunked_by_4])
def test_inputs_are_not_modified(backward):
    rng = np.random.default_rng(9)
    inputs, dy, options = make_problem(rng, 1, 6, 3, 2, 1, 2, **FULL)
    before = {k: v.copy() for k, v in {**inputs, **options, "dy": dy}.items()
              if isinstance(v, np.ndarray)}
    backward(dy, **inputs, **options)
    for name, value in {**inputs, **options, "dy": dy}.items():
        if name in before:
            np.testing.assert_array_equal(value, before[name], err_msg=name)
