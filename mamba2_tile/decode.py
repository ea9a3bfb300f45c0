"""The decode step, a drop-in for mamba_ssm's ``selective_state_update``.

    from mamba2_tile import selective_state_update
    y = selective_state_update(state, x, dt, A, B, C, D=D, z=z, dt_bias=dt_bias,
                               dt_softplus=True)          # state is updated in place

Shapes as ``mamba_ssm.ops.triton.selective_state_update.selective_state_update``::

    state (slots, nheads, headdim, dstate)   x, z (batch, nheads, headdim)
    dt (batch, nheads, headdim)   A (nheads, headdim, dstate)   B, C (batch, ngroups, dstate)
    D, dt_bias (nheads, headdim)   state_batch_indices (batch,) int32 / int64

or, as there, without the heads axis (``x (batch, dim)``, ``state (batch, dim, dstate)``, ``B, C
(batch, dstate)``...), read as one head. ``state_batch_indices[i]`` is the row of ``state``
that batch entry ``i`` reads and updates (without it, row ``i``); rows must be distinct.

What is copied: nothing for ``state``, ``x``, ``B``, ``C``, ``z`` (any strides). ``dt``,
``dt_bias``, ``A`` and ``D`` that are stride-0 broadcasts of one value per head (what mamba_ssm's
``Mamba2`` passes) are read as that value, never expanded; an ``A`` broadcast along only one of
``headdim`` / ``dstate`` is made contiguous (one ``nheads x headdim x dstate`` copy).
``state_batch_indices`` in int64 is converted to int32 (``batch`` integers). Their range and
distinctness are checked on CPU tensors only: on CUDA the check would wait for the GPU.

The kernel is :mod:`mamba2_tile.kernels.selective_state_update`; the float64 reference is
:func:`mamba2_tile.reference_decode.selective_state_update`.
"""

import torch

from mamba2_tile.kernels.selective_state_update import selective_state_update_launch

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

def _check_tensor(name, value, shape, device, dtypes=FLOAT_DTYPES):
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if value.dtype not in dtypes:
        names = ", ".join(str(d).removeprefix("torch.") for d in dtypes)
        raise TypeError(f"{name} must have dtype {names}, got {value.dtype}")
    if tuple(value.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {tuple(value.shape)}")
    if value.device != device:
        raise ValueError(f"{name} must be on {device} like x, got {value.device}")


def _check_indices(indices, batch, slots, device):
    _check_tensor("state_batch_indices", indices, (batch,), device, (torch.int32, torch.int64))
    if indices.device.type == "cpu" and batch:
        if int(indices.min()) < 0 or int(indices.max()) >= slots:
            raise ValueError(f"state_batch_indices must lie in [0, {slots}) (rows of state), "
                             f"got values from {int(indices.min())} to {int(indices.max())}")
        if indices.unique().numel() != batch:
            raise ValueError("state_batch_indices must be distinct: two batch entries would "
                             "update the same row of state")
    return indices.to(torch.int32)


def selective_state_update(state, x, dt, A, B, C, D=None, z=None, dt_bias=None,
                           dt_softplus=False, state_batch_indices=None, *, block_p=None):
    """One token through the SSM: updates ``state`` in place and returns ``y`` like ``x``.

    ``dt = softplus(dt + dt_bias)`` (bias and softplus optional), then per head ``h`` of group
    ``g = h // (nheads // ngroups)``: ``state = exp(dt A) state + (dt x) ⊗ B_g``,
    ``y = state C_g + D x``, and ``y *= silu(z)`` when ``z`` is given (module doc for shapes).
    ``block_p`` (keyword only, not in mamba_ssm): the kernel's rows of the state per block, a
    power of two, for measuring tile sizes; ``None`` keeps the kernel's rule.
    """
    if block_p is not None and (isinstance(block_p, bool) or not isinstance(block_p, int)
                                or block_p < 1 or block_p & (block_p - 1)):
        raise ValueError(f"block_p must be None or a power of two >= 1, got {block_p!r}")
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if not isinstance(dt_softplus, bool):
        raise TypeError(f"dt_softplus must be True or False, got {dt_softplus!r}")
    if x.ndim == 2:                      # mamba_ssm's form without the heads axis: one head
        # batch-led tensors gain the heads axis second, per-channel parameters first
        add = lambda t, axis: None if not isinstance(t, torch.Tensor) else t.unsqueeze(axis)
        one = selective_state_update(
            add(state, 1), add(x, 1), add(dt, 1), add(A, 0), add(B, 1), add(C, 1),
            add(D, 0), add(z, 1), add(dt_bias, 0),
            dt_softplus=dt_softplus, state_batch_indices=state_batch_indices, block_p=block_p)
        return one.squeeze(1)
    if x.ndim != 3:
        raise ValueError(f"x must be (batch, nheads, headdim), got shape {tuple(x.shape)}")
    device = x.device
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"tensors must be on a CPU or CUDA device, got {device}")
    batch, nheads, headdim = x.shape
    _check_tensor("x", x, x.shape, device)
    if not isinstance(B, torch.Tensor) or B.ndim != 3:
        raise ValueError("B must be a (batch, ngroups, dstate) torch.Tensor")
    ngroups, dstate = B.shape[1], B.shape[2]
    if ngroups == 0 or nheads % ngroups:
        raise ValueError(f"nheads ({nheads}) must be a multiple of ngroups ({ngroups}, "
                         f"B.shape[1])")
    if min(batch, nheads, headdim, dstate) == 0:
        raise ValueError(f"x and B must have no empty dimension, got x {tuple(x.shape)} "
                         f"and B {tuple(B.shape)}")
    if not isinstance(state, torch.Tensor) or state.ndim != 4:
        raise ValueError("state must be a (slots, nheads, headdim, dstate) torch.Tensor")
    slots = state.shape[0]
    _check_tensor("state", state, (slots, nheads, headdim, dstate), device)
    _check_tensor("dt", dt, (batch, nheads, headdim), device)
    _check_tensor("A", A, (nheads, headdim, dstate), device)
    _check_tensor("B", B, (batch, ngroups, dstate), device)
    _check_tensor("C", C, (batch, ngroups, dstate), device)
    for name, value, shape in (("D", D, (nheads, headdim)), ("z", z, x.shape),
                               ("dt_bias", dt_bias, (nheads, headdim))):
        if value is not None:
            _check_tensor(name, value, shape, device)
    if state_batch_indices is None:
        if slots != batch:
            raise ValueError(f"state must have batch ({batch}) rows when state_batch_indices "
                             f"is not given, got {slots}")
    else:
        state_batch_indices = _check_indices(state_batch_indices, batch, slots, device)

    launch, out = selective_state_update_launch(state, x, dt, A, B, C, D, z, dt_bias,
                                                dt_softplus, state_batch_indices, block_p)
    launch.run()
    return out
