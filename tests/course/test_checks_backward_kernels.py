"""The notebook-12 checks: the right kernels pass; each mistake of the catalogues, written as the
wrong kernel a learner would write, fails with its own diagnosis and the wrong chunks named; the
exercise stubs print the friendly line.

The wrong kernels of each exercise share one body with a flag per mistake; the solutions stay
written out in full, as the notebook has them. cuTile (and the interpreter) read a kernel's
source, so the kernels are defined here at module level; they run on the CPU tile interpreter.
"""

import numpy as np
import pytest

from mamba2_tile.course.checks.backward_kernels import (DC_MISTAKES, STATE_PASS_MISTAKES,
                                                        check_bwd_state_pass_simple,
                                                        check_dC_from_states, state_pass_walk)
from mamba2_tile.reference_backward import bwd_pass_state
from mamba2_tile.tile import ct

ZERO = ct.PaddingMode.ZERO


def hint_of(catalogue, **mistake):
    return next(hint for switches, hint in catalogue if switches == mistake)


# ------------------------------------------------------------------ Exercise 1: the kernels

# How the state carried into chunk c is decayed (CARRY) and how dy is weighted before it meets
# C (READ); the first of each is the notebook's solution.
CARRY_BY_OWN_CHUNK, CARRY_NONE, CARRY_BY_NEXT_CHUNK, CARRY_AFTER_OWN_TERM = 0, 1, 2, 3
READ_DECAYED, READ_NONE, READ_JUMP = 0, 1, 2


@ct.function
def state_pass_body(dy, C, dA_cumsum, dfinal_states, dchunk_states, dinitial_states,
                    CHUNK_SIZE, BLOCK_P, BLOCK_N, FORWARD, STORE_LEAVING, CARRY, READ,
                    START_ZERO, GROUP_MOD, STORE_INITIAL):
    """The backward state pass; a flag other than the solution's is one learner's mistake:
    ``FORWARD`` walks the chunks 0..n-1, ``STORE_LEAVING`` stores the state before chunk c's
    update, ``START_ZERO`` ignores dfinal_states, ``GROUP_MOD`` maps head h to group
    ``h % ngroups``, ``STORE_INITIAL=False`` never writes dinitial_states."""
    b, h = ct.bid(0), ct.bid(1)
    if GROUP_MOD:
        g = h % C.shape[2]
    else:
        g = h // (dy.shape[2] // C.shape[2])
    nchunks = dA_cumsum.shape[2]
    if START_ZERO:
        dstate = ct.zeros((BLOCK_P, BLOCK_N), dtype=ct.float32)
    else:
        dstate = ct.load(dfinal_states, (b, h, 0, 0), (1, 1, BLOCK_P, BLOCK_N),
                         padding_mode=ZERO)
        dstate = ct.reshape(dstate, (BLOCK_P, BLOCK_N)).astype(ct.float32)
    carry = ct.full((1, 1), 1.0, dtype=ct.float32)
    for k in range(nchunks):
        if FORWARD:
            c = k
        else:
            c = nchunks - 1 - k
        if STORE_LEAVING:
            ct.store(dchunk_states, (b, h, c, 0, 0),
                     ct.reshape(dstate, (1, 1, 1, BLOCK_P, BLOCK_N)))
        dA = ct.reshape(ct.load(dA_cumsum, (b, h, c, 0), (1, 1, 1, CHUNK_SIZE)), (CHUNK_SIZE, 1))
        dA_last = ct.reshape(ct.load(dA_cumsum, (b, h, c, CHUNK_SIZE - 1), (1, 1, 1, 1)), (1, 1))
        dy_c = ct.load(dy, (b, c, h, 0), (1, CHUNK_SIZE, 1, BLOCK_P), padding_mode=ZERO)
        dy_c = ct.reshape(dy_c, (CHUNK_SIZE, BLOCK_P)).astype(ct.float32)
        C_c = ct.load(C, (b, c, g, 0), (1, CHUNK_SIZE, 1, BLOCK_N), padding_mode=ZERO)
        C_c = ct.reshape(C_c, (CHUNK_SIZE, BLOCK_N)).astype(ct.float32)
        if READ == READ_NONE:
            read = dy_c
        elif READ == READ_JUMP:
            read = dy_c * ct.exp(dA_last - dA)   # copied from fwd_pass_state
        else:
            read = dy_c * ct.exp(dA)
        from_outputs = ct.sum(ct.reshape(read, (CHUNK_SIZE, BLOCK_P, 1))
                              * ct.reshape(C_c, (CHUNK_SIZE, 1, BLOCK_N)), axis=0)
        if CARRY == CARRY_NONE:
            dstate = dstate + from_outputs
        elif CARRY == CARRY_BY_NEXT_CHUNK:
            dstate = carry * dstate + from_outputs
            carry = ct.exp(dA_last)              # used one iteration late: chunk c - 1
        elif CARRY == CARRY_AFTER_OWN_TERM:
            dstate = ct.exp(dA_last) * (dstate + from_outputs)
        else:
            dstate = ct.exp(dA_last) * dstate + from_outputs
        if not STORE_LEAVING:
            ct.store(dchunk_states, (b, h, c, 0, 0),
                     ct.reshape(dstate, (1, 1, 1, BLOCK_P, BLOCK_N)))
    if STORE_INITIAL:
        ct.store(dinitial_states, (b, h, 0, 0), ct.reshape(dstate, (1, 1, BLOCK_P, BLOCK_N)))


