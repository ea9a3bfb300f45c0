"""The instructor's demo: its options are checked, and without a usable GPU it only says what it
would time (its GPU run: tests/gpu/test_demo_gpu.py)."""

import pytest

from mamba2_tile import dispatch
from mamba2_tile.tools import demo


def test_defaults_are_three_bfloat16_model_shapes():
    args = demo.parse_args([])
    assert args.reps == 20
    assert [problem.dtype for problem in args.problems] == ["bfloat16"] * 3
    assert [problem.seqlen for problem in args.problems] == [2048, 16384, 131072]


def test_dtype_replaces_every_shapes_dtype():
    args = demo.parse_args(["--dtype", "float16", "--reps", "5"])
    assert args.reps == 5 and {problem.dtype for problem in args.problems} == {"float16"}


@pytest.mark.parametrize("argv, message", [
    (["--reps", "0"], "expected a positive integer, got '0'"),
    (["--reps", "1.5"], "expected a positive integer"),
    (["--dtype", "float64"], "invalid choice: 'float64'"),
    (["--rep", "3"], "unrecognized arguments"),
])
def test_bad_options_are_refused(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        demo.parse_args(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_without_a_gpu_it_says_what_it_would_time(monkeypatch):
    monkeypatch.setattr(dispatch, "gpu_available", lambda: False)
    lines = []
    assert demo.main(["--reps", "7"], out=lines.append) == 0
    text = "\n".join(lines)
    assert "No GPU that cuTile supports here" in text and "7 replays" in text
    for problem in demo.SHAPES:
        assert problem.label() in text
