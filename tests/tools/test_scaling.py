"""The scaling sweep (CLI, rows, table, file) and the plot of its rows, all on the CPU."""

import dataclasses
import json

import matplotlib
import pytest
import torch
import torch.nn.functional as F

from mamba2_tile.cost import attention_cost, chunked_cost, final_states_bytes
from mamba2_tile.course.plots.long_sequences import plot_scaling
from mamba2_tile.problem import Problem
from mamba2_tile.tools import scaling
from mamba2_tile.tools.bench import measurement
from mamba2_tile.tools.results import load_scaling_results

matplotlib.use("Agg")

STATE = final_states_bytes(scaling.DEFAULT_PROBLEM)


def sizes(**changes):
    """The sweep's default sizes with some changed."""
    return dataclasses.replace(scaling.DEFAULT_PROBLEM, **changes)
MAKE_CALL = scaling.make_call


def synthetic_rows():
    """A sweep's rows as the GPU would give them: naive attention runs out of memory at 4k."""
    rows = []
    for seqlen in (1024, 2048, 4096, 8192):
        rows.append(scaling.make_row(seqlen, "mamba2_tile", "ok", ms=0.05 * seqlen / 1024,
                                     peak_bytes=12288 * seqlen, state_bytes=STATE))
        if seqlen < 4096:
            rows.append(scaling.make_row(seqlen, "naive_attention", "ok",
                                         ms=0.1 * (seqlen / 1024) ** 2,
                                         peak_bytes=129 * seqlen ** 2))
        elif seqlen == 4096:
            rows.append(scaling.make_row(seqlen, "naive_attention", "oom", note="out of memory"))
        else:
            rows.append(scaling.make_row(seqlen, "naive_attention", "skipped",
                                         note="out of memory at 4k"))
        rows.append(scaling.make_row(seqlen, "sdpa_attention", "ok",
                                     ms=0.01 * (seqlen / 1024) ** 2, peak_bytes=4224 * seqlen))
    return rows


# ------------------------------------------------------------------------------ the CLI

