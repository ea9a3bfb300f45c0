"""The notebook-06 checks: a correct kernel passes, a plausible buggy one fails and the message
names the differing positions and the likely cause, the exercise stub prints the friendly line.

cuTile (and the interpreter) read a kernel's source, so the kernels are defined here at module
level; they run on the CPU tile interpreter. The correct tiled / tensor-core kernel is the
package's own.
"""

from mamba2_tile.course.checks.fwd_pass_state import (check_fwd_pass_state_mma,
                                               check_fwd_pass_state_simple,
                                               check_fwd_pass_state_tiled)
from mamba2_tile.kernels.fwd_pass_state import fwd_pass_state_kernel
from mamba2_tile.tile import ct

ZERO = ct.PaddingMode.ZERO


@ct.function
def chunk_decay(dt, dA_cumsum, b, h, c, CHUNK_SIZE):
    """Chunk c's dA_cumsum and dt as columns, and its last dA_cumsum: what every variant loads."""
    dA = ct.reshape(ct.load(dA_cumsum, (b, h, c, 0), (1, 1, 1, CHUNK_SIZE)), (CHUNK_SIZE, 1))
    dt_c = ct.reshape(ct.load(dt, (b, h, c, 0), (1, 1, 1, CHUNK_SIZE)), (CHUNK_SIZE, 1))
    dA_last = ct.reshape(ct.load(dA_cumsum, (b, h, c, CHUNK_SIZE - 1), (1, 1, 1, 1)), (1, 1))
    return dA, dt_c, dA_last


@ct.function
def tiled_block_start(x, B, initial_states, BLOCK_P, BLOCK_N, HAS_INITIAL_STATES):
    """A tiled block's (batch, head, group, headdim tile, dstate tile) and its starting state."""
    nheads = x.shape[2]
    b, h = ct.bid(0) // nheads, ct.bid(0) % nheads
    pt, nt = ct.bid(1), ct.bid(2)
    g = h // (nheads // B.shape[2])
    if HAS_INITIAL_STATES:
        state = ct.load(initial_states, (b, h, pt, nt), (1, 1, BLOCK_P, BLOCK_N), padding_mode=ZERO)
        state = ct.reshape(state, (BLOCK_P, BLOCK_N)).astype(ct.float32)
    else:
        state = ct.zeros((BLOCK_P, BLOCK_N), dtype=ct.float32)
    return b, h, g, pt, nt, state


@ct.function
def simple_body(x, B, dt, dA_cumsum, chunk_states, final_states, CHUNK_SIZE, BLOCK_P, BLOCK_N,
                STORE_ENTERING):
    """One (batch, head) block; ``STORE_ENTERING=False`` is the learner's bug of storing the
    state after the jump instead of the state entering the chunk."""
    b, h = ct.bid(0), ct.bid(1)
    g = h // (x.shape[2] // B.shape[2])
    state = ct.zeros((BLOCK_P, BLOCK_N), dtype=ct.float32)
    for c in range(dA_cumsum.shape[2]):
        if STORE_ENTERING:
            ct.store(chunk_states, (b, h, c, 0, 0), ct.reshape(state, (1, 1, 1, BLOCK_P, BLOCK_N)))
        dA, dt_c, dA_last = chunk_decay(dt, dA_cumsum, b, h, c, CHUNK_SIZE)
        x_c = ct.load(x, (b, c, h, 0), (1, CHUNK_SIZE, 1, BLOCK_P), padding_mode=ZERO)
        x_c = ct.reshape(x_c, (CHUNK_SIZE, BLOCK_P)).astype(ct.float32)
        B_c = ct.load(B, (b, c, g, 0), (1, CHUNK_SIZE, 1, BLOCK_N), padding_mode=ZERO)
        B_c = ct.reshape(B_c, (CHUNK_SIZE, BLOCK_N)).astype(ct.float32)
        x_w = x_c * (ct.exp(dA_last - dA) * dt_c)
        outer = ct.reshape(x_w, (CHUNK_SIZE, BLOCK_P, 1)) * ct.reshape(B_c, (CHUNK_SIZE, 1, BLOCK_N))
        state = state * ct.exp(dA_last) + ct.sum(outer, axis=0)
        if not STORE_ENTERING:
            ct.store(chunk_states, (b, h, c, 0, 0), ct.reshape(state, (1, 1, 1, BLOCK_P, BLOCK_N)))
    ct.store(final_states, (b, h, 0, 0), ct.reshape(state, (1, 1, BLOCK_P, BLOCK_N)))


