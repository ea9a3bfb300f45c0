"""The decode benchmark's command on a GPU, small and quick: it runs, and this package's errors
against float64 are small (mamba_ssm's columns are filled where it imports)."""

import json

import pytest
import torch

from mamba2_tile import dispatch

from mamba2_tile.tools import decode

pytestmark = pytest.mark.skipif(not dispatch.gpu_available(),
                                reason="needs a GPU that cuTile supports and the real cuda.tile")


def test_decode_bench_runs(tmp_path):
    assert decode.main(["--batch", "1", "16", "--nheads", "8", "--reps", "3",
                        "--name", "decode_gpu_test"], data_dir=tmp_path) == 0
    rows = json.loads((tmp_path / "decode_gpu_test.json").read_text())["rows"]
    assert [(r["state_dtype"], r["batch"]) for r in rows] == [
        ("float32", 1), ("float32", 16), ("bfloat16", 1), ("bfloat16", 16)]
    for row in rows:
        assert row["mamba2_tile_ms"] > 0 and row["mamba2_tile_rel_err"] < 2e-2
        assert row["mamba2_tile_state_rel_err"] < 2e-2


def test_decode_bench_compares_tiles_in_one_run(tmp_path):
    assert decode.main(["--batch", "16", "--nheads", "8", "--reps", "3", "--state-dtype",
                        "float32", "--block-p", "auto", "4", "32", "--name", "decode_tiles"],
                       data_dir=tmp_path) == 0
    rows = json.loads((tmp_path / "decode_tiles.json").read_text())["rows"]
    assert [r["block_p_option"] for r in rows] == ["auto", 4, 32]
    assert [r["block_p"] for r in rows][1:] == [4, 32]
    for row in rows:
        assert row["mamba2_tile_ms"] > 0 and row["mamba2_tile_state_rel_err"] < 2e-2
