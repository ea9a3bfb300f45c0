"""The packing measurement's layouts (run here on the interpreter, tiny) and its command line
without a GPU."""

import torch

from mamba2_tile import api
from mamba2_tile.problem import Problem
from mamba2_tile.tools import packing
from mamba2_tile.tools.bench import measurement
from mamba2_tile.tolerances import TOLERANCES, assert_close


def test_mixed_lengths_cover_the_tokens():
    lengths = packing.mixed_lengths(1000, 64, seed=3)
    assert sum(lengths) == 1000 and min(lengths) >= 1 and max(lengths) <= 128


def test_the_layouts_hold_the_same_tokens():
    """Packed as equal sequences, the row gives what the batch gives, row by row."""
    problem = Problem(batch=3, seqlen=70, nheads=2, headdim=8, dstate=8, chunk_size=64,
                      dtype="float32")
    inputs = measurement.make_inputs(problem, device="cpu")
    built = packing.layouts(inputs, 3, 70)
    assert list(built) == list(packing.LAYOUTS)
    outputs = {}
    for layout, (t, kwargs) in built.items():
        outputs[layout] = api.mamba_chunk_scan_combined(t["x"], t["dt"], t["A"], t["B"], t["C"],
                                                        64, D=t["D"], **kwargs)
    batch = outputs["batch"].reshape(1, 210, 2, 8)
    assert_close(outputs["packed_equal"], batch.double().numpy(), TOLERANCES[torch.float32],
                 "packed_equal against batch")
    y, varlen_states = outputs["packed_varlen"]
    assert torch.equal(y, outputs["packed_mixed"])
    assert varlen_states.shape[0] == int(built["packed_varlen"][1]["cu_seqlens"].numel()) - 1


def test_without_a_gpu_it_says_so(capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert packing.main(["--no-save"]) == 0
    assert "No CUDA GPU" in capsys.readouterr().out


def test_one_shape_from_the_command_line():
    args = packing.parse_args(["--nheads", "24", "--seqlen", "512"])
    assert packing.shapes_from(args) == ((24, 64, 128, 256, 8, 512),)
    assert packing.shapes_from(packing.parse_args([])) == packing.DEFAULT_SHAPES
