"""The decode benchmark without a GPU: its options, the rows it would run, the bytes it counts,
its inputs (run here through the interpreter, tiny) and its table with made-up timings."""

import json

import pytest
import torch

from mamba2_tile.decode import selective_state_update
from mamba2_tile.tolerances import TOLERANCES, assert_close
from mamba2_tile.tools import decode


def test_without_a_gpu_it_says_so(capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert decode.main(["--no-save"]) == 0
    assert "No CUDA GPU" in capsys.readouterr().out


def test_the_default_rows_are_every_batch_for_both_state_dtypes():
    args = decode.parse_args([])
    rows = decode.planned_rows(args)
    assert rows == [(s, b) for s in ("float32", "bfloat16")
                    for b in (1, 2, 4, 8, 16, 32, 64, 128, 256)]
    assert args.block_p == ["auto"]
    assert (args.nheads, args.headdim, args.dstate, args.ngroups, args.dtype) == (
        80, 64, 128, 1, "bfloat16")


def test_options_choose_the_rows():
    args = decode.parse_args(["--batch", "3", "1", "--state-dtype", "bfloat16",
                              "--nheads", "8", "--ngroups", "2"])
    assert decode.planned_rows(args) == [("bfloat16", 3), ("bfloat16", 1)]
    assert (args.nheads, args.ngroups) == (8, 2)
    args = decode.parse_args(["--batch", "16", "--state-dtype", "float32",
                              "--block-p", "auto", "4", "32"])
    assert decode.planned_rows(args) == [("float32", 16)]
    assert args.block_p == ["auto", 4, 32]


BAD_ARGUMENTS = [
    # (argv, words the error must contain)
    (["--batch", "0"], ["--batch", "positive integer"]),
    (["--batch", "2.5"], ["--batch"]),
    (["--batch", "4", "4"], ["--batch", "4 given more than once"]),
    (["--state-dtype", "float16"], ["--state-dtype", "invalid choice"]),
    (["--state-dtype", "float32", "float32"], ["--state-dtype", "more than once"]),
    (["--dtype", "int8"], ["--dtype"]),
    (["--reps", "0"], ["--reps", "positive integer"]),
    (["--nheads", "80", "--ngroups", "3"], ["--ngroups", "multiple of ngroups"]),
    (["--name", "../x"], ["--name", "file name stem"]),
    (["--name", "x", "--no-save"], ["--name", "--no-save"]),
    (["--batch-size", "4"], ["unrecognized"]),
    (["--block-p", "12"], ["--block-p", "power of two"]),
    (["--block-p", "0"], ["--block-p", "power of two"]),
    (["--block-p", "wide"], ["--block-p", "'auto'"]),
    (["--block-p", "8", "auto", "8"], ["--block-p", "8 given more than once"]),
]


@pytest.mark.parametrize("argv, words", BAD_ARGUMENTS)
def test_bad_arguments_are_refused_with_the_option_named(argv, words, capsys):
    with pytest.raises(SystemExit) as exit_info:
        decode.parse_args(argv)
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    for word in words:
        assert word in error, (word, error)


def test_minimal_bytes_count_the_state_twice_and_each_input_once():
    # batch 2, 4 heads of 8 channels, dstate 16, 2 groups; float32 state, bfloat16 inputs
    state = 2 * (2 * 4 * 8 * 16) * 4
    x_z_y = 3 * (2 * 4 * 8) * 2
    b_c = 2 * (2 * 2 * 16) * 2
    dt = 2 * 4 * 2
    parameters = 3 * 4 * 4
    assert decode.minimal_bytes(2, 4, 8, 16, 2, "float32", "bfloat16") == (
        state + x_z_y + b_c + dt + parameters)
    # the 2.7B layer at batch 256: the state is nearly all of it, half as much in bfloat16
    f32 = decode.minimal_bytes(256, 80, 64, 128, 1, "float32", "bfloat16")
    bf16 = decode.minimal_bytes(256, 80, 64, 128, 1, "bfloat16", "bfloat16")
    assert 2 * 256 * 80 * 64 * 128 * 4 < f32 < 1.01 * 2 * 256 * 80 * 64 * 128 * 4
    assert bf16 < 0.51 * f32


@pytest.mark.parametrize("state_dtype", ["float32", "bfloat16"])
def test_the_inputs_are_mamba2s_broadcasts_and_match_the_reference(state_dtype):
    inputs = decode.decode_inputs(3, 4, 8, 16, 2, state_dtype, device="cpu")
    assert inputs["state"].dtype == getattr(torch, state_dtype)
    assert all(inputs[k].dtype == torch.bfloat16 for k in ("x", "z", "B", "C", "dt"))
    assert all(inputs[k].dtype == torch.float32 for k in ("A", "D", "dt_bias"))
    assert inputs["dt"].stride() == (4, 1, 0) and inputs["A"].stride() == (1, 0, 0)
    assert inputs["D"].stride() == (1, 0) and inputs["dt_bias"].stride() == (1, 0)
    y_ref, state_ref = decode._reference(inputs)
    state = inputs["state"].clone()
    y = decode._call(selective_state_update, inputs, state)()
    assert_close(y, y_ref.numpy(), TOLERANCES[torch.bfloat16], "y")
    assert_close(state, state_ref.numpy(), TOLERANCES[getattr(torch, state_dtype)], "state")


def fake_row(state_dtype, batch, theirs=True, block_p_option="auto"):
    row = dict(batch=batch, state_dtype=state_dtype, block_p=16, block_p_option=block_p_option,
               mamba2_tile_ms=0.0123,
               mamba2_tile_copy_fraction=0.81, mamba2_tile_rel_err=2.5e-3,
               mamba2_tile_state_rel_err=1e-7, mamba_ssm_ms=None)
    if theirs:
        row.update(mamba_ssm_ms=0.0246, speedup=2.0, mamba_ssm_copy_fraction=0.405,
                   mamba_ssm_rel_err=3e-3, mamba_ssm_state_rel_err=2e-7)
    return row


def test_the_table_with_made_up_timings():
    table = decode.format_table([fake_row("float32", 1), fake_row("bfloat16", 256, True, 16)])
    lines = table.splitlines()
    assert lines[0].split() == ["state", "batch", "block_p", "ms", "mamba_ssm", "xTriton",
                                "%copy", "ssm_%copy", "y_err", "ssm_y_err", "state_err",
                                "ssm_state_err"]
    assert lines[2].split() == ["float32", "1", "16", "(auto)", "0.0123", "0.0246", "2.00",
                                "81%", "40%", "2.5e-03", "3.0e-03", "1.0e-07", "2.0e-07"]
    assert lines[3].split()[:4] == ["bfloat16", "256", "16", "0.0123"]


def test_the_table_says_when_mamba_ssm_is_not_installed():
    table = decode.format_table([fake_row("float32", 4, theirs=False)], mamba_ssm_missing=True)
    row = table.splitlines()[2]
    assert row.count(decode.NOT_INSTALLED) == 5 and "0.0123" in row
    assert "-" in decode.format_table([fake_row("float32", 4, theirs=False)]).splitlines()[2]
    failed = {**fake_row("float32", 4, theirs=False), "mamba_ssm_error": "RuntimeError: x"}
    assert decode.format_table([failed]).splitlines()[2].count("failed") == 5


def test_a_whole_run_with_the_gpu_parts_faked(tmp_path, monkeypatch, capsys):
    """main on the CPU: inputs on the CPU, timings made up, the copy rate 1 TB/s; mamba_ssm's
    stand-in is this package's own call. Checks the rows and the files, not the kernels."""
    cpu_inputs = decode.decode_inputs
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda: "fake GPU")
    monkeypatch.setattr(decode, "decode_inputs",
                        lambda *a, **k: cpu_inputs(*a, **{**k, "device": "cpu"}))
    monkeypatch.setattr(decode, "load_mamba_ssm", lambda: (selective_state_update, None))
    monkeypatch.setattr(decode.measurement, "l2_flush_buffer", lambda: None)
    monkeypatch.setattr(decode.measurement, "copy_bandwidth",
                        lambda buffer, reps: {"memcpy": 0.5e12, "kernel": 1e12})
    monkeypatch.setattr(decode.measurement, "versions", lambda: {"torch": "fake"})
    # per batch: ours (auto), mamba_ssm (once), ours (2 rows per block)
    times = iter([0.01, 0.02, 0.005, 0.03, 0.03, 0.015])
    monkeypatch.setattr(decode.measurement, "median_ms", lambda fn, reps, buffer: next(times))
    assert decode.main(["--batch", "1", "2", "--state-dtype", "bfloat16", "--nheads", "4",
                        "--headdim", "8", "--dstate", "16", "--block-p", "auto", "2",
                        "--name", "decode_test"], data_dir=tmp_path) == 0
    saved = json.loads((tmp_path / "decode_test.json").read_text())
    assert saved["device"] == "fake GPU" and saved["copy_gbps"] == 1000.0
    assert saved["versions"] == {"torch": "fake"} and saved["mamba_ssm_missing"] is None
    first, first_2, second, second_2 = saved["rows"]
    assert [r["batch"] for r in saved["rows"]] == [1, 1, 2, 2]
    assert [r["block_p_option"] for r in saved["rows"]] == ["auto", 2, "auto", 2]
    assert first["block_p"] == 8 and first_2["block_p"] == 2      # the rule: all of headdim
    assert first["speedup"] == pytest.approx(2.0) and second["speedup"] == pytest.approx(1.0)
    assert first_2["mamba_ssm_ms"] == first["mamba_ssm_ms"] == 0.02
    assert first_2["speedup"] == pytest.approx(4.0) and second_2["speedup"] == pytest.approx(2.0)
    nbytes = decode.minimal_bytes(1, 4, 8, 16, 1, "bfloat16", "bfloat16")
    assert first["minimal_bytes"] == nbytes
    assert first["mamba2_tile_copy_fraction"] == pytest.approx(nbytes / 1e-5 / 1e12)
    assert first["mamba2_tile_rel_err"] < 1e-2 and first["mamba_ssm_state_rel_err"] < 1e-2
    header = (tmp_path / "decode_test.csv").read_text().splitlines()[0]
    assert "mamba_ssm_ms" in header and "speedup" in header
    assert "fake GPU" in capsys.readouterr().out


def test_a_failing_mamba_ssm_is_recorded_and_the_run_goes_on(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("no kernel for this")
    args = decode.parse_args(["--nheads", "2", "--headdim", "4", "--dstate", "8"])
    cpu_inputs = decode.decode_inputs
    monkeypatch.setattr(decode, "decode_inputs",
                        lambda *a, **k: cpu_inputs(*a, **{**k, "device": "cpu"}))
    monkeypatch.setattr(decode.measurement, "median_ms", lambda fn, reps, buffer: 0.01)
    row = decode.measure_row(args, "float32", 3, 5, None, 1e12, broken)
    assert row["mamba2_tile_ms"] == 0.01 and row["mamba_ssm_ms"] is None
    assert row["mamba_ssm_error"] == "RuntimeError: no kernel for this" and "speedup" not in row
