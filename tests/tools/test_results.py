"""Stored GPU results: loading, validating, the text table and the speed chart."""

import json

import matplotlib
import pytest

from mamba2_tile.course.plots.timings import plot_forward_times
from mamba2_tile.tools.results import describe_results, load_results, results_table

matplotlib.use("Agg")

ROW = {"batch": 8, "seqlen": 4096, "nheads": 64, "headdim": 64, "dstate": 128, "ngroups": 1,
       "chunk_size": 64, "dtype": "bfloat16", "mamba2_tile_ms": 1.25, "mamba_ssm_ms": 1.5,
       "speedup": 1.2, "max_abs_err": 1e-3, "max_rel_err": 2.5e-3}
RESULTS = {"device": "Some GPU", "date": "2026-01-01",
           "versions": {"torch": "2.9", "cuda": "13.0", "cuda_tile": "1.0", "triton": None,
                        "mamba_ssm": None},
           "rows": [ROW, {**ROW, "seqlen": 16384, "mamba_ssm_ms": None, "speedup": None,
                          "max_abs_err": None, "max_rel_err": None}]}


def write(tmp_path, name, content):
    (tmp_path / name).write_text(json.dumps(content), encoding="utf-8")


def test_load_results_reads_a_stored_file(tmp_path):
    write(tmp_path, "h200_forward.json", RESULTS)
    assert load_results("h200_forward", data_dir=tmp_path) == RESULTS
    assert load_results("h200_forward.json", data_dir=tmp_path) == RESULTS


def test_missing_file_gives_none(tmp_path):
    assert load_results("h200_forward", data_dir=tmp_path) is None


def test_malformed_files_are_refused_by_name(tmp_path):
    write(tmp_path, "a.json", {"date": "x"})
    with pytest.raises(ValueError, match="device, rows"):
        load_results("a", data_dir=tmp_path)
    broken_row = {k: v for k, v in ROW.items() if k != "mamba2_tile_ms"}
    write(tmp_path, "b.json", {**RESULTS, "rows": [ROW, broken_row]})
    with pytest.raises(ValueError, match="row 1: lacks the field.s. mamba2_tile_ms"):
        load_results("b", data_dir=tmp_path)


def test_optional_fields_are_filled_in(tmp_path):
    bare_row = {k: v for k, v in ROW.items() if k not in ("speedup", "max_abs_err")}
    write(tmp_path, "c.json", {"device": "GPU", "rows": [bare_row]})
    results = load_results("c", data_dir=tmp_path)
    assert results["date"] == "unknown" and results["versions"] == {}
    assert results["rows"][0]["speedup"] is None and results["rows"][0]["max_abs_err"] is None
    assert describe_results(results) == "GPU, measured unknown"
    assert "-" in results_table(results["rows"]).splitlines()[-1].split()


def test_table_has_fixed_format_and_dashes_for_missing_values():
    header, _, *lines = results_table(RESULTS["rows"]).splitlines()
    assert len(lines) == 2 and "mamba2_tile ms" in header
    assert {"1.250", "1.500", "1.20", "2.5e-03"} <= set(lines[0].split())
    assert lines[1].split()[-1] == "-" and "16384" in lines[1].split()


def test_describe_results_skips_unknown_versions():
    text = describe_results(RESULTS)
    assert text.startswith("Some GPU, measured 2026-01-01") and "triton" not in text


def test_chart_draws_both_bars_and_the_lone_one():
    fig = plot_forward_times(RESULTS["rows"])
    ax = fig.axes[0]
    assert len(ax.patches) == 4          # 2 cuTile bars + 2 mamba_ssm bars (one of them NaN)
    assert [t.get_text() for t in ax.texts] == ["1.20x"]
    assert ax.get_yscale() == "log"          # times spanning decades stay readable


def test_the_real_data_file_if_present_has_the_format():
    results = load_results("h200_forward")
    if results is None:
        pytest.skip("no data/h200_forward.json yet")
    assert results["rows"]


def test_labels_name_only_what_varies():
    from mamba2_tile.course.plots.timings import row_labels

    assert row_labels(RESULTS["rows"]) == ["L=4096", "L=16384"]
    assert row_labels([ROW, {**ROW, "dstate": 64, "chunk_size": 128}]) == [
        "n=128\nchunk 64", "n=64\nchunk 128"]
    assert row_labels([ROW]) == ["L=4096"]
