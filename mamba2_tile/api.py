"""The public entry point: a drop-in for mamba_ssm's ``mamba_chunk_scan_combined`` (forward).

    from mamba2_tile.api import mamba_chunk_scan_combined
    y = mamba_chunk_scan_combined(x, dt, A, B, C, chunk_size=128, D=D, z=z)

Same argument names, layouts and return convention as
``mamba_ssm.ops.triton.ssd_combined.mamba_chunk_scan_combined``; it chains the three cuTile
kernels of :mod:`mamba2_tile.kernels` or (the default) stage 1 and the fused stages 2+3
(:mod:`mamba2_tile.kernels.fused_state_out`), with the sequence cut into segments run in
parallel when batch x heads alone cannot fill the GPU
(:mod:`mamba2_tile.kernels.sequence_parallel`). CUDA tensors run on the GPU
through real cuTile; CPU tensors run the very same kernels on the course's CPU tile interpreter
(slow, for learning and testing).

Validation. Every argument is checked before anything runs, and errors name the argument:
``TypeError`` for a wrong kind of object or dtype, ``ValueError`` for a wrong shape, device,
layout or value.

Views. Every tensor may be a strided view, and none is copied: cuTile arrays carry their
strides, and the kernels load tiles through them (the interpreter reads the same views through
NumPy). So ``x, B, C = torch.split(xBC, ...)`` of one fused projection, ``z`` and ``dt`` cut from
the same ``zxbcdt``, and stride-0 broadcasts (``A``, ``D``, ``dt_bias`` expanded from a
per-head value, ``initial_states`` expanded over the batch) run as they are, where mamba_ssm
copies ``x``, ``z``, ``B``, ``C`` or ``D`` whose last dimension is not contiguous. What a layout
costs instead is speed: a view whose last dimension is contiguous and whose other strides are
multiples of 16 bytes (``torch.split`` of a bfloat16 projection whose widths are multiples of 8,
say) is loaded as fast as a contiguous tensor (the compiler specialises each launch on its
strides); any other layout takes slower loads, and a ``.contiguous()`` copy pays off for a
tensor used many times. The outputs (``y``, the states) are always new contiguous tensors.

Numerics (what the tests hold the kernels to, see ``mamba2_tile.tolerances``): all
accumulation is float32; tensor-core operands are rounded to the input dtype, as in mamba_ssm,
so float16 / bfloat16 results carry that input precision (about 1e-3 / 1e-2 relative).
The float16 range is a limit of its own: the state entering each chunk is such an operand, so a
state entry beyond float16's largest value, 65504, becomes ``inf``, and ``y`` is ``inf`` or NaN
from the next chunk on even where ``y`` itself would fit (``final_states``, float32, stays
finite). Scale the inputs, or use bfloat16 (float32's range) or float32, when
``|sum of dt * x * B|`` over a sequence can pass 65504. NaN in any input propagates as in the
recurrence; ``A = -inf`` forgets the state at every token, as ``exp(dt * -inf) = 0`` says.

Options. Every call runs what :func:`mamba2_tile.kernels.plan.plan` makes of
:data:`mamba2_tile.kernels.DEFAULT_OPTIONS` (chosen from H200 measurements) for its sizes: the
path (the fused kernel, cut into segments run in parallel when batch x heads alone cannot fill
the GPU) and the tiles. Only with
``MAMBA2_TILE_AUTOTUNE=1`` and CUDA tensors are the planned options handed to
:mod:`mamba2_tile.autotune`, which picks occupancy, hints, tiles and switches on that path per GPU
and shape class (tuning once, then reading its cache). :func:`forward_with_options` runs the same
checked forward pass with explicit :class:`mamba2_tile.kernels.ForwardOptions`, planned but never
tuned (the benchmark's ablation).
"""

import math
import numbers
from functools import lru_cache

import torch

