"""The benchmark CLI: its sweeps, its table, and a clean exit where there is no GPU."""

import dataclasses
import json

import pytest
import torch

from mamba2_tile import bench


def test_without_a_gpu_it_says_so_and_exits_cleanly(capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert bench.main(["--preset", "quick"]) == 0
    assert "No CUDA GPU found" in capsys.readouterr().out


def test_default_sweep_covers_the_targets_shapes():
    shapes = list(bench.sweep("default", {}))
    assert len(shapes) == 24
    assert {s.chunk_size for s in shapes} == {64, 128} and {s.ngroups for s in shapes} == {1, 8}
    assert all(s.batch == 8 and s.nheads == 64 and s.headdim == 64 for s in shapes)


def test_accuracy_preset_spans_the_issue_ranges():
    shapes = list(bench.sweep("accuracy", {}))
    assert {s.dtype for s in shapes} == {"bfloat16", "float32"}
    assert min(s.seqlen for s in shapes) == 256 and max(s.seqlen for s in shapes) == 16384
    assert {s.ngroups for s in shapes} == {1, 8} and {s.dstate for s in shapes} == {64, 128}
    assert any(s.seqlen % s.chunk_size for s in shapes), "an odd seqlen"


def test_overrides_and_invalid_group_counts():
    shapes = list(bench.sweep("quick", {"nheads": [6], "ngroups": [1, 4], "seqlen": None}))
    assert [s.ngroups for s in shapes] == [1], "ngroups must divide nheads"


def test_table_and_summary():
    row = dict(batch=8, seqlen=4096, nheads=64, headdim=64, dstate=128, ngroups=1, chunk_size=64,
               dtype="bfloat16", chunk_cumsum_ms=0.01, fwd_pass_state_ms=0.2, compute_out_ms=0.5,
               mamba2_tile_ms=0.7, mamba_ssm_ms=1.4, speedup=2.0, torch_ms=7.0, torch_speedup=10.0,
               gbps=1500.0, copy_fraction=0.35, rel_err=2e-3, mamba_ssm_rel_err=2e-3)
    table = bench.format_table([row, {**row, "mamba_ssm_ms": None, "speedup": None}])
    assert "b8 l4096 h64 p64 n128 g1 c64 bfloat16" in table and "2.00" in table and "35%" in table
    assert bench.summary([row, {**row, "speedup": 8.0}]).startswith(
        "chunk 64: speed-up over mamba_ssm Triton geomean 4.00x, min 2.00x")


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_inputs_are_in_range(dtype):
    shape = bench.Shape(1, 10, 4, 8, 16, 2, 64, dtype)
    inputs = bench.make_inputs(shape, device="cpu")
    assert inputs["x"].dtype == getattr(torch, dtype) and inputs["B"].shape == (1, 10, 2, 16)
    assert (inputs["dt"] > 0).all() and (inputs["dt"] < 0.1).all() and (inputs["A"] < 0).all()


def test_ablation_ladders():
    steps = lambda dtype: [name for name, _ in bench.ladder(dtype)]
    assert steps("bfloat16") == ["baseline", "+latency", "+swap", "+transposed", "+autotune",
                                 "+bf16_states", "+fused", "+fused_autotune"]
    assert steps("float32") == ["baseline", "+latency", "+swap", "+transposed", "+tf32",
                                "+autotune", "+fused", "+fused_autotune"]
    shapes = list(bench.sweep("ablation", {}))
    assert {s.dtype for s in shapes} == {"bfloat16", "float32"}
    assert {s.chunk_size for s in shapes} == {64, 128} and {s.ngroups for s in shapes} == {1, 8}


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_ablation_rows_on_the_interpreter(monkeypatch, dtype):
    # The measuring machinery needs a GPU; the ladder, options and errors do not.
    from mamba2_tile import autotune

    make_inputs = bench.make_inputs
    monkeypatch.setattr(bench, "make_inputs", lambda shape: make_inputs(shape, device="cpu"))
    # Fake timings: a variant whose stage 2 swaps operands "takes" 2 ms, the others 1 ms.
    monkeypatch.setattr(bench, "median_ms", lambda fn, reps, flush: 1.0 + fn.__defaults__[0]
                        .fwd_pass_state.swap_operands)
    tuned = []
    monkeypatch.setattr(autotune, "tuned_options", lambda *args, base: tuned.append(base) or
                        base.with_switches(block_p=8, swap_operands=False))
    shape = bench.Shape(1, 70, 2, 16, 8, 1, 64, dtype)
    rows = bench.measure_ablation(shape, 3, None, triton_fn=None)
    assert [r["variant"] for r in rows] == [name for name, _ in bench.ladder(dtype)]
    by_name = {r["variant"]: r for r in rows}
    assert by_name["+swap"]["vs_baseline"] == 0.5 and by_name["+autotune"]["vs_baseline"] == 1.0
    assert "autotune_s" in by_name["+autotune"] and tuned[0].fwd_pass_state.tf32 == (
        dtype == "float32")
    assert "autotune_cached_s" in by_name["+fused_autotune"]
    assert '"transposed_layout": true' in by_name["+autotune"]["options"]
    # The baseline is the three kernels with every switch off; "+fused" changes the path.
    assert by_name["baseline"]["path"] == "three_kernel" and by_name["+fused"]["path"] == "fused"
    assert by_name["+fused"]["vs_baseline"] == 1.0
    limit = 1e-2 if dtype == "float32" else 6e-2
    assert all(r["rel_err"] < limit for r in rows)
    table = bench.format_ablation(rows)
    assert "+transposed" in table and "b1 l70 h2 p16 n8 g1 c64" in table


def test_ablation_summary_is_per_step():
    rows = [dict(chunk_size=64, variant="baseline", speedup=1.0),
            dict(chunk_size=64, variant="+swap", speedup=4.0)]
    lines = bench.summary(rows).splitlines()
    assert lines[0].startswith("baseline: chunk 64: speed-up over mamba_ssm Triton geomean 1.00x")
    assert lines[1].startswith("+swap: chunk 64")


def test_ablation_without_a_gpu_exits_cleanly(capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert bench.main(["--ablation"]) == 0
    assert "No CUDA GPU found" in capsys.readouterr().out


def test_resume_measures_only_the_missing_shapes(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "DATA_DIR", tmp_path)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Fake GPU")
    monkeypatch.setattr(torch, "empty", lambda *a, **k: None)
    monkeypatch.setattr(bench, "copy_bandwidth", lambda *a: {"memcpy": 1e12, "kernel": 2e12})
    monkeypatch.setattr(bench, "load_triton", lambda: (None, "not installed"))
    monkeypatch.setattr(bench, "versions", lambda: {})
    measured = []

    def fake_measure(shape, *args, **kwargs):
        measured.append(shape)
        return {**dataclasses.asdict(shape), "mamba2_tile_ms": 1.0}
    monkeypatch.setattr(bench, "measure", fake_measure)
    argv = ["--preset", "quick", "--seqlen", "1024", "2048", "--name", "sweep"]
    bench.main(argv)
    assert len(measured) == 2
    rows = json.loads((tmp_path / "sweep.json").read_text())["rows"]
    (tmp_path / "sweep.json").write_text(json.dumps({"device": "Fake GPU", "rows": rows[:1]}))
    measured.clear()
    bench.main([*argv, "--resume"])
    assert [s.seqlen for s in measured] == [2048]
    assert len(json.loads((tmp_path / "sweep.json").read_text())["rows"]) == 2


def test_bandwidth_is_stated_against_the_faster_copy():
    assert bench.copy_reference({"memcpy": 2.8e12, "kernel": 4.2e12}) == 4.2e12
