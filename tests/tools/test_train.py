"""The training command on the CPU interpreter: a short run writes a checkpoint that loads, its
losses and a loss curve; bad arguments are refused by name before anything runs."""

import json

import pytest
import torch

from mamba2_tile.model import load_checkpoint
from mamba2_tile.tools import train

TINY = ["--d-model", "16", "--n-layer", "2", "--d-state", "8", "--headdim", "8",
        "--batch", "2", "--seqlen", "64"]


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("the cat sat on the mat and the dog sat on the log. " * 40)
    return path


def test_a_short_run_writes_what_it_says(corpus, tmp_path, capsys):
    out = tmp_path / "lm"
    assert train.main(["--text", str(corpus), "--steps", "6", "--eval-every", "3",
                       "--out", str(out), *TINY]) == 0
    result = json.loads(out.with_suffix(".json").read_text())
    assert len(result["losses"]) == 6 and [s for s, _ in result["held_out"]] == [3, 6]
    assert result["config"]["d_model"] == 16 and result["tokens_per_s"] > 0
    assert result["device"] == "cpu" and result["sample"].startswith("The ")
    assert out.with_suffix(".png").stat().st_size > 0
    model, extra = load_checkpoint(out.with_suffix(".pt"))
    assert extra["final_loss"] == pytest.approx(result["losses"][-1])
    assert model(torch.zeros(1, 3, dtype=torch.int64)).shape == (1, 3, 256)
    assert "parameters; final training loss" in capsys.readouterr().out


@pytest.mark.parametrize("argv, words", [
    (["--steps", "0"], ["--steps"]),
    (["--lr", "0"], ["--lr"]),
    (["--chunk-size", "32"], ["--chunk-size"]),
    (["--headdim", "5"], ["--headdim", "must divide"]),
    (["--scan", "triton"], ["--scan"]),
])
def test_bad_arguments_are_refused_by_name(corpus, capsys, argv, words):
    with pytest.raises(SystemExit) as exit_:
        train.parse_args(["--text", str(corpus), *argv])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert all(word in err for word in words), err


def test_a_missing_text_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        train.parse_args(["--text", str(tmp_path / "nope.txt")])
    assert "no such file" in capsys.readouterr().err


def test_a_text_too_short_for_the_windows_says_so(tmp_path):
    path = tmp_path / "short.txt"
    path.write_text("x" * 100)
    with pytest.raises(ValueError, match="held-out part has 10 bytes"):
        train.train(train.parse_args(["--text", str(path), *TINY, "--no-save"]),
                    torch.device("cpu"))
