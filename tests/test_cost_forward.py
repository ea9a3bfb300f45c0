"""The cost of the forward pass as the package runs it (three kernels, low-precision states, or
stages 2+3 fused) and the H200 roofline, against the arrays the reference stages produce."""

import numpy as np
import pytest

from mamba2_tile import cost, reference
from mamba2_tile.problem import Problem

SHAPES = [
    dict(batch=1, seqlen=6, nheads=2, headdim=2, dstate=3, ngroups=1, chunk_size=4),
    dict(batch=2, seqlen=8, nheads=4, headdim=3, dstate=2, ngroups=2, chunk_size=4),
]


def arrays(batch, seqlen, nheads, headdim, dstate, ngroups, chunk_size, dtype):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, seqlen, nheads, headdim)).astype(dtype)
    dt = rng.uniform(0.1, 0.5, (batch, seqlen, nheads)).astype(dtype)
    A = -rng.uniform(0.5, 1.5, nheads)
    B = rng.standard_normal((batch, seqlen, ngroups, dstate)).astype(dtype)
    C = rng.standard_normal((batch, seqlen, ngroups, dstate)).astype(dtype)
    dA_cumsum, dt_c = reference.chunk_cumsum(dt, A, chunk_size)
    chunk_states, final = reference.fwd_pass_state(x, B, dt_c, dA_cumsum)
    return dict(x=x, B=B, C=C, dA_cumsum=dA_cumsum, dt_c=dt_c, chunk_states=chunk_states,
                final=final, per_head_B=np.repeat(B, nheads // ngroups, axis=2))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_chunk_states_and_fused_bytes_match_the_arrays(shape, dtype):
    p = Problem(**shape, dtype=np.dtype(dtype).name)
    a = arrays(**shape, dtype=dtype)
    f32 = 4
    assert cost.chunk_states_bytes(p) == 2 * a["chunk_states"].size * f32
    assert cost.chunk_states_bytes(p, 2) == 2 * a["chunk_states"].size * 2

    fused = cost.fused_state_out_cost(p)
    assert fused.bytes_read == (a["x"].nbytes + 2 * a["per_head_B"].nbytes
                                + (a["dA_cumsum"].size + a["dt_c"].size) * f32)
    assert fused.bytes_written == a["x"].nbytes + a["final"].size * f32
    assert fused.flops == cost.fwd_pass_state_cost(p).flops + cost.compute_out_cost(p).flops


@pytest.mark.parametrize("shape", SHAPES)
def test_forward_cost_of_each_path(shape):
    p = Problem(**shape)
    three = cost.forward_cost(p)
    assert three == cost.chunked_cost(p)
    low = cost.forward_cost(p, states_bytes=2)
    half = cost.chunk_states_bytes(p) // 4          # half the states' bytes, each way
    assert (low.bytes_read, low.bytes_written) == (three.bytes_read - half,
                                                   three.bytes_written - half)
    fused = cost.forward_cost(p, fused=True)
    assert fused == cost.chunk_cumsum_cost(p) + cost.fused_state_out_cost(p)
    # Fusing saves the states both ways and the second read of x, B, dt and dA_cumsum.
    saved = (cost.chunk_states_bytes(p)
             + (p.batch * p.seqlen * p.nheads * (p.headdim + p.dstate)) * p.dtype_bytes
             + 2 * p.batch * p.nheads * p.padded_seqlen * cost.STATE_VALUE_BYTES)
    assert three.bytes - fused.bytes == saved
    assert three.flops == low.flops == fused.flops
    assert cost.minimal_bytes(p) <= fused.bytes < low.bytes < three.bytes


def test_the_states_dominate_the_three_kernel_traffic_at_chunk_64():
    p = Problem(batch=8, seqlen=4096, nheads=64, headdim=64, dstate=128, chunk_size=64)
    assert cost.chunk_states_bytes(p) / cost.forward_cost(p).bytes > 0.4
    # per (head, chunk): the state written and read is 8x the chunk's bfloat16 x
    one = Problem(batch=1, seqlen=64, nheads=1, headdim=64, dstate=128, chunk_size=64)
    assert cost.chunk_states_bytes(one) == 8 * 64 * 64 * 2


def test_roofline():
    assert cost.ridge_point() == pytest.approx(989e12 / 4.8e12)
    np.testing.assert_allclose(cost.attainable_flops([1.0, 1e4]), [4.8e12, 989e12])
    assert cost.attainable_flops(10.0, peak_flops=1e12, bandwidth=1e9) == 1e10
