"""The benchmark: its presets, its rows and tables, and a clean exit where there is no GPU."""

import dataclasses
import json

import pytest
import torch

from mamba2_tile import autotune
from mamba2_tile.problem import Problem
from mamba2_tile.tools.bench import __main__ as cli
from mamba2_tile.tools.bench import measurement, presets, reporting, training


def test_without_a_gpu_it_says_so_and_exits_cleanly(capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert cli.main(["--preset", "quick"]) == 0
    assert "No CUDA GPU found" in capsys.readouterr().out


def test_default_sweep_covers_the_targets_shapes():
    problems = list(presets.sweep("default", {}))
    assert len(problems) == 24
    assert {p.chunk_size for p in problems} == {64, 128} and {p.ngroups for p in problems} == {1, 8}
    assert all(p.batch == 8 and p.nheads == 64 and p.headdim == 64 for p in problems)


def test_accuracy_preset_spans_the_issue_ranges():
    problems = list(presets.sweep("accuracy", {}))
    assert {p.dtype for p in problems} == {"bfloat16", "float32"}
    assert min(p.seqlen for p in problems) == 256 and max(p.seqlen for p in problems) == 16384
    assert {p.ngroups for p in problems} == {1, 8} and {p.dstate for p in problems} == {64, 128}
    assert any(p.seqlen % p.chunk_size for p in problems), "an odd seqlen"


def test_overrides_replace_a_grid_presets_axes():
    problems = presets.sweep("quick", {"nheads": [6], "ngroups": [1, 3], "seqlen": None})
    assert [(p.nheads, p.ngroups, p.seqlen) for p in problems] == [(6, 1, 1024), (6, 3, 1024)]
    args = cli.parse_args(["--preset", "quick", "--seqlen", "512", "300", "--dtype", "float32"])
    assert [(p.seqlen, p.dtype) for p in args.problems] == [(512, "float32"), (300, "float32")]


def test_an_invalid_group_count_is_an_error_not_a_smaller_sweep():
    with pytest.raises(ValueError, match="nheads must be a multiple of ngroups"):
        presets.sweep("quick", {"nheads": [6], "ngroups": [1, 4]})
    with pytest.raises(ValueError, match="no problem of preset 'accuracy' has seqlen in"):
        presets.sweep("accuracy", {"seqlen": [1024]})


def test_values_select_among_a_fixed_presets_problems_in_its_order():
    float32 = presets.sweep("models", {"dtype": ["float32"], "seqlen": None})
    assert float32 == [p for p in presets.PRESETS["models"] if p.dtype == "float32"] != []
    batch_one = presets.sweep("models", {"batch": [1], "seqlen": [32768, 8192]})
    assert [(p.nheads, p.seqlen) for p in batch_one] == [
        (heads, seqlen) for heads in (24, 48, 80) for seqlen in (8192, 32768)]


BAD_ARGUMENTS = [
    # (argv, words the error must contain): each refused on a machine without a GPU too
    (["--chunk-size", "63"], ["--chunk-size", "64, 128, 256", "'63'"]),
    (["--chunk-size", "32"], ["--chunk-size"]),
    (["--reps", "0"], ["--reps", "positive integer"]),
    (["--reps", "2.5"], ["--reps"]),
    (["--batch", "0"], ["--batch", "positive integer"]),
    (["--seqlen", "1024", "-5"], ["--seqlen"]),
    (["--seqlen", "1e3"], ["--seqlen"]),
    (["--headdim", "x"], ["--headdim"]),
    (["--nheads", "4", "--ngroups", "3"], ["nheads must be a multiple of ngroups"]),
    (["--nheads", "4"], ["nheads must be a multiple of ngroups", "ngroups 8"]),
    (["--dtype", "float64"], ["--dtype"]),
    (["--preset", "nope"], ["--preset"]),
    (["--preset", "accuracy", "--seqlen", "1024"], ["seqlen in [1024]", "'accuracy'"]),
    (["--preset", "models", "--dtype", "float16", "--chunk-size", "64"],
     ["dtype in ['float16']", "chunk_size in [64]", "'models'"]),
    (["--ablation", "--batch", "2"], ["batch", "'ablation'"]),
    (["--ablation", "--totals-only"], ["--totals-only", "does not apply"]),
    (["--preset", "models", "--totals-only"], ["--totals-only"]),
    (["--no-save", "--name", "mine"], ["--name", "--no-save"]),
    (["--name", "../elsewhere"], ["--name", "file name stem"]),
    (["--seqlen", "1024", "4096", "1024"], ["--seqlen", "1024 given more than once"]),
    (["--seq", "1024"], ["unrecognized arguments"]),
]


@pytest.mark.parametrize("argv, words", BAD_ARGUMENTS, ids=[" ".join(a) for a, _ in BAD_ARGUMENTS])
def test_bad_arguments_are_refused_by_name(capsys, monkeypatch, argv, words):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    for word in words:
        assert word in err, f"{word!r} not in {err!r}"


def test_a_preset_is_data(monkeypatch):
    monkeypatch.setitem(presets.PRESETS, "tiny", [Problem(1, 64, 2, 16, 8, 1, 64, "float32")])
    assert list(presets.sweep("tiny", {})) == [Problem(1, 64, 2, 16, 8, 1, 64, "float32")]
    assert "tiny" in cli.parse_args(["--preset", "tiny"]).preset


ROW = dict(batch=8, seqlen=4096, nheads=64, headdim=64, dstate=128, ngroups=1, chunk_size=64,
           dtype="bfloat16", chunk_cumsum_ms=0.01, fwd_pass_state_ms=0.2, compute_out_ms=0.5,
           mamba2_tile_ms=0.7, mamba_ssm_ms=1.4, speedup=2.0, torch_ms=7.0, torch_speedup=10.0,
           gbps=1500.0, copy_fraction=0.35, rel_err=2e-3, mamba_ssm_rel_err=2e-3)


def test_table_and_summary():
    header, _, mine, theirs_missing = reporting.format_table(
        [ROW, {**ROW, "mamba_ssm_ms": None, "speedup": None}]).splitlines()
    assert mine.split()[0:8] == Problem.from_row(ROW).label().split()
    assert {"2.00", "35%", "10.0"} <= set(mine.split())
    assert theirs_missing.split().count("-") == 3   # fused, triton, xTriton
    assert reporting.summary([ROW, {**ROW, "speedup": 8.0}]).startswith(
        "chunk 64: speed-up over mamba_ssm Triton geomean 4.00x, min 2.00x")


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_inputs_are_in_range(dtype):
    inputs = measurement.make_inputs(Problem(1, 10, 4, 8, 16, 2, 64, dtype), device="cpu")
    assert inputs["x"].dtype == getattr(torch, dtype) and inputs["B"].shape == (1, 10, 2, 16)
    assert (inputs["dt"] > 0).all() and (inputs["dt"] < 0.1).all() and (inputs["A"] < 0).all()


def test_ablation_ladders():
    def steps(dtype):
        return [name for name, _ in presets.ladder(dtype)]
    assert steps("bfloat16") == ["baseline", "+latency", "+swap", "+transposed", "+autotune",
                                 "+bf16_states", "+fused", "+fused_autotune"]
    assert steps("float32") == ["baseline", "+latency", "+swap", "+transposed", "+tf32",
                                "+autotune", "+fused", "+fused_autotune"]
    problems = list(presets.sweep("ablation", {}))
    assert {p.dtype for p in problems} == {"bfloat16", "float32"}
    assert {p.chunk_size for p in problems} == {64, 128} and {p.ngroups for p in problems} == {1, 8}


def fake_implementation(name, ms, speedup_key):
    """An implementation that returns zeros and is "timed" at ``ms``."""
    def load():
        return (lambda inputs, problem: lambda: torch.zeros_like(inputs["x"]).add_(ms)), None
    return measurement.Implementation(name, load, speedup_key=speedup_key)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_ablation_rows_on_the_interpreter(monkeypatch, dtype):
    # The measuring machinery needs a GPU; the ladder, options and errors do not.
    make_inputs = measurement.make_inputs
    monkeypatch.setattr(measurement, "make_inputs",
                        lambda problem: make_inputs(problem, device="cpu"))

    def fake_median_ms(fn, reps, flush):
        # The other implementation "takes" 4 ms; a step whose stage 2 swaps operands 2 ms.
        if fn.__defaults__ is None:
            return float(fn()[0, 0, 0, 0])
        return 1.0 + fn.__defaults__[0].fwd_pass_state.swap_operands
    monkeypatch.setattr(measurement, "median_ms", fake_median_ms)
    tuned = []
    monkeypatch.setattr(autotune, "tuned_options", lambda *args, base: tuned.append(base) or
                        base.with_switches(block_p=8, swap_operands=False))
    others, _ = measurement.load_implementations([fake_implementation("other", 4.0, "x_other")])
    problem = Problem(1, 70, 2, 16, 8, 1, 64, dtype)
    rows = measurement.measure_ablation(problem, 3, None, others)
    assert [r["variant"] for r in rows] == [name for name, _ in presets.ladder(dtype)]
    by_name = {r["variant"]: r for r in rows}
    assert by_name["+swap"]["vs_baseline"] == 0.5 and by_name["+autotune"]["vs_baseline"] == 1.0
    assert by_name["+swap"]["other_ms"] == 4.0 and by_name["+swap"]["x_other"] == 2.0
    assert "autotune_s" in by_name["+autotune"] and tuned[0].fwd_pass_state.tf32 == (
        dtype == "float32")
    assert "autotune_cached_s" in by_name["+fused_autotune"]
    assert '"transposed_layout": true' in by_name["+autotune"]["options"]
    # The baseline is the three kernels with every switch off; "+fused" changes the path.
    assert by_name["baseline"]["path"] == "three_kernel" and by_name["+fused"]["path"] == "fused"
    assert by_name["+fused"]["vs_baseline"] == 1.0
    limit = 1e-2 if dtype == "float32" else 6e-2
    assert all(r["rel_err"] < limit for r in rows)
    table = reporting.format_ablation(rows)
    assert problem.label() in table and "+transposed" in table.split()


def test_an_implementation_that_cannot_load_is_reported_missing():
    broken = measurement.Implementation("broken", lambda: (None, "ImportError: nope"), "x")
    found, missing = measurement.load_implementations([broken, fake_implementation("ok", 1, "y")])
    assert list(found) == ["ok"] and missing == {"broken": "ImportError: nope"}


def test_ablation_summary_is_per_step():
    rows = [dict(chunk_size=64, variant="baseline", speedup=1.0),
            dict(chunk_size=64, variant="+swap", speedup=4.0)]
    lines = reporting.summary(rows).splitlines()
    assert lines[0].startswith("baseline: chunk 64: speed-up over mamba_ssm Triton geomean 1.00x")
    assert lines[1].startswith("+swap: chunk 64")


def test_ablation_without_a_gpu_exits_cleanly(capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert cli.main(["--ablation"]) == 0
    assert "No CUDA GPU found" in capsys.readouterr().out


@pytest.fixture
def fake_gpu_bench(monkeypatch):
    """The benchmark's command line as on a GPU, with every measurement faked: returns the list
    of problems ``measurement.measure`` was asked for, in order."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Fake GPU")
    monkeypatch.setattr(measurement, "l2_flush_buffer", lambda: None)
    monkeypatch.setattr(measurement, "copy_bandwidth", lambda *a: {"memcpy": 1e12, "kernel": 2e12})
    monkeypatch.setattr(measurement, "load_implementations", lambda: ({}, {"mamba_ssm": "absent"}))
    monkeypatch.setattr(measurement, "versions", lambda: {})
    measured = []

    def fake_measure(problem, *args, **kwargs):
        measured.append(problem)
        return {**dataclasses.asdict(problem), "mamba2_tile_ms": 1.0}
    monkeypatch.setattr(measurement, "measure", fake_measure)
    return measured


def test_resume_measures_only_the_missing_shapes(tmp_path, fake_gpu_bench):
    measured = fake_gpu_bench
    argv = ["--preset", "quick", "--seqlen", "1024", "2048", "--name", "sweep"]
    cli.main(argv, data_dir=tmp_path)
    assert len(measured) == 2
    stored = json.loads((tmp_path / "sweep.json").read_text())
    assert stored["copy_gbps"] == 2000.0 and stored["command"].endswith(" ".join(argv))
    (tmp_path / "sweep.json").write_text(json.dumps({"device": "Fake GPU",
                                                     "rows": stored["rows"][:1]}))
    measured.clear()
    cli.main([*argv, "--resume"], data_dir=tmp_path)
    assert [p.seqlen for p in measured] == [2048]
    assert len(json.loads((tmp_path / "sweep.json").read_text())["rows"]) == 2


def test_bandwidth_is_stated_against_the_faster_copy():
    assert measurement.copy_reference({"memcpy": 2.8e12, "kernel": 4.2e12}) == 4.2e12


def test_models_preset_holds_the_issue_rows():
    problems = list(presets.sweep("models", {}))
    labels = {p.label() for p in problems}
    assert len(problems) == len(labels) == 28          # 29 rows: float32 is measured twice
    b8 = {(p.seqlen, p.chunk_size) for p in problems
          if (p.batch, p.nheads, p.dstate, p.ngroups, p.dtype) == (8, 64, 128, 1, "bfloat16")}
    assert {(l, c) for l in (2048, 8192, 16384) for c in (64, 128, 256)} <= b8
    assert {(p.seqlen, p.chunk_size) for p in problems if p.dstate == 256} == {
        (2048, 64), (2048, 256), (8192, 64), (8192, 256)}
    assert {p.chunk_size for p in problems if p.dstate == 64} == {64, 256}
    assert Problem(8, 8192, 64, 64, 128, 8, 256, "bfloat16") in problems
    assert Problem(8, 8192, 64, 64, 128, 8, 256, "float16") in problems
    assert Problem(4, 8192, 32, 128, 128, 1, 256, "bfloat16") in problems
    assert Problem(8, 8192, 64, 64, 128, 1, 256, "float32") in problems
    prefill = {(p.nheads, p.seqlen) for p in problems if p.batch == 1}
    assert prefill == {(h, l) for h in (24, 48, 80) for l in (8192, 32768, 131072)}
    assert all(p.chunk_size == 256 and p.dstate == 128 for p in problems if p.batch == 1)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_models_rows_on_the_interpreter(monkeypatch, dtype):
    make_inputs = measurement.make_inputs
    monkeypatch.setattr(measurement, "make_inputs",
                        lambda problem: make_inputs(problem, device="cpu"))
    # Ours "takes" 1 ms (2 ms eagerly), the other implementations what their output says.
    monkeypatch.setattr(measurement, "median_ms", lambda fn, reps, flush, graph=True: (
        float(fn()[0, 0, 0, 0]) if getattr(fn, "fake", False) else (1.0 if graph else 2.0)))

    def fake(name, ms):
        def load():
            def call(inputs, problem):
                run = lambda: torch.zeros_like(inputs["x"]).add_(ms)
                run.fake = True
                return run
            return call, None
        return measurement.Implementation(name, load, speedup_key=f"x_{name}")
    others, missing = measurement.load_implementations(
        [fake("mamba_ssm", 4.0), fake("fla", 3.0),
         measurement.Implementation("absent", lambda: (None, "ImportError: nope"), "x")])
    problem = Problem(1, 300, 2, 16, 8, 1, 64, dtype)
    rows = measurement.measure_models(problem, 3, None, 4e12, others, missing)
    assert [r["tf32"] for r in rows] == ([False, True] if dtype == "float32" else [False])
    for row in rows:
        assert row["ms"] == {"mamba2_tile": 1.0, "mamba_ssm": 4.0, "fla": 3.0, "absent": None}
        assert row["missing"] == {"absent": "ImportError: nope"}
        assert row["vs_best_peer"] == 3.0 and row["eager_ms"] == 2.0
        assert row["error"]["mamba2_tile"] < (1e-2 if dtype == "float32" else 6e-2)
        assert row["error"]["fla"] > 0.5                  # a constant is far off
        assert row["path"].startswith("sequence_parallel")   # 2 heads: segments
        assert row["copy_fraction"] == pytest.approx(row["minimal_bytes"] / 1e-3 / 4e12)
    table = reporting.format_models(rows)
    assert problem.label() in table and "3.00" in table
    assert reporting.models_summary(rows).startswith(
        "speed-up over the faster of the others: geomean 3.00x")


def test_nested_fields_become_flat_csv_columns(tmp_path):
    row = {**dataclasses.asdict(Problem(1, 10, 2, 8, 8)), "ms": {"mamba2_tile": 1.0, "fla": None},
           "missing": {"fla": "gone"}}
    reporting.save(tmp_path / "m", {"device": "x"}, [row])
    header = (tmp_path / "m.csv").read_text().splitlines()[0].split(",")
    assert {"ms_mamba2_tile", "ms_fla", "missing_fla", "batch"} <= set(header)
    assert json.loads((tmp_path / "m.json").read_text())["rows"][0]["ms"]["fla"] is None


def test_training_preset_holds_the_issue_rows():
    problems = presets.sweep("training", {})
    assert all(p.batch == 8 and p.nheads == 64 and p.headdim == 64 and p.dtype == "bfloat16"
               for p in problems)
    assert {p.dstate for p in problems} == {64, 128, 256}
    assert {p.chunk_size for p in problems} == {64, 128, 256}
    assert {p.seqlen for p in problems} == {2048, 8192, 16384}
    assert cli.parse_args(["--backward"]).preset == "training"


def test_training_shapes_preset_covers_what_the_issue_rows_leave_out():
    problems = presets.sweep("training-shapes", {})
    assert {p.dtype for p in problems} == {"bfloat16", "float16", "float32"}
    assert {1, 8} <= {p.batch for p in problems}
    assert 128 in {p.headdim for p in problems} and 8 in {p.ngroups for p in problems}
    assert any(p.seqlen % p.chunk_size for p in problems)
    assert not set(problems) & set(presets.sweep("training", {}))
    assert cli.parse_args(["--backward", "--preset", "training-shapes"]).problems == problems


@pytest.mark.parametrize("argv, words", [
    (["--backward", "--ablation"], ["--ablation", "--backward"]),
    (["--backward", "--totals-only"], ["--totals-only"]),
])
def test_backward_options_refused(capsys, argv, words):
    with pytest.raises(SystemExit) as exit_:
        cli.parse_args(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert all(word in err for word in words), err


def test_training_row_on_the_interpreter(monkeypatch):
    """Forward + backward through the interpreter's kernels: gradient errors against float64
    small for ours, large for a peer whose gradients are wrong, ratios from the (fake) times."""
    make_inputs = measurement.make_inputs
    monkeypatch.setattr(training, "make_inputs",
                        lambda problem: make_inputs(problem, device="cpu"))
    times = iter([2.0, 5.0])
    monkeypatch.setattr(training, "median_ms", lambda fn, reps, flush, graph=True: next(times))

    def halved(problem):                # a peer with every gradient half what it should be
        forward, _ = training._mamba2_tile(problem)
        return (lambda *tensors: forward(*tensors) * 0.5), None
    implementations = {"mamba2_tile": training._mamba2_tile, "halved": halved,
                       "absent": lambda problem: (None, "ImportError: nope")}
    problem = Problem(2, 70, 2, 8, 8, 1, 64, "float32")
    row = training.measure_training(problem, 3, None, implementations)
    assert row["ms"] == {"mamba2_tile": 2.0, "halved": 5.0}
    assert row["vs_best_peer"] == 2.5 and row["timing"]["mamba2_tile"] == "graph"
    assert row["missing"] == {"absent": "ImportError: nope"}
    assert set(row["grad_error"]["mamba2_tile"]) == {"x", "dt", "A", "B", "C", "D"}
    assert row["max_grad_error"]["mamba2_tile"] < 1e-4
    assert row["max_grad_error"]["halved"] == pytest.approx(0.5, rel=1e-3)
    assert row["peak_mb"]["mamba2_tile"] is None                    # measured on a GPU only
    table = reporting.format_training([row])
    assert problem.label() in table and "2.50" in table


def test_shards_fill_one_file_in_preset_order(tmp_path, fake_gpu_bench):
    # Two shards, run one after the other here (one per GPU on a real host): each measures
    # every second row and merges its rows into the file the other one writes too.
    measured = fake_gpu_bench
    argv = ["--preset", "quick", "--seqlen", "1024", "2048", "4096", "--name", "sharded"]
    cli.main([*argv, "--shard", "1/2"], data_dir=tmp_path)
    assert [p.seqlen for p in measured] == [2048]
    cli.main([*argv, "--shard=0/2"], data_dir=tmp_path)
    assert [p.seqlen for p in measured] == [2048, 1024, 4096]
    stored = json.loads((tmp_path / "sharded.json").read_text())
    assert [row["seqlen"] for row in stored["rows"]] == [1024, 2048, 4096]
    assert stored["command"].endswith(" ".join([*argv, "--shard", "K/2"]))
    cli.main([*argv, "--shard", "1/2"], data_dir=tmp_path)   # nothing left to measure
    assert [p.seqlen for p in measured] == [2048, 1024, 4096]
    assert sorted(tmp_path.iterdir()) == [tmp_path / "sharded.csv", tmp_path / "sharded.json"]


@pytest.mark.parametrize("text", ["2/2", "-1/2", "1", "a/b", "1/0"])
def test_shard_must_be_an_index_below_a_count(text, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.parse_args(["--shard", text])
    assert exit_info.value.code == 2 and "--shard" in capsys.readouterr().err


def test_shard_is_refused_without_a_file_to_meet_in(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.parse_args(["--shard", "0/2", "--no-save"])
    assert exit_info.value.code == 2 and "--shard does not apply" in capsys.readouterr().err
