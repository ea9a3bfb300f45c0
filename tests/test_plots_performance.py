"""Notebook 09's charts and tables on synthetic results: figures are built, tables keep their
fixed format, and malformed input is refused with an error that says what is wrong."""

import copy

import matplotlib
import matplotlib.pyplot as plt
import pytest

from mamba2_tile.cost import Problem, chunk_states_bytes, forward_cost, minimal_bytes
from mamba2_tile.plots import performance as perf

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


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


# --- the ablation ---------------------------------------------------------------------------

def test_ablation_table_has_a_fixed_format():
    lines = perf.ablation_table(ABLATION).splitlines()
    assert len(lines) == 1 + 8 + 3
    assert lines[0].split() == ["shape", "variant", "ms", "x", "base", "x", "mamba_ssm",
                                "rel", "err", "tune", "s", "cached", "s"]
    assert lines[1].startswith("b8 L4096 h64 p64 n128 g1 c64 bf16") and "baseline" in lines[1]
    assert lines[2].startswith(" ")                      # the shape is named once
    assert lines[7].split()[:4] == ["+fused", "0.300", "3.33", "2.67"]
    assert lines[5].split()[-2:] == ["42", "0.012"]      # +autotune: tuning, cache read
    assert lines[9].startswith("b8 L2048") and "fp32" in lines[9]
    assert len({len(line.rstrip()) for line in lines[1:]}) == 1   # columns line up
    assert perf.ablation_table(ABLATION) == perf.ablation_table(copy.deepcopy(ABLATION))


def test_ablation_orders_the_ladder_whatever_the_row_order():
    shuffled = {**ABLATION, "rows": list(reversed(ABLATION["rows"]))}
    groups = perf.ablation_groups(shuffled)
    assert list(groups[1][1]) == ["baseline", "+latency", "+swap", "+transposed", "+autotune",
                                  "+bf16_states", "+fused", "+fused_autotune"]
    assert list(groups[0][1]) == ["baseline", "+tf32", "+fused"]


def test_ablation_missing_values_print_as_dashes():
    rows = [{**row, "mamba_ssm_ms": None, "rel_err": None} for row in ABLATION["rows"][:2]]
    line = perf.ablation_table(rows).splitlines()[1]
    assert line.split()[-5:] == ["1.00", "-", "-", "-", "-"]


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
        perf.ablation_table(DEFAULT)
    with pytest.raises(TypeError, match="load_results return None"):
        perf.plot_ablation(None)
    with pytest.raises(ValueError, match="no rows"):
        perf.ablation_table({"device": "x", "rows": []})


# --- against mamba_ssm ----------------------------------------------------------------------

def test_speedup_summary_reports_the_targets():
    lines = perf.speedup_summary(DEFAULT).splitlines()
    assert lines[0].split() == ["chunk", "shapes", "geomean", "min", "max", "target", "met"]
    assert lines[1].split() == ["64", "6", "2.60x", "2.60x", "2.60x", "2.5x", "yes"]
    assert lines[2].split() == ["128", "6", "1.60x", "1.60x", "1.60x", "1.5x", "yes"]
    assert "4 shapes, min 40%" in lines[3] and "yes" in lines[3]
    slow = {**DEFAULT, "rows": [{**r, "speedup": 2.0, "copy_fraction": 0.2}
                                for r in DEFAULT["rows"]]}
    lines = perf.speedup_summary(slow).splitlines()
    assert lines[1].endswith("no") and lines[3].endswith("no)")


def test_speedup_summary_without_mamba_ssm_or_bandwidth():
    bare = [{k: v for k, v in row.items() if k not in ("speedup", "mamba_ssm_ms",
                                                        "copy_fraction")}
            for row in DEFAULT["rows"]]
    text = perf.speedup_summary(bare)
    assert "   64       0        -" in text and "not measured" in text
    # the copy fraction is recomputed from the run's copy bandwidth when a row lacks it
    text = perf.speedup_summary({**DEFAULT, "rows": bare})
    assert "min 40%" in text


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
    point = perf.roofline_points([{**SHAPE, "mamba2_tile_ms": 1.0, "mamba_ssm_ms": 2.0}])[0]
    p = Problem(8, 4096, 64, 64, 128, 1, 64, dtype_bytes=2)
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
    parts = perf.traffic_breakdown(p)
    three, low, fused = parts.values()
    assert three["chunk states"] == chunk_states_bytes(p)
    assert low["chunk states"] == chunk_states_bytes(p) // 2
    assert fused["chunk states"] == 0
    assert sum(fused.values()) == forward_cost(p, fused=True).bytes
    assert three["everything else"] == low["everything else"]
    lines = perf.fusion_table(p).splitlines()
    assert lines[1].split()[-6:] == ["2.15", "GB", "2.49", "GB", "4.63", "GB"]
    assert lines[-1].split()[-2:] == ["0.56", "GB"]


@pytest.mark.parametrize("draw", [perf.plot_latency_hiding, perf.plot_operand_swap,
                                  perf.plot_transposed_layout,
                                  lambda: perf.plot_fusion(Problem(8, 4096, 64, 64, 128))])
def test_drawings_build(draw):
    fig = draw()
    assert fig.axes and any(ax.patches for ax in fig.axes)
