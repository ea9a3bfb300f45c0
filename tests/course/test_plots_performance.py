"""Notebook 09's charts and tables on synthetic results: figures are built, tables hold the
right values under the right names, and malformed input is refused with an error that says
what is wrong. (The tables are computed by the benchmark's reporting; the figures here.)"""

import copy
import re

import matplotlib
import matplotlib.pyplot as plt
import pytest

from mamba2_tile import cost
from mamba2_tile.cost import chunk_states_bytes, forward_cost, minimal_bytes
from mamba2_tile.course.plots import performance as perf
from mamba2_tile.problem import Problem
from mamba2_tile.tools.bench import reporting

matplotlib.use("Agg")

SHAPE = dict(batch=8, seqlen=4096, nheads=64, headdim=64, dstate=128, ngroups=1, chunk_size=64,
             dtype="bfloat16")
FP32 = {**SHAPE, "seqlen": 2048, "dtype": "float32"}


def ablation_rows():
    rows = []
    for shape, steps in [(SHAPE, [("baseline", 1.0), ("+latency", 0.9), ("+swap", 0.85),
                                  ("+transposed", 0.8), ("+autotune", 0.7),
                                  ("+bf16_states", 0.6), ("+fused", 0.3),
                                  ("+fused_autotune", 0.25)]),
                         (FP32, [("baseline", 50.0), ("+tf32", 2.0), ("+fused", 1.0)])]:
        base = steps[0][1]
        for variant, ms in steps:
            row = {**shape, "variant": variant, "mamba2_tile_ms": ms, "vs_baseline": base / ms,
                   "mamba_ssm_ms": 0.8, "speedup": 0.8 / ms, "rel_err": 2e-3}
            if "autotune" in variant:
                row["autotune_s"] = 41.7
                row["autotune_cached_s"] = 0.0123
            rows.append(row)
    return rows


ABLATION = {"device": "Some GPU", "date": "2027-01-01", "versions": {}, "copy_gbps": 4300.0,
            "rows": ablation_rows()}


def default_rows():
    rows = []
    for seqlen in (1024, 4096, 16384):
        for dstate in (64, 128):
            for chunk, speedup in ((64, 2.6), (128, 1.6)):
                shape = {**SHAPE, "seqlen": seqlen, "dstate": dstate, "chunk_size": chunk}
                nbytes = minimal_bytes(Problem(8, seqlen, 64, 64, dstate, 1, chunk))
                ms = nbytes / (0.4 * 4300e9) * 1e3
                rows.append({**shape, "mamba2_tile_ms": ms, "mamba_ssm_ms": ms * speedup,
                             "speedup": speedup, "copy_fraction": 0.4, "minimal_bytes": nbytes})
    return rows


DEFAULT = {"device": "Some GPU", "date": "2027-01-01", "versions": {}, "copy_gbps": 4300.0,
           "rows": default_rows()}


def read_table(text):
    """A text table back as one dict per line, cut at the columns its dashed rule marks."""
    header, rule, *body = text.splitlines()
    spans = [(m.start(), m.end()) for m in re.finditer(r"-+", rule)]

    def cells(line):
        return [line[start:end].strip() for start, end in spans]
    return [dict(zip(cells(header), cells(line))) for line in body]


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


# --- the ablation ---------------------------------------------------------------------------

def test_ablation_table_names_each_shape_once_and_every_step():
    lines = read_table(reporting.ablation_table(ABLATION))
    assert len(lines) == 8 + 3
    assert [line["shape"] for line in lines if line["shape"]] == [
        "b8 L4096 h64 p64 n128 g1 c64 bf16", "b8 L2048 h64 p64 n128 g1 c64 fp32"]
    fused = next(line for line in lines if line["variant"] == "+fused")
    assert (fused["ms"], fused["x base"], fused["x mamba_ssm"]) == ("0.300", "3.33", "2.67")
    tuned = next(line for line in lines if line["variant"] == "+autotune")
    assert (tuned["tune s"], tuned["cached s"]) == ("42", "0.012")
    assert reporting.ablation_table(ABLATION) == reporting.ablation_table(
        copy.deepcopy(ABLATION))