@ct.kernel
def simple(x, B, dt, dA_cumsum, chunk_states, final_states, CHUNK_SIZE: ct.Constant[int],
           BLOCK_P: ct.Constant[int], BLOCK_N: ct.Constant[int]):
    simple_body(x, B, dt, dA_cumsum, chunk_states, final_states, CHUNK_SIZE, BLOCK_P, BLOCK_N,
                True)


@ct.kernel
def simple_stores_after(x, B, dt, dA_cumsum, chunk_states, final_states,
                        CHUNK_SIZE: ct.Constant[int], BLOCK_P: ct.Constant[int],
                        BLOCK_N: ct.Constant[int]):
    # The bug: chunk_states gets the state after the chunk's jump, not the one entering it.
    simple_body(x, B, dt, dA_cumsum, chunk_states, final_states, CHUNK_SIZE, BLOCK_P, BLOCK_N,
                False)


@ct.kernel
def simple_stub(x, B, dt, dA_cumsum, chunk_states, final_states, CHUNK_SIZE: ct.Constant[int],
                BLOCK_P: ct.Constant[int], BLOCK_N: ct.Constant[int]):
    b, h = ct.bid(0), ct.bid(1)
    raise NotImplementedError("Exercise: write your code here")


@ct.kernel
def tiled_weight_from_start(x, B, dt, dA_cumsum, initial_states, chunk_states, final_states,
                            CHUNK_SIZE: ct.Constant[int], BLOCK_P: ct.Constant[int],
                            BLOCK_N: ct.Constant[int], HAS_INITIAL_STATES: ct.Constant[bool]):
    b, h, g, pt, nt, state = tiled_block_start(x, B, initial_states, BLOCK_P, BLOCK_N,
                                               HAS_INITIAL_STATES)
    for c in range(dA_cumsum.shape[2]):
        ct.store(chunk_states, (b, h, c, pt, nt), ct.reshape(state, (1, 1, 1, BLOCK_P, BLOCK_N)))
        dA, dt_c, dA_last = chunk_decay(dt, dA_cumsum, b, h, c, CHUNK_SIZE)
        x_c = ct.load(x, (b, c, h, pt), (1, CHUNK_SIZE, 1, BLOCK_P), padding_mode=ZERO)
        x_c = ct.reshape(x_c, (CHUNK_SIZE, BLOCK_P)).astype(ct.float32)
        B_c = ct.load(B, (b, c, g, nt), (1, CHUNK_SIZE, 1, BLOCK_N), padding_mode=ZERO)
        B_c = ct.reshape(B_c, (CHUNK_SIZE, BLOCK_N)).astype(ct.float32)
        x_w = x_c * (ct.exp(dA) * dt_c)
        outer = ct.reshape(x_w, (CHUNK_SIZE, BLOCK_P, 1)) * ct.reshape(B_c, (CHUNK_SIZE, 1, BLOCK_N))
        state = state * ct.exp(dA_last) + ct.sum(outer, axis=0)
    ct.store(final_states, (b, h, pt, nt), ct.reshape(state, (1, 1, BLOCK_P, BLOCK_N)))


