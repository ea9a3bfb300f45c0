"""Stored GPU results: loading, validating, the text table and the speed chart."""

import json

import matplotlib
import pytest

from mamba2_tile.course.plots.timings import plot_forward_times
from mamba2_tile.tools.results import (describe_results, load_models_results, load_results,
                                       results_table)

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


MODELS_ROW = {"batch": 8, "seqlen": 8192, "nheads": 64, "headdim": 64, "dstate": 128,
              "ngroups": 1, "chunk_size": 256, "dtype": "float32", "tf32": False,
              "ms": {"mamba2_tile": 200.0, "mamba_ssm": 4.0}, "error": {"mamba2_tile": 5e-7},
              "copy_fraction": 0.01, "vs_best_peer": 0.02}


def test_a_later_run_replaces_the_model_rows_it_measured_again(tmp_path):
    tf32 = {**MODELS_ROW, "tf32": True, "ms": {"mamba2_tile": 3.6}, "vs_best_peer": 1.1}
    bf16 = {**MODELS_ROW, "dtype": "bfloat16", "vs_best_peer": 3.5}
    write(tmp_path, "models.json", {"device": "GPU", "date": "2026-12-03",
                                    "rows": [bf16, MODELS_ROW, tf32]})
    again = {**MODELS_ROW, "ms": {"mamba2_tile": 7.6}, "vs_best_peer": 0.5}
    write(tmp_path, "again.json", {"device": "GPU", "date": "2026-12-04", "rows": [again]})
    results = load_models_results("models", tmp_path, remeasured=("again", "absent"))
    assert [row["vs_best_peer"] for row in results["rows"]] == [3.5, 0.5, 1.1]
    assert results["rows"][1]["date"] == "2026-12-04" and "date" not in results["rows"][2]
    assert results["date"] == "2026-12-03"
    assert results["remeasured"] == [{"name": "again", "date": "2026-12-04", "rows": 1}]
    assert load_models_results("models", tmp_path, remeasured=())["rows"][1]["vs_best_peer"] == 0.02


def test_a_later_run_of_a_problem_the_models_file_lacks_is_refused(tmp_path):
    write(tmp_path, "models.json", {"device": "GPU", "rows": [MODELS_ROW]})
    write(tmp_path, "again.json", {"device": "GPU", "rows": [{**MODELS_ROW, "seqlen": 4096}]})
    with pytest.raises(ValueError, match="again.json re-measures problems models.json does not "
                                         "hold: .'b8 L4096"):
        load_models_results("models", tmp_path, remeasured=("again",))


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