@ct.kernel
def bwd_state_pass_simple_kernel(dy, C, dA_cumsum, dfinal_states, dchunk_states, dinitial_states,
                                 CHUNK_SIZE: ct.Constant[int], BLOCK_P: ct.Constant[int],
                                 BLOCK_N: ct.Constant[int]):
    """The notebook's solution, written out in full."""
    b, h = ct.bid(0), ct.bid(1)
    g = h // (dy.shape[2] // C.shape[2])
    nchunks = dA_cumsum.shape[2]
    dstate = ct.load(dfinal_states, (b, h, 0, 0), (1, 1, BLOCK_P, BLOCK_N), padding_mode=ZERO)
    dstate = ct.reshape(dstate, (BLOCK_P, BLOCK_N)).astype(ct.float32)
    for k in range(nchunks):
        c = nchunks - 1 - k
        dA = ct.reshape(ct.load(dA_cumsum, (b, h, c, 0), (1, 1, 1, CHUNK_SIZE)), (CHUNK_SIZE, 1))
        dA_last = ct.reshape(ct.load(dA_cumsum, (b, h, c, CHUNK_SIZE - 1), (1, 1, 1, 1)), (1, 1))
        dy_c = ct.load(dy, (b, c, h, 0), (1, CHUNK_SIZE, 1, BLOCK_P), padding_mode=ZERO)
        dy_c = ct.reshape(dy_c, (CHUNK_SIZE, BLOCK_P)).astype(ct.float32)
        C_c = ct.load(C, (b, c, g, 0), (1, CHUNK_SIZE, 1, BLOCK_N), padding_mode=ZERO)
        C_c = ct.reshape(C_c, (CHUNK_SIZE, BLOCK_N)).astype(ct.float32)
        read = dy_c * ct.exp(dA)
        from_outputs = ct.sum(ct.reshape(read, (CHUNK_SIZE, BLOCK_P, 1))
                              * ct.reshape(C_c, (CHUNK_SIZE, 1, BLOCK_N)), axis=0)
        dstate = ct.exp(dA_last) * dstate + from_outputs
        ct.store(dchunk_states, (b, h, c, 0, 0), ct.reshape(dstate, (1, 1, 1, BLOCK_P, BLOCK_N)))
    ct.store(dinitial_states, (b, h, 0, 0), ct.reshape(dstate, (1, 1, BLOCK_P, BLOCK_N)))


