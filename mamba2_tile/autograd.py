"""Training: gradients of :func:`mamba2_tile.api.mamba_chunk_scan_combined`.

:class:`SSDFunction` is the ``torch.autograd.Function`` the API routes a call through when a
tensor argument requires a gradient. Its forward runs the API's forward kernels and saves
the inputs (and, where :func:`keeps_chunk_states` says so, the state entering each chunk, which
the fused forward kernel then writes as it passes); its backward (:func:`ssd_backward`) recomputes what is cheap to recompute
and runs the backward kernels:

1. ``chunk_cumsum`` again (``dA_cumsum``, the prepared ``dt``), the state entering each chunk
   in the input dtype (kept by the forward where :func:`keeps_chunk_states` says so, else
   ``fwd_pass_state`` again), and, only when ``z`` needs a gradient,
   ``compute_out`` without skip and gate, written in float32: the scan's output ``y_ssd``;
2. the gate's backward (elementwise): ``dz`` and the scan's output gradient ``dy``;
3. :mod:`mamba2_tile.kernels.bwd_state_pass`: the state gradient walking the chunks in reverse
   (stored in the input dtype), ending at the gradient of ``initial_states``;
4. :mod:`mamba2_tile.kernels.bwd_chunk`: ``dx`` (the skip's ``D dy`` included, in ``x``'s
   dtype), ``dB``, ``dC`` (each block summing several heads of a group), ``dt``'s direct
   gradient, ``dD``'s sums per row block, and the row sums ``C_k · dC_k``, ``B_k · dB_k`` (per
   head);
5. ``dA_cumsum``'s gradient, from step 4::

       d dA_cumsum_k = C_k · dC_k - B_k · dB_k   (+ <dh_{c+1}, h_{c+1}> at a chunk's last
                                                  position: the decay of the whole chunk)

   and its reverse running sum in each chunk, the gradient of each token's step ``dt_k A``:
   ``dA`` and the rest of ``ddt``; then ``dt``'s chain back through the clamp to ``dt_limit``
   (no gradient where clamped), the softplus and ``dt_bias``. The running sum cancels the
   pairs of positions on one side of ``k``: it is exact only if both row sums hold the same
   values, unrounded, which is why the kernel computes both from its float32 tiles (and why
   ``<dh_{c+1}, h_{c+1}>`` is summed from the kernel's pieces, ``exp(dA_last) <dh_{c+1}, h_c>``
   plus the ``B · dB`` terms through ``dh_{c+1}``: from the forward's ``h_{c+1}`` it cancels
   against those terms only to the input dtype's precision).

Step 5 is one kernel, :mod:`mamba2_tile.kernels.bwd_chunk_cumsum` (stage 1's backward), where
it was ten elementwise PyTorch operations on ``(b, h, c, s)`` tensors; step 2 and the last sums
of ``dB``, ``dC``, ``dD`` and ``dA`` are elementwise work and sums in PyTorch (on the tensors'
device).

Packed sequences (``seq_idx``): steps 1, 3 and 4 run the kernels with the forward's masks (no
state gradient crosses a boundary, no in-chunk pair across one), and step 5 holds unchanged;
it runs in PyTorch there (:func:`_packed_dt_gradients`), its running sum cut at each sequence's
end.
Every term of ``y_ssd`` and of the state leaving a chunk is a masked ``m exp(·)`` of
``dA_cumsum`` differences, so ``C_k · dC_k``, ``B_k · dB_k`` and ``<dh_{c+1}, h_{c+1}>``,
computed from the masked quantities, are still its gradient; the running sum over the chunk
only adds up ``dA_cumsum``'s chain rule, and terms of another sequence cancel in it.

Each sequence's last state (``return_varlen_states``): ``V_k``, the state after sequence ``k``'s
last token ``e``, is a jump to ``e`` from the start of ``e``'s chunk ``c`` (its own tokens in
the chunk, and the state entering the chunk if that is ``k``'s). Its gradient ``G_k`` goes to
the tokens in step 4 (:mod:`mamba2_tile.kernels.bwd_chunk`), to the state entering ``c`` as
``exp(dA_e) G_k`` in step 3 (then on backward through the chunks before), and to ``dA_e`` as
``<G_k, V_k>`` in step 5, ``V_k`` recomputed by :mod:`mamba2_tile.kernels.varlen_states`
(``dA_j``'s side of those terms, ``-B_j · dB_j``, comes with step 4's row sums).
"""

