"""The backward profiler's table, and what it does without a GPU."""

import pytest
import torch

from mamba2_tile.tools import profile_backward


def test_kernel_rows_are_per_step_slowest_first_with_shares():
    events = [("cudaLaunchKernel", 30, 0.0),                 # host-side entry: no GPU time
              ("reduce_kernel", 6, 300.0),
              ("bwd_chunk_kernel_" + "x" * 100, 3, 1500.0),
              ("fwd_pass_state_kernel", 3, 1200.0)]
    rows, total_ms = profile_backward.kernel_rows(events, steps=3)
    assert [row[0][:16] for row in rows] == ["bwd_chunk_kernel", "fwd_pass_state_k", "reduce_kernel"]
    assert len(rows[0][0]) == profile_backward.NAME_WIDTH
    assert rows[0][1:3] == (1.0, 0.5) and rows[2][1] == 2.0
    assert total_ms == pytest.approx(1.0)
    assert sum(row[3] for row in rows) == pytest.approx(1.0)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only message")
def test_without_a_gpu_it_says_so(capsys):
    assert profile_backward.main(["--chunk-size", "256"]) == 0
    assert "No CUDA GPU found" in capsys.readouterr().out


def test_bad_sizes_are_refused_by_name(capsys):
    with pytest.raises(SystemExit) as exit_info:
        profile_backward.main(["--chunk-size", "100"])
    assert exit_info.value.code == 2
    assert "chunk" in capsys.readouterr().err