def test_ablation_orders_the_ladder_whatever_the_row_order():
    shuffled = {**ABLATION, "rows": list(reversed(ABLATION["rows"]))}
    groups = reporting.ablation_groups(shuffled)
    assert list(groups[1][1]) == ["baseline", "+latency", "+swap", "+transposed", "+autotune",
                                  "+bf16_states", "+fused", "+fused_autotune"]
    assert list(groups[0][1]) == ["baseline", "+tf32", "+fused"]


def test_ablation_missing_values_print_as_dashes():
    rows = [{**row, "mamba_ssm_ms": None, "rel_err": None} for row in ABLATION["rows"][:2]]
    line = read_table(reporting.ablation_table(rows))[0]
    assert line["x base"] == "1.00"
    assert [line[name] for name in ("x mamba_ssm", "rel err", "tune s", "cached s")] == ["-"] * 4


@pytest.mark.parametrize("metric", ["speedup", "ms"])
def test_plot_ablation_draws_one_panel_per_shape(metric):
    fig = perf.plot_ablation(ABLATION, metric=metric)
    panels = [ax for ax in fig.axes if ax.patches]
    assert len(panels) == 2
    assert len(panels[0].patches) == 8 and len(panels[1].patches) == 3
    assert any(line.get_linestyle() == "--" for line in panels[0].lines)   # mamba_ssm
    if metric == "speedup":
        assert panels[0].patches[6].get_height() == pytest.approx(1 / 0.3)


def test_plot_ablation_refuses_bad_input():
    with pytest.raises(ValueError, match="metric"):
        perf.plot_ablation(ABLATION, metric="gflops")
    with pytest.raises(ValueError, match="no 'baseline' row"):
        perf.plot_ablation([row for row in ABLATION["rows"] if row["variant"] != "baseline"])
    with pytest.raises(ValueError, match="row 0 lacks variant"):
        reporting.ablation_table(DEFAULT)
    with pytest.raises(TypeError, match="load_results return None"):
        perf.plot_ablation(None)
    with pytest.raises(ValueError, match="no rows"):
        reporting.ablation_table({"device": "x", "rows": []})


# --- against mamba_ssm ----------------------------------------------------------------------

def summary_table(results):
    """The per-chunk table of ``speedup_summary`` (all but its last line, the bandwidth)."""
    *table, bandwidth = reporting.speedup_summary(results).splitlines()
    return {line["chunk"]: line for line in read_table("\n".join(table))}, bandwidth


def test_speedup_summary_reports_the_targets():
    chunks, bandwidth = summary_table(DEFAULT)
    assert chunks["64"] == dict(chunk="64", shapes="6", geomean="2.60x", min="2.60x",
                                max="2.60x", target="2.5x", met="yes")
    assert (chunks["128"]["geomean"], chunks["128"]["target"], chunks["128"]["met"]) == (
        "1.60x", "1.5x", "yes")
    assert "4 shapes, min 40%" in bandwidth and "yes" in bandwidth
    slow = {**DEFAULT, "rows": [{**r, "speedup": 2.0, "copy_fraction": 0.2}
                                for r in DEFAULT["rows"]]}
    chunks, bandwidth = summary_table(slow)
    assert chunks["64"]["met"] == "no" and bandwidth.endswith("no)")


def test_speedup_summary_without_mamba_ssm_or_bandwidth():
    bare = [{k: v for k, v in row.items() if k not in ("speedup", "mamba_ssm_ms",
                                                        "copy_fraction")}
            for row in DEFAULT["rows"]]
    chunks, bandwidth = summary_table(bare)
    assert (chunks["64"]["shapes"], chunks["64"]["geomean"]) == ("0", "-")
    assert "not measured" in bandwidth
    # the copy fraction is recomputed from the run's copy bandwidth when a row lacks it
    assert "min 40%" in reporting.speedup_summary({**DEFAULT, "rows": bare})


