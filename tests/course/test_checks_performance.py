"""Notebook 09's checks pass right answers, name the likely mistake in plausible wrong ones, and
greet an unfinished exercise with the friendly line."""

import math

import pytest

from mamba2_tile.course.checks import performance as checks


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
