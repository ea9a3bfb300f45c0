"""The Mamba-2 layer as a ``torch.nn.Module``, a drop-in for mamba_ssm's ``Mamba2``.

    from mamba2_tile import Mamba2
    layer = Mamba2(d_model=256, d_state=64, headdim=32, layer_idx=0)
    out = layer(u)                                   # u (batch, seqlen, d_model)

The constructor takes mamba_ssm's arguments in mamba_ssm's order, and the parameters have its
names and shapes (``mamba_ssm/modules/mamba2.py``), so a ``state_dict`` of either loads into the
other::

    in_proj.weight    (2 d_inner + 2 ngroups d_state + nheads, d_model)   [+ in_proj.bias]
    conv1d.weight     (conv_dim, 1, d_conv)                               [+ conv1d.bias]
    dt_bias, A_log    (nheads,)
    D                 (nheads,), or (d_ssm,) with D_has_hdim
    norm.weight       (d_ssm,)                                            (with rmsnorm)
    out_proj.weight   (d_model, d_inner)                                  [+ out_proj.bias]

with ``d_inner = expand d_model``, ``d_ssm`` (default ``d_inner``) the channels that go through
the SSM, ``nheads = d_ssm / headdim`` and ``conv_dim = d_ssm + 2 ngroups d_state``.

The forward pass, token by token ``t`` of a row:

1. ``in_proj(u)`` is cut (``torch.split`` views, nothing copied) into ``[z0, x0, z, xBC, dt]``
   of widths ``[d_mlp, d_mlp, d_ssm, conv_dim, nheads]``, ``d_mlp = d_inner - d_ssm``;
2. ``xBC`` goes through the causal depthwise convolution of width ``d_conv`` and SiLU, in plain
   torch with float32 sums (:meth:`Mamba2.causal_conv`), and is cut into ``x, B, C``;
3. ``y = mamba_chunk_scan_combined(x, dt, A, B, C, D=D, dt_bias=dt_bias, dt_softplus=True,
   dt_limit=dt_limit)`` with ``A = -exp(A_log)``: this package's kernels;
4. ``y = norm(y, z)``, the gated RMSNorm ``rmsnorm(y * silu(z)) * weight`` over groups of
   ``d_ssm / ngroups`` channels (``norm_before_gate=False``; with ``rmsnorm=False`` the gate
   ``silu(z)`` is applied inside the scan instead);
5. with ``d_mlp > 0``, ``silu(z0) * x0`` is put in front of ``y``; then ``out_proj``.

Packed sequences: ``seq_idx`` (batch, seqlen) int32 resets the state where it changes, in the
scan and in the convolution (a token never sees the previous sequence's last inputs);
``cu_seqlens`` is passed on to the scan, and with ``inference_params`` fills one cache row per
sequence, as in mamba_ssm.

Training: the scan's backward kernels (:mod:`mamba2_tile.autograd`) give every parameter its
gradient, packed calls (``seq_idx``, ``cu_seqlens``) included.

Generation, as mamba_ssm's ``inference_params``: ``forward(u, inference_params=params)`` with
``params.seqlen_offset == 0`` (the prefill) runs the whole prompt and writes the layer's cache
in ``params.key_value_memory_dict[layer_idx] = (conv_state, ssm_state)``: the last ``d_conv``
inputs of the convolution and the state after the last token. With ``seqlen_offset > 0`` it
runs :meth:`Mamba2.step`: one token, the caches updated in place, the SSM through
:func:`mamba2_tile.selective_state_update`.

What is mamba_ssm's and not here: tensor parallelism (``process_group`` must be None;
``sequence_parallel`` then does nothing, there as here) and its fused
``mamba_split_conv1d_scan_combined`` (``use_mem_eff_path`` chooses between two implementations
of the same function there; here there is one, so it is accepted and changes nothing). Where
this layer does more: :meth:`Mamba2.step` applies ``dt_limit`` (mamba_ssm's step ignores it,
so its decode departs from its own forward pass when a limit is set) and takes ``D_has_hdim``.
"""

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from mamba2_tile.api import CHUNK_SIZES, mamba_chunk_scan_combined
from mamba2_tile.decode import selective_state_update

NO_DT_LIMIT = (0.0, float("inf"))