from mamba2_tile import autotune
from mamba2_tile.autograd import SSDFunction, keeps_chunk_states
from mamba2_tile.kernels import (DEFAULT_OPTIONS, chunk_cumsum, compute_out, fused_state_out,
                                 fwd_pass_state)
from mamba2_tile.kernels.plan import device_sm_count, plan, plan_for
from mamba2_tile.kernels.sequence_parallel import sequence_parallel_states
from mamba2_tile.kernels.varlen_states import varlen_states
from mamba2_tile.problem import check_chunk_size, ssd_dims

CHUNK_SIZES = (64, 128, 256)
INPUT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)   # x, B, C, z
PARAM_DTYPES = (torch.float32, torch.float16, torch.bfloat16)   # dt, A, D, dt_bias, initial_states
INDEX_DTYPES = {"seq_idx": (torch.int32,), "cu_seqlens": (torch.int32, torch.int64)}


def _dtype_names(dtypes):
    return ", ".join(str(d).removeprefix("torch.") for d in dtypes)


# The tensor arguments in ssd_dims' order, then the packing, and the dtypes each may have.
TENSOR_NAMES = ("x", "dt", "A", "B", "C", "D", "initial_states", "z", "dt_bias", "seq_idx",
                "cu_seqlens")
_ALLOWED_DTYPES = {name: INPUT_DTYPES if name in ("x", "B", "C", "z") else
                   INDEX_DTYPES.get(name, PARAM_DTYPES) for name in TENSOR_NAMES}


def _metadata(tensors):
    """``(dtype, device, shape)`` of every tensor argument, ``None`` for an absent one
    (``tensors`` in :data:`TENSOR_NAMES`' order): all that :func:`_check_metadata` reads. A
    ``TypeError`` names the first argument that is not a tensor."""
    metadata = []
    for name, value in zip(TENSOR_NAMES, tensors):
        if value is None:
            metadata.append(None)
        elif isinstance(value, torch.Tensor):
            metadata.append((value.dtype, value.device, value.shape))
        else:
            raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    return tuple(metadata)


class _Shaped(tuple):
    """A shape standing in for its tensor: :func:`ssd_dims` reads nothing but ``.shape``."""

    @property
    def shape(self):
        return self


def _check_metadata(metadata):
    """Dtype and device of every tensor argument (any strides: module doc, Views), and their
    shapes against each other (:func:`ssd_dims`, no empty dimension), from :func:`_metadata`;
    returns ``(dims, device)``."""
    device = first = None
    for name, meta in zip(TENSOR_NAMES, metadata):
        if meta is None:
            continue
        dtype, value_device, _ = meta
        allowed = _ALLOWED_DTYPES[name]
        if dtype not in allowed:
            raise TypeError(f"{name} must have dtype {_dtype_names(allowed)}, got {dtype}")
        if value_device != device:
            if first is not None:
                raise ValueError(f"all tensors must be on the same device: {first} is on "
                                 f"{device} but {name} is on {value_device}")
            device, first = value_device, name
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"tensors must be on a CPU or CUDA device, got {device}")
    x_dtype = metadata[0][0]
    for name in ("B", "C", "z"):
        meta = metadata[TENSOR_NAMES.index(name)]
        if meta is not None and meta[0] != x_dtype:
            raise TypeError(f"{name} must have the dtype of x ({x_dtype}), got {meta[0]}")
    shapes = [None if meta is None else _Shaped(meta[2]) for meta in metadata[:9]]
    dims = ssd_dims(*shapes)
    if min(dims.batch, dims.nheads, dims.headdim, dims.dstate) < 1:
        x, _, _, B = shapes[:4]
        raise ValueError(f"x and B must have no empty dimension, got x {tuple(x)} "
                         f"and B {tuple(B)}")
    return dims, device


