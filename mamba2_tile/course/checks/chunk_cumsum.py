"""Checks for notebook 05, the ``chunk_cumsum`` kernel (stage 1 of the chunked SSD).

Each check launches the learner's ``@ct.kernel`` through :func:`mamba2_tile.dispatch.launch` on
small seeded inputs (CPU tensors run on the tile interpreter, CUDA tensors on the GPU), in shapes
chosen to be awkward: ``seqlen`` not a multiple of the chunk size, ``nheads`` not a multiple of
the head block. It compares both outputs with :func:`mamba2_tile.reference.chunk_cumsum` and, on
a mismatch, names the likely mistake.

Three kernels, three signatures (the notebook defines them in this order)::

    chunk_cumsum_head_kernel(dt, A, dA_cumsum, dt_out, CHUNK_SIZE)                 grid (b, c, h)
    chunk_cumsum_heads_kernel(dt, A, dA_cumsum, dt_out, CHUNK_SIZE, BLOCK_H)       grid (b, c, h / BLOCK_H)
    chunk_cumsum_kernel(dt, A, dt_bias, dA_cumsum, dt_out, CHUNK_SIZE, BLOCK_H,
                        HAS_DT_BIAS, DT_SOFTPLUS, DT_MIN, DT_MAX)                  grid (b, c, h / BLOCK_H)

the last one with the signature of the package's own kernel.
"""


import numpy as np
import torch

from mamba2_tile import dispatch, reference
from mamba2_tile.course.checks.feedback import (NOT_DONE, attempt, compare, exercise,
                                                 launch_exercise)
from mamba2_tile.kernels.launching import cdiv

# Stage 1 computes in float32 from inputs exactly representable in float32, whatever their
# dtype: float32 rounding is all that separates a correct kernel from the float64 reference.
TOLERANCE = 1e-5



def _device(device):
    return device or dispatch.default_device()


def _outputs(batch, nheads, nchunks, chunk_size, device):
    """Outputs filled with NaN, so a position the kernel never stores shows up as NaN."""
    shape = (batch, nheads, nchunks, chunk_size)
    return (torch.full(shape, float("nan"), device=device),
            torch.full(shape, float("nan"), device=device))


def _inputs(rng, batch, seqlen, nheads, dtype, device):
    dt = torch.tensor(rng.uniform(0.05, 0.5, (batch, seqlen, nheads)), dtype=dtype, device=device)
    A = torch.tensor(-rng.uniform(0.5, 2.0, nheads), dtype=torch.float32, device=device)
    return dt, A


def _np(t):
    return t.detach().to("cpu", torch.float64).numpy()


def _tolerances(expected):
    """Relative tolerance, plus an absolute one at the scale of the values (near-zero sums)."""
    scale = float(np.sqrt(np.mean(expected ** 2))) if expected.size else 0.0
    return dict(rtol=TOLERANCE, atol=TOLERANCE * max(scale, 1.0))


def _close(got, candidate):
    return got.shape == candidate.shape and np.allclose(got, candidate, rtol=1e-4, atol=1e-4)


def _terms(dt_chunks, A):
    """dt * A in the output layout (batch, head, chunk, position)."""
    return dt_chunks * A[None, :, None, None]


# Exercise 1's catalogue (and every kernel's dA_cumsum): (what a mistake stores, from the
# padded dt in the output layout and A, the diagnosis). The first match names the mistake;
# the general rules in _dA_hint follow.
DA_CUMSUM_MISTAKES = [
    (lambda dt_chunks, A: np.cumsum(dt_chunks, axis=-1),
     "that is the running sum of dt alone: multiply each dt by its head's A first."),
    (lambda dt_chunks, A: np.cumsum(_terms(dt_chunks, A), axis=-1) - _terms(dt_chunks, A),
     "the sum is exclusive (shifted by one): dA_cumsum[i] includes position i "
     "itself, which is what ct.cumsum computes."),
    (lambda dt_chunks, A: _terms(dt_chunks, A),
     "those are the terms dt*A, not their running sum: apply ct.cumsum along the chunk."),
    (lambda dt_chunks, A: np.cumsum(_terms(dt_chunks, A), axis=1),
     "the sum ran across heads: in the (CHUNK_SIZE, BLOCK_H) tile the chunk is "
     "axis 0, so scan with ct.cumsum(tile, axis=0)."),
    (lambda dt_chunks, A: np.cumsum(dt_chunks * A[0], axis=-1),
     "every head used A[0]: load A at this block's head index."),
]