@dataclass
class InferenceParams:
    """The generation state mamba_ssm's layers read (``mamba_ssm.utils.generation``'s fields
    that a ``Mamba2`` layer uses): ``seqlen_offset`` tokens already seen (0 for the prompt),
    and each layer's cache in ``key_value_memory_dict[layer_idx]``. Any object with these two
    attributes will do."""

    max_seqlen: int
    max_batch_size: int
    seqlen_offset: int = 0
    key_value_memory_dict: dict = field(default_factory=dict)

    def reset(self, max_seqlen, max_batch_size):
        self.max_seqlen, self.max_batch_size, self.seqlen_offset = max_seqlen, max_batch_size, 0


class GatedRMSNorm(nn.Module):
    """RMSNorm over groups of ``group_size`` channels, gated by ``silu(z)``: before the norm
    (``norm(y * silu(z)) * weight``, ``norm_before_gate=False``, Mamba-2's choice) or after it
    (``norm(y) * weight * silu(z)``). float32 inside, the dtype of ``y`` out. Parameters as
    mamba_ssm's ``layernorm_gated.RMSNorm``: ``weight`` (hidden_size,), no bias."""

    def __init__(self, hidden_size, eps=1e-5, group_size=None, norm_before_gate=False,
                 device=None, dtype=None):
        super().__init__()
        group_size = hidden_size if group_size is None else group_size
        if group_size < 1 or hidden_size % group_size:
            raise ValueError(f"group_size ({group_size}) must divide hidden_size "
                             f"({hidden_size})")
        self.eps, self.group_size, self.norm_before_gate = eps, group_size, norm_before_gate
        self.weight = nn.Parameter(torch.ones(hidden_size, device=device, dtype=dtype))

    def forward(self, y, z=None):
        dtype = y.dtype
        y = y.float()
        if z is not None and not self.norm_before_gate:
            y = y * F.silu(z.float())
        groups = y.unflatten(-1, (-1, self.group_size))
        groups = groups * torch.rsqrt(groups.square().mean(-1, keepdim=True) + self.eps)
        y = groups.flatten(-2) * self.weight.float()
        if z is not None and self.norm_before_gate:
            y = y * F.silu(z.float())
        return y.to(dtype)


class _NoBackward(torch.autograd.Function):
    """Stands in the graph for a kernel call without a backward pass: its output passes
    unchanged, and a backward through it raises, where it would otherwise leave the gradients
    of the kernel's inputs silently out (the kernel's output is not part of the graph)."""

    @staticmethod
    def forward(ctx, y, what, *inputs):
        ctx.what = what
        return y.view_as(y)

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError(f"{ctx.what} has no backward pass here: gradients cannot flow through "
                           f"the SSM of this Mamba2 layer (run it under torch.no_grad() for "
                           f"inference)")


def _no_silent_gradient(y, what, *inputs):
    """``y``, joined to the graph by :class:`_NoBackward` when grad mode is on, some input
    needs a gradient and ``what`` gave ``y`` none."""
    inputs = [t for t in inputs if isinstance(t, torch.Tensor)]
    if torch.is_grad_enabled() and not y.requires_grad and any(t.requires_grad for t in inputs):
        return _NoBackward.apply(y, what, *inputs)
    return y


def _positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


