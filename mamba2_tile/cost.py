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
  ``chunk_states``, ``final_states``) have :data:`STATE_VALUE_BYTES` (float32, as the kernels
  keep them).
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
from tabulate import tabulate


# The kernels keep the tensors passed between stages (dA_cumsum, dt, chunk_states, final_states)
# in float32, whatever the input dtype.
STATE_VALUE_BYTES = 4


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


def interaction_matrix_bytes(batch, seqlen, nheads, chunk_size, bytes_per_value):
    """Bytes of every ``chunk x chunk`` matrix of a sequence, one per (batch, head, chunk).

    The last chunk is padded to a full chunk, as the kernels compute it (so ``ceil``).
    """
    nchunks = -(-seqlen // chunk_size)
    return batch * nheads * nchunks * chunk_size * chunk_size * bytes_per_value


def final_states_bytes(p):
    """Bytes of ``final_states``, ``(batch, nheads, headdim, dstate)`` float32: all a Mamba-2
    layer needs to continue its sequences, and no ``seqlen`` in it."""
    return p.batch * ssm_state_bytes(1, p.nheads, p.headdim, p.dstate, STATE_VALUE_BYTES)


# --------------------------------------------------------------------------------------------
# The three stages of the chunked algorithm
# --------------------------------------------------------------------------------------------

def chunk_cumsum_cost(p):
    """Stage 1: ``dA = dt * A`` and its running sum, one multiply and one add per position."""
    flops = 2 * _chunk_vector_elements(p)
    read = _dt_elements(p) * p.dtype_bytes
    written = 2 * _chunk_vector_elements(p) * STATE_VALUE_BYTES        # dA_cumsum and dt
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
            + 2 * _chunk_vector_elements(p) * STATE_VALUE_BYTES)       # dt and dA_cumsum
    # chunk_states and final_states
    written = (p.nchunks + 1) * _state_elements(p) * STATE_VALUE_BYTES
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
            + (2 * _chunk_vector_elements(p) + p.nchunks * _state_elements(p))
            * STATE_VALUE_BYTES)
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

    ``bytes_per_value`` defaults to :data:`STATE_VALUE_BYTES` (float32); 2 with
    ``low_precision_states``.
    """
    per_value = STATE_VALUE_BYTES if bytes_per_value is None else bytes_per_value
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
            + 2 * _chunk_vector_elements(p) * STATE_VALUE_BYTES)
    written = _x_elements(p) * p.dtype_bytes + _state_elements(p) * STATE_VALUE_BYTES
    return Cost(flops, read, written)


def forward_cost(p, fused=False, states_bytes=None):
    """The whole forward pass: stage 1, then stages 2 and 3 as two kernels or (``fused``) one.

    ``states_bytes`` is the size of a ``chunk_states`` value on the three-kernel path (default
    ``STATE_VALUE_BYTES``, float32; the input's 2 bytes with ``low_precision_states``); the other
    intermediates stay float32. The FLOPs are the same for every path.
    """
    if fused:
        return chunk_cumsum_cost(p) + fused_state_out_cost(p)
    total = chunked_cost(p)
    saved = (chunk_states_bytes(p) - chunk_states_bytes(p, states_bytes)) // 2  # each way
    return Cost(total.flops, total.bytes_read - saved, total.bytes_written - saved)


def traffic_breakdown(problem):
    """Bytes through global memory for the three ways to run the forward pass, split into the
    chunk states (written by stage 2, read by stage 3) and everything else.

    Returns ``{pipeline: {"chunk states": bytes, "everything else": bytes}}`` for
    ``3 kernels, fp32 states``, ``3 kernels, 16-bit states`` and ``fused (states in registers)``.
    """
    half = problem.dtype_bytes
    pipelines = {
        "3 kernels, fp32 states": (forward_cost(problem), chunk_states_bytes(problem)),
        f"3 kernels, {8 * half}-bit states": (forward_cost(problem, states_bytes=half),
                                              chunk_states_bytes(problem, half)),
        "fused (states in registers)": (forward_cost(problem, fused=True), 0),
    }
    return {name: {"chunk states": states, "everything else": cost.bytes - states}
            for name, (cost, states) in pipelines.items()}


def fusion_table(problem):
    """:func:`traffic_breakdown` as a text table, in GB, with the minimal bytes."""
    body = [[name, f"{parts['chunk states'] / 1e9:.2f} GB",
             f"{parts['everything else'] / 1e9:.2f} GB", f"{sum(parts.values()) / 1e9:.2f} GB"]
            for name, parts in traffic_breakdown(problem).items()]
    body.append(["minimal (inputs once, y)", "", "", f"{minimal_bytes(problem) / 1e9:.2f} GB"])
    return tabulate(body, headers=["pipeline", "chunk states", "other", "total"],
                    disable_numparse=True, colalign=("left", "right", "right", "right"))


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
    ``+ D x`` (``2 l p``). The matrix is written once and read back once (float32 each),
    like attention before FlashAttention; that term is what grows as seqlen².
    """
    l, hp, n = p.seqlen, p.headdim, p.dstate
    flops = p.batch * p.nheads * (l + 2 * l * l + 2 * l * l * n + l * l + l * hp
                                  + 2 * l * l * hp + 2 * l * hp)
    matrix = p.batch * p.nheads * l * l * STATE_VALUE_BYTES
    read = (_x_elements(p) + _dt_elements(p) + 2 * _bc_elements_per_head(p)) * p.dtype_bytes
    return Cost(flops, read + matrix, _x_elements(p) * p.dtype_bytes + matrix)


# --------------------------------------------------------------------------------------------
# Attention, counted the same way (notebook 10 compares it with the SSD)
# --------------------------------------------------------------------------------------------

def attention_cost(batch, seqlen, nheads, headdim, dtype_bytes=2, flash=False, block_rows=128):
    """FLOPs and bytes of causal attention, counted like the SSD above.

    Per (batch, head), with ``l = seqlen``, ``d = headdim``: ``q kᵀ`` (``2 l l d``), scale and
    mask (``2 l l``), softmax (max, subtract, exp, sum, divide: ``5 l l``), times ``v``
    (``2 l l d``). The naive version computes every entry and moves the scores through memory
    four times (written, read by the softmax, probabilities written, read by the product), with
    ``dtype_bytes`` per entry. The Flash version (``flash=True``) skips the blocks above the
    diagonal, about half the work, and keeps the scores on chip; in exchange every block of
    ``block_rows`` queries reads the keys and values it needs, so ``k`` and ``v`` are read about
    ``l / block_rows / 2`` times. Its traffic still grows as ``l²``, but divided by the block
    size, which keeps it far below the arithmetic.
    """
    l, d = seqlen, headdim
    heads = batch * nheads
    flops = heads * (4 * l * l * d + 7 * l * l)
    qkvo = 4 * heads * l * d * dtype_bytes
    if not flash:
        scores = 4 * heads * l * l * dtype_bytes
        return Cost(flops, 3 * qkvo // 4 + scores // 2, qkvo // 4 + scores // 2)
    kv_reads = max(1.0, l / block_rows / 2)
    read = heads * l * d * dtype_bytes * (1 + 2 * kv_reads)
    return Cost(flops // 2, int(read), qkvo // 4)


# --------------------------------------------------------------------------------------------
# The memory one sequence costs a whole model: a Transformer's KV cache against a Mamba-2 state
# --------------------------------------------------------------------------------------------

FP16 = 2  # bytes per value: what inference typically stores

# The two reference models (notebook 00) have nearly the same size and width (d_model 2560),
# with the sizes of their published configurations: Pythia-2.8B (EleutherAI; 32 layers of 32
# heads of 80) and Mamba-2 2.7B (state-spaces; 64 layers, expand 2 -> 5120 channels = 80 heads
# of headdim 64, dstate 128).
TRANSFORMER = dict(name="Pythia-2.8B (Transformer)", nlayers=32, nheads=32, headdim=80)
MAMBA2 = dict(name="Mamba-2 2.7B", nlayers=64, nheads=80, headdim=64, dstate=128)


def kv_cache_bytes(seqlen, nlayers, nheads, headdim, bytes_per_value):
    """Bytes of one sequence's KV cache: a key and a value vector per token, head and layer."""
    return 2 * seqlen * nlayers * nheads * headdim * bytes_per_value


def ssm_state_bytes(nlayers, nheads, headdim, dstate, bytes_per_value):
    """Bytes of one sequence's SSM state: a (headdim, dstate) matrix per head and layer.

    No ``seqlen``: that is the point. (A real Mamba-2 layer also keeps the last few inputs of
    its short convolution, a few tokens' worth, ignored here.)
    """
    return nlayers * nheads * headdim * dstate * bytes_per_value


def attention_scores_bytes(seqlen, nheads, bytes_per_value):
    """Bytes of one layer's ``seqlen x seqlen`` attention scores, if written out per head."""
    return seqlen * seqlen * nheads * bytes_per_value


def crossover_seqlen(transformer=TRANSFORMER, mamba=MAMBA2, bytes_per_value=FP16):
    """The sequence length from which the KV cache outgrows the (fixed) state."""
    per_token = kv_cache_bytes(1, transformer["nlayers"], transformer["nheads"],
                               transformer["headdim"], bytes_per_value)
    state = ssm_state_bytes(mamba["nlayers"], mamba["nheads"], mamba["headdim"], mamba["dstate"],
                            bytes_per_value)
    return int(np.ceil(state / per_token))


# --------------------------------------------------------------------------------------------
# Printing counts
# --------------------------------------------------------------------------------------------

def format_bytes(n):
    """``1536 -> '1.5 KiB'``: binary units, one decimal (hand-written: a fixed format keeps
    printed tables reproducible, which no well-kept library's size formatter promises)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def _human(value, unit):
    """``2.5e9 -> '2.5 GFLOP'``: three digits and an SI prefix (a fixed format, as above)."""
    for prefix in ("", "K", "M", "G", "T", "P"):
        if abs(value) < 1000:
            return f"{value:.3g} {prefix}{unit}"
        value /= 1000
    return f"{value:.3g} E{unit}"


def cost_table(p):
    """A text table: FLOPs, bytes and intensity per stage and per form, plus the floor."""
    rows = [(f"- {name}", cost) for name, cost in chunked_costs(p).items()]
    rows = ([("chunked (3 stages)", chunked_cost(p))] + rows
            + [("recurrent", recurrent_cost(p)), ("quadratic", quadratic_cost(p))])
    body = [[name, _human(cost.flops, "FLOP"), _human(cost.bytes, "B"), f"{cost.intensity:.1f}"]
            for name, cost in rows]
    body.append(["minimal bytes", "", _human(minimal_bytes(p), "B"), ""])
    return tabulate(body, headers=["", "FLOPs", "bytes", "FLOP/byte"], disable_numparse=True,
                    colalign=("left", "right", "right", "right"))
