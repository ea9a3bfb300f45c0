"""The host-overhead tool's GPU table: the benchmark's graph and eager times and the host's time
per call, real launches."""

import pytest

from mamba2_tile import dispatch
from mamba2_tile.problem import Problem
from mamba2_tile.tools import host_overhead

pytestmark = pytest.mark.skipif(not dispatch.gpu_available(), reason="needs a GPU cuTile supports")


@pytest.mark.parametrize("layer", [False, True])
def test_measure_gpu_times_a_call(layer):
    result = host_overhead.measure_gpu(Problem(8, 1024, 64, 64, 128, 1, 256), layer, reps=5,
                                       number=3)
    assert result["graph_ms"] > 0 and result["eager_ms"] > 0 and result["host_us"] > 0


def test_main_prints_the_gpu_table(capsys, monkeypatch):
    monkeypatch.setattr(host_overhead, "SHAPES", (Problem(1, 2048, 24, 64, 128, 1, 256),))
    assert host_overhead.main(["--number", "2", "--repeat", "2", "--gpu", "--reps", "3"]) == 0
    out = capsys.readouterr().out
    assert "eager - graph µs" in out and "b1 L2048 h24 p64 n128 g1 c256 bf16" in out