def _dA_hint(got, dt, A, seqlen):
    """Name the most likely mistake in ``dA_cumsum`` by recomputing it the wrong ways."""
    got = np.nan_to_num(_np(got), nan=1e30)
    dt_chunks = reference.chunk_cumsum(dt, np.zeros_like(A), got.shape[-1])[1]  # padded, (b,h,c,s)
    for wrong_answer, hint in DA_CUMSUM_MISTAKES:
        if _close(got, wrong_answer(dt_chunks, A)):
            return hint
    inclusive = np.cumsum(_terms(dt_chunks, A), axis=-1)
    padded = np.arange(got.shape[2] * got.shape[3]).reshape(got.shape[2:]) >= seqlen
    wrong = ~np.isclose(got, inclusive, rtol=1e-4, atol=1e-4)
    if wrong.any() and np.broadcast_to(padded, got.shape)[wrong].all():
        return ("only positions past seqlen differ: load dt with padding_mode="
                "ct.PaddingMode.ZERO so that the missing tail of the last chunk reads as 0.")
    if np.any(got >= 1e29):
        return ("some positions were never stored (still NaN): store the whole "
                "(chunk_size,) result at index (b, h, c, 0) with shape (1, 1, 1, CHUNK_SIZE).")
    return ("dA_cumsum[b, h, c, i] = dt[c*chunk+0]*A[h] + ... + dt[c*chunk+i]*A[h]: the sum "
            "restarts at every chunk.")


def _dt_hint(got, seqlen):
    got = _np(got)
    flat = got.reshape(*got.shape[:2], -1)
    inside, tail = flat[..., :seqlen], flat[..., seqlen:]
    if np.isnan(inside).any():
        return ("some positions were never stored (still NaN): store dt_out with the same "
                "index and shape as dA_cumsum.")
    if tail.size and np.any(np.isnan(tail) | (tail != 0)):
        return ("positions past seqlen must hold dt = 0, but the load read past the end of dt "
                "(undefined values; NaN on the interpreter): load with "
                "padding_mode=ct.PaddingMode.ZERO.")
    return ("dt_out[b, h, c, i] is dt[b, c*chunk_size + i, h] (after the optional bias, softplus "
            "and clamp), stored in the chunk layout (batch, nheads, nchunks, chunk_size).")


