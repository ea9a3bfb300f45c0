"""data/golden/ is exactly what `python -m mamba2_tile.tools.golden` writes, and it is right."""

import numpy as np
import pytest

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
