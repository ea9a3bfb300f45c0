"""The notebook-05 checks: a correct kernel passes, a plausible buggy one fails and the message
names the differing positions and the likely cause, the exercise stub prints the friendly line.

cuTile (and the interpreter) read a kernel's source, so the kernels are defined here at module
level; they run on the CPU tile interpreter.
"""

from mamba2_tile.course.checks.chunk_cumsum import (check_chunk_cumsum, check_chunk_cumsum_heads,
                                             check_chunk_cumsum_per_head)
from mamba2_tile.course.checks.feedback import kernel_is_stub
from mamba2_tile.kernels.chunk_cumsum import chunk_cumsum_kernel
from mamba2_tile.tile import ct

ZERO = ct.PaddingMode.ZERO


@ct.kernel
def per_head(dt, A, dA_cumsum, dt_out, CHUNK_SIZE: ct.Constant[int]):
    b, c, h = ct.bid(0), ct.bid(1), ct.bid(2)
    dt_c = ct.load(dt, (b, c, h), (1, CHUNK_SIZE, 1), padding_mode=ZERO)
    dt_c = ct.reshape(dt_c, (CHUNK_SIZE,)).astype(ct.float32)
    A_h = ct.load(A, (h,), (1,)).astype(ct.float32)
    ct.store(dA_cumsum, (b, h, c, 0), ct.reshape(ct.cumsum(dt_c * A_h, axis=0), (1, 1, 1, CHUNK_SIZE)))
    ct.store(dt_out, (b, h, c, 0), ct.reshape(dt_c, (1, 1, 1, CHUNK_SIZE)))


@ct.kernel
def per_head_no_padding(dt, A, dA_cumsum, dt_out, CHUNK_SIZE: ct.Constant[int]):
    b, c, h = ct.bid(0), ct.bid(1), ct.bid(2)
    dt_c = ct.load(dt, (b, c, h), (1, CHUNK_SIZE, 1))
    dt_c = ct.reshape(dt_c, (CHUNK_SIZE,)).astype(ct.float32)
    A_h = ct.load(A, (h,), (1,)).astype(ct.float32)
    ct.store(dA_cumsum, (b, h, c, 0), ct.reshape(ct.cumsum(dt_c * A_h, axis=0), (1, 1, 1, CHUNK_SIZE)))
    ct.store(dt_out, (b, h, c, 0), ct.reshape(dt_c, (1, 1, 1, CHUNK_SIZE)))


@ct.kernel
def per_head_exclusive(dt, A, dA_cumsum, dt_out, CHUNK_SIZE: ct.Constant[int]):
    b, c, h = ct.bid(0), ct.bid(1), ct.bid(2)
    dt_c = ct.load(dt, (b, c, h), (1, CHUNK_SIZE, 1), padding_mode=ZERO)
    dt_c = ct.reshape(dt_c, (CHUNK_SIZE,)).astype(ct.float32)
    A_h = ct.load(A, (h,), (1,)).astype(ct.float32)
    dA = ct.cumsum(dt_c * A_h, axis=0) - dt_c * A_h
    ct.store(dA_cumsum, (b, h, c, 0), ct.reshape(dA, (1, 1, 1, CHUNK_SIZE)))
    ct.store(dt_out, (b, h, c, 0), ct.reshape(dt_c, (1, 1, 1, CHUNK_SIZE)))


@ct.kernel
def per_head_stub(dt, A, dA_cumsum, dt_out, CHUNK_SIZE: ct.Constant[int]):
    b, c, h = ct.bid(0), ct.bid(1), ct.bid(2)
    raise NotImplementedError("Exercise: write your code here")


@ct.function
def heads_body(dt, A, dA_cumsum, dt_out, CHUNK_SIZE, BLOCK_H, SUM_AXIS):
    """One (batch, chunk, head block) block; ``SUM_AXIS=1`` is the learner's bug of summing
    across the heads instead of along the chunk (axis 0)."""
    b, c, hb = ct.bid(0), ct.bid(1), ct.bid(2)
    dt_c = ct.load(dt, (b, c, hb), (1, CHUNK_SIZE, BLOCK_H), padding_mode=ZERO)
    dt_c = ct.reshape(dt_c, (CHUNK_SIZE, BLOCK_H)).astype(ct.float32)
    A_h = ct.load(A, (hb,), (BLOCK_H,), padding_mode=ZERO).astype(ct.float32)
    dA = ct.cumsum(dt_c * ct.reshape(A_h, (1, BLOCK_H)), axis=SUM_AXIS)
    ct.store(dA_cumsum, (b, hb, c, 0), ct.reshape(ct.transpose(dA), (1, BLOCK_H, 1, CHUNK_SIZE)))
    ct.store(dt_out, (b, hb, c, 0), ct.reshape(ct.transpose(dt_c), (1, BLOCK_H, 1, CHUNK_SIZE)))


@ct.kernel
def heads(dt, A, dA_cumsum, dt_out, CHUNK_SIZE: ct.Constant[int], BLOCK_H: ct.Constant[int]):
    heads_body(dt, A, dA_cumsum, dt_out, CHUNK_SIZE, BLOCK_H, 0)


@ct.kernel
def heads_wrong_axis(dt, A, dA_cumsum, dt_out, CHUNK_SIZE: ct.Constant[int],
                     BLOCK_H: ct.Constant[int]):
    heads_body(dt, A, dA_cumsum, dt_out, CHUNK_SIZE, BLOCK_H, 1)