@ct.kernel
def walks_forward(dy, C, dA_cumsum, dfinal_states, dchunk_states, dinitial_states,
                  CHUNK_SIZE: ct.Constant[int], BLOCK_P: ct.Constant[int],
                  BLOCK_N: ct.Constant[int]):
    state_pass_body(dy, C, dA_cumsum, dfinal_states, dchunk_states, dinitial_states,
                    CHUNK_SIZE, BLOCK_P, BLOCK_N,
                    True, False, CARRY_BY_OWN_CHUNK, READ_DECAYED, False, False, True)


@ct.kernel
def stores_leaving(dy, C, dA_cumsum, dfinal_states, dchunk_states, dinitial_states,
                   CHUNK_SIZE: ct.Constant[int], BLOCK_P: ct.Constant[int],
                   BLOCK_N: ct.Constant[int]):
    state_pass_body(dy, C, dA_cumsum, dfinal_states, dchunk_states, dinitial_states,
                    CHUNK_SIZE, BLOCK_P, BLOCK_N,
                    False, True, CARRY_BY_OWN_CHUNK, READ_DECAYED, False, False, True)


@ct.kernel
def without_decay(dy, C, dA_cumsum, dfinal_states, dchunk_states, dinitial_states,
                  CHUNK_SIZE: ct.Constant[int], BLOCK_P: ct.Constant[int],
                  BLOCK_N: ct.Constant[int]):
    state_pass_body(dy, C, dA_cumsum, dfinal_states, dchunk_states, dinitial_states,
                    CHUNK_SIZE, BLOCK_P, BLOCK_N,
                    False, False, CARRY_NONE, READ_DECAYED, False, False, True)


@ct.kernel
def decay_of_chunk_after(dy, C, dA_cumsum, dfinal_states, dchunk_states, dinitial_states,
                         CHUNK_SIZE: ct.Constant[int], BLOCK_P: ct.Constant[int],
                         BLOCK_N: ct.Constant[int]):
    state_pass_body(dy, C, dA_cumsum, dfinal_states, dchunk_states, dinitial_states,
                    CHUNK_SIZE, BLOCK_P, BLOCK_N,
                    False, False, CARRY_BY_NEXT_CHUNK, READ_DECAYED, False, False, True)


@ct.kernel
def decays_own_term(dy, C, dA_cumsum, dfinal_states, dchunk_states, dinitial_states,
                    CHUNK_SIZE: ct.Constant[int], BLOCK_P: ct.Constant[int],
                    BLOCK_N: ct.Constant[int]):
    state_pass_body(dy, C, dA_cumsum, dfinal_states, dchunk_states, dinitial_states,
                    CHUNK_SIZE, BLOCK_P, BLOCK_N,
                    False, False, CARRY_AFTER_OWN_TERM, READ_DECAYED, False, False, True)


@ct.kernel
def unread_dy(dy, C, dA_cumsum, dfinal_states, dchunk_states, dinitial_states,
              CHUNK_SIZE: ct.Constant[int], BLOCK_P: ct.Constant[int],
              BLOCK_N: ct.Constant[int]):
    state_pass_body(dy, C, dA_cumsum, dfinal_states, dchunk_states, dinitial_states,
                    CHUNK_SIZE, BLOCK_P, BLOCK_N,
                    False, False, CARRY_BY_OWN_CHUNK, READ_NONE, False, False, True)


@ct.kernel
def forward_jump_weight(dy, C, dA_cumsum, dfinal_states, dchunk_states, dinitial_states,
                        CHUNK_SIZE: ct.Constant[int], BLOCK_P: ct.Constant[int],
                        BLOCK_N: ct.Constant[int]):
    state_pass_body(dy, C, dA_cumsum, dfinal_states, dchunk_states, dinitial_states,
                    CHUNK_SIZE, BLOCK_P, BLOCK_N,
                    False, False, CARRY_BY_OWN_CHUNK, READ_JUMP, False, False, True)


