"""A helper redefined after a launch is what the next launch runs, with or without cuda-tile
(issue #15, item 6): the interpreter's twin of a kernel used to keep the helper it first saw
exactly when cuda-tile was installed (and `ct` had to be swapped), and pick up the new one
when it was not. Run in both settings: test_without_cutile.py reruns this directory with
cuda-tile hidden."""
import numpy as np

from mamba2_tile.interpreter import launch
from mamba2_tile.tile import ct

from . import kernels


@ct.function
def doubled_scaled_exp(t, scale):
    return ct.exp2(t * scale) * 2.0


def run_block():
    rng = np.random.default_rng(5)
    chunk, d, n = 16, 8, 2
    x, B, C = (rng.normal(size=(n * chunk, d)).astype(np.float32) for _ in range(3))
    y = np.zeros_like(x)
    launch((n,), kernels.ssd_like_block, (x, B, C, y, chunk, d))
    return y


def test_redefined_function_helper_is_used(monkeypatch):
    before = run_block()
    monkeypatch.setattr(kernels, "scaled_exp", doubled_scaled_exp)
    np.testing.assert_allclose(run_block(), 2 * before, rtol=1e-6)
    monkeypatch.undo()
    np.testing.assert_array_equal(run_block(), before)


def test_redefined_plain_helper_is_used(monkeypatch):
    before = run_block()
    monkeypatch.setattr(kernels, "log2e", lambda: 0.0)     # every decay becomes exp2(0) = 1
    assert not np.allclose(run_block(), before)
    monkeypatch.undo()
    np.testing.assert_array_equal(run_block(), before)
