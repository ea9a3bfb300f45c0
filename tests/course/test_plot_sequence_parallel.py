"""The sequence-parallel picture's schedule: every chunk of every head computed twice on the
segmented side (state, then output), once on the walking side, and the segmented side shorter
whenever the segments fill SMs the heads leave idle."""

import matplotlib
import pytest

matplotlib.use("Agg")

from mamba2_tile.course.plots.sequence_parallel import (PASS_STEP,  # noqa: E402
                                                        plot_sequence_parallel,
                                                        sequence_parallel_timeline)


def _work(bars, stage):
    return sum(length for _, _, length, name in bars if name == stage)


@pytest.mark.parametrize("nheads, nchunks, segment_chunks, sm_count",
                         [(4, 32, 4, 32), (3, 10, 3, 7), (1, 5, 5, 4), (2, 9, 2, 2)])
def test_every_chunk_is_scheduled(nheads, nchunks, segment_chunks, sm_count):
    walk, segmented = sequence_parallel_timeline(nheads, nchunks, segment_chunks, sm_count)
    assert _work(walk, "walk") == nheads * nchunks
    assert _work(segmented, "segment_states") == nheads * nchunks
    assert _work(segmented, "fused_state_out") == nheads * nchunks
    assert all(0 <= sm < sm_count for sm, *_ in walk + segmented)


def test_no_sm_runs_two_blocks_at_once():
    _, segmented = sequence_parallel_timeline(3, 10, 3, 7)
    for sm in range(7):
        spans = sorted((start, start + length) for s, start, length, _ in segmented if s == sm)
        assert all(end <= next_start for (_, end), (next_start, _) in zip(spans, spans[1:]))


def test_segments_finish_first_when_heads_leave_sms_idle():
    walk, segmented = sequence_parallel_timeline(4, 32, 4, 32)
    assert max(s + n for _, s, n, _ in walk) == 32
    assert max(s + n for _, s, n, _ in segmented) == 4 + 8 * PASS_STEP + 4


def test_more_heads_than_sms_is_refused():
    with pytest.raises(ValueError, match="nheads"):
        sequence_parallel_timeline(8, 16, 4, 4)


def test_plot_draws_two_panels():
    fig = plot_sequence_parallel()
    assert len(fig.axes) == 2