@ct.kernel
def starts_from_zero(dy, C, dA_cumsum, dfinal_states, dchunk_states, dinitial_states,
                     CHUNK_SIZE: ct.Constant[int], BLOCK_P: ct.Constant[int],
                     BLOCK_N: ct.Constant[int]):
    state_pass_body(dy, C, dA_cumsum, dfinal_states, dchunk_states, dinitial_states,
                    CHUNK_SIZE, BLOCK_P, BLOCK_N,
                    False, False, CARRY_BY_OWN_CHUNK, READ_DECAYED, True, False, True)


@ct.kernel
def group_by_modulo(dy, C, dA_cumsum, dfinal_states, dchunk_states, dinitial_states,
                    CHUNK_SIZE: ct.Constant[int], BLOCK_P: ct.Constant[int],
                    BLOCK_N: ct.Constant[int]):
    state_pass_body(dy, C, dA_cumsum, dfinal_states, dchunk_states, dinitial_states,
                    CHUNK_SIZE, BLOCK_P, BLOCK_N,
                    False, False, CARRY_BY_OWN_CHUNK, READ_DECAYED, False, True, True)


@ct.kernel
def forgets_dinitial(dy, C, dA_cumsum, dfinal_states, dchunk_states, dinitial_states,
                     CHUNK_SIZE: ct.Constant[int], BLOCK_P: ct.Constant[int],
                     BLOCK_N: ct.Constant[int]):
    state_pass_body(dy, C, dA_cumsum, dfinal_states, dchunk_states, dinitial_states,
                    CHUNK_SIZE, BLOCK_P, BLOCK_N,
                    False, False, CARRY_BY_OWN_CHUNK, READ_DECAYED, False, False, False)


@ct.kernel
def state_pass_stub(dy, C, dA_cumsum, dfinal_states, dchunk_states, dinitial_states,
                    CHUNK_SIZE: ct.Constant[int], BLOCK_P: ct.Constant[int],
                    BLOCK_N: ct.Constant[int]):
    b, h = ct.bid(0), ct.bid(1)
    raise NotImplementedError("Exercise: write your code here")


def test_the_right_state_pass_passes(capsys):
    assert check_bwd_state_pass_simple(bwd_state_pass_simple_kernel)
    assert capsys.readouterr().out.count("✅") == 4


STATE_PASS_WRONG = [
    (walks_forward, dict(order="forward")),
    (stores_leaving, dict(store="leaving")),
    (without_decay, dict(carry="none")),
    (decay_of_chunk_after, dict(carry="next")),
    (decays_own_term, dict(carry="after")),
    (unread_dy, dict(read="none")),
    (forward_jump_weight, dict(read="jump")),
    (starts_from_zero, dict(start="zero")),
    (group_by_modulo, dict(group="mod")),
]


def test_every_state_pass_mistake_has_a_wrong_kernel():
    assert sorted(map(str, (m for _, m in STATE_PASS_WRONG))) == \
        sorted(map(str, (m for m, _ in STATE_PASS_MISTAKES)))


@pytest.mark.parametrize("kernel, mistake", STATE_PASS_WRONG,
                         ids=lambda v: getattr(v, "__name__", ""))
def test_a_state_pass_mistake_gets_its_diagnosis_and_the_wrong_chunks(kernel, mistake, capsys):
    assert not check_bwd_state_pass_simple(kernel)
    out = capsys.readouterr().out
    assert "❌" in out
    assert hint_of(STATE_PASS_MISTAKES, **mistake) in out
    if mistake != dict(start="zero"):      # a wrong start can leave the first case's chunks right
        assert "batch 0, head 0: wrong at chunks" in out or "batch 0, head 1: wrong at" in out


