"""data/golden/ is exactly what `python -m mamba2_tile.tools.golden` writes, and it is right."""

import subprocess
import sys

import numpy as np
import pytest

from mamba2_tile.tools import golden
from mamba2_tile.tools.golden import CASES, GOLDEN_DIR, load_case, make_case
from mamba2_tile.reference import ssd_chunked


def test_every_case_is_stored_and_nothing_else():
    assert sorted(p.stem for p in GOLDEN_DIR.glob("*.npz")) == sorted(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_regenerating_reproduces_the_files(name):
    stored, fresh = load_case(name), make_case(name)
    assert sorted(stored) == sorted(fresh)
    for key, value in fresh.items():
        assert stored[key].dtype == value.dtype and stored[key].shape == value.shape, key
        if key in ("y", "final_states"):
            # Computed in float64 on this machine: allow for another CPU's summation order.
            np.testing.assert_allclose(stored[key], value, rtol=1e-12, atol=1e-12, err_msg=key)
        else:
            np.testing.assert_array_equal(stored[key], value, err_msg=key)


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_outputs_agree_with_the_chunked_path(name):
    case = load_case(name)
    inputs = {k: v for k, v in case.items() if k not in ("y", "final_states")}
    y, h = ssd_chunked(**inputs, chunk_size=16, return_final_states=True)
    np.testing.assert_allclose(y, case["y"], rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(h, case["final_states"], rtol=1e-10, atol=1e-10)


def test_help_and_stray_arguments_write_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(golden, "GOLDEN_DIR", tmp_path / "golden")
    with pytest.raises(SystemExit) as exit_:
        golden.main(["--help"])
    assert exit_.value.code == 0 and "golden" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        golden.main(["--force"])
    assert exit_.value.code == 2 and "unrecognized arguments: --force" in capsys.readouterr().err
    assert not (tmp_path / "golden").exists()
    assert golden.main([]) == 0
    assert sorted(p.stem for p in (tmp_path / "golden").glob("*.npz")) == sorted(CASES)


def test_the_command_line_help_leaves_data_golden_alone():
    before = {p.name: p.stat().st_mtime_ns for p in GOLDEN_DIR.glob("*.npz")}
    done = subprocess.run([sys.executable, "-m", "mamba2_tile.tools.golden", "--help"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "usage:" in done.stdout
    assert {p.name: p.stat().st_mtime_ns for p in GOLDEN_DIR.glob("*.npz")} == before
