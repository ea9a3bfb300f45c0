"""fwd_pass_state on the CPU tile interpreter against reference.fwd_pass_state (float64)."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from mamba2_tile import reference
from mamba2_tile.kernels import fwd_pass_state, fwd_pass_state_launch
from mamba2_tile.kernels.fwd_pass_state import (FLOAT32_ROWS, fwd_pass_state_rows,
                                                fwd_pass_state_switched_kernel)
from mamba2_tile.tolerances import TOLERANCES, assert_close, to_numpy
from ssd_cases import stage_shapes


def stage_inputs(rng, batch, seqlen, nheads, headdim, ngroups, dstate, chunk_size, dtype,
                 has_initial_states, A_range=(0.2, 2.0)):
    """Kernel inputs (torch) and their float64 twins; dt / dA_cumsum come from stage 1's reference."""
    x = torch.tensor(rng.standard_normal((batch, seqlen, nheads, headdim)), dtype=dtype)
    B = torch.tensor(rng.standard_normal((batch, seqlen, ngroups, dstate)) * 0.5, dtype=dtype)
    dt = rng.uniform(0.01, 0.2, (batch, seqlen, nheads))
    A = -rng.uniform(*A_range, nheads)
    dA_cumsum, dt_chunks = reference.chunk_cumsum(dt, A, chunk_size)
    dA_cumsum = torch.tensor(dA_cumsum, dtype=torch.float32)
    dt_chunks = torch.tensor(dt_chunks, dtype=torch.float32)
    initial_states = None
    if has_initial_states:
        initial_states = torch.tensor(rng.standard_normal((batch, nheads, headdim, dstate)),
                                      dtype=torch.float32)
    return x, B, dt_chunks, dA_cumsum, initial_states


def check(x, B, dt_chunks, dA_cumsum, initial_states):
    chunk_states, final_states = fwd_pass_state(x, B, dt_chunks, dA_cumsum, initial_states)
    ref_states, ref_final = reference.fwd_pass_state(
        to_numpy(x), to_numpy(B), to_numpy(dt_chunks), to_numpy(dA_cumsum),
        None if initial_states is None else to_numpy(initial_states),
    )
    assert chunk_states.dtype == final_states.dtype == torch.float32
    tol = TOLERANCES[x.dtype]
    assert_close(chunk_states, ref_states, tol, "chunk_states")
    assert_close(final_states, ref_final, tol, "final_states")


@settings(max_examples=30, deadline=None)
@given(shape=stage_shapes(), has_initial_states=st.booleans(), seed=st.integers(0, 2**16))
def test_matches_reference(shape, has_initial_states, seed):
    check(*stage_inputs(np.random.default_rng(seed), **shape,
                        has_initial_states=has_initial_states))


def test_several_state_tiles_per_head():
    # headdim / dstate larger than one 64-wide tile, and not powers of two.
    rng = np.random.default_rng(1)
    check(*stage_inputs(rng, 1, 100, 1, 72, 1, 66, 64, torch.float32, True))


def test_launch_can_be_inspected_without_running():
    x = torch.zeros(2, 300, 3, 80)
    B = torch.zeros(2, 300, 1, 16)
    dA_cumsum = torch.zeros(2, 3, 3, 128)
    launch, (chunk_states, final_states) = fwd_pass_state_launch(x, B, dA_cumsum, dA_cumsum)
    assert launch.grid == (6, 2, 1)              # batch * heads, headdim tiles, dstate tiles
    assert chunk_states.shape == (2, 3, 3, 80, 16) and final_states.shape == (2, 3, 80, 16)


@pytest.mark.parametrize("chunk_size, seqlen", [(256, 300), (256, 512), (128, 129)])
def test_float32_sums_a_chunk_64_positions_at_a_time(chunk_size, seqlen):
    """Float32 inputs at chunks over 64 positions run the switched kernel with ROWS = 64 (a whole
    chunk of float32 operands spills on sm_90), and stop at the last 64 positions holding a
    token: at 300 tokens, chunk 256, the last chunk's blocks 2 and 3 are wholly past seqlen."""
    rng = np.random.default_rng(2)
    inputs = stage_inputs(rng, 1, seqlen, 2, 64, 1, 32, chunk_size, torch.float32, True)
    launch, _ = fwd_pass_state_launch(*inputs)
    assert launch.kernel is fwd_pass_state_switched_kernel and launch.args[-1] == FLOAT32_ROWS
    assert fwd_pass_state_rows(chunk_size, torch.bfloat16) == chunk_size
    check(*inputs)
