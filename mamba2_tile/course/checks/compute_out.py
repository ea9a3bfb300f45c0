"""Checks for notebook 07, the ``compute_out`` kernel (stage 3 of the chunked SSD).

The warm-up check tests a byte count; the two kernel checks launch the learner's ``@ct.kernel``
through :func:`mamba2_tile.dispatch.launch` on small seeded inputs (CPU tensors run on the tile
interpreter, CUDA tensors on the GPU), in awkward shapes (``seqlen`` not a multiple of the chunk
size, ``ngroups > 1``, ``headdim`` and ``dstate`` that are not powers of two), compare ``y``
with :func:`mamba2_tile.reference.compute_out` and, on a mismatch, recompute ``y`` the usual
wrong ways to name the likely mistake.

The two kernels and their launches (the notebook defines them with these signatures)::

    compute_out_chunk_kernel(x, dt, dA_cumsum, B, C, chunk_states, D, y,
                             CHUNK_SIZE, HEADDIM, DSTATE)           grid (batch, nchunks, nheads)
    compute_out_mma_kernel(x, dt, dA_cumsum, B, C, chunk_states, D, z, y,
                           CHUNK_SIZE, BLOCK_P, DSTATE, HAS_Z)
                                    grid (batch * nchunks, nheads, cdiv(headdim, BLOCK_P))

``HEADDIM`` and ``DSTATE`` are ``headdim`` and ``dstate`` rounded up to powers of two; ``D`` has
shape ``(nheads,)``; ``z`` is a one-element placeholder when ``HAS_Z`` is False.
"""

import numpy as np
import torch

from mamba2_tile import dispatch, reference
from mamba2_tile.cost import interaction_matrix_bytes
from mamba2_tile.course.checks.feedback import (NOT_DONE, attempt, compare, compare_counts,
                                                 exercise, launch_exercise)
from mamba2_tile.kernels.launching import cdiv, next_power_of_2
from mamba2_tile.tolerances import GPU_TOLERANCES, TOLERANCES



# --------------------------------------------------------------------------------------------
# Warm-up: the size of the interaction matrices
# --------------------------------------------------------------------------------------------

_BYTES_CASES = [  # batch, seqlen, nheads, chunk_size, bytes_per_value
    (8, 8192, 64, 128, 4),
    (1, 100, 3, 64, 4),        # a partial last chunk
    (2, 1000, 5, 256, 2),
    (3, 257, 7, 64, 4),
]