def test_without_a_gpu_it_says_so_and_exits_cleanly(capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert scaling.main([]) == 0
    assert "No CUDA GPU found" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--chunk-size", "32"], "--chunk-size"),
    (["--max-ms", "0"], "--max-ms"),
    (["--seqlen", "1024", "-5"], "--seqlen"),
    (["--reps", "0"], "--reps"),
    (["--nheads", "32", "--ngroups", "3"], "ngroups"),
    (["--methods", "flash"], "--methods"),
    (["--max-ms", "nan"], "--max-ms: expected a finite number > 0"),
    (["--max-ms", "inf"], "--max-ms"),
    (["--max-ms", "-1"], "--max-ms"),
    (["--chunk-size", "63"], "--chunk-size: expected a chunk size the kernels take"),
    (["--batch", "0"], "--batch"),
    (["--headdim", "1.5"], "--headdim"),
    (["--dtype", "float64"], "--dtype"),
    (["--nheads", "4", "--ngroups", "3"], "nheads must be a multiple of ngroups"),
    (["--seqlen", "1024", "1024"], "--seqlen: 1024 given more than once"),
    (["--methods", "sdpa_attention", "sdpa_attention"], "--methods"),
    (["--no-save", "--name", "mine"], "--name does not apply with --no-save"),
    (["--no-save", "--data-dir", "somewhere"], "--data-dir does not apply"),
    (["--name", "a/b"], "--name"),
    (["--max", "10"], "unrecognized arguments"),
])
def test_bad_arguments_are_refused_by_name(capsys, monkeypatch, argv, message):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as exit_:
        scaling.main(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_defaults_cover_1k_to_256k_at_the_issue_shape():
    args = scaling.parse_args([])
    assert args.seqlen == [1024 * 2 ** k for k in range(9)]
    assert scaling.sweep_config(args.problem) == dict(
        batch=1, nheads=32, headdim=64, dstate=128, ngroups=1, chunk_size=64, dtype="bfloat16")
    assert args.max_ms == 2000.0 and args.methods == list(scaling.METHODS)
    assert args.name == scaling.DEFAULT_NAME and args.data_dir == scaling.DATA_DIR
    assert STATE == 32 * 64 * 128 * 4 == 2 ** 20


@pytest.mark.parametrize("field, value, message", [
    ("chunk_size", 32, "chunk_size"), ("batch", 0, "batch"), ("dtype", "int8", "dtype"),
    ("ngroups", 5, "ngroups"),
])
def test_sizes_name_a_bad_field(field, value, message):
    with pytest.raises(ValueError, match=message):
        scaling.check_sweep_problem(sizes(**{field: value}))


def test_rows_refuse_unknown_methods_and_statuses():
    with pytest.raises(ValueError, match="status"):
        scaling.make_row(1024, "mamba2_tile", "crashed")
    with pytest.raises(ValueError, match="method"):
        scaling.make_row(1024, "flash", "ok")


# ------------------------------------------------------------------------------ the methods

@pytest.mark.parametrize("seqlen", [1, 7, 33])
def test_naive_attention_agrees_with_sdpa(seqlen):
    gen = torch.Generator().manual_seed(seqlen)
    q, k, v = (torch.randn(2, 3, seqlen, 8, generator=gen) for _ in range(3))
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(scaling.naive_attention(q, k, v), expected, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(scaling.sdpa_attention(q, k, v), expected)


def test_attention_refuses_mismatched_inputs():
    q = torch.zeros(1, 2, 5, 4)
    with pytest.raises(ValueError, match="^k has shape"):
        scaling.naive_attention(q, torch.zeros(1, 2, 6, 4), q)
    with pytest.raises(ValueError, match="^v must be a 4-D"):
        scaling.sdpa_attention(q, q, torch.zeros(2, 5, 4))


def test_make_call_builds_each_method_on_the_cpu():
    problem = sizes(nheads=2, headdim=8, dstate=16, dtype="float32")
    for method in ("naive_attention", "sdpa_attention"):
        fn, inputs = scaling.make_call(method, problem, 10, device="cpu")
        assert fn().shape == inputs["q"].shape == (1, 2, 10, 8)
    _, inputs = scaling.make_call("mamba2_tile", problem, 10, device="cpu")
    assert inputs["x"].shape == (1, 10, 2, 8) and inputs["B"].shape == (1, 10, 1, 16)
    with pytest.raises(ValueError, match="method"):
        scaling.make_call("flash", problem, 10, device="cpu")


def test_attention_costs_grow_quadratically_and_the_ssd_linearly():
    def costs(seqlen):
        return (attention_cost(1, seqlen, 32, 64),
                attention_cost(1, seqlen, 32, 64, flash=True),
                chunked_cost(Problem(1, seqlen, 32, 64, 128, 1, 64)))

    (naive1, flash1, ssd1), (naive2, flash2, ssd2) = costs(8192), costs(16384)
    assert naive2.flops == 4 * naive1.flops and flash2.flops == 4 * flash1.flops
    assert naive2.bytes == pytest.approx(4 * naive1.bytes, rel=0.01)
    assert 3.5 < flash2.bytes / flash1.bytes < 4.0       # quadratic, over a block of 128 queries
    assert ssd2.flops == 2 * ssd1.flops and ssd2.bytes == pytest.approx(2 * ssd1.bytes, rel=0.01)
    assert flash1.bytes < naive1.bytes / 5 and flash1.flops * 2 == pytest.approx(naive1.flops, 1e-6)


# ------------------------------------------------------------------------------ the sweep

def fake_cuda(monkeypatch, peak=1000, ms=1.5, free=10 ** 12):
    """Enough of torch.cuda for the measuring code to run on the CPU."""
    class Event:
        def __init__(self, enable_timing=False):
            pass

        def record(self):
            pass

        def synchronize(self):
            pass

        def elapsed_time(self, end):
            return ms

    monkeypatch.setattr(torch.cuda, "Event", Event)
    for name in ("synchronize", "reset_peak_memory_stats", "empty_cache"):
        monkeypatch.setattr(torch.cuda, name, lambda: None)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda: 100)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda: 100 + peak)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda: (free, free))
    monkeypatch.setattr(scaling, "make_call", lambda method, problem, seqlen:
                        MAKE_CALL(method, problem, seqlen, device="cpu"))


