"""The PyTorch chunked baseline computes what the NumPy references compute."""

import numpy as np
import pytest
import torch

from mamba2_tile.reference import chunk_cumsum, compute_out, fwd_pass_state, ssd_recurrent
from mamba2_tile.torch_reference import mamba_chunk_scan_torch


@pytest.mark.parametrize("seqlen, chunk_size, ngroups, d_shape", [
    (1, 4, 1, None), (37, 8, 2, "per_head"), (64, 16, 4, "per_channel"), (50, 64, 1, None),
])
def test_matches_numpy_reference_in_float64(seqlen, chunk_size, ngroups, d_shape):
    rng = np.random.default_rng(seqlen)
    b, h, p, n = 2, 4, 3, 5
    x = rng.standard_normal((b, seqlen, h, p))
    dt = rng.standard_normal((b, seqlen, h))
    A = -rng.uniform(0.5, 3.0, h)
    B = rng.standard_normal((b, seqlen, ngroups, n))
    C = rng.standard_normal((b, seqlen, ngroups, n))
    D = {None: None, "per_head": rng.standard_normal(h),
         "per_channel": rng.standard_normal((h, p))}[d_shape]
    z = rng.standard_normal(x.shape)
    dt_bias = rng.standard_normal(h)
    h0 = rng.standard_normal((b, h, p, n))
    # NumPy: the three stages with the dt transform and gating.
    dA_cumsum, dt_c = chunk_cumsum(dt, A, chunk_size, dt_bias=dt_bias, dt_softplus=True,
                                   dt_limit=(0.01, 2.0))
    states, final = fwd_pass_state(x, B, dt_c, dA_cumsum, h0)
    y_ref = compute_out(x, dt_c, dA_cumsum, B, C, states, D=D, z=z)
    t = lambda a: None if a is None else torch.from_numpy(a)
    y, final_t = mamba_chunk_scan_torch(
        t(x), t(dt), t(A), t(B), t(C), chunk_size, D=t(D), z=t(z), dt_bias=t(dt_bias),
        initial_states=t(h0), dt_softplus=True, dt_limit=(0.01, 2.0),
        return_final_states=True, compute_dtype=torch.float64)
    np.testing.assert_allclose(y.numpy(), y_ref, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(final_t.numpy(), final, rtol=1e-10, atol=1e-10)


def test_float32_baseline_is_close_and_keeps_the_input_dtype():
    rng = np.random.default_rng(0)
    x, B, C = (rng.standard_normal(s).astype(np.float32) for s in
               [(1, 100, 2, 8), (1, 100, 1, 16), (1, 100, 1, 16)])
    dt = rng.uniform(0.01, 0.1, (1, 100, 2)).astype(np.float32)
    A = np.array([-1.0, -4.0], dtype=np.float32)
    y = mamba_chunk_scan_torch(*(torch.from_numpy(a).to(torch.bfloat16) for a in (x, dt, A, B, C)), 64)
    assert y.dtype == torch.bfloat16
    y_ref = ssd_recurrent(*(torch.from_numpy(a).to(torch.bfloat16).float().numpy()
                            for a in (x, dt, A, B, C)))
    assert np.abs(y.float().numpy() - y_ref).max() < 0.05 * np.abs(y_ref).max()