@ct.kernel
def mma_no_decay(x, B, dt, dA_cumsum, initial_states, chunk_states, final_states,
                 CHUNK_SIZE: ct.Constant[int], BLOCK_P: ct.Constant[int],
                 BLOCK_N: ct.Constant[int], HAS_INITIAL_STATES: ct.Constant[bool]):
    b, h, g, pt, nt, state = tiled_block_start(x, B, initial_states, BLOCK_P, BLOCK_N,
                                               HAS_INITIAL_STATES)
    for c in range(dA_cumsum.shape[2]):
        ct.store(chunk_states, (b, h, c, pt, nt), ct.reshape(state, (1, 1, 1, BLOCK_P, BLOCK_N)))
        dA, dt_c, dA_last = chunk_decay(dt, dA_cumsum, b, h, c, CHUNK_SIZE)
        x_c = ct.reshape(ct.load(x, (b, c, h, pt), (1, CHUNK_SIZE, 1, BLOCK_P), padding_mode=ZERO),
                         (CHUNK_SIZE, BLOCK_P))
        B_c = ct.reshape(ct.load(B, (b, c, g, nt), (1, CHUNK_SIZE, 1, BLOCK_N), padding_mode=ZERO),
                         (CHUNK_SIZE, BLOCK_N))
        x_w = (x_c.astype(ct.float32) * (ct.exp(dA_last - dA) * dt_c)).astype(x.dtype)
        state = ct.mma(ct.transpose(x_w), B_c, state)
    ct.store(final_states, (b, h, pt, nt), ct.reshape(state, (1, 1, BLOCK_P, BLOCK_N)))


@ct.kernel
def tiled_stub(x, B, dt, dA_cumsum, initial_states, chunk_states, final_states,
               CHUNK_SIZE: ct.Constant[int], BLOCK_P: ct.Constant[int],
               BLOCK_N: ct.Constant[int], HAS_INITIAL_STATES: ct.Constant[bool]):
    raise NotImplementedError("Exercise: write your code here")


def test_simple_passes(capsys):
    assert check_fwd_pass_state_simple(simple, device="cpu")
    assert capsys.readouterr().out.count("✅") == 4


def test_storing_the_state_after_the_jump_fails(capsys):
    assert not check_fwd_pass_state_simple(simple_stores_after, device="cpu")
    out = capsys.readouterr().out
    assert "❌ fwd_pass_state_simple_kernel chunk_states, float32" in out
    assert "at [batch 0, head 0, chunk 0, channel 0, state 0]: got" in out and "expected 0.0" in out
    assert "store it before the update" in out


def test_simple_stub_says_not_implemented(capsys):
    assert not check_fwd_pass_state_simple(simple_stub, device="cpu")
    assert "⏳ fwd_pass_state_simple_kernel is not implemented yet" in capsys.readouterr().out


def test_tiled_and_mma_pass_with_the_package_kernel(capsys):
    assert check_fwd_pass_state_tiled(fwd_pass_state_kernel, device="cpu")
    assert check_fwd_pass_state_mma(fwd_pass_state_kernel, device="cpu")
    assert "❌" not in capsys.readouterr().out


def test_wrong_token_weight_fails(capsys):
    assert not check_fwd_pass_state_tiled(tiled_weight_from_start, device="cpu")
    out = capsys.readouterr().out
    assert "❌ fwd_pass_state_tiled_kernel chunk_states, float32" in out
    # chunk 0 is the zero state: still right
    assert "at [batch 0, head 0, chunk 1, channel 0, state 0]" in out
    assert "weight exp(dA_last - dA_i) * dt_i" in out


def test_missing_state_decay_fails(capsys):
    assert not check_fwd_pass_state_mma(mma_no_decay, device="cpu")
    out = capsys.readouterr().out
    assert "❌ fwd_pass_state_mma_kernel chunk_states, float16" in out
    assert "at [batch 0, head 0, chunk 2, " in out
    assert "multiply it by exp(dA_last)" in out


def test_tiled_and_mma_stubs_say_not_implemented(capsys):
    assert not check_fwd_pass_state_tiled(tiled_stub, device="cpu")
    assert not check_fwd_pass_state_mma(tiled_stub, device="cpu")
    out = capsys.readouterr().out
    assert "⏳ fwd_pass_state_tiled_kernel is not implemented yet" in out
    assert "⏳ fwd_pass_state_mma_kernel is not implemented yet" in out