import torch
import torch.nn.functional as F

from mamba2_tile.kernels.bwd_chunk import bwd_chunk
from mamba2_tile.kernels.bwd_chunk_cumsum import bwd_chunk_cumsum
from mamba2_tile.kernels.bwd_state_pass import BWD_STATE_PASS_OCCUPANCY, bwd_state_pass
from mamba2_tile.kernels.chunk_cumsum import DA_STEP_MIN, SOFTPLUS_THRESHOLD, chunk_cumsum
from mamba2_tile.kernels.compute_out import compute_out_launch
from mamba2_tile.kernels.fwd_pass_state import fwd_pass_state
from mamba2_tile.kernels.launching import KernelLaunch
from mamba2_tile.kernels.options import FwdPassStateOptions
from mamba2_tile.kernels.varlen_states import varlen_states

# fwd_pass_state again, for the states entering each chunk: the same walk as bwd_state_pass, with
# its occupancy hint (the comment at BWD_STATE_PASS_OCCUPANCY says what it buys).
STATE_RECOMPUTE_OPTIONS = FwdPassStateOptions(occupancy=BWD_STATE_PASS_OCCUPANCY)

TENSOR_ARGUMENTS = ("x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_states")


def keeps_chunk_states(dstate, chunk_size):
    """Whether a training forward keeps the state entering each chunk for the backward, instead
    of the backward recomputing it with ``fwd_pass_state``: where those states, ``(nchunks,
    headdim, dstate)`` a head, take no more memory than ``x``'s ``(seqlen, headdim)``, that is
    ``dstate <= chunk_size``. Kept, they are held from the forward to the backward in every
    layer of a model, as mamba_ssm holds its output ``y`` (``x``'s size); at chunk 64 and dstate
    128 they would be twice that, and are recomputed. The recomputation took 8-14% of a training
    step on an H100 (b8 h64 p64 L2048 bf16, ``python -m mamba2_tile.tools.profile_backward``,
    2026-12-07): 0.14 ms of 1.80 at dstate 128 chunk 256, 0.28 of 3.01 at dstate 256."""
    return dstate <= chunk_size


class SSDFunction(torch.autograd.Function):
    """``(y, final_states)`` of the forward pass ``run_forward`` (the API's, planned for these
    inputs), then ``varlen_states`` when ``settings["cu_seqlens"]`` is given, differentiable in
    every tensor of :data:`TENSOR_ARGUMENTS`."""

    @staticmethod
    def forward(ctx, run_forward, settings, x, dt, A, B, C, D, z, dt_bias, initial_states):
        tensors = (x, dt, A, B, C, D, z, dt_bias, initial_states)
        # Detached: the kernels read the tensors' memory, outside autograd's view.
        *outputs, chunk_states = run_forward(*(None if t is None else t.detach()
                                               for t in tensors))
        ctx.save_for_backward(*tensors, chunk_states)
        ctx.settings = settings
        return tuple(outputs)

    @staticmethod
    def backward(ctx, dy, dfinal_states, dvarlen_states=None):
        *tensors, chunk_states = ctx.saved_tensors
        grads = ssd_backward(*tensors, **ctx.settings, dy=dy, dfinal_states=dfinal_states,
                             dvarlen_states=dvarlen_states, needs=ctx.needs_input_grad[2:],
                             chunk_states=chunk_states)
        return (None, None) + grads


def _from_chunks(t, seqlen):
    """(b, h, c, s) -> (b, l, h), dropping what lies past seqlen: the layout of ``dt`` from
    the chunk layout of ``dt_chunks``."""
    b, h, c, s = t.shape
    return t.permute(0, 2, 3, 1).reshape(b, c * s, h)[:, :seqlen]


