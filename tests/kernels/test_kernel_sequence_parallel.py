"""The sequence-parallel path (segment_states -> segment_pass -> fused kernel per segment) and the
precomputed ``C Bᵀ`` (chunk_scores), on the interpreter, against the float64 recurrence; and the
rule that picks the segments."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from mamba2_tile import reference
from mamba2_tile.api import forward_with_options
from mamba2_tile.kernels import DEFAULT_OPTIONS, ForwardOptions, chunk_cumsum
from mamba2_tile.kernels.chunk_scores import chunk_scores
from mamba2_tile.kernels.fused_state_out import fused_block_p, fused_occupancy, scores_given
from mamba2_tile.kernels.segment_pass import segment_pass
from mamba2_tile.kernels.segment_states import segment_states
from mamba2_tile.kernels.plan import plan
from mamba2_tile.kernels.sequence_parallel import choose_segment_chunks
from mamba2_tile.tolerances import TOLERANCES, assert_close
from ssd_cases import DTYPES, Case, api_kwargs, expected_output, make_case, random_cases

H200 = 132


def segmented(segment_chunks):
    return DEFAULT_OPTIONS.with_switches(fuse_state_passing=True, segment_chunks=segment_chunks)


def check(case, chunk_size, segment_chunks):
    t = case.tensors or make_case(case)
    y, final_states = forward_with_options(chunk_size=chunk_size,
                                           options=segmented(segment_chunks),
                                           return_final_states=True, **t, **api_kwargs(case))
    ref_y, ref_final = expected_output(case)
    tol = TOLERANCES[case.dtype]
    where = f"chunk {chunk_size}, {segment_chunks} chunks a segment"
    assert y.dtype == case.dtype and final_states.dtype == torch.float32
    assert_close(y, ref_y, tol, f"y ({where})")
    assert_close(final_states, ref_final, tol, f"final_states ({where})")


@settings(max_examples=20, deadline=None)
@given(case=random_cases(nheads=(1, 2, 4), headdims=(4, 6, 24, 72), dstates=(4, 10, 32),
                         max_seqlen=700),
       chunk_size=st.sampled_from([64, 128, 256]), segment_chunks=st.integers(1, 3))
def test_matches_recurrence(case, chunk_size, segment_chunks):
    check(case, chunk_size, segment_chunks)


@pytest.mark.parametrize("chunk_size", [64, 128, 256])
@pytest.mark.parametrize("seqlen, segment_chunks", [
    (1, 1), (65, 1), (200, 2), (64 * 5 + 7, 2), (900, 3), (900, 50),   # 50: one segment
])
def test_partial_chunks_and_segments(seqlen, segment_chunks, chunk_size):
    # Seqlen not a multiple of the chunk, nor the segment; the last segment partial.
    check(Case(seqlen=seqlen, nheads=2, headdim=8, dstate=8, initial_states=True, D="channel",
               z=True, seed=seqlen), chunk_size, segment_chunks)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("D", [None, "head", "channel"])
def test_every_dtype_and_skip(dtype, D):
    check(Case(batch=2, seqlen=333, nheads=4, ngroups=2, headdim=24, dstate=10, dtype=dtype,
               D=D, z=True, dt_bias=True, dt_softplus=True, initial_states=True, seed=5), 64, 2)


def test_long_decay_between_segments():
    # Strong decay: a wrong segment decay or entering state shows at once.
    check(Case(seqlen=700, A_range=(-8.0, -2.0), initial_states=True, seed=14), 64, 2)
    check(Case(seqlen=2000, nheads=1, headdim=8, dstate=8, initial_states=True, seed=12), 128, 3)


@pytest.mark.parametrize("segment_chunks", [None, 2])
def test_dstate_256_reads_precomputed_scores(segment_chunks):
    assert scores_given(256) and not scores_given(128)
    case = Case(seqlen=150, nheads=2, headdim=8, dstate=256, dtype=torch.bfloat16,
                D="head", z=True, initial_states=True, seed=21)
    t = make_case(case)
    options = DEFAULT_OPTIONS.with_switches(fuse_state_passing=True,
                                            segment_chunks=segment_chunks)
    y, final_states = forward_with_options(chunk_size=64, options=options,
                                           return_final_states=True, **t)
    ref_y, ref_final = expected_output(case)
    assert_close(y, ref_y, TOLERANCES[case.dtype], "y (dstate 256)")
    assert_close(final_states, ref_final, TOLERANCES[case.dtype], "final_states (dstate 256)")


def test_one_segment_is_the_plain_fused_kernel():
    case = Case(seqlen=150, nheads=2, headdim=8, dstate=8, initial_states=True, seed=40)
    check(case, 64, 3)                                  # 3 chunks, one segment
    with pytest.raises(ValueError, match="at least two segments"):
        t = case.tensors
        segment_states(t["x"], t["B"], *reversed(chunk_cumsum(t["dt"], t["A"], 64)), 3)


def test_chunk_scores_are_C_times_B_per_row_block():
    rng = np.random.default_rng(3)
    B = torch.tensor(rng.standard_normal((2, 100, 3, 12)), dtype=torch.float32)
    C = torch.tensor(rng.standard_normal((2, 100, 3, 12)), dtype=torch.float32)
    scores = chunk_scores(B, C, 32).numpy()
    assert scores.shape == (2, 3, 4, 32, 32)
    padded = lambda a: np.pad(a.numpy().astype(np.float64), ((0, 0), (0, 28), (0, 0), (0, 0)))
    Bp, Cp = padded(B), padded(C)
    for block in range(4):
        rows = slice(32 * block, 32 * block + 32)
        expected = np.einsum("bign,bjgn->bgij", Cp[:, rows], Bp[:, rows])
        assert_close(scores[:, :, block], expected, TOLERANCES[torch.float32], f"block {block}")


def test_segment_states_and_pass_follow_the_recurrence():
    # Each segment's own state is the recurrence run over the segment from zero; the entering
    # state of each segment is the recurrence's state at the segment's start.
    case = Case(seqlen=300, nheads=2, headdim=8, dstate=8, initial_states=True, seed=31)
    t = make_case(case)
    dA_cumsum, dt = chunk_cumsum(t["dt"], t["A"], 64)
    local, decay = segment_states(t["x"], t["B"], dt, dA_cumsum, 2)
    entering = segment_pass(local, decay, t["initial_states"])
    # Three segments: the last one's own state is never needed (the fused kernel ends there).
    assert local.shape == (1, 2, 2, 8, 8) and decay.shape == (1, 2, 2)
    assert entering.shape == (1, 2, 3, 8, 8)
    x, B, C, A = (t[k].numpy().astype(np.float64) for k in ("x", "B", "C", "A"))
    dts = t["dt"].numpy().astype(np.float64)
    h0 = t["initial_states"].numpy().astype(np.float64)
    tol = TOLERANCES[torch.float32]
    for s, start in enumerate(range(0, 300, 128)):
        stop = min(start + 128, 300)
        _, own = reference.ssd_recurrent(x[:, start:stop], dts[:, start:stop], A,
                                         B[:, start:stop], C[:, start:stop],
                                         return_final_states=True)
        if s < 2:
            assert_close(local[:, :, s], own, tol, f"segment {s} own state")
            assert_close(decay[:, :, s], (dts[:, start:stop] * A).sum(1), tol, f"decay {s}")
        if start == 0:
            before = h0
        else:
            _, before = reference.ssd_recurrent(x[:, :start], dts[:, :start], A, B[:, :start],
                                                C[:, :start], initial_states=h0,
                                                return_final_states=True)
        assert_close(entering[:, :, s], before, tol, f"state entering segment {s}")


def test_segments_are_chosen_to_fill_whole_waves():
    # Two fused blocks an SM, 132 SMs: waves of 264 blocks. 24 heads (one headdim tile each):
    # 11 segments make exactly one wave; 48 heads: 11 make two. Both beat more, shorter segments.
    assert choose_segment_chunks(1, 24, 64, 128, nchunks=32, sm_count=132) == 3      # 11 segments
    assert choose_segment_chunks(1, 48, 64, 128, nchunks=128, sm_count=132) == 12    # 11 segments
    # 80 heads: 3 segments (240 blocks) in one wave beat 13 (1040 blocks) in four.
    assert choose_segment_chunks(1, 80, 64, 128, nchunks=128, sm_count=132) == 43
    # Few chunks: as many segments as chunks while they still fit in one wave.
    assert choose_segment_chunks(1, 80, 64, 128, nchunks=3, sm_count=132) == 1
    # One block an SM (large states): waves of 132.
    assert choose_segment_chunks(1, 44, 64, 256, nchunks=30, sm_count=132, block_p=64,
                                 blocks_per_sm=1) == 10                              # 3 segments


def test_the_plan_cuts_segments_only_when_heads_cannot_fill_the_gpu():
    def planned(batch, nheads, base=DEFAULT_OPTIONS, seqlen=40 * 64):
        return plan(batch=batch, seqlen=seqlen, nheads=nheads, headdim=64, ngroups=1,
                    dstate=128, chunk_size=64, dtype=torch.bfloat16, sm_count=H200, base=base)
    few = planned(1, 8)                                             # 8 blocks
    assert few.fuse_state_passing
    assert few.segment_chunks == choose_segment_chunks(1, 8, 64, 128, 40, H200, 64, 64, 2)
    assert 1 <= few.segment_chunks < 40
    assert planned(8, 64).segment_chunks is None                    # 512 blocks fill it
    assert planned(1, 8, seqlen=64).segment_chunks is None          # one chunk: nothing to cut
    forced = DEFAULT_OPTIONS.with_switches(fuse_state_passing=True)
    assert planned(1, 8, forced).segment_chunks is None             # the caller's path
    assert planned(8, 64, segmented(3)).segment_chunks == 3


def test_large_states_take_a_wide_tile_and_one_block_an_sm():
    assert fused_block_p(64, 256) == 64 and fused_block_p(64, 128) == 64
    assert fused_block_p(64, 512) == 32
    assert fused_occupancy(256, 64, 2) is None and fused_occupancy(256, 32, 2) == 2
    assert fused_occupancy(128, 64, 2) == 2


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_bad_segment_chunks_are_refused(bad):
    with pytest.raises(ValueError, match="segment_chunks"):
        ForwardOptions(segment_chunks=bad)