@lru_cache(maxsize=256)
def _checked_plan(metadata, chunk_size, sm_count, base):
    """:func:`_check_metadata`, then ``base`` planned for those sizes on ``sm_count`` SMs
    (:func:`mamba2_tile.kernels.plan.plan`, what :func:`plan_for` reads off the tensors);
    returns ``(dims, device, planned options)``. Memoised: a model calls with the same kinds of
    tensors again and again, and reading them costs less than checking them; a bad combination
    raises on every call (an exception is never cached)."""
    dims, device = _check_metadata(metadata)
    planned = plan(dims.batch, dims.seqlen, dims.nheads, dims.headdim, dims.ngroups, dims.dstate,
                   chunk_size, metadata[0][0], sm_count, base)
    return dims, device, planned


def _check_arguments(x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, dt_limit,
                     seq_idx=None, cu_seqlens=None, return_varlen_states=False,
                     base=DEFAULT_OPTIONS):
    """Check every tensor argument; returns ``base`` planned for them (never tuned)."""
    if x is None or dt is None or A is None or B is None or C is None:
        name = next(name for name, value in zip(TENSOR_NAMES, (x, dt, A, B, C)) if value is None)
        raise TypeError(f"{name} is required, got None")
    if not return_varlen_states:
        cu_seqlens = None               # as in mamba_ssm: it only serves return_varlen_states
    metadata = _metadata((x, dt, A, B, C, D, initial_states, z, dt_bias, seq_idx, cu_seqlens))
    dims, device, planned = _checked_plan(metadata, chunk_size,
                                          device_sm_count(metadata[0][1]), base)
    if seq_idx is not None or return_varlen_states:
        _check_packing(dims, seq_idx, cu_seqlens, return_varlen_states)
    # Reading A back is cheap for a CPU tensor; for a CUDA one it would stall the stream (a
    # host sync) on every call, so there the docstring says what a positive A does instead.
    if device.type == "cpu":
        _check_decay_rates(A)
    return planned


def _check_decay_rates(A):
    """``A <= 0`` (CPU tensors only: see :func:`_check_arguments`)."""
    if bool((A > 0).any()):
        raise ValueError(f"A must be <= 0 (a decay rate: the state decays by exp(dt * A) per "
                         f"token), got positive values at heads "
                         f"{(A > 0).nonzero().flatten().tolist()}")


def _check_scalars(chunk_size, dt_softplus, dt_limit, return_final_states,
                   return_varlen_states=False):
    """The non-tensor arguments; returns ``chunk_size`` and ``dt_limit`` as Python numbers (a
    NumPy or torch scalar is accepted for them, a flag must be a bool)."""
    if (type(chunk_size) is int and chunk_size in CHUNK_SIZES and type(dt_softplus) is bool
            and type(return_final_states) is bool and type(return_varlen_states) is bool
            and type(dt_limit) is tuple and len(dt_limit) == 2 and type(dt_limit[0]) is float
            and type(dt_limit[1]) is float and dt_limit[0] <= dt_limit[1]):
        return chunk_size, dt_limit     # the usual call, plain Python values: nothing to convert
    chunk_size = check_chunk_size(chunk_size)
    if chunk_size not in CHUNK_SIZES:
        raise ValueError(f"chunk_size must be one of {CHUNK_SIZES}, got {chunk_size}")
    for name, flag in (("dt_softplus", dt_softplus), ("return_final_states", return_final_states),
                       ("return_varlen_states", return_varlen_states)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name} must be True or False, got {flag!r}")
    if not (isinstance(dt_limit, (tuple, list)) and len(dt_limit) == 2):
        raise TypeError(f"dt_limit must be a pair (min, max), got {dt_limit!r}")
    if not all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in dt_limit):
        raise TypeError(f"dt_limit must hold two real numbers, got {dt_limit!r}")
    low, high = (float(v) for v in dt_limit)
    if math.isnan(low) or math.isnan(high) or low > high:
        raise ValueError(f"dt_limit must satisfy min <= max (no NaN), got {dt_limit!r}")
    return chunk_size, (low, high)


