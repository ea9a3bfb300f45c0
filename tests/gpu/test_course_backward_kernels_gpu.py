"""Notebook 12's solution kernels pass its checks on a real GPU (compiled by cuTile), as they do
on the interpreter (tests/course/test_checks_backward_kernels.py holds the kernels).

Skipped unless torch sees a CUDA device and the real ``cuda.tile`` imports.
"""

import sys
from pathlib import Path

import pytest

from mamba2_tile import dispatch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "course"))

from test_checks_backward_kernels import (bwd_state_pass_simple_kernel,  # noqa: E402
                                          dC_from_states_kernel, walks_forward)

from mamba2_tile.course.checks.backward_kernels import (  # noqa: E402
    check_bwd_state_pass_simple, check_dC_from_states)

pytestmark = pytest.mark.skipif(not dispatch.gpu_available(),
                                reason="needs a GPU that cuTile supports and the real cuda.tile")


def test_the_state_pass_solution_passes_on_the_gpu():
    assert check_bwd_state_pass_simple(bwd_state_pass_simple_kernel, device="cuda")


def test_the_dC_solution_passes_on_the_gpu():
    assert check_dC_from_states(dC_from_states_kernel, device="cuda")


def test_a_wrong_kernel_gets_the_same_diagnosis_on_the_gpu(capsys):
    assert not check_bwd_state_pass_simple(walks_forward, device="cuda")
    assert "you walked the chunks forward" in capsys.readouterr().out