def test_measure_point_times_with_a_graph_or_eagerly(monkeypatch):
    problem = sizes(nheads=2, headdim=8, dtype="float32")
    graphed = []
    eager_median_ms = measurement.median_ms

    def median_ms(fn, reps, flush, graph=True):
        # Graph replays are faked; eager timing runs for real on the fake events below.
        if not graph:
            return eager_median_ms(fn, reps, flush, graph=False)
        return graphed.append(reps) or 0.25
    monkeypatch.setattr(measurement, "median_ms", median_ms)
    fake_cuda(monkeypatch)
    row = scaling.measure_point("sdpa_attention", problem, 16, reps=30, flush_buffer=None)
    assert row == scaling.make_row(16, "sdpa_attention", "ok", ms=0.25, peak_bytes=1000)
    assert graphed == [30]
    # The SSD's rows say which kernels ran (the interpreter runs them, slowly, at seqlen 16).
    row = scaling.measure_point("mamba2_tile", problem, 16, reps=30, flush_buffer=None)
    assert row["note"] in ("path: three_kernel", "path: fused") and row["state_bytes"] == 8192
    assert graphed == [30, 30]
    # Slower than the budget: the one eager call is the measurement.
    row = scaling.measure_point("naive_attention", problem, 16, 30, None, max_ms=1.0)
    assert row["ms"] == 1.5 and graphed == [30, 30]
    # Too big to capture beside the eager cache: timed eagerly.
    fake_cuda(monkeypatch, peak=10 ** 12)
    monkeypatch.setattr(measurement, "flush_l2", lambda buffer: None)
    row = scaling.measure_point("naive_attention", problem, 16, 30, None)
    assert row["ms"] == 1.5 and graphed == [30, 30]


def test_out_of_memory_becomes_a_row_and_other_errors_do_not(monkeypatch):
    problem = sizes(nheads=2, headdim=8, dtype="float32")
    fake_cuda(monkeypatch)

    def oom(*args):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 64.00 GiB")
    monkeypatch.setattr(scaling, "_measure", oom)
    row = scaling.measure_point("mamba2_tile", problem, 4096, 30, None)
    assert row["status"] == "oom" and row["ms"] is None and row["state_bytes"] == 2 * 8 * 128 * 4
    assert "Tried to allocate 64.00 GiB" in row["note"]

    def broken(*args):
        raise RuntimeError("an illegal memory access was encountered")
    monkeypatch.setattr(scaling, "_measure", broken)
    with pytest.raises(RuntimeError, match="illegal"):
        scaling.measure_point("mamba2_tile", problem, 4096, 30, None)


def test_sweep_stops_a_method_after_oom_or_over_budget(monkeypatch):
    def fake(method, problem, seqlen, reps, flush_buffer, max_ms):
        if method == "naive_attention" and seqlen >= 4096:
            return scaling.make_row(seqlen, method, "oom", note="out of memory")
        ms = {"mamba2_tile": 0.1, "naive_attention": 1.0, "sdpa_attention": seqlen / 1000}[method]
        return scaling.make_row(seqlen, method, "ok", ms=ms, peak_bytes=seqlen)

    monkeypatch.setattr(scaling, "measure_point", fake)
    saved = []
    rows = scaling.run_sweep(scaling.DEFAULT_PROBLEM, seqlens=[8192, 1024, 2048, 4096], max_ms=3.0,
                             flush_buffer=object(), on_row=lambda rows: saved.append(len(rows)))
    assert saved == list(range(1, 13)), "on_row after every row"
    status = {(r["method"], r["seqlen"]): r["status"] for r in rows}
    assert [status["naive_attention", s] for s in (1024, 2048, 4096, 8192)] == [
        "ok", "ok", "oom", "skipped"]
    assert [status["sdpa_attention", s] for s in (1024, 2048, 4096, 8192)] == [
        "ok", "ok", "ok", "skipped"]      # 4.1 ms at 4096 > 3 ms: measured, then stopped
    assert all(status["mamba2_tile", s] == "ok" for s in (1024, 2048, 4096, 8192))
    skipped = {r["method"]: r["note"] for r in rows if r["status"] == "skipped"}
    assert skipped == {"naive_attention": "out of memory at 4k",
                       "sdpa_attention": "4 ms at 4k, over the 3 ms budget"}