def _scan_output(x, dt_chunks, dA_cumsum, B, C, chunk_states, seq_idx=None):
    """``compute_out`` without skip and gate, stored in float32 (its tiles are float32 until
    the store, whatever the dtype of ``x``)."""
    launch, _ = compute_out_launch(x, dt_chunks, dA_cumsum, B, C, chunk_states, seq_idx=seq_idx)
    y_ssd = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    args = launch.named_args()
    args["y"] = y_ssd
    KernelLaunch(launch.grid, launch.kernel, tuple(args.values())).run()
    return y_ssd


def _varlen_parts(x, B, dt_chunks, dA_cumsum, chunk_states, seq_idx, cu_seqlens, G):
    """What each sequence's last-state gradient ``G`` (num_sequences, h, p, n) adds outside
    ``bwd_chunk`` (module doc): ``direct`` (1, h, c, p, n), the gradient of each chunk's
    entering state, and ``dA_last`` (num_sequences, h), that of ``dA_cumsum`` at each
    sequence's last token (at ``chunk``, ``position``, (num_sequences,) each); ``G`` itself for
    ``bwd_chunk``."""
    chunk_size = dA_cumsum.shape[3]
    cu_seqlens = cu_seqlens.long()
    start, last = cu_seqlens[:-1], cu_seqlens[1:] - 1
    chunk = last // chunk_size
    V = varlen_states(x, B, dt_chunks, dA_cumsum, cu_seqlens, chunk_states, 1, seq_idx)
    # The state entering the last token's chunk is the sequence's if it began before the chunk,
    # or, at chunk 0, if it is sequence 0 (initial_states'): packing.py's rule.
    first = (torch.zeros_like(start) if seq_idx is None else seq_idx[0, start]) == 0
    enters = (start < chunk * chunk_size) | ((chunk == 0) & first)
    dA_at_last = dA_cumsum[0].reshape(dA_cumsum.shape[1], -1)[:, last].T     # (k, h)
    decay = torch.where(enters[:, None], torch.exp(dA_at_last), 0.0)
    # float32 whatever the dtype of chunk_states (the backward keeps them in the input dtype).
    direct = torch.zeros(chunk_states.shape, dtype=torch.float32, device=chunk_states.device)
    direct[0].index_add_(1, chunk, (decay[..., None, None] * G).transpose(0, 1))
    return dict(G=G, direct=direct, chunk=chunk, position=last % chunk_size,
                dA_last=(G * V).sum((-2, -1)))


def _packed_step_gradient(to_end, whole_chunk, seq_idx, chunk_size):
    """The gradient of each token's step ``dt_k A`` with packed sequences: the running sum
    ``to_end`` (b, h, c, s) of ``dA_cumsum``'s gradient cut at the end of the token's sequence,
    plus the whole chunk's term (b, h, c) for tokens of the chunk's last sequence only.

    The running sum over a whole chunk is the same in exact arithmetic (the later sequences'
    terms add up to zero: their outputs depend on differences of ``dA_cumsum`` inside them
    alone), but in 16-bit inputs each term carries its own rounding, and the residue of the
    later sequences' sum would land on the token's gradient. Cutting it, ``to_end[k] -
    to_end[end of k's sequence]``, drops those terms as computed: the same values in both.
    """
    batch, seqlen = seq_idx.shape
    # Past seqlen: the last token's sequence, as the kernels' last_seq sees it.
    seq = torch.cat([seq_idx, seq_idx[:, -1:].expand(batch, -seqlen % chunk_size)], dim=1)
    seq = seq.reshape(batch, -1, chunk_size)                                # (b, c, s)
    position = torch.arange(chunk_size, device=seq.device)
    # The first position of the next sequence in the chunk (chunk_size if none): the smallest
    # position after k where seq_idx changes.
    starts = torch.where(seq[..., 1:] != seq[..., :-1], position[1:], chunk_size)
    starts = torch.cat([starts, starts.new_full((batch, starts.shape[1], 1), chunk_size)], -1)
    end = starts.flip(-1).cummin(-1).values.flip(-1)                        # (b, c, s)
    padded = F.pad(to_end, (0, 1))                                          # to_end[s] = 0
    index = end[:, None].expand(-1, to_end.shape[1], -1, -1)
    d_step = to_end - padded.gather(-1, index)
    in_last = (seq == seq[..., -1:])[:, None]                               # (b, 1, c, s)
    return d_step + torch.where(in_last, whole_chunk[..., None], 0.0)


