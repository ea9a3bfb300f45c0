"""The instructor's demo on a GPU: it times every shape (mamba_ssm's column where it imports)."""

import pytest
import torch

from mamba2_tile import dispatch
from mamba2_tile.problem import Problem
from mamba2_tile.tools import demo

pytestmark = pytest.mark.skipif(not dispatch.gpu_available(), reason="needs a GPU cuTile supports")

def test_demo_times_each_shape(monkeypatch):
    small = (Problem(batch=1, seqlen=1000, nheads=8, headdim=64, dstate=128),
             Problem(batch=2, seqlen=4096, nheads=8, headdim=64, dstate=64))
    monkeypatch.setattr(demo, "SHAPES", small)
    lines = []
    assert demo.main(["--reps", "3"], out=lines.append) == 0
    for problem in small:
        row = next(line for line in lines if line.startswith(problem.label()))
        assert float(row.split()[len(problem.label().split())]) > 0
    torch.cuda.synchronize()