def _check_packing(dims, seq_idx, cu_seqlens, return_varlen_states):
    """Shapes of ``seq_idx`` / ``cu_seqlens`` (their dtypes and device are checked with the
    other tensors), then their values (:func:`_check_packing_values`)."""
    if seq_idx is not None and tuple(seq_idx.shape) != (dims.batch, dims.seqlen):
        raise ValueError(f"seq_idx must have shape (batch, seqlen) = ({dims.batch}, "
                         f"{dims.seqlen}), got {tuple(seq_idx.shape)}")
    if return_varlen_states:
        if cu_seqlens is None:
            raise ValueError("return_varlen_states needs cu_seqlens (num_sequences + 1,)")
        if cu_seqlens.dim() != 1 or cu_seqlens.shape[0] < 2:
            raise ValueError(f"cu_seqlens must be 1-D (num_sequences + 1,) with at least one "
                             f"sequence, got shape {tuple(cu_seqlens.shape)}")
        if dims.batch != 1:
            raise ValueError(f"cu_seqlens needs batch 1 (all sequences packed in one row), "
                             f"got batch {dims.batch}")
        if seq_idx is None and cu_seqlens.shape[0] > 2:
            raise ValueError("cu_seqlens with several sequences needs seq_idx (without it the "
                             "state is not reset between them)")
    if seq_idx is not None or cu_seqlens is not None:
        _check_packing_values(seq_idx, cu_seqlens, dims.seqlen)


def _check_packing_values(seq_idx, cu_seqlens, seqlen):
    """``seq_idx`` non-negative and nondecreasing along each row; ``cu_seqlens`` rising
    strictly from 0 to ``seqlen``, and rising exactly where ``seq_idx`` changes.

    The values live on the device: a few reductions there, one small copy to the host (a
    synchronisation, some microseconds on a GPU). Skipped while a CUDA graph is being captured,
    where nothing can be copied back: the kernels then trust the values.
    """
    given = seq_idx if seq_idx is not None else cu_seqlens
    if given.is_cuda and torch.cuda.is_current_stream_capturing():
        return
    checks = []
    if seq_idx is not None:
        steps = torch.diff(seq_idx, dim=1, prepend=seq_idx.new_zeros(seq_idx.shape[0], 1))
        checks.append(steps.min() < 0)          # a negative first value or a decrease
    if cu_seqlens is not None:
        lengths = torch.diff(cu_seqlens)
        checks += [cu_seqlens[0] != 0, cu_seqlens[-1] != seqlen, lengths.min() <= 0]
        if seq_idx is not None:
            # seq_idx changes at the starts of sequences 1, 2, ... and nowhere else.
            starts = torch.zeros(seqlen, dtype=torch.bool, device=seq_idx.device)
            starts[cu_seqlens[1:-1].clamp(0, seqlen - 1)] = True
            checks.append(((steps[0, 1:] != 0) != starts[1:]).any() | starts[0])
    failed = torch.stack(checks).tolist()
    if not any(failed):
        return
    if seq_idx is not None and failed[0]:
        values = seq_idx.cpu()
        if values.min() < 0:
            raise ValueError(f"seq_idx must be non-negative, got {values.min().item()}")
        b, t = torch.nonzero(values.diff(dim=1) < 0)[0].tolist()
        raise ValueError(f"seq_idx must be nondecreasing along seqlen (each sequence's tokens in "
                         f"one run): seq_idx[{b}, {t + 1}] = {values[b, t + 1].item()} follows "
                         f"{values[b, t].item()}")
    given = cu_seqlens.tolist()
    if any(failed[-4:-1] if seq_idx is not None else failed[-3:]):
        raise ValueError(f"cu_seqlens must rise strictly from 0 to seqlen ({seqlen}), got "
                         f"{given}")
    changes = (torch.nonzero(seq_idx[0].diff()).flatten() + 1).tolist()
    raise ValueError(f"cu_seqlens {given} does not match where seq_idx changes "
                     f"(tokens {changes})")