def test_walking_forward_is_wrong_at_every_chunk_but_the_first_visited(capsys):
    """Forward, the first chunk visited (0) gets dfinal + its own term; the right walk reaches it
    last: the report names the later chunks."""
    check_bwd_state_pass_simple(walks_forward)
    out = capsys.readouterr().out
    assert "batch 0, head 0: wrong at chunks 0, 1, 2 (of 0..2)" in out


def test_dinitial_states_never_stored_is_named(capsys):
    assert not check_bwd_state_pass_simple(forgets_dinitial)
    out = capsys.readouterr().out
    assert "dinitial_states" in out and "never stored" in out


def test_the_stub_prints_the_friendly_line(capsys):
    assert not check_bwd_state_pass_simple(state_pass_stub)
    assert "⏳ bwd_state_pass_simple_kernel is not implemented yet" in capsys.readouterr().out


def test_the_correct_replay_is_the_reference():
    """The hint machinery's walk with no mistake switched on is the package's bwd_pass_state."""
    rng = np.random.default_rng(0)
    dy = rng.standard_normal((2, 37, 4, 3))
    C = rng.standard_normal((2, 37, 2, 5))
    dA = np.cumsum(-rng.uniform(0.1, 0.5, (2, 4, 3, 16)), axis=-1)
    dfinal = rng.standard_normal((2, 4, 3, 5))
    got = state_pass_walk(dy, C, dA, dfinal)
    expected = bwd_pass_state(dy, C, dA, dfinal)
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-12)
    np.testing.assert_allclose(got[1], expected[1], rtol=1e-12)


# ------------------------------------------------------------------ Exercise 2

@ct.kernel
def dC_from_states_kernel(dy, dA_cumsum, chunk_states, dC, CHUNK_SIZE: ct.Constant[int],
                          BLOCK_P: ct.Constant[int], BLOCK_N: ct.Constant[int]):
    """The notebook's solution, written out in full."""
    nchunks = dA_cumsum.shape[2]
    b, c = ct.bid(0) // nchunks, ct.bid(0) % nchunks
    h = ct.bid(1)
    dA = ct.reshape(ct.load(dA_cumsum, (b, h, c, 0), (1, 1, 1, CHUNK_SIZE)), (CHUNK_SIZE, 1))
    dy_c = ct.load(dy, (b, c, h, 0), (1, CHUNK_SIZE, 1, BLOCK_P), padding_mode=ZERO)
    dy_c = ct.reshape(dy_c, (CHUNK_SIZE, BLOCK_P))
    state = ct.load(chunk_states, (b, h, c, 0, 0), (1, 1, 1, BLOCK_P, BLOCK_N), padding_mode=ZERO)
    state = ct.reshape(state, (BLOCK_P, BLOCK_N))
    dC_c = ct.mma(dy_c * ct.exp(dA), state, ct.zeros((CHUNK_SIZE, BLOCK_N), dtype=ct.float32))
    ct.store(dC, (b, c, h, 0), ct.reshape(dC_c, (1, CHUNK_SIZE, 1, BLOCK_N)))


# How dy is weighted before it meets the state (WEIGHT); the first is the notebook's solution.
WEIGHT_DECAYED, WEIGHT_NONE, WEIGHT_JUMP, WEIGHT_LAST = 0, 1, 2, 3