def _packed_dt_gradients(dt, A, dt_bias, dt_chunks, ddt_chunks, ddA_terms, seq_idx, varlen, *,
                         dt_softplus, dt_limit):
    """Step 5 with packed sequences, in PyTorch: :func:`bwd_chunk_cumsum`'s sums with the
    running sum cut at each sequence's end (:func:`_packed_step_gradient`, with ``seq_idx``)
    and, with ``varlen``, each sequence's last state's ``<G_k, V_k>``; returns ``(ddt, dA)``,
    float32."""
    batch, seqlen, nheads = dt.shape
    C_dC, B_dB, dA_last_terms = ddA_terms.unbind(3)                        # (b, h, c, s) each
    whole_chunk = dA_last_terms.sum(-1)                                    # <dh_{c+1}, h_{c+1}>
    d_dA_cumsum = C_dC - B_dB
    if varlen is not None:
        # <G_k, V_k> at each sequence's last token (batch 1).
        heads = torch.arange(nheads, device=dt.device)[None]
        d_dA_cumsum[0].index_put_((heads, varlen["chunk"][:, None], varlen["position"][:, None]),
                                  varlen["dA_last"], accumulate=True)
    to_end = d_dA_cumsum.flip(-1).cumsum(-1).flip(-1)
    if seq_idx is None:
        d_step = to_end + whole_chunk[..., None]
    else:
        d_step = _packed_step_gradient(to_end, whole_chunk, seq_idx, ddt_chunks.shape[-1])
    A32 = A.float()[None, :, None, None]
    # chunk_cumsum floors each step dt * A at DA_STEP_MIN: no gradient where floored.
    d_step = torch.where(dt_chunks * A32 < DA_STEP_MIN, 0.0, d_step)
    dA = (d_step * dt_chunks).sum((0, 2, 3))
    ddt = _from_chunks(ddt_chunks + d_step * A32, seqlen)

    # dt's chain: clamp (no gradient where clamped), softplus (only at or below the
    # threshold), bias.
    dt_raw = dt.float() if dt_bias is None else dt.float() + dt_bias.float()
    if dt_softplus:
        below = dt_raw <= SOFTPLUS_THRESHOLD
        dt_soft = torch.where(below, F.softplus(dt_raw), dt_raw)
        ddt = ddt * torch.where(below, torch.sigmoid(dt_raw), 1.0)
    else:
        dt_soft = dt_raw
    return torch.where((dt_soft < dt_limit[0]) | (dt_soft > dt_limit[1]), 0.0, ddt), dA


