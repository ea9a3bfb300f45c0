"""The decode reference against the recurrent reference: stepping token by token from a
prefill's final state equals one long run."""

import numpy as np
import pytest

from mamba2_tile.reference import ssd_recurrent
from mamba2_tile.reference_decode import selective_state_update


@pytest.mark.parametrize("ngroups", [1, 2])
def test_decode_steps_equal_recurrent(ngroups):
    rng = np.random.default_rng(0)
    b, l, h, p, n, prefill = 2, 7, 4, 3, 5, 4
    x = rng.standard_normal((b, l, h, p))
    dt = rng.uniform(0.01, 0.5, (b, l, h))
    A = -rng.uniform(0.5, 2.0, h)
    B = rng.standard_normal((b, l, ngroups, n))
    C = rng.standard_normal((b, l, ngroups, n))
    D = rng.standard_normal(h)
    y_all = ssd_recurrent(x, dt, A, B, C, D=D)
    _, state = ssd_recurrent(x[:, :prefill], dt[:, :prefill], A, B[:, :prefill],
                             C[:, :prefill], D=D, return_final_states=True)
    A_full = np.broadcast_to(A[:, None, None], (h, p, n))
    D_full = np.broadcast_to(D[:, None], (h, p))
    for t in range(prefill, l):
        dt_t = np.broadcast_to(dt[:, t, :, None], (b, h, p))
        y, state = selective_state_update(state, x[:, t], dt_t, A_full, B[:, t], C[:, t],
                                          D=D_full)
        np.testing.assert_allclose(y, y_all[:, t], rtol=1e-12, atol=1e-12)


def test_state_batch_indices_touch_only_named_rows():
    rng = np.random.default_rng(1)
    b, h, p, n = 2, 2, 3, 4
    state = rng.standard_normal((5, h, p, n))
    args = (rng.standard_normal((b, h, p)), rng.uniform(0.1, 1, (b, h, p)),
            -rng.uniform(0.5, 1, (h, p, n)), rng.standard_normal((b, 1, n)),
            rng.standard_normal((b, 1, n)))
    y, new = selective_state_update(state, *args, state_batch_indices=np.array([3, 0]))
    y_direct, rows = selective_state_update(state[[3, 0]], *args)
    np.testing.assert_allclose(y, y_direct)
    np.testing.assert_allclose(new[[3, 0]], rows)
    np.testing.assert_array_equal(new[[1, 2, 4]], state[[1, 2, 4]])
    with pytest.raises(ValueError, match="state_batch_indices"):
        selective_state_update(state, *args, state_batch_indices=np.array([0, 0]))