def mamba_chunk_scan_combined(x, dt, A, B, C, chunk_size, D=None, z=None, dt_bias=None,
                              initial_states=None, seq_idx=None, cu_seqlens=None,
                              dt_softplus=False, dt_limit=(0.0, float("inf")),
                              return_final_states=False, return_varlen_states=False):
    """Mamba-2's SSD layer, forward pass, with cuTile kernels.

    Args (``b`` batch, ``l`` seqlen, ``h`` nheads, ``p`` headdim, ``g`` ngroups, ``n`` dstate;
    any tensor may be a strided or stride-0 view, never copied: module doc, Views):
        x: (b, l, h, p), float32 / float16 / bfloat16.
        dt: (b, l, h), float; becomes ``clamp(softplus(dt + dt_bias), *dt_limit)`` (each step
            optional, softplus only where ``dt + dt_bias <= 20``, as in mamba_ssm).
        A: (h,), float, at most 0 (the state decays by ``exp(dt * A)`` per token). A positive
            value is refused for CPU tensors; for CUDA tensors it is not checked, as reading
            ``A`` back would make every call wait for the GPU (a host sync). There the kernels,
            which take every decay to be at most 1 (they clamp the in-chunk decay
            ``exp(dA_cumsum[i] - dA_cumsum[j])`` to 1), return a ``y`` that is neither the
            recurrence's nor an error, and that overflows to inf / NaN once ``dt * A`` sums
            past about 88 in a sequence.
        B, C: (b, l, g, n), dtype of x; ``g`` divides ``h``.
        chunk_size: 64, 128 or 256 (any seqlen: the last chunk may be partial); any integer
            type (a NumPy integer too), never a bool or a float.
        D: optional (h,) or (h, p) skip connection.
        z: optional (b, l, h, p) gate, dtype of x: ``y * silu(z)``.
        dt_bias: optional (h,).
        initial_states: optional (b, h, p, n), the state before token 0.
        seq_idx: optional (b, l) int32, packed sequences: which sequence each token belongs
            to, non-negative and nondecreasing along each row. The state is reset to zero where
            it changes, so no token sees another sequence; ``initial_states`` belongs to
            sequence 0 (a row whose ``seq_idx`` starts above 0 starts from zero), as in
            mamba_ssm. Every path of :mod:`mamba2_tile.kernels.plan` takes it: the kernels read
            it once per row block and mask (:mod:`mamba2_tile.kernels.packing`), the backward
            kernels too (:mod:`mamba2_tile.autograd`).
        cu_seqlens: optional (num_sequences + 1,) int32 / int64, the sequences' boundaries in
            the one packed row (batch 1): ``0 = cu_seqlens[0] < cu_seqlens[1] < ... = l``,
            rising exactly where ``seq_idx`` changes. Used only with ``return_varlen_states``
            (otherwise ignored, as in mamba_ssm).
        dt_softplus: apply softplus to ``dt`` (a bool: ``"yes"`` or ``1`` is refused).
        dt_limit: ``(min, max)`` clamp applied to ``dt`` last: two real numbers (NumPy
            scalars too), ``min <= max``.
        return_final_states: also return the state after the last token (a bool).
        return_varlen_states: also return the state after each sequence's last token (a bool);
            differentiable like ``final_states``.

    The values of ``seq_idx`` and ``cu_seqlens`` are checked on their device, which costs one
    synchronisation (skipped while a CUDA graph is captured: see :func:`_check_packing_values`).

    Returns:
        ``y`` (b, l, h, p) in the dtype of x; then ``final_states`` (b, h, p, n) float32 if
        ``return_final_states``; then ``varlen_states`` (num_sequences, h, p, n) float32 if
        ``return_varlen_states``: mamba_ssm's order, a tuple when anything follows ``y``.
        (mamba_ssm returns ``varlen_states`` in the dtype of C, or its ``state_dtype``, a
        parameter after ``return_varlen_states`` in its latest version that this function does
        not take; float32 here, like ``final_states``.)
    """
    chunk_size, dt_limit = _check_scalars(chunk_size, dt_softplus, dt_limit,
                                          return_final_states, return_varlen_states)
    options = _tuned(_check_arguments(x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states,
                                      dt_limit, seq_idx, cu_seqlens, return_varlen_states),
                     x, dt, A, B, C, chunk_size)
    tensors = (x, dt, A, B, C, D, z, dt_bias, initial_states)
    if torch.is_grad_enabled() and _any_requires_grad(tensors):
        return _forward_with_grad(tensors, chunk_size, seq_idx, cu_seqlens, dt_softplus,
                                  dt_limit, return_final_states, return_varlen_states, options)
    return _forward(x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx,
                    cu_seqlens, dt_softplus, dt_limit, return_final_states,
                    return_varlen_states, options)