def ssd_backward(x, dt, A, B, C, D, z, dt_bias, initial_states, *, chunk_size, dt_softplus,
                 dt_limit, dy, dfinal_states, needs=(True,) * 9, seq_idx=None, cu_seqlens=None,
                 dvarlen_states=None, chunk_states=None):
    """The gradients of ``(y, final_states)`` for output gradients ``dy`` and ``dfinal_states``
    (either may be ``None``: zero); returns one gradient per :data:`TENSOR_ARGUMENTS` entry, in
    that input's dtype, ``None`` for an absent input or one whose ``needs`` entry is False.
    ``seq_idx`` (b, l) int32: the packing of the forward call; ``dvarlen_states``
    (num_sequences, h, p, n), with ``cu_seqlens``: the gradient of each sequence's last state
    (module doc). ``chunk_states`` (b, h, c, p, n) in ``x``'s dtype: the state entering each
    chunk, as the forward kept it, or ``None`` to recompute it."""
    seqlen, nheads = x.shape[1], x.shape[2]
    dA_cumsum, dt_chunks = chunk_cumsum(dt, A, chunk_size, dt_bias=dt_bias,
                                        dt_softplus=dt_softplus, dt_limit=tuple(dt_limit))
    # The states entering each chunk in the input dtype: bwd_chunk rounds them to it for its
    # mma anyway, and they are the backward's largest buffer (b, h, c, p, n).
    if chunk_states is None:
        chunk_states, _ = fwd_pass_state(
            x, B, dt_chunks, dA_cumsum, initial_states, options=STATE_RECOMPUTE_OPTIONS,
            low_precision_states=True, seq_idx=seq_idx)

    # Without a gate the kernels read dy as it came (they round it to the input dtype for
    # their mma anyway): no float32 copy.
    dy = torch.zeros_like(x) if dy is None else dy.contiguous()
    if dfinal_states is None:
        dfinal_states = torch.zeros(chunk_states.shape[:2] + chunk_states.shape[3:],
                                    dtype=torch.float32, device=x.device)
    dz = None
    if z is not None:
        # In place on our own float32 buffers: four of (b, l, h, p) at most, dz returned early
        # in z's dtype, and no y_ssd at all when z needs no gradient.
        gate = z.to(torch.float32, copy=True).sigmoid_()
        dy = dy.to(torch.float32, copy=True)            # ours to gate in place
        if needs[6]:
            dz = _scan_output(x, dt_chunks, dA_cumsum, B, C, chunk_states, seq_idx)  # y_ssd
            if D is not None:
                dz.addcmul_(x, D.float()[:, None] if D.dim() == 1 else D.float())  # y_pre
            dz.mul_(dy).mul_(gate)
            dz.mul_(torch.sub(1, gate).mul_(z).add_(1))        # d silu(z) / dz = g (1 + z (1 - g))
            dz = dz.to(z.dtype)
        dy.mul_(z).mul_(gate)
        del gate
    varlen = None
    if dvarlen_states is not None:
        varlen = _varlen_parts(x, B, dt_chunks, dA_cumsum, chunk_states, seq_idx, cu_seqlens,
                               dvarlen_states.float())
    # dstates in the input dtype (bwd_chunk rounds them to it for its mma anyway); packing
    # arguments only when packed.
    state_kwargs = {"low_precision_states": x.dtype != torch.float32}
    chunk_packing = {}
    if seq_idx is not None:
        state_kwargs["seq_idx"] = chunk_packing["seq_idx"] = seq_idx
    if varlen is not None:
        state_kwargs["dchunk_states_direct"] = varlen["direct"]
        chunk_packing.update(dvarlen_states=varlen["G"], cu_seqlens=cu_seqlens)
    dstates, dinitial_states = bwd_state_pass(dy, C, dA_cumsum, dfinal_states.float(),
                                              **state_kwargs)
    dx, ddt_chunks, dB, dC, ddA_terms, dD = bwd_chunk(
        x, dt_chunks, dA_cumsum, B, C, chunk_states, dstates, dy, D, **chunk_packing)
    # Each group's dB and dC: the sum of its blocks' (one per heads_per_block heads).
    batch, _, ngroups, dstate = B.shape
    dB = dB.view(batch, seqlen, ngroups, -1, dstate).sum(3)
    dC = dC.view(batch, seqlen, ngroups, -1, dstate).sum(3)
    if D is not None:
        # (h, p) from the row blocks' float32 sums, added in float64: added in float32 they
        # landed 2-3x float32's rounding away from the exact sum (tests/kernels/test_backward.py).
        dD = dD.sum((0, 1), dtype=torch.float64)
        if D.dim() == 1:
            dD = dD.sum(-1)

    # dA_cumsum's gradient (module doc, step 5), then each step's: a reverse running sum.
    if seq_idx is None and varlen is None:
        ddt, dA = bwd_chunk_cumsum(dt, A, ddA_terms, ddt_chunks, dt_bias=dt_bias,
                                   dt_softplus=dt_softplus, dt_limit=tuple(dt_limit))
    else:
        ddt, dA = _packed_dt_gradients(dt, A, dt_bias, dt_chunks, ddt_chunks, ddA_terms,
                                       seq_idx, varlen, dt_softplus=dt_softplus,
                                       dt_limit=dt_limit)
    ddt_bias = None if dt_bias is None else ddt.sum((0, 1))

    grads = (dx, ddt, dA, dB, dC, dD, dz, ddt_bias, dinitial_states)
    inputs = (x, dt, A, B, C, D, z, dt_bias, initial_states)
    return tuple(None if t is None or not need else grad.to(t.dtype)
                 for grad, t, need in zip(grads, inputs, needs))
