"""bwd_chunk_cumsum (the backward of stage 1) on the CPU tile interpreter against
reference_backward.chunk_cumsum_backward and dt_transform (float64)."""

import numpy as np
import torch
from hypothesis import given, settings

from mamba2_tile import reference, reference_backward
from mamba2_tile.kernels.bwd_chunk_cumsum import bwd_chunk_cumsum
from mamba2_tile.tolerances import CUMSUM_TOLERANCE, assert_close, to_numpy
from ssd_cases import stage_1_problems


def expected_gradients(dt, A, ddA_terms, ddt_direct, dt_bias, dt_softplus, dt_limit):
    """``(ddt, dA)`` in float64: ``dA_cumsum``'s gradient assembled from the three rows (the
    whole chunk's terms at its last position, where every step's running sum reaches them),
    then the reference's stage-1 backward and ``dt``'s chain."""
    terms = to_numpy(ddA_terms)
    ddA_cumsum = terms[:, :, :, 0] - terms[:, :, :, 1]
    ddA_cumsum[..., -1] += terms[:, :, :, 2].sum(-1)
    chunk_size = ddA_cumsum.shape[-1]
    bias = None if dt_bias is None else to_numpy(dt_bias)
    _, dt_chunks = reference.chunk_cumsum(to_numpy(dt), to_numpy(A), chunk_size, dt_bias=bias,
                                          dt_softplus=dt_softplus, dt_limit=dt_limit)
    ddt_used, dA = reference_backward.chunk_cumsum_backward(
        ddA_cumsum, to_numpy(ddt_direct), dt_chunks, to_numpy(A), dt.shape[1])
    _, ddt_used_ddt = reference_backward.dt_transform(to_numpy(dt), bias, dt_softplus, dt_limit)
    return ddt_used * ddt_used_ddt, dA


def summand_magnitudes(dt, A, ddA_terms, ddt_direct, dt_bias, dt_softplus, dt_limit):
    """``(ddt, dA)`` with every summand taken by its magnitude: what float32 rounding in the
    running sums scales with. A token's gradient sums up to three chunks' worth of terms that
    can cancel to almost nothing, so its error is judged against this, not against itself.
    (The steps ``dt·|A|`` come out positive and are never floored, as none of the random
    problems below floors them either.)"""
    terms = ddA_terms.abs()
    terms[:, :, :, 1] = -terms[:, :, :, 1]
    return expected_gradients(dt, -A.abs(), terms, ddt_direct.abs(), dt_bias, dt_softplus,
                              dt_limit)


def random_inputs(rng, batch, seqlen, nheads, chunk_size, dtype):
    nchunks = -(-seqlen // chunk_size)
    dt = torch.tensor(rng.standard_normal((batch, seqlen, nheads)), dtype=dtype)
    A = torch.tensor(-rng.uniform(0.1, 4.0, nheads), dtype=torch.float32)
    ddA_terms = torch.tensor(rng.standard_normal((batch, nheads, nchunks, 3, chunk_size)),
                             dtype=torch.float32)
    ddt_direct = torch.tensor(rng.standard_normal((batch, nheads, nchunks, chunk_size)),
                              dtype=torch.float32)
    return dt, A, ddA_terms, ddt_direct


@settings(max_examples=30, deadline=None)
@given(problem=stage_1_problems())
def test_matches_reference(problem):
    batch, seqlen, nheads, chunk_size, dtype, has_bias, dt_softplus, dt_limit, seed = problem
    rng = np.random.default_rng(seed)
    dt, A, ddA_terms, ddt_direct = random_inputs(rng, batch, seqlen, nheads, chunk_size, dtype)
    dt_bias = torch.tensor(rng.uniform(-1, 1, nheads), dtype=dtype) if has_bias else None
    ddt, dA = bwd_chunk_cumsum(dt, A, ddA_terms, ddt_direct, dt_bias=dt_bias,
                               dt_softplus=dt_softplus, dt_limit=dt_limit)
    ddt_ref, dA_ref = expected_gradients(dt, A, ddA_terms, ddt_direct, dt_bias, dt_softplus,
                                         dt_limit)
    ddt_magnitude, dA_magnitude = summand_magnitudes(dt, A, ddA_terms, ddt_direct, dt_bias,
                                                     dt_softplus, dt_limit)
    assert ddt.dtype == dA.dtype == torch.float32
    assert_close(ddt, ddt_ref, CUMSUM_TOLERANCE, "ddt", magnitude=ddt_magnitude)
    assert_close(dA, dA_ref, CUMSUM_TOLERANCE, "dA", magnitude=dA_magnitude)


def test_no_step_gradient_where_stage_1_floored_the_step():
    # Head 1's steps dt * A are below DA_STEP_MIN (-128): stage 1 floored them, so neither A
    # nor dt gets their running sums' gradient there; dt keeps its direct gradient. Head 0 is
    # the reference's.
    rng = np.random.default_rng(0)
    dt, A, ddA_terms, ddt_direct = random_inputs(rng, 1, 100, 2, 64, torch.float32)
    dt = dt.abs() + 0.5
    A[1] = -1e6
    ddt, dA = bwd_chunk_cumsum(dt, A, ddA_terms, ddt_direct)
    ddt_ref, dA_ref = expected_gradients(dt, A, ddA_terms, ddt_direct, None, False,
                                         (0.0, float("inf")))
    assert_close(ddt[..., 0], ddt_ref[..., 0], CUMSUM_TOLERANCE, "ddt, head 0")
    assert_close(dA[0], dA_ref[0], CUMSUM_TOLERANCE, "dA, head 0")
    assert dA[1] == 0
    direct = ddt_direct[0, 1].reshape(-1)[:100]
    assert torch.equal(ddt[0, :, 1], direct)


def test_no_gradient_where_clamped_or_past_softplus_threshold_slope_one():
    # dt + bias: 25 (softplus is the identity above 20: slope 1), -30 (softplus ~ 1e-13, below
    # dt_limit's low end: clamped, no gradient), 0 (slope sigmoid(0) = 1/2).
    dt = torch.tensor([[[25.0, -30.0, 0.0]]])
    A = -torch.ones(3)
    ddA_terms = torch.zeros(1, 3, 1, 3, 64)
    ddt_direct = torch.ones(1, 3, 1, 64)
    ddt, _ = bwd_chunk_cumsum(dt, A, ddA_terms, ddt_direct, dt_softplus=True,
                              dt_limit=(1e-3, float("inf")))
    assert torch.equal(ddt[0, 0], torch.tensor([1.0, 0.0, 0.5]))