def _any_requires_grad(tensors):
    for tensor in tensors:
        if tensor is not None and tensor.requires_grad:
            return True
    return False


def _forward_with_grad(tensors, chunk_size, seq_idx, cu_seqlens, dt_softplus, dt_limit,
                       return_final_states, return_varlen_states, options):
    """The forward pass through :class:`mamba2_tile.autograd.SSDFunction`: the same kernels
    (``options``), differentiable in every tensor argument, ``final_states`` and
    ``varlen_states`` included, packed sequences too."""
    cu_seqlens = cu_seqlens if return_varlen_states else None

    def run_forward(x, dt, A, B, C, D, z, dt_bias, initial_states):
        return _forward(x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx,
                        cu_seqlens, dt_softplus, dt_limit, True, return_varlen_states, options,
                        keep_chunk_states=True)

    settings = dict(chunk_size=chunk_size, dt_softplus=dt_softplus, dt_limit=dt_limit,
                    seq_idx=seq_idx, cu_seqlens=cu_seqlens)
    y, final_states, *varlen = SSDFunction.apply(run_forward, settings, *tensors)
    outputs = (y,) + ((final_states,) if return_final_states else ()) + tuple(varlen)
    return outputs if len(outputs) > 1 else y


def forward_options(x, dt, A, B, C, chunk_size, base=DEFAULT_OPTIONS):
    """The options a call runs: ``base`` planned for these inputs, then handed to the autotuner
    only when tuning is on and the tensors are on a GPU (the interpreter is never tuned)."""
    return _tuned(plan_for(x, B, chunk_size, base), x, dt, A, B, C, chunk_size)


def _tuned(planned, x, dt, A, B, C, chunk_size):
    """``planned``, or what the autotuner makes of it when tuning is on and the tensors are on a
    GPU."""
    if x.is_cuda and autotune.enabled():
        return autotune.tuned_options(x, dt, A, B, C, chunk_size, base=planned)
    return planned


def forward_with_options(x, dt, A, B, C, chunk_size, options=DEFAULT_OPTIONS, **kwargs):
    """:func:`mamba_chunk_scan_combined` with explicit kernel options (never autotuned).

    ``kwargs`` are that function's optional arguments (``D``, ``z``, ..., ``return_final_states``).
    """
    arguments = dict(D=None, z=None, dt_bias=None, initial_states=None, seq_idx=None,
                     cu_seqlens=None, dt_softplus=False, dt_limit=(0.0, float("inf")),
                     return_final_states=False, return_varlen_states=False)
    unknown = set(kwargs) - set(arguments)
    if unknown:
        raise TypeError(f"unexpected keyword arguments {sorted(unknown)}")
    arguments.update(kwargs)
    chunk_size, arguments["dt_limit"] = _check_scalars(
        chunk_size, arguments["dt_softplus"], arguments["dt_limit"],
        arguments["return_final_states"], arguments["return_varlen_states"])
    planned = _check_arguments(x, dt, A, B, C, chunk_size, arguments["D"], arguments["z"],
                               arguments["dt_bias"], arguments["initial_states"],
                               arguments["dt_limit"], arguments["seq_idx"],
                               arguments["cu_seqlens"], arguments["return_varlen_states"],
                               base=options)
    return _forward(x, dt, A, B, C, chunk_size, *arguments.values(), planned)