def _bytes_hint(got):
    def matches(fn):
        return np.allclose(got, [fn(*case) for case in _BYTES_CASES])

    if matches(lambda b, l, h, s, v: b * h * (l // s) * s * s * v):
        return ("the last chunk is padded to a full chunk (the kernel computes it whole): "
                "use ceil(seqlen / chunk_size) chunks, not seqlen // chunk_size.")
    if matches(lambda b, l, h, s, v: b * h * l * s * v):
        return ("that is seqlen x chunk_size per head: the padded length is "
                "ceil(seqlen / chunk_size) * chunk_size.")
    if matches(lambda b, l, h, s, v: b * h * l * l * v):
        return ("that is one seqlen x seqlen matrix per head (the quadratic form); the chunked "
                "form has one chunk_size x chunk_size matrix per chunk.")
    return ("one (chunk_size x chunk_size) matrix per (batch, head, chunk), with "
            "ceil(seqlen / chunk_size) chunks, bytes_per_value bytes per entry.")


@exercise("07.1")
def check_interaction_matrix_bytes(fn):
    """Check ``interaction_matrix_bytes(batch, seqlen, nheads, chunk_size, bytes_per_value)``."""
    return compare_counts("interaction_matrix_bytes", fn, interaction_matrix_bytes,
                          _BYTES_CASES, hint=_bytes_hint)


# --------------------------------------------------------------------------------------------
# Inputs, the float64 answer, and the answers of the usual mistakes
# --------------------------------------------------------------------------------------------

def _np(t):
    return t.detach().to("cpu", torch.float64).numpy()



def _inputs(rng, batch, seqlen, nheads, headdim, ngroups, dstate, chunk_size, dtype, has_z,
            device):
    """Stage-3 inputs as the kernels get them: stage-1 outputs in float32, states in float32."""
    def tensor(shape, dtype=dtype, scale=1.0):
        return torch.tensor(rng.standard_normal(shape) * scale, dtype=dtype, device=device)

    dt = rng.uniform(0.05, 0.3, (batch, seqlen, nheads))
    A = -rng.uniform(0.3, 1.5, nheads)
    dA_cumsum, dt_chunks = reference.chunk_cumsum(dt, A, chunk_size)
    nchunks = dA_cumsum.shape[2]
    return dict(
        x=tensor((batch, seqlen, nheads, headdim)),
        dt=torch.tensor(dt_chunks, dtype=torch.float32, device=device),
        dA_cumsum=torch.tensor(dA_cumsum, dtype=torch.float32, device=device),
        B=tensor((batch, seqlen, ngroups, dstate), scale=0.5),
        C=tensor((batch, seqlen, ngroups, dstate), scale=0.5),
        chunk_states=tensor((batch, nheads, nchunks, headdim, dstate), torch.float32, 0.5),
        D=tensor((nheads,), torch.float32),
        z=tensor((batch, seqlen, nheads, headdim)) if has_z else None,
    )


def _chunked(t, chunk_size):
    """(b, l, ...) -> (b, c, s, ...), zero-padded along l."""
    pad = [(0, 0)] * t.ndim
    pad[1] = (0, -t.shape[1] % chunk_size)
    t = np.pad(t, pad)
    return t.reshape(t.shape[0], -1, chunk_size, *t.shape[2:])


def stage3_variant(x, dt, dA_cumsum, B, C, chunk_states, D=None, z=None, *, inter=True,
                   inter_decay=True, inter_exp=True, intra=True, mask="causal", decay=True,
                   decay_exp=True, dt_weight=True, clamp=True, skip=True, gate=True,
                   groups="h // heads_per_group"):
    """``compute_out`` in float64, with switches that reproduce the usual mistakes.

    With every switch at its default this equals :func:`mamba2_tile.reference.compute_out`.
    ``mask`` is "causal", "strict" (j < i, the diagonal left out), "transposed" or "none";
    ``inter_exp`` / ``decay_exp`` False use the exponent itself where its ``exp`` belongs; ``clamp`` takes ``exp(min(dA_i - dA_j, 0))``
    (as the notebook's kernels do, which matters only where the mask is wrong); ``groups`` is
    "h // heads_per_group" or "h % ngroups".
    """
    batch, seqlen, nheads, headdim = x.shape
    ngroups, chunk_size = B.shape[2], dA_cumsum.shape[-1]
    heads = np.arange(nheads)
    group = heads // (nheads // ngroups) if groups == "h // heads_per_group" else heads % ngroups
    xc = _chunked(x, chunk_size)                                      # (b, c, s, h, p)
    Bc, Cc = _chunked(B[:, :, group], chunk_size), _chunked(C[:, :, group], chunk_size)
    y = np.zeros_like(xc)
    if inter:
        y_inter = np.einsum("bcihn,bhcpn->bcihp", Cc, chunk_states)
        if inter_decay:
            growth = np.exp(dA_cumsum) if inter_exp else dA_cumsum
            y_inter *= growth.transpose(0, 2, 3, 1)[..., None]
        y += y_inter
    if intra:
        lower = np.tril(np.ones((chunk_size, chunk_size), dtype=bool))
        keep = {"causal": lower, "strict": np.tril(lower, k=-1), "transposed": lower.T,
                "none": np.ones_like(lower)}[mask]
        diff = dA_cumsum[..., :, None] - dA_cumsum[..., None, :] if decay else 0.0 * lower
        if clamp:
            diff = np.minimum(diff, 0.0)
        with np.errstate(over="ignore"):
            kept = np.where(keep, diff, 0.0)
            weights = np.where(keep, np.exp(kept) if decay_exp else kept, 0.0)  # (b, h, c, i, j)
        scores = np.einsum("bcihn,bcjhn->bhcij", Cc, Bc) * weights
        w = dt if dt_weight else np.ones_like(dt)
        y += np.einsum("bhcij,bhcj,bcjhp->bcihp", scores, w, xc)
    y = y.reshape(batch, -1, nheads, headdim)[:, :seqlen]
    if skip and D is not None:
        y = y + x * D[:, None]
    if gate and z is not None:
        y = y * z / (1.0 + np.exp(-z))
    return y


_MISTAKES = [  # (switches, hint)
    (dict(inter=False), "the inter-chunk term is missing: add exp(dA_i) * (C_i · h_enter), "
                        "the state entering the chunk read out by C."),
    (dict(inter_decay=False), "the inter-chunk term is not decayed: multiply C h_enter at row i "
                              "by exp(dA_cumsum[i])."),
    (dict(intra=False), "the intra-chunk term is missing: add (L ∘ C Bᵀ)(dt·x) over the chunk."),
    (dict(mask="none"), "the causal mask is missing: position i may only read positions j <= i "
                        "(keep scores where row >= column, 0 elsewhere)."),
    (dict(mask="none", clamp=False), "the causal mask is missing: position i may only read "
                                     "positions j <= i (keep scores where row >= column)."),
    (dict(mask="strict"), "the causal mask leaves out the diagonal: position i reads its own "
                          "input too, so keep row >= column, not row > column."),
    (dict(inter_exp=False), "the inter-chunk decay is dA_cumsum[i] itself, not its "
                            "exponential: multiply C h_enter at row i by exp(dA_cumsum[i])."),
    (dict(decay_exp=False), "the intra-chunk decay is the exponent without its exp: multiply "
                            "score (i, j) by exp(min(dA_cumsum[i] - dA_cumsum[j], 0))."),
    (dict(mask="transposed"), "the causal mask is transposed: rows are outputs i, columns inputs "
                              "j; keep the entries with i >= j."),
    (dict(decay=False), "the intra-chunk decay is missing: multiply score (i, j) by "
                        "exp(dA_cumsum[i] - dA_cumsum[j])."),
    (dict(dt_weight=False), "each input position j must be weighted by its step dt[j]: the "
                            "values are dt·x, not x."),
    (dict(skip=False), "the skip connection is missing: add D[h] * x."),
    (dict(gate=False), "the gate is missing: when HAS_Z, multiply y by silu(z) = z * sigmoid(z)."),
    (dict(groups="h % ngroups"), "heads read the wrong group of B and C: head h reads group "
                                 "h // (nheads // ngroups), so neighbouring heads share one."),
]


def _hint(got, args, tolerance):
    got = _np(got)
    if np.isnan(got).any():
        return ("some outputs were never stored (still NaN): every block must store its whole "
                "tile of y, at the chunk's tile index along seqlen.")
    expected = stage3_variant(*args)
    scale = float(np.sqrt(np.mean(expected ** 2)))
    for switches, hint in _MISTAKES:
        candidate = stage3_variant(*args, **switches)
        if (not np.allclose(candidate, expected, rtol=tolerance, atol=tolerance * scale)
                and np.allclose(got, candidate, rtol=tolerance, atol=tolerance * scale)):
            return hint
    return ("y_i = exp(dA_i) C_i·h_enter + sum_{j<=i} exp(dA_i - dA_j) (C_i·B_j) dt_j x_j "
            "+ D x_i; compare your kernel with reference.compute_out on one chunk.")


def _tolerance(dtype, device):
    return (GPU_TOLERANCES if str(device).startswith("cuda") else TOLERANCES)[dtype]


def _run(name, kernel, cases, make_launch, device):
    """Launch ``kernel`` on each case, compare y; stop at the first failure."""
    device = device or dispatch.default_device()
    rng = np.random.default_rng(70)
    for case in cases:
        batch, seqlen, nheads, headdim, ngroups, dstate, chunk_size, dtype, has_z = case
        t = _inputs(rng, batch, seqlen, nheads, headdim, ngroups, dstate, chunk_size, dtype,
                    has_z, device)
        y = torch.full_like(t["x"], float("nan"))
        grid, args = make_launch(t, y, chunk_size)
        if attempt(name, launch_exercise, grid, kernel, args) is NOT_DONE:
            return False
        ref_args = [None if t[k] is None else _np(t[k])
                    for k in ("x", "dt", "dA_cumsum", "B", "C", "chunk_states", "D", "z")]
        expected = stage3_variant(*ref_args)
        tolerance = _tolerance(dtype, device)
        scale = float(np.sqrt(np.mean(expected ** 2)))
        label = (f"{name}, seqlen={seqlen} nheads={nheads} ngroups={ngroups} headdim={headdim} "
                 f"dstate={dstate} chunk_size={chunk_size} dtype={str(dtype)[6:]}"
                 + (" with z" if has_z else ""))
        if not compare(label, y, expected, rtol=tolerance, atol=tolerance * scale,
                       hint=_hint(y, ref_args, tolerance),
                       axes=("batch", "token", "head", "channel"),
                       picture=("token", ("head", "channel"))):
            return False
    return True


@exercise("07.2")
def check_compute_out_chunk(kernel, device=None):
    """One block per (batch, chunk, head), everything by broadcasting and ``ct.sum``.

    ``kernel(x, dt, dA_cumsum, B, C, chunk_states, D, y, CHUNK_SIZE, HEADDIM, DSTATE)`` on the
    grid ``(batch, nchunks, nheads)``.
    """
    def make_launch(t, y, chunk_size):
        batch, _, nheads, headdim = t["x"].shape
        nchunks = t["dA_cumsum"].shape[2]
        args = (t["x"], t["dt"], t["dA_cumsum"], t["B"], t["C"], t["chunk_states"], t["D"], y,
                chunk_size, next_power_of_2(headdim), next_power_of_2(t["B"].shape[3]))
        return (batch, nchunks, nheads), args

    cases = [  # batch, seqlen, nheads, headdim, ngroups, dstate, chunk_size, dtype, has_z
        (1, 40, 2, 8, 1, 8, 16, torch.float32, False),
        (2, 75, 4, 6, 2, 12, 32, torch.float32, False),
    ]
    return _run("compute_out_chunk_kernel", kernel, cases, make_launch, device)


@exercise("07.3")
def check_compute_out_mma(kernel, device=None, block_p=16):
    """Tensor cores, one block per (batch, chunk, head, headdim tile).

    ``kernel(x, dt, dA_cumsum, B, C, chunk_states, D, z, y, CHUNK_SIZE, BLOCK_P, DSTATE, HAS_Z)``
    on the grid ``(batch * nchunks, nheads, cdiv(headdim, BLOCK_P))``.
    """
    def make_launch(t, y, chunk_size):
        batch, _, nheads, headdim = t["x"].shape
        nchunks = t["dA_cumsum"].shape[2]
        has_z = t["z"] is not None
        z = t["z"] if has_z else t["x"].new_zeros(1)
        args = (t["x"], t["dt"], t["dA_cumsum"], t["B"], t["C"], t["chunk_states"], t["D"], z, y,
                chunk_size, block_p, next_power_of_2(t["B"].shape[3]), has_z)
        return (batch * nchunks, nheads, cdiv(headdim, block_p)), args

    cases = [  # batch, seqlen, nheads, headdim, ngroups, dstate, chunk_size, dtype, has_z
        (1, 100, 2, 32, 1, 16, 64, torch.float32, False),
        (2, 150, 4, 24, 2, 12, 64, torch.float32, True),
        (1, 200, 2, 16, 1, 32, 128, torch.bfloat16, True),
    ]
    return _run("compute_out_mma_kernel", kernel, cases, make_launch, device)