@ct.function
def dC_body(dy, dA_cumsum, chunk_states, dC, CHUNK_SIZE, BLOCK_P, BLOCK_N, WEIGHT):
    nchunks = dA_cumsum.shape[2]
    b, c, h = ct.bid(0) // nchunks, ct.bid(0) % nchunks, ct.bid(1)
    dA = ct.reshape(ct.load(dA_cumsum, (b, h, c, 0), (1, 1, 1, CHUNK_SIZE)), (CHUNK_SIZE, 1))
    dA_last = ct.reshape(ct.load(dA_cumsum, (b, h, c, CHUNK_SIZE - 1), (1, 1, 1, 1)), (1, 1))
    dy_c = ct.load(dy, (b, c, h, 0), (1, CHUNK_SIZE, 1, BLOCK_P), padding_mode=ZERO)
    dy_c = ct.reshape(dy_c, (CHUNK_SIZE, BLOCK_P))
    state = ct.load(chunk_states, (b, h, c, 0, 0), (1, 1, 1, BLOCK_P, BLOCK_N), padding_mode=ZERO)
    state = ct.reshape(state, (BLOCK_P, BLOCK_N))
    if WEIGHT == WEIGHT_NONE:
        read = dy_c
    elif WEIGHT == WEIGHT_JUMP:
        read = dy_c * ct.exp(dA_last - dA)
    elif WEIGHT == WEIGHT_LAST:
        read = dy_c * ct.exp(dA_last)
    else:
        read = dy_c * ct.exp(dA)
    dC_c = ct.mma(read, state, ct.zeros((CHUNK_SIZE, BLOCK_N), dtype=ct.float32))
    ct.store(dC, (b, c, h, 0), ct.reshape(dC_c, (1, CHUNK_SIZE, 1, BLOCK_N)))


@ct.kernel
def dC_without_decay(dy, dA_cumsum, chunk_states, dC, CHUNK_SIZE: ct.Constant[int],
                     BLOCK_P: ct.Constant[int], BLOCK_N: ct.Constant[int]):
    dC_body(dy, dA_cumsum, chunk_states, dC, CHUNK_SIZE, BLOCK_P, BLOCK_N, WEIGHT_NONE)


@ct.kernel
def dC_jump_weight(dy, dA_cumsum, chunk_states, dC, CHUNK_SIZE: ct.Constant[int],
                   BLOCK_P: ct.Constant[int], BLOCK_N: ct.Constant[int]):
    dC_body(dy, dA_cumsum, chunk_states, dC, CHUNK_SIZE, BLOCK_P, BLOCK_N, WEIGHT_JUMP)


@ct.kernel
def dC_chunk_total_decay(dy, dA_cumsum, chunk_states, dC, CHUNK_SIZE: ct.Constant[int],
                         BLOCK_P: ct.Constant[int], BLOCK_N: ct.Constant[int]):
    dC_body(dy, dA_cumsum, chunk_states, dC, CHUNK_SIZE, BLOCK_P, BLOCK_N, WEIGHT_LAST)


@ct.kernel
def dC_stub(dy, dA_cumsum, chunk_states, dC, CHUNK_SIZE: ct.Constant[int],
            BLOCK_P: ct.Constant[int], BLOCK_N: ct.Constant[int]):
    raise NotImplementedError("Exercise: write your code here")


def test_the_right_dC_passes(capsys):
    assert check_dC_from_states(dC_from_states_kernel)
    assert capsys.readouterr().out.count("✅") == 2


DC_WRONG = [
    (dC_without_decay, dict(weight="none")),
    (dC_jump_weight, dict(weight="jump")),
    (dC_chunk_total_decay, dict(weight="last")),
]


def test_every_dC_mistake_has_a_wrong_kernel():
    assert sorted(map(str, (m for _, m in DC_WRONG))) == \
        sorted(map(str, (m for m, _ in DC_MISTAKES)))


@pytest.mark.parametrize("kernel, mistake", DC_WRONG, ids=lambda v: getattr(v, "__name__", ""))
def test_a_dC_mistake_gets_its_diagnosis_and_the_wrong_chunks(kernel, mistake, capsys):
    assert not check_dC_from_states(kernel)
    out = capsys.readouterr().out
    assert "❌" in out
    assert hint_of(DC_MISTAKES, **mistake) in out
    assert "wrong at chunks" in out


def test_the_dC_stub_prints_the_friendly_line(capsys):
    assert not check_dC_from_states(dC_stub)
    assert "⏳ dC_from_states_kernel is not implemented yet" in capsys.readouterr().out