def test_plot_speedups_draws_the_targets():
    fig = perf.plot_speedups(DEFAULT)
    ax = fig.axes[0]
    assert len([p for p in ax.patches if p.get_height() > 0]) == len(DEFAULT["rows"])
    heights = {round(line.get_ydata()[0], 6) for line in ax.lines}
    assert {1.0, 2.5, 1.5, 2.6}.issubset(heights)


def test_plot_speedups_needs_mamba_ssm_times():
    bare = [{**row, "speedup": None, "mamba_ssm_ms": None} for row in DEFAULT["rows"]]
    with pytest.raises(ValueError, match="no row has a mamba_ssm time"):
        perf.plot_speedups(bare)


# --- the roofline ---------------------------------------------------------------------------

def test_roofline_points_use_the_cost_model():
    point = reporting.roofline_points([{**SHAPE, "mamba2_tile_ms": 1.0, "mamba_ssm_ms": 2.0}])[0]
    p = Problem(8, 4096, 64, 64, 128, 1, 64, "bfloat16")
    assert point["bytes"] == minimal_bytes(p)
    assert point["intensity"] == pytest.approx(forward_cost(p).flops / minimal_bytes(p))
    assert point["tflops"] == pytest.approx(forward_cost(p).flops / 1e-3 / 1e12)
    assert point["mamba_ssm_tflops"] == pytest.approx(point["tflops"] / 2)


def test_plot_roofline_draws_roofs_and_points():
    fig = perf.plot_roofline(DEFAULT, marks={"fused": 80.0})
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert len(ax.collections) == 4          # ours and mamba_ssm, for two chunk sizes
    assert sum(len(c.get_offsets()) for c in ax.collections) == 2 * len(DEFAULT["rows"])
    labels = [line.get_label() for line in ax.lines]
    assert any("TB/s HBM" in label for label in labels)
    assert any("copy bandwidth" in label for label in labels)
    # without the run's copy bandwidth only the datasheet roof is drawn
    fig = perf.plot_roofline(DEFAULT["rows"])
    assert not any("copy" in line.get_label() for line in fig.axes[0].lines)


def test_roofline_refuses_unknown_dtypes():
    with pytest.raises(ValueError, match="unknown dtype 'int8'"):
        perf.plot_roofline([{**SHAPE, "dtype": "int8", "mamba2_tile_ms": 1.0}])


# --- drawings -------------------------------------------------------------------------------

def test_latency_timelines_overlap_loads():
    schedules = perf.latency_timelines(ntiles=4, latency=3.0, issue=0.5, compute=1.0,
                                       in_flight=3)
    (serial, _), (overlapped, _) = [(c[-1][1], depth) for _, c, depth in schedules.values()]
    assert serial == 4 * (3.0 + 1.0)
    assert overlapped < serial
    loads, computes, depth = list(schedules.values())[1]
    for i in range(depth, len(loads)):       # a buffer is reused only once its tile is done
        assert loads[i][0] >= computes[i - depth][1]


def test_fusion_traffic_comes_from_the_cost_model():
    p = Problem(8, 4096, 64, 64, 128, 1, 64)
    parts = cost.traffic_breakdown(p)
    three, low, fused = parts.values()
    assert three["chunk states"] == chunk_states_bytes(p)
    assert low["chunk states"] == chunk_states_bytes(p) // 2
    assert fused["chunk states"] == 0
    assert sum(fused.values()) == forward_cost(p, fused=True).bytes
    assert three["everything else"] == low["everything else"]
    lines = {line["pipeline"]: line for line in read_table(cost.fusion_table(p))}
    three_kernels = lines["3 kernels, fp32 states"]
    assert [three_kernels[k] for k in ("chunk states", "other", "total")] == [
        "2.15 GB", "2.49 GB", "4.63 GB"]
    assert lines["minimal (inputs once, y)"]["total"] == "0.56 GB"


@pytest.mark.parametrize("draw", [perf.plot_latency_hiding, perf.plot_operand_swap,
                                  perf.plot_transposed_layout,
                                  lambda: perf.plot_fusion(Problem(8, 4096, 64, 64, 128))])
def test_drawings_build(draw):
    fig = draw()
    assert fig.axes and any(ax.patches for ax in fig.axes)