# ------------------------------------------------------------------------------ reporting

def test_table_names_each_method_and_its_failures():
    header, _, *lines, state = scaling.format_table(synthetic_rows()).splitlines()
    assert header.split() == ["seqlen", "mamba2_tile", "ms", "mamba2_tile", "peak",
                              "naive_attention", "ms", "naive_attention", "peak",
                              "sdpa_attention", "ms", "sdpa_attention", "peak"]
    by_seqlen = {line.split()[0]: line.split() for line in lines}
    assert list(by_seqlen) == ["1024", "2048", "4096", "8192"]
    assert by_seqlen["1024"][1] == "0.050"
    assert "oom" in by_seqlen["4096"] and "skipped" in by_seqlen["8192"]
    assert state == "SSD state carried to the next call: 1.0 MiB at every seqlen"


def test_slopes_tell_linear_from_quadratic():
    rows = synthetic_rows()
    assert scaling.loglog_slope(rows, "mamba2_tile") == pytest.approx(1.0)
    assert scaling.loglog_slope(rows, "sdpa_attention") == pytest.approx(2.0)
    assert scaling.loglog_slope(rows, "sdpa_attention", "peak_bytes") == pytest.approx(1.0)
    assert scaling.loglog_slope(rows, "naive_attention", "peak_bytes") == pytest.approx(2.0)
    assert scaling.loglog_slope(rows[:3], "naive_attention") is None


def test_saved_file_loads_with_the_scaling_schema(tmp_path):
    rows = synthetic_rows()
    meta = {"device": "Some GPU", "date": "2026-01-01", "versions": {}, "command": "x",
            "config": {"batch": 1}, "gpu_memory_bytes": 2 ** 37}
    scaling.save(tmp_path / "s.json", meta, rows)
    results = load_scaling_results("s", data_dir=tmp_path)
    assert results["rows"] == rows and results["config"] == {"batch": 1}
    assert set(rows[0]) == {"seqlen", "method", "ms", "peak_bytes", "status", "state_bytes",
                            "note"}


def test_loader_refuses_unknown_methods_and_missing_fields(tmp_path):
    row = scaling.make_row(1024, "mamba2_tile", "ok", ms=1.0, peak_bytes=1, state_bytes=1)
    (tmp_path / "a.json").write_text(json.dumps({"device": "x", "rows": [
        row, {**row, "method": "flash"}]}))
    with pytest.raises(ValueError, match="row 1: method 'flash'"):
        load_scaling_results("a", data_dir=tmp_path)
    del row["status"]
    (tmp_path / "b.json").write_text(json.dumps({"device": "x", "rows": [row]}))
    with pytest.raises(ValueError, match="row 0: lacks the field.s. status"):
        load_scaling_results("b", data_dir=tmp_path)
    assert load_scaling_results("missing", data_dir=tmp_path) is None


def test_plot_marks_out_of_memory_and_the_state():
    fig = plot_scaling({"device": "Some GPU", "rows": synthetic_rows(),
                        "gpu_memory_bytes": 2 ** 37})
    time_ax, mem_ax = fig.axes
    texts = [t.get_text() for ax in (time_ax, mem_ax) for t in ax.texts]
    assert texts.count("out of memory at 4k") == 2
    assert any(t.startswith("SSD state carried to the next call: 1.0 MiB") for t in texts)
    assert len(time_ax.lines) == 3 + 1          # three methods, one "x"
    assert time_ax.get_xscale() == "log" and mem_ax.get_yscale() == "log"


def test_plot_notes_a_method_stopped_for_time():
    rows = [r for r in synthetic_rows() if r["method"] != "naive_attention"]
    rows[-1] = {**rows[-1], "status": "skipped", "ms": None, "peak_bytes": None}
    fig = plot_scaling({"device": "GPU", "rows": rows})
    assert [t.get_text() for t in fig.axes[0].texts] == ["stopped: too slow"]
