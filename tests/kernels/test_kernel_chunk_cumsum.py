"""chunk_cumsum on the CPU tile interpreter against reference.chunk_cumsum (float64)."""

import numpy as np
import torch
from hypothesis import given, settings

from mamba2_tile import reference
from mamba2_tile.kernels import chunk_cumsum, chunk_cumsum_launch
from mamba2_tile.tolerances import CUMSUM_TOLERANCE, assert_close, to_numpy
from ssd_cases import stage_1_problems


def check(dt, A, chunk_size, dt_bias=None, dt_softplus=False, dt_limit=(0.0, float("inf"))):
    dA_cumsum, dt_out = chunk_cumsum(dt, A, chunk_size, dt_bias=dt_bias,
                                     dt_softplus=dt_softplus, dt_limit=dt_limit)
    ref_dA, ref_dt = reference.chunk_cumsum(
        to_numpy(dt), to_numpy(A), chunk_size,
        dt_bias=None if dt_bias is None else to_numpy(dt_bias),
        dt_softplus=dt_softplus, dt_limit=dt_limit,
    )
    assert dA_cumsum.dtype == dt_out.dtype == torch.float32
    assert_close(dt_out, ref_dt, CUMSUM_TOLERANCE, "dt")
    assert_close(dA_cumsum, ref_dA, CUMSUM_TOLERANCE, "dA_cumsum")
    return dA_cumsum, dt_out


@settings(max_examples=40, deadline=None)
@given(problem=stage_1_problems())
def test_matches_reference(problem):
    batch, seqlen, nheads, chunk_size, dtype, has_bias, dt_softplus, dt_limit, seed = problem
    rng = np.random.default_rng(seed)
    dt = torch.tensor(rng.standard_normal((batch, seqlen, nheads)), dtype=dtype)
    A = torch.tensor(-rng.uniform(0.1, 4.0, nheads), dtype=torch.float32)
    dt_bias = torch.tensor(rng.uniform(-1, 1, nheads), dtype=dtype) if has_bias else None
    check(dt, A, chunk_size, dt_bias, dt_softplus, dt_limit)


def test_padding_past_seqlen_is_zero_even_after_bias_and_softplus():
    dt = torch.full((1, 70, 3), 0.3)
    dA_cumsum, dt_out = check(dt, -torch.ones(3), 64, dt_bias=torch.ones(3), dt_softplus=True)
    assert torch.all(dt_out[:, :, 1, 6:] == 0)
    # The cumsum stays flat over the padding: the last entry is the last real position's.
    assert torch.all(dA_cumsum[:, :, 1, 6:] == dA_cumsum[:, :, 1, 5:6])


def test_softplus_is_identity_above_20():
    dt = torch.tensor([[[19.0, 21.0, 50.0, 100.0]]])
    _, dt_out = check(dt, -torch.ones(4), 64, dt_softplus=True)
    assert torch.equal(dt_out[0, 1:, 0, 0], torch.tensor([21.0, 50.0, 100.0]))


def test_launch_can_be_inspected_without_running():
    dt = torch.zeros(2, 300, 20)
    launch, (dA_cumsum, dt_out) = chunk_cumsum_launch(dt, torch.zeros(20), 128)
    assert launch.grid == (2, 3, 2)              # batch, chunks, blocks of 16 heads
    assert dA_cumsum.shape == dt_out.shape == (2, 20, 3, 128)
    args = launch.named_args()
    assert args["dt"] is dt and args["dA_cumsum"] is dA_cumsum and args["dt_out"] is dt_out
    assert args["CHUNK_SIZE"] == 128 and args["BLOCK_H"] == 16
