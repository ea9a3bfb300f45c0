"""Notebook 08's checks pass a right forward pass, fail plausible wrong ones naming the positions
and the likely mistake, and greet an unfinished exercise with the friendly line."""

import numpy as np
import torch

from mamba2_tile.api import mamba_chunk_scan_combined
from mamba2_tile.course.checks import forward as checks
from mamba2_tile.kernels import chunk_cumsum, compute_out, fwd_pass_state
from mamba2_tile.tolerances import GPU_TOLERANCES, TOLERANCES


def not_written(*args, **kwargs):
    raise NotImplementedError("Exercise: write your code here")


def ssd_forward(x, dt, A, B, C, chunk_size, D=None, z=None, initial_states=None):
    dA_cumsum, dt_c = chunk_cumsum(dt, A, chunk_size)
    chunk_states, final_states = fwd_pass_state(x, B, dt_c, dA_cumsum, initial_states)
    return compute_out(x, dt_c, dA_cumsum, B, C, chunk_states, D=D, z=z), final_states


def ssd_forward_ignoring_initial_states(x, dt, A, B, C, chunk_size, D=None, z=None,
                                       initial_states=None):
    return ssd_forward(x, dt, A, B, C, chunk_size, D=D, z=z)


def ssd_forward_without_gate(x, dt, A, B, C, chunk_size, D=None, z=None, initial_states=None):
    return ssd_forward(x, dt, A, B, C, chunk_size, D=D, initial_states=initial_states)


def test_forward_check_passes(capsys):
    assert checks.check_ssd_forward(ssd_forward)
    assert capsys.readouterr().out.count("✅ ssd_forward") == 4


def test_forward_check_catches_ignored_initial_states(capsys):
    assert not checks.check_ssd_forward(ssd_forward_ignoring_initial_states)
    out = capsys.readouterr().out
    assert "❌ ssd_forward final_states" in out and "   at [0, " in out
    assert "Hint: the run ignored initial_states" in out


def test_forward_check_catches_a_missing_gate(capsys):
    assert not checks.check_ssd_forward(ssd_forward_without_gate)
    out = capsys.readouterr().out
    assert "❌ ssd_forward y" in out and "Hint: the gate is missing" in out


def test_forward_check_unfinished(capsys):
    assert not checks.check_ssd_forward(not_written)
    assert "⏳ ssd_forward is not implemented yet" in capsys.readouterr().out


def test_forward_check_wants_a_pair(capsys):
    assert not checks.check_ssd_forward(lambda *args, **kwargs: ssd_forward(*args, **kwargs)[0])
    assert "expected a pair (y, final_states)" in capsys.readouterr().out


def in_two_parts(x, dt, A, B, C, chunk_size, split):
    x1, dt1, B1, C1 = (t[:, :split].contiguous() for t in (x, dt, B, C))
    x2, dt2, B2, C2 = (t[:, split:].contiguous() for t in (x, dt, B, C))
    y1, h1 = mamba_chunk_scan_combined(x1, dt1, A, B1, C1, chunk_size, return_final_states=True)
    y2, h2 = mamba_chunk_scan_combined(x2, dt2, A, B2, C2, chunk_size, initial_states=h1,
                                       return_final_states=True)
    return torch.cat([y1, y2], dim=1), h2


def in_two_parts_forgetting_the_state(x, dt, A, B, C, chunk_size, split):
    parts = [mamba_chunk_scan_combined(x[:, s].contiguous(), dt[:, s].contiguous(), A,
                                       B[:, s].contiguous(), C[:, s].contiguous(), chunk_size,
                                       return_final_states=True)
             for s in (slice(None, split), slice(split, None))]
    return torch.cat([parts[0][0], parts[1][0]], dim=1), parts[1][1]


def test_two_parts_check_passes(capsys):
    assert checks.check_forward_in_two_parts(in_two_parts)
    out = capsys.readouterr().out
    assert out.count("✅ forward_in_two_parts") == 4 and "split=37" in out


def test_two_parts_check_catches_a_lost_state(capsys):
    assert not checks.check_forward_in_two_parts(in_two_parts_forgetting_the_state)
    out = capsys.readouterr().out
    assert "❌ forward_in_two_parts y" in out and "   at [0, 64, " in out
    assert "Hint: the second part started from a zero state" in out


def test_two_parts_check_unfinished(capsys):
    assert not checks.check_forward_in_two_parts(not_written)
    assert "⏳ forward_in_two_parts is not implemented yet" in capsys.readouterr().out


def test_report_match_uses_the_dtype_tolerance(capsys):
    expected = np.linspace(-1.0, 1.0, 50)
    slightly_off = torch.tensor(expected * (1 + 1e-3))
    assert checks.report_match("bf16 y", slightly_off, expected, torch.bfloat16, "cpu")
    assert not checks.report_match("fp32 y", slightly_off, expected, torch.float32, "cpu")
    assert checks.tolerance(torch.float32, "cuda") == GPU_TOLERANCES[torch.float32]
    assert checks.tolerance(torch.float32, "cpu") == TOLERANCES[torch.float32]
