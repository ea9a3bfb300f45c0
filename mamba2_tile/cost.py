"""How much arithmetic and memory traffic each way of computing SSD costs.

The same function can be computed three ways (recurrence, quadratic, chunked); this module
counts what each one does, so the notebooks can compare them and the benchmark can turn a
measured time into bandwidth and FLOP rates.

What is counted:

* **FLOPs**: every multiply, add, subtract and ``exp`` counts as one; a multiply-add is two, so
  an ``(m, k) @ (k, n)`` product is ``2 m k n``. Work on padded positions counts too (a kernel
  computes whole tiles), and so does the upper triangle of each ``chunk x chunk`` tile, which a
  kernel computes and then masks.
* **Bytes**: global-memory reads and writes, with each kernel program (one per batch, head and
  chunk) loading what it needs. Heads that share a group of ``B``/``C`` each load it, so ``B``
  and ``C`` are counted ``nheads`` times, not ``ngroups`` times; caches may absorb part of that,
  which makes these counts an upper bound for the stages. Inputs and ``y`` have
  ``dtype_bytes`` per element; the tensors passed between stages (``dA_cumsum``, ``dt``,
  ``chunk_states``, ``final_states``) have ``state_bytes`` (float32, as the kernels keep them).
  ``A`` and ``D`` (``nheads`` numbers each) are left out: they are negligible.

:func:`minimal_bytes` is the floor no implementation can beat: read ``x``, ``dt``, ``B`` and ``C``
once and write ``y`` once. Dividing it by a measured time gives the effective bandwidth.

The package can also run stages 2 and 3 as one kernel, which never writes the chunk states
(:func:`fused_state_out_cost`, :func:`forward_cost`, :func:`chunk_states_bytes`); the H200's
peak rates (:data:`H200_HBM_BANDWIDTH`, :data:`H200_BF16_DENSE_FLOPS`) turn counts into a
roofline (:func:`attainable_flops`).
"""

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Problem:
    """The sizes that determine the cost (names and meaning as in COURSE.md §2)."""

    batch: int
    seqlen: int
    nheads: int
    headdim: int
    dstate: int
    ngroups: int = 1
    chunk_size: int = 256
    dtype_bytes: int = 2
    state_bytes: int = 4

    @property
    def nchunks(self):
        return -(-self.seqlen // self.chunk_size)

    @property
    def padded_seqlen(self):
        """seqlen rounded up to whole chunks: the positions the chunked kernels compute."""
        return self.nchunks * self.chunk_size


@dataclass(frozen=True)
class Cost:
    flops: int
    bytes_read: int
    bytes_written: int

    @property
    def bytes(self):
        return self.bytes_read + self.bytes_written

    @property
    def intensity(self):
        """FLOPs per byte moved: compare with the GPU's FLOP rate / bandwidth (the roofline)."""
        return self.flops / self.bytes

    def __add__(self, other):
        return Cost(self.flops + other.flops, self.bytes_read + other.bytes_read,
                    self.bytes_written + other.bytes_written)


# The size of each tensor in elements. B and C per head: every head's program loads them.

def _x_elements(p):
    return p.batch * p.seqlen * p.nheads * p.headdim


def _dt_elements(p):
    return p.batch * p.seqlen * p.nheads


def _bc_elements_per_head(p):
    return p.batch * p.seqlen * p.nheads * p.dstate


def _chunk_vector_elements(p):
    """dA_cumsum or the chunked dt: (batch, nheads, nchunks, chunk_size)."""
    return p.batch * p.nheads * p.padded_seqlen


def _state_elements(p):
    return p.batch * p.nheads * p.headdim * p.dstate


def minimal_bytes(p):
    """Read x, dt, B and C once (B and C once per group) and write y once."""
    read = _x_elements(p) + _dt_elements(p) + 2 * p.batch * p.seqlen * p.ngroups * p.dstate
    return (read + _x_elements(p)) * p.dtype_bytes


# --------------------------------------------------------------------------------------------
# The three stages of the chunked algorithm
# --------------------------------------------------------------------------------------------

def chunk_cumsum_cost(p):
    """Stage 1: ``dA = dt * A`` and its running sum, one multiply and one add per position."""
    flops = 2 * _chunk_vector_elements(p)
    read = _dt_elements(p) * p.dtype_bytes
    written = 2 * _chunk_vector_elements(p) * p.state_bytes        # dA_cumsum and dt
    return Cost(flops, read, written)


def fwd_pass_state_cost(p):
    """Stage 2: per chunk, the jump ``h = exp(dA_last) h + sum_i w_i x_i ⊗ B_i``.

    Per (batch, head, chunk): the weights ``w_i = exp(dA_last - dA_i) * dt_i`` (3 per position),
    ``w_i * x_i`` (``s p``), the ``(p, s) @ (s, n)`` product (``2 s p n``), and the update
    ``exp(dA_last) * h + inflow`` (``1 + 2 p n``).
    """
    s, hp, n = p.chunk_size, p.headdim, p.dstate
    per_chunk = 3 * s + s * hp + 2 * s * hp * n + 1 + 2 * hp * n
    flops = p.batch * p.nheads * p.nchunks * per_chunk
    read = ((_x_elements(p) + _bc_elements_per_head(p)) * p.dtype_bytes
            + 2 * _chunk_vector_elements(p) * p.state_bytes)       # dt and dA_cumsum
    written = (p.nchunks + 1) * _state_elements(p) * p.state_bytes  # chunk_states, final_states
    return Cost(flops, read, written)


def compute_out_cost(p):
    """Stage 3: per chunk, ``y = exp(dA_i) C_i h_enter + (L ∘ C Bᵀ)(dt x) + D x``.

    Per (batch, head, chunk), with ``s = chunk_size``:
    inter-chunk ``C h`` (``2 s n p``), times ``exp(dA_i)`` (``s`` exps, ``s p`` multiplies);
    intra-chunk ``C Bᵀ`` (``2 s s n``), the decay ``exp(dA_i - dA_j)`` (``2 s s``), times the
    decay and times ``dt_j`` (``2 s s``), the ``(s, s) @ (s, p)`` product (``2 s s p``);
    then inter + intra (``s p``) and ``+ D x`` (``2 s p``).
    """
    s, hp, n = p.chunk_size, p.headdim, p.dstate
    inter = 2 * s * n * hp + s + s * hp
    intra = 2 * s * s * n + 2 * s * s + 2 * s * s + 2 * s * s * hp
    per_chunk = inter + intra + s * hp + 2 * s * hp
    flops = p.batch * p.nheads * p.nchunks * per_chunk
    read = ((_x_elements(p) + 2 * _bc_elements_per_head(p)) * p.dtype_bytes
            + (2 * _chunk_vector_elements(p) + p.nchunks * _state_elements(p)) * p.state_bytes)
    written = _x_elements(p) * p.dtype_bytes
    return Cost(flops, read, written)


def chunked_costs(p):
    """The three stages in order, by the names the package and the kernels use."""
    return {
        "chunk_cumsum": chunk_cumsum_cost(p),
        "fwd_pass_state": fwd_pass_state_cost(p),
        "compute_out": compute_out_cost(p),
    }


def chunked_cost(p):
    """All three stages together."""
    stages = list(chunked_costs(p).values())
    return sum(stages[1:], stages[0])


# --------------------------------------------------------------------------------------------
# The forward pass as the package runs it: three kernels, or stage 1 and stages 2+3 fused
# --------------------------------------------------------------------------------------------

def chunk_states_bytes(p, bytes_per_value=None):
    """What the chunk states cost the three-kernel pipeline: stage 2 writes the state entering
    every chunk, ``(headdim, dstate)`` per (batch, head, chunk), and stage 3 reads it back.

    ``bytes_per_value`` defaults to ``p.state_bytes`` (float32); 2 with ``low_precision_states``.
    """
    per_value = p.state_bytes if bytes_per_value is None else bytes_per_value
    return 2 * p.nchunks * _state_elements(p) * per_value


def fused_state_out_cost(p):
    """Stages 2 and 3 as one kernel (:mod:`mamba2_tile.kernels.fused_state_out`).

    The same arithmetic as the two stages (counted as their sum: the fused kernel folds the
    state update's ``p n`` adds into its ``mma``, a negligible difference), but the state stays
    in registers: it reads ``x``, ``B`` and ``C`` (per head), ``dt`` and ``dA_cumsum`` once and
    writes ``y`` and ``final_states``. No ``chunk_states`` at all, and ``x``, ``B``, ``dt`` and
    ``dA_cumsum`` are read once instead of twice.
    """
    flops = fwd_pass_state_cost(p).flops + compute_out_cost(p).flops
    read = ((_x_elements(p) + 2 * _bc_elements_per_head(p)) * p.dtype_bytes
            + 2 * _chunk_vector_elements(p) * p.state_bytes)
    written = _x_elements(p) * p.dtype_bytes + _state_elements(p) * p.state_bytes
    return Cost(flops, read, written)


def forward_cost(p, fused=False, states_bytes=None):
    """The whole forward pass: stage 1, then stages 2 and 3 as two kernels or (``fused``) one.

    ``states_bytes`` is the size of a ``chunk_states`` value on the three-kernel path (default
    ``p.state_bytes``, float32; the input's 2 bytes with ``low_precision_states``); the other
    intermediates stay float32. The FLOPs are the same for every path.
    """
    if fused:
        return chunk_cumsum_cost(p) + fused_state_out_cost(p)
    total = chunked_cost(p)
    saved = (chunk_states_bytes(p) - chunk_states_bytes(p, states_bytes)) // 2  # each way
    return Cost(total.flops, total.bytes_read - saved, total.bytes_written - saved)


# --------------------------------------------------------------------------------------------
# The GPU: an NVIDIA H200 SXM, and its roofline
# --------------------------------------------------------------------------------------------

# From NVIDIA's H200 datasheet (H200 SXM column): 4.8 TB/s of HBM3e bandwidth, and 1,979 TFLOP/s
# of BF16/FP16 tensor-core throughput quoted "with sparsity", i.e. about 989 TFLOP/s for dense
# products like the kernels' ct.mma. Peaks: a large device-to-device copy reaches about 90% of
# the bandwidth (the benchmark measures it in each run, ``copy_gbps``).
H200_HBM_BANDWIDTH = 4.8e12        # bytes/s
H200_BF16_DENSE_FLOPS = 989e12     # FLOP/s


def ridge_point(peak_flops=H200_BF16_DENSE_FLOPS, bandwidth=H200_HBM_BANDWIDTH):
    """The arithmetic intensity (FLOP/byte) where memory stops being the limit."""
    return peak_flops / bandwidth


def attainable_flops(intensity, peak_flops=H200_BF16_DENSE_FLOPS, bandwidth=H200_HBM_BANDWIDTH):
    """The roofline: the FLOP rate a kernel of this intensity can reach at most,
    ``min(peak_flops, intensity * bandwidth)`` (numbers or NumPy arrays)."""
    return np.minimum(peak_flops, np.asarray(intensity, dtype=float) * bandwidth)


# --------------------------------------------------------------------------------------------
# The two forms the chunked algorithm mixes, for comparison
# --------------------------------------------------------------------------------------------

def recurrent_cost(p):
    """One token at a time, the state kept on chip: each input read once, y written once.

    Per (batch, head, token): ``exp(dt A)`` (2), ``dt * x`` (``p``), decay the state (``p n``),
    add ``dt x ⊗ B`` (``2 p n``), ``y = h C`` (``2 p n``), ``+ D x`` (``2 p``).
    """
    hp, n = p.headdim, p.dstate
    flops = p.batch * p.nheads * p.seqlen * (2 + 3 * hp + 5 * hp * n)
    read = (_x_elements(p) + _dt_elements(p) + 2 * _bc_elements_per_head(p)) * p.dtype_bytes
    return Cost(flops, read, _x_elements(p) * p.dtype_bytes)


def quadratic_cost(p):
    """All tokens at once, with the ``seqlen x seqlen`` matrix ``L ∘ C Bᵀ`` written to memory.

    Per (batch, head), ``l = seqlen``: ``dt * A`` (``l``), the segment sums as a masked running
    sum and their ``exp``, everywhere, then masked (``2 l l``), ``C Bᵀ``
    (``2 l l n``), times ``L`` (``l l``), ``dt * x`` (``l p``), ``(l, l) @ (l, p)`` (``2 l l p``),
    ``+ D x`` (``2 l p``). The matrix is written once and read back once (``state_bytes`` each),
    like attention before FlashAttention; that term is what grows as seqlen².
    """
    l, hp, n = p.seqlen, p.headdim, p.dstate
    flops = p.batch * p.nheads * (l + 2 * l * l + 2 * l * l * n + l * l + l * hp
                                  + 2 * l * l * hp + 2 * l * hp)
    matrix = p.batch * p.nheads * l * l * p.state_bytes
    read = (_x_elements(p) + _dt_elements(p) + 2 * _bc_elements_per_head(p)) * p.dtype_bytes
    return Cost(flops, read + matrix, _x_elements(p) * p.dtype_bytes + matrix)


def _human(value, unit):
    for prefix in ("", "K", "M", "G", "T", "P"):
        if abs(value) < 1000:
            return f"{value:.3g} {prefix}{unit}"
        value /= 1000
    return f"{value:.3g} E{unit}"


def cost_table(p):
    """A text table: FLOPs, bytes and intensity per stage and per form, plus the floor."""
    rows = [(f"  {name}", cost) for name, cost in chunked_costs(p).items()]
    rows = ([("chunked (3 stages)", chunked_cost(p))] + rows
            + [("recurrent", recurrent_cost(p)), ("quadratic", quadratic_cost(p))])
    lines = [f"{'':20s} {'FLOPs':>12s} {'bytes':>12s} {'FLOP/byte':>10s}"]
    for name, cost in rows:
        lines.append(f"{name:20s} {_human(cost.flops, 'FLOP'):>12s} "
                     f"{_human(cost.bytes, 'B'):>12s} {cost.intensity:10.1f}")
    lines.append(f"{'minimal bytes':20s} {'':>12s} {_human(minimal_bytes(p), 'B'):>12s}")
    return "\n".join(lines)