def _forward(x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx, cu_seqlens,
             dt_softplus, dt_limit, return_final_states, return_varlen_states, options,
             keep_chunk_states=False):
    """The kernels of planned ``options`` (their path decided, see :func:`plan_for`), then,
    for ``return_varlen_states``, :mod:`mamba2_tile.kernels.varlen_states` from the states
    that path kept (the state entering each chunk, each segment, or ``initial_states``).

    ``keep_chunk_states`` (training): the outputs end with the state entering each chunk, (b, h,
    c, p, n) in ``x``'s dtype, written by the fused kernels as they pass where
    :func:`mamba2_tile.autograd.keeps_chunk_states` says so, else ``None`` (the backward
    recomputes them)."""
    dA_cumsum, dt_chunks = chunk_cumsum(dt, A, chunk_size, dt_bias=dt_bias,
                                        dt_softplus=dt_softplus, dt_limit=tuple(dt_limit),
                                        options=options.chunk_cumsum)
    kept_chunk_states = None
    if (keep_chunk_states and options.fuse_state_passing
            and keeps_chunk_states(B.shape[3], chunk_size)):
        batch, _, nheads, headdim = x.shape
        kept_chunk_states = torch.empty(batch, nheads, dA_cumsum.shape[2], headdim, B.shape[3],
                                        dtype=x.dtype, device=x.device)
    # The states varlen_states starts from, (anchor_states, anchor_chunks, transposed), and the
    # options whose TF32 switch it follows: the initial states unless the path keeps others.
    kept = (initial_states, None, False)
    numerics = options.fused_state_out
    if options.fuse_state_passing and options.segment_chunks is None:
        y, final_states = fused_state_out(x, dt_chunks, dA_cumsum, B, C, initial_states, D=D,
                                          z=z, options=options.fused_state_out, seq_idx=seq_idx,
                                          chunk_states=kept_chunk_states)
    elif options.fuse_state_passing:
        y, final_states, entering = sequence_parallel_states(
            x, dt_chunks, dA_cumsum, B, C, initial_states, D=D, z=z,
            options=options.fused_state_out, segment_chunks=options.segment_chunks,
            seq_idx=seq_idx, chunk_states=kept_chunk_states)
        if entering is not None:
            kept = (entering, options.segment_chunks, False)
    else:
        chunk_states, final_states = fwd_pass_state(
            x, B, dt_chunks, dA_cumsum, initial_states, options.fwd_pass_state,
            options.transposed_layout, options.low_precision_states, seq_idx=seq_idx)
        y = compute_out(x, dt_chunks, dA_cumsum, B, C, chunk_states, D=D, z=z,
                        options=options.compute_out, transposed_layout=options.transposed_layout,
                        seq_idx=seq_idx)
        kept = (chunk_states, 1, options.transposed_layout)
        numerics = options.fwd_pass_state
    outputs = (y,) + ((final_states,) if return_final_states else ())
    if return_varlen_states:
        anchor_states, anchor_chunks, transposed = kept
        if anchor_chunks is None and anchor_states is not None:
            anchor_states = anchor_states.unsqueeze(2)      # one segment: a view, no copy
        outputs += (varlen_states(x, B, dt_chunks, dA_cumsum, cu_seqlens, anchor_states,
                                  anchor_chunks, seq_idx, transposed,
                                  numerics.use_tf32(x.dtype)),)
    if keep_chunk_states:
        outputs += (kept_chunk_states,)
    return outputs if len(outputs) > 1 else y
