"""The host-overhead tool runs the API's whole host path on CPU tensors with the GPU launch
stubbed: it counts the launches each path makes, and the torch operators of a call."""

import pytest
import torch

from mamba2_tile import api, dispatch
from mamba2_tile.problem import Problem
from mamba2_tile.tools import host_overhead


def test_stubbed_launches_take_the_gpu_route_and_run_nothing():
    args, kwargs = host_overhead.make_inputs(Problem(8, 100, 32, 16, 16, 1, 64))
    with host_overhead.stubbed_launches() as launched:
        y = api.mamba_chunk_scan_combined(*args, **kwargs)
    assert len(launched) == 2                       # chunk_cumsum, fused_state_out
    assert dispatch.last_backend() == dispatch.CUTILE
    assert y.shape == args[0].shape


def test_a_bad_argument_is_still_refused_by_name():
    (x, dt, A, B, C, chunk_size), kwargs = host_overhead.make_inputs(
        Problem(8, 100, 32, 16, 16, 1, 64))
    with host_overhead.stubbed_launches(), pytest.raises(ValueError, match="dt must have shape"):
        api.mamba_chunk_scan_combined(x, dt[:, :50], A, B, C, chunk_size, **kwargs)


@pytest.mark.parametrize("problem, launches", [
    (Problem(8, 1024, 64, 64, 128, 1, 256), 2),     # fused
    (Problem(8, 1024, 64, 64, 256, 1, 256), 3),     # C Bᵀ precomputed first
    (Problem(1, 8192, 24, 64, 128, 1, 256), 4),     # sequence-parallel
])
def test_measure_counts_launches_and_launches_no_small_kernels(problem, launches):
    result = host_overhead.measure(problem, number=1, repeat=1)
    assert result["launches"] == launches
    assert result["us_per_call"] > 0
    # Allocations and views only: on a GPU any other operator (a fill, a copy, a cast) would be
    # a kernel of its own, ~5 µs each.
    assert result["kernel_ops"] == 0, dict(result["ops"])


def test_main_prints_a_row_per_shape(capsys, monkeypatch):
    monkeypatch.setattr(host_overhead, "SHAPES", (Problem(8, 100, 32, 16, 16, 1, 64),))
    assert host_overhead.main(["--number", "1", "--repeat", "1", "--profile", "--ops"]) == 0
    out = capsys.readouterr().out
    assert "b8 L100 h32 p16 n16 g1 c64 bf16" in out and "µs/call" in out
    assert "tottime" in out and "empty" in out


def test_an_eager_call_stays_lean():
    # A guard on the host path of the eager row (#12 item 3), counted rather than timed
    # so that it holds on any machine: at the time of writing 127 Python and C function calls
    # (inspecting a signature on every launch, say, would add hundreds) and four torch
    # operators, all allocations (y, final_states, dA_cumsum, dt).
    result = host_overhead.measure(Problem(8, 1024, 64, 64, 128, 1, 256), number=1, repeat=1)
    assert result["function_calls"] <= 160, result["function_calls"]
    assert result["aten_ops"] == 4, dict(result["ops"])


def test_gpu_timing_without_a_gpu_says_so(capsys, monkeypatch):
    monkeypatch.setattr(host_overhead, "SHAPES", (Problem(8, 100, 32, 16, 16, 1, 64),))
    monkeypatch.setattr(dispatch, "gpu_available", lambda: False)
    assert host_overhead.main(["--number", "1", "--repeat", "1", "--gpu"]) == 0
    assert "no GPU that cuTile supports here" in capsys.readouterr().out
