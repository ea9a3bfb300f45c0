"""compute_out on the CPU tile interpreter against reference.compute_out (float64)."""

import numpy as np
import torch
from hypothesis import given, settings, strategies as st

from mamba2_tile import reference
from mamba2_tile.kernels import compute_out, compute_out_launch
from mamba2_tile.tolerances import TOLERANCES, assert_close, to_numpy
from ssd_cases import stage_shapes


def stage_inputs(rng, batch, seqlen, nheads, headdim, ngroups, dstate, chunk_size, dtype,
                 D_shape, has_z, A_range=(0.2, 2.0)):
    tensor = lambda shape, dt=dtype, s=1.0: torch.tensor(rng.standard_normal(shape) * s, dtype=dt)
    x = tensor((batch, seqlen, nheads, headdim))
    B = tensor((batch, seqlen, ngroups, dstate), s=0.5)
    C = tensor((batch, seqlen, ngroups, dstate), s=0.5)
    dt = rng.uniform(0.01, 0.2, (batch, seqlen, nheads))
    A = -rng.uniform(*A_range, nheads)
    dA_cumsum, dt_chunks = reference.chunk_cumsum(dt, A, chunk_size)
    nchunks = dA_cumsum.shape[2]
    chunk_states = tensor((batch, nheads, nchunks, headdim, dstate), torch.float32)
    D = None if D_shape is None else tensor(D_shape, torch.float32)
    z = tensor((batch, seqlen, nheads, headdim)) if has_z else None
    return (x, torch.tensor(dt_chunks, dtype=torch.float32),
            torch.tensor(dA_cumsum, dtype=torch.float32), B, C, chunk_states, D, z)


def check(x, dt, dA_cumsum, B, C, chunk_states, D, z):
    y = compute_out(x, dt, dA_cumsum, B, C, chunk_states, D=D, z=z)
    ref = reference.compute_out(
        *(to_numpy(t) for t in (x, dt, dA_cumsum, B, C, chunk_states)),
        D=None if D is None else to_numpy(D), z=None if z is None else to_numpy(z),
    )
    assert y.dtype == x.dtype and y.shape == x.shape
    assert_close(y, ref, TOLERANCES[x.dtype], "y")


@settings(max_examples=30, deadline=None)
@given(shape=stage_shapes(), D_kind=st.sampled_from([None, "head", "channel"]),
       has_z=st.booleans(), seed=st.integers(0, 2**16))
def test_matches_reference(shape, D_kind, has_z, seed):
    nheads, headdim = shape["nheads"], shape["headdim"]
    D_shape = {None: None, "head": (nheads,), "channel": (nheads, headdim)}[D_kind]
    check(*stage_inputs(np.random.default_rng(seed), **shape, D_shape=D_shape, has_z=has_z))


def test_several_headdim_tiles_and_row_blocks():
    # headdim 72 -> two 64-wide tiles; chunk 256 -> four 64-row blocks, the last ones past seqlen.
    rng = np.random.default_rng(2)
    check(*stage_inputs(rng, 1, 300, 2, 72, 1, 20, 256, torch.float32, (2, 72), True))


def test_launch_can_be_inspected_without_running():
    x = torch.zeros(2, 300, 3, 80)
    B = torch.zeros(2, 300, 1, 24)
    dA_cumsum = torch.zeros(2, 3, 2, 256)
    chunk_states = torch.zeros(2, 3, 2, 80, 24)
    launch, y = compute_out_launch(x, dA_cumsum, dA_cumsum, B, B, chunk_states)
    # (row blocks per chunk * headdim tiles, batch * chunks, heads); dstate padded to 32.
    assert launch.grid == (4 * 2, 4, 3)
    assert y.shape == x.shape and y.dtype == x.dtype
    args = launch.named_args()
    assert args["y"] is y and args["chunk_states"] is chunk_states
    assert (args["DSTATE"], args["BLOCK_M"], args["BLOCK_P"]) == (32, 64, 64)
