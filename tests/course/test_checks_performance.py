"""Notebook 09's checks pass right answers, name the likely mistake in plausible wrong ones, and
greet an unfinished exercise with the friendly line."""

import math

import pytest

from mamba2_tile.compiler import NO_COMPILER, compile_kernel, compiler_available
from mamba2_tile.course.checks import performance as checks
from mamba2_tile.kernels.fwd_pass_state import fwd_pass_state_kernel, fwd_pass_state_launch
from mamba2_tile.kernels.options import FwdPassStateOptions


def not_written(*args, **kwargs):
    raise NotImplementedError("Exercise: write your code here")


# --- the chunk states' bytes ----------------------------------------------------------------

def states(batch, seqlen, nheads, headdim, dstate, chunk_size, bytes_per_value):
    return (2 * batch * nheads * math.ceil(seqlen / chunk_size) * headdim * dstate
            * bytes_per_value)


def test_states_check_passes_a_written_answer(capsys):
    assert checks.check_chunk_states_bytes(states)
    assert "✅ chunk_states_bytes matches" in capsys.readouterr().out


def floor_chunks(batch, seqlen, nheads, headdim, dstate, chunk_size, bytes_per_value):
    return 2 * batch * nheads * (seqlen // chunk_size) * headdim * dstate * bytes_per_value


def per_token(batch, seqlen, nheads, headdim, dstate, chunk_size, bytes_per_value):
    return 2 * batch * nheads * seqlen * headdim * dstate * bytes_per_value


@pytest.mark.parametrize("wrong, words", [
    (lambda **case: states(**case) / 2, "one way only"),
    (floor_chunks, "ceil(seqlen / chunk_size)"),
    (per_token, "not per token"),
    (lambda **case: states(**case) + 1000, "2 (write + read)"),
])
def test_states_check_names_the_mistake(wrong, words, capsys):
    assert not checks.check_chunk_states_bytes(wrong)
    out = capsys.readouterr().out
    assert "❌ chunk_states_bytes" in out and words in out and "Call [" in out


def test_states_check_unfinished(capsys):
    assert not checks.check_chunk_states_bytes(not_written)
    assert "⏳ chunk_states_bytes is not implemented yet" in capsys.readouterr().out


# --- the achieved bandwidth -----------------------------------------------------------------

def gbps(batch, seqlen, nheads, headdim, dstate, ngroups, bytes_per_value, ms):
    values = (2 * batch * seqlen * nheads * headdim + batch * seqlen * nheads
              + 2 * batch * seqlen * ngroups * dstate)
    return values * bytes_per_value / (ms / 1000) / 1e9


def test_gbps_check_passes_a_written_answer(capsys):
    assert checks.check_achieved_gbps(gbps)
    assert "✅ achieved_gbps matches" in capsys.readouterr().out


@pytest.mark.parametrize("variant, words", [
    (dict(per_head=True), "once per group"),
    (dict(with_y=False), "y is written once"),
    (dict(with_dt=False), "dt is an input too"),
    (dict(seconds=1.0), "milliseconds"),
    (dict(giga=2 ** 30), "not 2**30"),
])
def test_gbps_check_names_the_mistake(variant, words, capsys):
    assert not checks.check_achieved_gbps(lambda **case: checks._gbps_variant(case, **variant))
    out = capsys.readouterr().out
    assert "❌ achieved_gbps" in out and words in out


def test_gbps_check_unfinished(capsys):
    assert not checks.check_achieved_gbps(not_written)
    assert "⏳ achieved_gbps is not implemented yet" in capsys.readouterr().out


def test_the_answers_agree_with_the_cost_model():
    from mamba2_tile.cost import chunk_states_bytes, minimal_bytes
    from mamba2_tile.problem import Problem

    p = Problem(8, 4096, 64, 64, 128, 1, 64)
    assert checks.chunk_states_bytes(8, 4096, 64, 64, 128, 64, 4) == chunk_states_bytes(p)
    assert checks.achieved_gbps(8, 4096, 64, 64, 128, 1, 2, 1.0) == pytest.approx(
        minimal_bytes(p) / 1e-3 / 1e9)


# --- registers per thread at occupancy 2 (compiled, no GPU) -----------------------------------

needs_compiler = pytest.mark.skipif(not compiler_available(), reason=NO_COMPILER)


def registers_written(x, B, dt, dA_cumsum, occupancy):
    launch, _ = fwd_pass_state_launch(x, B, dt, dA_cumsum,
                                      options=FwdPassStateOptions(occupancy=occupancy))
    return compile_kernel(launch.kernel, launch.args, target="sm_90").registers


def registers_of_the_bare_kernel(x, B, dt, dA_cumsum, occupancy):
    """The occupancy is planned, but the kernel compiled is the one without the hint."""
    launch, _ = fwd_pass_state_launch(x, B, dt, dA_cumsum,
                                      options=FwdPassStateOptions(occupancy=occupancy))
    return compile_kernel(fwd_pass_state_kernel, launch.args, target="sm_90").registers


def compiled_kernel_returned(x, B, dt, dA_cumsum, occupancy):
    launch, _ = fwd_pass_state_launch(x, B, dt, dA_cumsum,
                                      options=FwdPassStateOptions(occupancy=occupancy))
    return compile_kernel(launch.kernel, launch.args, target="sm_90")


@needs_compiler
def test_registers_check_passes_and_shows_the_drop(capsys):
    assert checks.check_registers_per_thread(registers_written)
    out = capsys.readouterr().out
    assert "✅ registers_per_thread" in out and "asking for 2 blocks per SM" in out
    problem = checks.occupancy_problem()
    assert checks.registers_per_thread(*problem, 2) < checks.registers_per_thread(*problem, None)


@needs_compiler
def test_registers_check_names_a_hint_that_never_reached_the_compiler(capsys):
    assert not checks.check_registers_per_thread(registers_of_the_bare_kernel)
    assert "the occupancy never reached the compiler" in capsys.readouterr().out


@needs_compiler
def test_registers_check_asks_for_the_count_not_the_kernel(capsys):
    assert not checks.check_registers_per_thread(compiled_kernel_returned)
    assert "return its `.registers`" in capsys.readouterr().out


def registers_not_returned(x, B, dt, dA_cumsum, occupancy):
    launch, _ = fwd_pass_state_launch(x, B, dt, dA_cumsum,
                                      options=FwdPassStateOptions(occupancy=occupancy))
    compile_kernel(launch.kernel, launch.args, target="sm_90")


@needs_compiler
def test_registers_check_asks_for_an_int_when_nothing_is_returned(capsys):
    assert not checks.check_registers_per_thread(registers_not_returned)
    assert "returned None and None; return the registers per thread" in capsys.readouterr().out


@needs_compiler
def test_registers_check_greets_an_unfinished_exercise(capsys):
    assert not checks.check_registers_per_thread(not_written)
    assert "not implemented yet" in capsys.readouterr().out


def test_registers_check_without_a_compiler_says_so(capsys, monkeypatch):
    monkeypatch.setattr(checks, "compiler_available", lambda: False)
    assert not checks.check_registers_per_thread(registers_written)
    assert "cannot be checked here" in capsys.readouterr().out