def _stored_without_transpose(expected, block_h):
    """What a kernel stores when it reshapes its (CHUNK_SIZE, BLOCK_H) tile straight into the
    (1, BLOCK_H, 1, CHUNK_SIZE) output block: reshape keeps the element order, so each block's
    row-major (chunk, head) values land in (head, chunk) order. None when the heads do not fill
    whole blocks (the partial block's stored values are then cut and cannot be rebuilt)."""
    batch, nheads, nchunks, chunk = expected.shape
    if nheads % block_h:
        return None
    blocks = expected.reshape(batch, nheads // block_h, block_h, nchunks, chunk)
    tiles = blocks.transpose(0, 1, 3, 4, 2)                      # (b, hb, c, chunk, head)
    stored = tiles.reshape(batch, nheads // block_h, nchunks, block_h, chunk)
    return stored.transpose(0, 1, 3, 2, 4).reshape(expected.shape)


TRANSPOSE_HINT = ("the values are stored in the wrong order: the tile is (CHUNK_SIZE, BLOCK_H) "
                  "but the output block is (1, BLOCK_H, 1, CHUNK_SIZE), and ct.reshape keeps "
                  "the element order; ct.transpose the tile before reshaping it for the store.")


# Exercise 2's catalogue, for either output: (what a mistake stores, from the right output and
# BLOCK_H, or None where it cannot be rebuilt; the diagnosis). Where nothing matches, the
# output's own diagnosis (_dA_hint or _dt_hint) is given.
HEADS_MISTAKES = [
    (_stored_without_transpose, TRANSPOSE_HINT),
]

_UNWRITTEN_HEADS_HINT = ("heads from BLOCK_H on were never written: block hb owns heads "
                         "hb*BLOCK_H ... hb*BLOCK_H + BLOCK_H - 1, so load and store at tile "
                         "index hb.")


def _heads_hint(got, expected, block_h):
    """The diagnosis of a block-of-heads output, or None to fall back on the output's own."""
    for wrong_answer, hint in HEADS_MISTAKES:
        candidate = wrong_answer(expected, block_h)
        if candidate is not None and _close(got, candidate):
            return hint
    if got.shape == expected.shape and np.isnan(got[:, block_h:]).any():
        return _UNWRITTEN_HEADS_HINT
    return None


# The layout of dA_cumsum and dt_out, named for the learner; the picture of an error lays the
# tokens (chunk after chunk) out along x, one row per head.
CHUNK_AXES = ("batch", "head", "chunk", "position in chunk")
CHUNK_PICTURE = ("head", ("chunk", "position in chunk"))


def _report(name, label, got_dA, got_dt, expected, dt, A, seqlen, dA_hint=None, dt_hint=None):
    exp_dA, exp_dt = expected
    if not compare(f"{name} dt_out, {label}", got_dt, exp_dt, **_tolerances(exp_dt),
                   hint=dt_hint or _dt_hint(got_dt, seqlen), axes=CHUNK_AXES,
                   picture=CHUNK_PICTURE):
        return False
    return compare(f"{name} dA_cumsum, {label}", got_dA, exp_dA, **_tolerances(exp_dA),
                   hint=dA_hint or _dA_hint(got_dA, dt, A, seqlen), axes=CHUNK_AXES,
                   picture=CHUNK_PICTURE)


@exercise("05.1")
def check_chunk_cumsum_per_head(kernel, device=None):
    """One block per (batch, chunk, head): ``kernel(dt, A, dA_cumsum, dt_out, CHUNK_SIZE)``."""
    name = "chunk_cumsum_head_kernel"
    device = _device(device)
    rng = np.random.default_rng(50)
    for batch, seqlen, nheads, chunk_size, dtype in [(1, 32, 2, 16, torch.float32),
                                                    (2, 37, 3, 16, torch.float16)]:
        dt, A = _inputs(rng, batch, seqlen, nheads, dtype, device)
        nchunks = cdiv(seqlen, chunk_size)
        dA_cumsum, dt_out = _outputs(batch, nheads, nchunks, chunk_size, device)
        done = attempt(name, launch_exercise, (batch, nchunks, nheads), kernel,
                       (dt, A, dA_cumsum, dt_out, chunk_size))
        if done is NOT_DONE:
            return False
        expected = reference.chunk_cumsum(_np(dt), _np(A), chunk_size)
        label = f"seqlen={seqlen} chunk_size={chunk_size} dtype={str(dtype)[6:]}"
        if not _report(name, label, dA_cumsum, dt_out, expected, _np(dt), _np(A), seqlen):
            return False
    return True


@exercise("05.2")
def check_chunk_cumsum_heads(kernel, device=None):
    """A block of heads per block: ``kernel(dt, A, dA_cumsum, dt_out, CHUNK_SIZE, BLOCK_H)``."""
    name = "chunk_cumsum_heads_kernel"
    device = _device(device)
    rng = np.random.default_rng(51)
    for batch, seqlen, nheads, chunk_size, block_h in [(1, 40, 4, 16, 4), (2, 45, 6, 32, 4)]:
        dt, A = _inputs(rng, batch, seqlen, nheads, torch.float32, device)
        nchunks = cdiv(seqlen, chunk_size)
        dA_cumsum, dt_out = _outputs(batch, nheads, nchunks, chunk_size, device)
        grid = (batch, nchunks, cdiv(nheads, block_h))
        done = attempt(name, launch_exercise, grid, kernel,
                       (dt, A, dA_cumsum, dt_out, chunk_size, block_h))
        if done is NOT_DONE:
            return False
        expected = reference.chunk_cumsum(_np(dt), _np(A), chunk_size)
        label = f"seqlen={seqlen} nheads={nheads} chunk_size={chunk_size} BLOCK_H={block_h}"
        if not _report(name, label, dA_cumsum, dt_out, expected, _np(dt), _np(A), seqlen,
                       dA_hint=_heads_hint(_np(dA_cumsum), expected[0], block_h),
                       dt_hint=_heads_hint(_np(dt_out), expected[1], block_h)):
            return False
    return True


def _softplus(v):
    return np.logaddexp(0.0, v)


# Exercise 3's catalogue: (the dt a mistake prepares, from the raw dt (b, l, h), dt_bias, the
# DT_SOFTPLUS flag and (DT_MIN, DT_MAX), or None where that mistake changes nothing; the
# diagnosis). The first match names the mistake.
FULL_DT_MISTAKES = [
    (lambda dt, bias, softplus, limit: np.clip(dt + bias, *limit) if softplus else None,
     "softplus is missing: when DT_SOFTPLUS, dt = log(1 + exp(dt))."),
    (lambda dt, bias, softplus, limit: np.clip(dt, *limit) if softplus else None,
     "softplus is missing: when DT_SOFTPLUS, dt = log(1 + exp(dt))."),
    (lambda dt, bias, softplus, limit: np.clip(_softplus(dt), *limit) + bias if softplus else None,
     "the bias comes first: softplus(dt + dt_bias), then the clamp."),
    (lambda dt, bias, softplus, limit: _softplus(dt + bias) if softplus else dt + bias,
     "the clamp is missing: dt = min(max(dt, DT_MIN), DT_MAX)."),
    (lambda dt, bias, softplus, limit: np.clip(_softplus(dt) if softplus else dt, *limit),
     "dt_bias is missing: when HAS_DT_BIAS, add dt_bias[h] to every dt of head h first."),
]


def _full_hint(got_dt, dt, dt_bias, softplus, limit, seqlen):
    """What went wrong in the dt preparation (bias -> softplus -> clamp -> zero past seqlen)."""
    got = _np(got_dt)
    flat = got.transpose(0, 2, 3, 1).reshape(got.shape[0], -1, got.shape[1])   # (b, c*s, h)
    inside, tail = flat[:, :seqlen], flat[:, seqlen:]
    # Checked first: a wrong tail says nothing about how the real positions were prepared.
    if tail.size and np.any(tail != 0) and not np.isnan(tail).any():
        return ("positions past seqlen must end with dt = 0, *after* the bias, softplus and "
                "clamp (softplus(0 + bias) is not 0): mask them with ct.where on the position.")
    for wrong_answer, hint in FULL_DT_MISTAKES:
        candidate = wrong_answer(dt, dt_bias, softplus, limit)
        if candidate is not None and _close(inside, candidate):
            return hint
    return ("dt = min(max(softplus(dt + dt_bias), DT_MIN), DT_MAX), each step only when asked, "
            "then 0 past seqlen.")


@exercise("05.3")
def check_chunk_cumsum(kernel, device=None):
    """The full stage, with mamba_ssm's dt options, against the reference.

    ``kernel(dt, A, dt_bias, dA_cumsum, dt_out, CHUNK_SIZE, BLOCK_H, HAS_DT_BIAS, DT_SOFTPLUS,
    DT_MIN, DT_MAX)``, the signature of :mod:`mamba2_tile.kernels.chunk_cumsum`.
    """
    name = "chunk_cumsum_kernel"
    device = _device(device)
    rng = np.random.default_rng(52)
    cases = [  # (batch, seqlen, nheads, chunk_size, block_h, dtype, bias, softplus, dt_limit)
        (1, 32, 4, 16, 4, torch.float32, False, False, (0.0, float("inf"))),
        (2, 45, 6, 32, 4, torch.float32, True, True, (0.0, float("inf"))),
        (1, 21, 3, 16, 2, torch.bfloat16, True, True, (0.3, 0.9)),
    ]
    for batch, seqlen, nheads, chunk_size, block_h, dtype, bias, softplus, limit in cases:
        dt = torch.tensor(rng.uniform(-3.0, 1.0, (batch, seqlen, nheads)) if softplus
                          else rng.uniform(0.05, 0.5, (batch, seqlen, nheads)),
                          dtype=dtype, device=device)
        A = torch.tensor(-rng.uniform(0.5, 2.0, nheads), dtype=torch.float32, device=device)
        dt_bias = torch.tensor(rng.uniform(-0.5, 0.5, nheads), dtype=torch.float32, device=device)
        nchunks = cdiv(seqlen, chunk_size)
        dA_cumsum, dt_out = _outputs(batch, nheads, nchunks, chunk_size, device)
        grid = (batch, nchunks, cdiv(nheads, block_h))
        args = (dt, A, dt_bias if bias else torch.zeros(1, device=device), dA_cumsum, dt_out,
                chunk_size, block_h, bias, softplus, float(limit[0]), float(limit[1]))
        if attempt(name, launch_exercise, grid, kernel, args) is NOT_DONE:
            return False
        bias_np = _np(dt_bias) if bias else np.zeros(nheads)
        expected = reference.chunk_cumsum(_np(dt), _np(A), chunk_size,
                                          dt_bias=bias_np if bias else None,
                                          dt_softplus=softplus, dt_limit=limit)
        label = (f"seqlen={seqlen} nheads={nheads} dt_bias={bias} dt_softplus={softplus} "
                 f"dt_limit=({limit[0]:g}, {limit[1]:g})")
        dt_hint = _full_hint(dt_out, _np(dt), bias_np, softplus, limit, seqlen)
        dA_hint = ("dt_out is right but dA_cumsum is not: scan the *prepared* dt "
                   "(after bias, softplus, clamp and masking) times A.")
        if not _report(name, label, dA_cumsum, dt_out, expected, _np(dt), _np(A), seqlen,
                       dA_hint=dA_hint, dt_hint=dt_hint):
            return False
    return True
