"""Notebook 00's stored-speed showcase: the rows it names exist, and it shows a loss too."""

import matplotlib
import pytest

from mamba2_tile.course.plots.model_speeds import SHOWCASE, plot_model_speeds, showcase_rows, speed_table

matplotlib.use("Agg")


def test_every_showcase_row_is_stored_and_one_of_them_is_a_loss():
    rows = showcase_rows()
    assert len(rows) == len(SHOWCASE)
    assert any(row["vs_best_peer"] < 1 for row in rows)
    assert any(row["vs_best_peer"] > 1 for row in rows)
    table = speed_table(rows)
    assert len(table.splitlines()) == len(rows) + 1 and "float32" in table


def test_a_pick_without_a_stored_row_is_named():
    with pytest.raises(KeyError, match="4096"):
        showcase_rows(picks=((3, 4096, 64, 64, 128, 1, 256, "bfloat16", False),))


def test_the_chart_has_one_group_per_row():
    rows = showcase_rows()
    ax = plot_model_speeds(rows)
    assert len(ax.get_xticks()) == len(rows) and ax.get_yscale() == "log"


def test_notebook_00s_prose_holds_for_the_stored_data():
    """Notebook 00 says: in bfloat16 we beat both peers on every stored shape, the narrowest
    lead is the smallest problem (the fourth showcase row), and float32 without TF32 loses."""
    from mamba2_tile.tools.results import load_models_results

    bf16 = [row for row in load_models_results()["rows"] if row["dtype"] == "bfloat16"]
    assert all(row["vs_best_peer"] > 1 for row in bf16)
    narrowest = min(bf16, key=lambda row: row["vs_best_peer"])
    assert narrowest["vs_best_peer"] == showcase_rows()[3]["vs_best_peer"]
    assert showcase_rows()[-1]["vs_best_peer"] < 1