class Mamba2(nn.Module):
    """One Mamba-2 block's mixer (module doc): mamba_ssm's ``Mamba2`` on this package's kernels.

    Args as mamba_ssm's (same order and defaults): ``d_model``, ``d_state``, ``d_conv``,
    ``conv_init`` (uniform init range of the conv weights, else PyTorch's default),
    ``expand`` (``d_inner = expand * d_model``), ``headdim``, ``d_ssm`` (channels through the
    SSM, default ``d_inner``; the rest is a gated MLP), ``ngroups`` (groups of heads sharing
    ``B`` and ``C``), ``A_init_range`` (``A = -U(range)``), ``D_has_hdim`` (``D`` per channel),
    ``rmsnorm``, ``norm_before_gate``, ``dt_min`` / ``dt_max`` / ``dt_init_floor`` (the initial
    ``softplus(dt_bias)``, log-uniform), ``dt_limit`` (``(min, max)`` clamp of ``dt``),
    ``bias`` (of the projections), ``conv_bias``, ``chunk_size`` (64, 128 or 256 here),
    ``use_mem_eff_path`` (accepted, changes nothing), ``layer_idx`` (the key of this layer's
    cache; needed with ``inference_params``), ``process_group`` (must be None),
    ``sequence_parallel``, ``device``, ``dtype``.

    ``chunk_scan``: the function the forward pass calls for the scan; None (the default) is
    :func:`mamba2_tile.mamba_chunk_scan_combined`. mamba_ssm's function of that name takes the
    same arguments, so setting it times or checks the same layer on mamba_ssm's kernels.
    """

    chunk_scan = None

    def __init__(self, d_model, d_state=128, d_conv=4, conv_init=None, expand=2, headdim=64,
                 d_ssm=None, ngroups=1, A_init_range=(1, 16), D_has_hdim=False, rmsnorm=True,
                 norm_before_gate=False, dt_min=0.001, dt_max=0.1, dt_init_floor=1e-4,
                 dt_limit=NO_DT_LIMIT, bias=False, conv_bias=True, chunk_size=256,
                 use_mem_eff_path=True, layer_idx=None, process_group=None,
                 sequence_parallel=True, device=None, dtype=None):
        super().__init__()
        if process_group is not None:
            raise ValueError("process_group must be None: this layer has no tensor parallelism")
        for name, value in (("d_model", d_model), ("d_state", d_state), ("d_conv", d_conv),
                            ("expand", expand), ("headdim", headdim), ("ngroups", ngroups)):
            _positive_int(name, value)
        d_inner = expand * d_model
        d_ssm = d_inner if d_ssm is None else _positive_int("d_ssm", d_ssm)
        if d_ssm > d_inner:
            raise ValueError(f"d_ssm ({d_ssm}) must be at most d_inner = expand * d_model "
                             f"({d_inner})")
        if d_ssm % headdim:
            raise ValueError(f"d_ssm ({d_ssm}, default expand * d_model) must be a multiple of "
                             f"headdim ({headdim}): the SSM channels are cut into heads")
        nheads = d_ssm // headdim
        if nheads % ngroups:
            raise ValueError(f"ngroups ({ngroups}) must divide the number of heads "
                             f"d_ssm / headdim = {nheads}")
        if chunk_size not in CHUNK_SIZES:
            raise ValueError(f"chunk_size must be one of {CHUNK_SIZES}, got {chunk_size!r}")
        low, high = A_init_range
        if not 0 < low <= high:
            raise ValueError(f"A_init_range must be (low, high) with 0 < low <= high, "
                             f"got {A_init_range!r}")
        if not (isinstance(dt_limit, (tuple, list)) and len(dt_limit) == 2
                and dt_limit[0] <= dt_limit[1]):
            raise ValueError(f"dt_limit must be a pair (min, max) with min <= max, "
                             f"got {dt_limit!r}")
        if not 0 < dt_min <= dt_max:
            raise ValueError(f"dt_min and dt_max must satisfy 0 < dt_min <= dt_max, got "
                             f"{dt_min}, {dt_max}")

        self.d_model, self.d_state, self.d_conv = d_model, d_state, d_conv
        self.conv_init, self.expand, self.d_inner = conv_init, expand, d_inner
        self.headdim, self.d_ssm, self.ngroups, self.nheads = headdim, d_ssm, ngroups, nheads
        self.D_has_hdim, self.rmsnorm = D_has_hdim, rmsnorm
        self.norm_before_gate = norm_before_gate
        self.dt_limit = tuple(float(v) for v in dt_limit)
        self.chunk_size, self.use_mem_eff_path = chunk_size, use_mem_eff_path
        self.layer_idx = layer_idx
        self.process_group, self.sequence_parallel = None, sequence_parallel
        self.activation = "silu"
        factory = {"device": device, "dtype": dtype}

        conv_dim = d_ssm + 2 * ngroups * d_state
        self.in_proj = nn.Linear(d_model, 2 * d_inner + 2 * ngroups * d_state + nheads,
                                 bias=bias, **factory)
        # nn.Conv1d for its parameters (names, shapes, init); causal_conv computes with them.
        self.conv1d = nn.Conv1d(conv_dim, conv_dim, kernel_size=d_conv, groups=conv_dim,
                                padding=d_conv - 1, bias=conv_bias, **factory)
        if conv_init is not None:
            nn.init.uniform_(self.conv1d.weight, -conv_init, conv_init)
        # softplus(dt_bias) log-uniform in [dt_min, dt_max], floored; dt_bias its inverse
        dt = torch.exp(torch.rand(nheads, device=device) * (math.log(dt_max) - math.log(dt_min))
                       + math.log(dt_min)).clamp(min=dt_init_floor)
        self.dt_bias = nn.Parameter((dt + torch.log(-torch.expm1(-dt))).to(dtype))
        A = torch.empty(nheads, device=device).uniform_(low, high)
        self.A_log = nn.Parameter(torch.log(A).to(dtype))
        # float32 whatever dtype is, as in mamba_ssm
        self.D = nn.Parameter(torch.ones(d_ssm if D_has_hdim else nheads, device=device))
        for parameter in (self.dt_bias, self.A_log, self.D):
            parameter._no_weight_decay = True
        if rmsnorm:
            self.norm = GatedRMSNorm(d_ssm, eps=1e-5, group_size=d_ssm // ngroups,
                                     norm_before_gate=norm_before_gate, **factory)
        self.out_proj = nn.Linear(d_inner, d_model, bias=bias, **factory)

    @property
    def conv_dim(self):
        return self.conv1d.weight.shape[0]

    # --- the forward pass ---------------------------------------------------------------------

    def forward(self, u, seqlen=None, seq_idx=None, cu_seqlens=None, inference_params=None):
        """``u`` (batch, seqlen, d_model) -> same shape; or, with ``seqlen``, ``u`` (batch *
        seqlen, d_model) -> same shape. ``seq_idx``, ``cu_seqlens``, ``inference_params``: see
        the module doc."""
        if not isinstance(u, torch.Tensor):
            raise TypeError(f"u must be a torch.Tensor, got {type(u).__name__}")
        if seqlen is not None:
            if u.ndim != 2 or u.shape[0] % seqlen:
                raise ValueError(f"with seqlen, u must be (batch * seqlen, d_model) with seqlen "
                                 f"= {seqlen}, got shape {tuple(u.shape)}")
            return self.forward(u.unflatten(0, (-1, seqlen)), seq_idx=seq_idx,
                                cu_seqlens=cu_seqlens,
                                inference_params=inference_params).flatten(0, 1)
        if u.ndim != 3 or u.shape[-1] != self.d_model:
            raise ValueError(f"u must be (batch, seqlen, d_model = {self.d_model}), got shape "
                             f"{tuple(u.shape)}")
        batch, length, _ = u.shape
        if seq_idx is not None and (not isinstance(seq_idx, torch.Tensor)
                                    or tuple(seq_idx.shape) != (batch, length)
                                    or seq_idx.device != u.device):
            got = (f"{tuple(seq_idx.shape)} on {seq_idx.device}"
                   if isinstance(seq_idx, torch.Tensor) else repr(seq_idx))
            raise ValueError(f"seq_idx must be a (batch, seqlen) = ({batch}, {length}) tensor "
                             f"on {u.device} like u, got {got}")
        if inference_params is not None:
            cache_batch = batch if cu_seqlens is None else cu_seqlens.shape[0] - 1
            conv_state, ssm_state = self._get_states_from_cache(inference_params, cache_batch)
            if inference_params.seqlen_offset > 0:
                out, _, _ = self.step(u, conv_state, ssm_state)
                return out

        z0, x0, z, xBC, dt = self._split(self.in_proj(u))
        x, B, C = self._split_xBC(self.causal_conv(xBC, seq_idx))
        caching = inference_params is not None
        results = (self.chunk_scan or mamba_chunk_scan_combined)(
            x.unflatten(-1, (self.nheads, self.headdim)), dt, self._A(),
            B.unflatten(-1, (self.ngroups, self.d_state)),
            C.unflatten(-1, (self.ngroups, self.d_state)),
            self.chunk_size, D=self._D(), z=None if self.rmsnorm else self._heads(z),
            dt_bias=self.dt_bias, seq_idx=seq_idx, cu_seqlens=cu_seqlens, dt_softplus=True,
            dt_limit=self.dt_limit, return_final_states=caching,
            return_varlen_states=caching and cu_seqlens is not None)
        if caching:
            # written only now, after every check of the scan has passed
            y, final_states, *varlen_states = results
            ssm_state.copy_(varlen_states[0] if cu_seqlens is not None else final_states)
            conv_state.copy_(self._conv_window(xBC, seq_idx, cu_seqlens))
        else:
            y = results
        y = _no_silent_gradient(y, "mamba_chunk_scan_combined", x, dt, B, C, z, self.A_log,
                                self.D, self.dt_bias)
        return self._output(y.flatten(-2), z, z0, x0)

    def _split(self, zxbcdt):
        d_mlp = self.d_inner - self.d_ssm
        return torch.split(zxbcdt, [d_mlp, d_mlp, self.d_ssm, self.conv_dim, self.nheads], dim=-1)

    def _split_xBC(self, xBC):
        groups = self.ngroups * self.d_state
        return torch.split(xBC, [self.d_ssm, groups, groups], dim=-1)

    def _A(self):
        # float32 first: exp of a float16 A_log can overflow to -inf
        return -torch.exp(self.A_log.float())

    def _D(self):
        return self.D.view(self.nheads, self.headdim) if self.D_has_hdim else self.D

    def _heads(self, t):
        return t.unflatten(-1, (self.nheads, self.headdim))

    def _output(self, y, z, z0, x0):
        """Steps 4 and 5 of the module doc, on ``y`` (..., d_ssm)."""
        if self.rmsnorm:
            y = self.norm(y, z)
        if z0.shape[-1]:
            y = torch.cat([F.silu(z0) * x0, y], dim=-1)
        return self.out_proj(y)

    def causal_conv(self, xBC, seq_idx=None):
        """``silu(bias + sum_k weight[:, k] * xBC[t - (d_conv - 1) + k])`` per channel, for
        ``xBC`` (batch, seqlen, conv_dim): the convolution sees no token before the row's first
        nor, with ``seq_idx``, before its own sequence's first. Sums in float32, out in the
        dtype of ``xBC``."""
        length, width = xBC.shape[1], self.d_conv
        weight = self.conv1d.weight[:, 0, :].float()            # (conv_dim, d_conv)
        padded = F.pad(xBC.float(), (0, 0, width - 1, 0))       # zeros before the first token
        if seq_idx is not None:
            padded_idx = F.pad(seq_idx, (width - 1, 0), value=-1)
        out = None
        for k in range(width):
            window = padded[:, k:k + length]                    # the token d_conv - 1 - k back
            if seq_idx is not None:
                same = padded_idx[:, k:k + length] == seq_idx
                window = torch.where(same.unsqueeze(-1), window, 0.0)
            term = window * weight[:, k]
            out = term if out is None else out + term
        if self.conv1d.bias is not None:
            out = out + self.conv1d.bias.float()
        return F.silu(out).to(xBC.dtype)

    def _conv_window(self, xBC, seq_idx, cu_seqlens):
        """The conv cache after a prefill, (rows, conv_dim, d_conv): the last ``d_conv`` inputs
        of each row (with ``cu_seqlens``: of each sequence), zero where the row or its last
        sequence has fewer tokens."""
        width = self.d_conv
        if cu_seqlens is not None:
            ends = cu_seqlens[1:].long().to(xBC.device)
            positions = ends[:, None] - width + torch.arange(width, device=xBC.device)
            valid = positions >= cu_seqlens[:-1].long().to(xBC.device)[:, None]
            window = xBC[0, positions.clamp(min=0)]             # (sequences, d_conv, conv_dim)
            window = torch.where(valid.unsqueeze(-1), window, 0)
        else:
            window = F.pad(xBC, (0, 0, max(width - xBC.shape[1], 0), 0))[:, -width:]
            if seq_idx is not None:
                padded_idx = F.pad(seq_idx, (max(width - xBC.shape[1], 0), 0), value=-1)
                same = padded_idx[:, -width:] == seq_idx[:, -1:]
                window = torch.where(same.unsqueeze(-1), window, 0)
        return window.transpose(1, 2)

    # --- generation ---------------------------------------------------------------------------

    def step(self, hidden_states, conv_state, ssm_state):
        """One token: ``hidden_states`` (batch, 1, d_model) -> ``(out (batch, 1, d_model),
        conv_state, ssm_state)``, both caches updated in place (shapes of
        :meth:`allocate_inference_cache`)."""
        if (not isinstance(hidden_states, torch.Tensor) or hidden_states.ndim != 3
                or hidden_states.shape[1:] != (1, self.d_model)):
            raise ValueError(f"hidden_states must be (batch, 1, d_model = {self.d_model}): one "
                             f"token at a time, got {getattr(hidden_states, 'shape', None)}")
        batch = hidden_states.shape[0]
        for name, state, shape in (
                ("conv_state", conv_state, (batch, self.conv_dim, self.d_conv)),
                ("ssm_state", ssm_state, (batch, self.nheads, self.headdim, self.d_state))):
            if not isinstance(state, torch.Tensor) or tuple(state.shape) != shape:
                raise ValueError(f"{name} must be a tensor of shape {shape}, got "
                                 f"{getattr(state, 'shape', state)!r}")
        z0, x0, z, xBC, dt = self._split(self.in_proj(hidden_states[:, 0]))
        window = torch.cat([conv_state[:, :, 1:], xBC.unsqueeze(-1).to(conv_state.dtype)], -1)
        xBC = (window.float() * self.conv1d.weight[:, 0, :].float()).sum(-1)
        if self.conv1d.bias is not None:
            xBC = xBC + self.conv1d.bias.float()
        x, B, C = self._split_xBC(F.silu(xBC).to(hidden_states.dtype))

        shape = (self.nheads, self.headdim)
        dt_bias = self.dt_bias
        if self.dt_limit != NO_DT_LIMIT:
            # the decode kernel has no limit: dt is finished here, as the scan does it
            dt = F.softplus(dt.float() + dt_bias.float()).clamp(*self.dt_limit)
            dt_bias = None
        D = self._D()
        y = selective_state_update(
            ssm_state, self._heads(x), dt.unsqueeze(-1).expand(batch, *shape),
            self._A()[:, None, None].expand(*shape, self.d_state),
            B.unflatten(-1, (self.ngroups, self.d_state)),
            C.unflatten(-1, (self.ngroups, self.d_state)),
            D=D if self.D_has_hdim else D[:, None].expand(shape),
            z=None if self.rmsnorm else self._heads(z),
            dt_bias=None if dt_bias is None else dt_bias[:, None].expand(shape),
            dt_softplus=dt_bias is not None)
        conv_state.copy_(window)            # after the decode step's checks have passed
        y = _no_silent_gradient(y, "selective_state_update", x, dt, B, C, z, self.A_log, self.D,
                                self.dt_bias)
        out = self._output(y.flatten(-2), z, z0, x0)
        return out.unsqueeze(1), conv_state, ssm_state

    def allocate_inference_cache(self, batch_size, max_seqlen, dtype=None, **kwargs):
        """Zero caches for ``batch_size`` rows: ``conv_state`` (batch, conv_dim, d_conv) (a
        transposed view, mamba_ssm's layout) and ``ssm_state`` (batch, nheads, headdim,
        d_state), in ``dtype`` or the parameters'. ``max_seqlen`` is unused: the caches do not
        grow with the sequence."""
        device = self.out_proj.weight.device
        conv_state = torch.zeros(batch_size, self.d_conv, self.conv_dim, device=device,
                                 dtype=dtype or self.conv1d.weight.dtype).transpose(1, 2)
        ssm_state = torch.zeros(batch_size, self.nheads, self.headdim, self.d_state,
                                device=device, dtype=dtype or self.in_proj.weight.dtype)
        return conv_state, ssm_state

    def _get_states_from_cache(self, inference_params, batch_size, initialize_states=False):
        if self.layer_idx is None:
            raise ValueError("inference_params needs the layer's layer_idx (the key of its "
                             "cache in inference_params.key_value_memory_dict), got None")
        caches = inference_params.key_value_memory_dict
        if self.layer_idx not in caches:
            caches[self.layer_idx] = self.allocate_inference_cache(batch_size, None)
        elif caches[self.layer_idx][1].shape[0] != batch_size:
            raise ValueError(f"the cache of layer {self.layer_idx} has "
                             f"{caches[self.layer_idx][1].shape[0]} rows, this call needs "
                             f"{batch_size} (a new generation needs fresh inference_params)")
        elif initialize_states:
            for state in caches[self.layer_idx]:
                state.zero_()
        return caches[self.layer_idx]