@ct.kernel
def heads_stub(dt, A, dA_cumsum, dt_out, CHUNK_SIZE: ct.Constant[int], BLOCK_H: ct.Constant[int]):
    raise NotImplementedError("Exercise: write your code here")


@ct.kernel
def full_no_remask(dt, A, dt_bias, dA_cumsum, dt_out,
                   CHUNK_SIZE: ct.Constant[int], BLOCK_H: ct.Constant[int],
                   HAS_DT_BIAS: ct.Constant[bool], DT_SOFTPLUS: ct.Constant[bool],
                   DT_MIN: ct.Constant[float], DT_MAX: ct.Constant[float]):
    b, c, hb = ct.bid(0), ct.bid(1), ct.bid(2)
    dt_c = ct.load(dt, (b, c, hb), (1, CHUNK_SIZE, BLOCK_H), padding_mode=ZERO)
    dt_c = ct.reshape(dt_c, (CHUNK_SIZE, BLOCK_H)).astype(ct.float32)
    if HAS_DT_BIAS:
        bias = ct.load(dt_bias, (hb,), (BLOCK_H,), padding_mode=ZERO).astype(ct.float32)
        dt_c = dt_c + ct.reshape(bias, (1, BLOCK_H))
    if DT_SOFTPLUS:
        dt_c = ct.where(dt_c <= 20.0, ct.log(1.0 + ct.exp(dt_c)), dt_c)
    dt_c = ct.minimum(ct.maximum(dt_c, DT_MIN), DT_MAX)
    A_h = ct.load(A, (hb,), (BLOCK_H,), padding_mode=ZERO).astype(ct.float32)
    dA = ct.cumsum(dt_c * ct.reshape(A_h, (1, BLOCK_H)), axis=0)
    ct.store(dA_cumsum, (b, hb, c, 0), ct.reshape(ct.transpose(dA), (1, BLOCK_H, 1, CHUNK_SIZE)))
    ct.store(dt_out, (b, hb, c, 0), ct.reshape(ct.transpose(dt_c), (1, BLOCK_H, 1, CHUNK_SIZE)))


@ct.kernel
def full_stub(dt, A, dt_bias, dA_cumsum, dt_out,
              CHUNK_SIZE: ct.Constant[int], BLOCK_H: ct.Constant[int],
              HAS_DT_BIAS: ct.Constant[bool], DT_SOFTPLUS: ct.Constant[bool],
              DT_MIN: ct.Constant[float], DT_MAX: ct.Constant[float]):
    b, c, hb = ct.bid(0), ct.bid(1), ct.bid(2)
    dt_c = ct.load(dt, (b, c, hb), (1, CHUNK_SIZE, BLOCK_H), padding_mode=ZERO)
    raise NotImplementedError("Exercise: write your code here")


def test_per_head_passes(capsys):
    assert check_chunk_cumsum_per_head(per_head, device="cpu")
    assert capsys.readouterr().out.count("✅") == 4


def test_missing_padding_fails_at_the_padded_positions(capsys):
    assert not check_chunk_cumsum_per_head(per_head_no_padding, device="cpu")
    out = capsys.readouterr().out
    assert "❌ chunk_cumsum_head_kernel dt_out, seqlen=37" in out
    assert "at [batch 0, head 0, chunk 2, position in chunk 5]: got nan, expected 0.0" in out      # 37 = 2 * 16 + 5
    assert "padding_mode=ct.PaddingMode.ZERO" in out


def test_exclusive_scan_fails_with_its_hint(capsys):
    assert not check_chunk_cumsum_per_head(per_head_exclusive, device="cpu")
    out = capsys.readouterr().out
    assert "❌ chunk_cumsum_head_kernel dA_cumsum" in out and "at [batch 0, head 0, chunk 0, position in chunk 0]" in out
    assert "exclusive" in out


def test_per_head_stub_says_not_implemented(capsys):
    assert kernel_is_stub(per_head_stub) and not kernel_is_stub(per_head)
    assert not check_chunk_cumsum_per_head(per_head_stub, device="cpu")
    assert "⏳ chunk_cumsum_head_kernel is not implemented yet" in capsys.readouterr().out


def test_heads_passes_and_scan_across_heads_fails(capsys):
    assert check_chunk_cumsum_heads(heads, device="cpu")
    assert not check_chunk_cumsum_heads(heads_wrong_axis, device="cpu")
    out = capsys.readouterr().out
    assert "❌ chunk_cumsum_heads_kernel dA_cumsum" in out and "at [batch 0, head 0, chunk 0, position in chunk 1]" in out
    assert "the sum ran across heads" in out


def test_heads_stub_says_not_implemented(capsys):
    assert not check_chunk_cumsum_heads(heads_stub, device="cpu")
    assert "⏳ chunk_cumsum_heads_kernel is not implemented yet" in capsys.readouterr().out


def test_full_passes_with_the_package_kernel(capsys):
    assert check_chunk_cumsum(chunk_cumsum_kernel, device="cpu")
    assert "❌" not in capsys.readouterr().out


def test_padding_not_zeroed_after_softplus_fails(capsys):
    assert not check_chunk_cumsum(full_no_remask, device="cpu")
    out = capsys.readouterr().out
    assert "❌ chunk_cumsum_kernel dt_out, seqlen=45" in out
    assert "at [batch 0, head 0, chunk 1, position in chunk 13]" in out                               # 45 = 32 + 13
    assert "past seqlen must end with dt = 0" in out


def test_full_stub_says_not_implemented(capsys):
    assert not check_chunk_cumsum(full_stub, device="cpu")
    assert "⏳ chunk_cumsum_kernel is not implemented yet" in capsys.readouterr().out
