"""The ``Mamba2`` layer on the CPU interpreter: against a float64 token-by-token
re-implementation written here from the layer's parameters, mamba_ssm's parameter names and
shapes, prefill + decode against one long forward, packed sequences, and bad arguments.

``reference_layer`` is shared with tests/gpu/test_layer_gpu.py.
"""

import importlib

import pytest
import torch
import torch.nn.functional as F

import mamba2_tile
from mamba2_tile.layer import GatedRMSNorm, InferenceParams, Mamba2
from mamba2_tile.tolerances import TOLERANCES, assert_close
from mamba2_tile.torch_reference import mamba_chunk_scan_torch

TOL = TOLERANCES[torch.float32]

# Small layers, each with one feature of mamba_ssm's Mamba2 switched on (chunk_size 64, the
# smallest the kernels take, so seqlen up to 40 is one partial chunk and 70 two).
CONFIGS = {
    "plain": dict(d_model=16, d_state=8, headdim=4),
    "ngroups": dict(d_model=32, d_state=16, headdim=8, ngroups=2),
    "D_has_hdim": dict(d_model=16, d_state=8, headdim=8, D_has_hdim=True),
    "d_mlp": dict(d_model=16, d_state=8, headdim=4, d_ssm=16),
    "no_rmsnorm": dict(d_model=16, d_state=8, headdim=4, rmsnorm=False),
    "norm_before_gate": dict(d_model=16, d_state=8, headdim=4, ngroups=2, norm_before_gate=True),
    "dt_limit": dict(d_model=16, d_state=8, headdim=4, dt_limit=(0.02, 0.2)),
    "biases": dict(d_model=16, d_state=8, headdim=4, d_conv=3, bias=True, conv_bias=False,
                   expand=3),
}


def make_layer(seed=0, dtype=torch.float32, **config):
    """A layer whose every parameter is random (D and the norm weight start as ones), with
    ``dt`` large enough that the state decays noticeably over a few tokens."""
    torch.manual_seed(seed)
    config = {"chunk_size": 64, "layer_idx": 0, "dt_min": 0.05, "dt_max": 0.5, **config}
    layer = Mamba2(**config, dtype=dtype)
    with torch.no_grad():
        layer.D.copy_(torch.randn_like(layer.D))
        if layer.rmsnorm:
            layer.norm.weight.copy_(1 + 0.5 * torch.randn_like(layer.norm.weight))
    return layer


def reference_layer(layer, u, seq_idx=None):
    """float64, token by token, from ``layer.state_dict()`` and its sizes alone: returns
    ``(out, conv_window, state)``, the output and what the caches hold after the last token
    (``conv_window`` (batch, conv_dim, d_conv): the convolution's last inputs of the row's last
    sequence; ``state`` (batch, nheads, headdim, d_state))."""
    p = {name: value.detach().double().cpu() for name, value in layer.state_dict().items()}
    u = u.detach().double().cpu()
    batch, length, _ = u.shape
    d_inner, d_ssm, nheads = layer.d_inner, layer.d_ssm, layer.nheads
    headdim, ngroups, d_state, width = layer.headdim, layer.ngroups, layer.d_state, layer.d_conv
    d_mlp = d_inner - d_ssm
    seq = torch.zeros(batch, length, dtype=torch.long) if seq_idx is None else seq_idx.cpu()

    proj = u @ p["in_proj.weight"].T + p.get("in_proj.bias", 0)
    z0, x0 = proj[..., :d_mlp], proj[..., d_mlp:2 * d_mlp]
    z = proj[..., 2 * d_mlp:2 * d_mlp + d_ssm]
    xBC_in = proj[..., 2 * d_mlp + d_ssm:-nheads]
    dt = F.softplus(proj[..., -nheads:] + p["dt_bias"]).clamp(*layer.dt_limit)

    conv_weight = p["conv1d.weight"][:, 0, :]          # tap d_conv - 1 is the current token
    xBC = torch.zeros_like(xBC_in)
    conv_window = torch.zeros(batch, xBC_in.shape[-1], width, dtype=torch.float64)
    for b in range(batch):
        for t in range(length):
            acc = p.get("conv1d.bias", torch.zeros(xBC_in.shape[-1])).clone()
            for back in range(width):
                s = t - back
                if s < 0 or seq[b, s] != seq[b, t]:
                    break
                acc += conv_weight[:, width - 1 - back] * xBC_in[b, s]
            xBC[b, t] = F.silu(acc)
        for back in range(min(width, length)):
            if seq[b, length - 1 - back] != seq[b, length - 1]:
                break
            conv_window[b, :, width - 1 - back] = xBC_in[b, length - 1 - back]

    x = xBC[..., :d_ssm].reshape(batch, length, nheads, headdim)
    group = torch.arange(nheads) // (nheads // ngroups)
    B, C = (part.reshape(batch, length, ngroups, d_state)[:, :, group]
            for part in xBC[..., d_ssm:].chunk(2, dim=-1))
    A = -torch.exp(p["A_log"])
    D = p["D"].reshape(nheads, headdim) if layer.D_has_hdim else p["D"][:, None]

    state = torch.zeros(batch, nheads, headdim, d_state, dtype=torch.float64)
    y = torch.zeros(batch, length, nheads, headdim, dtype=torch.float64)
    for t in range(length):
        if t:
            state[seq[:, t] != seq[:, t - 1]] = 0
        decay = torch.exp(dt[:, t] * A)[..., None, None]
        state = decay * state + (dt[:, t, :, None] * x[:, t])[..., None] * B[:, t, :, None, :]
        y[:, t] = (state * C[:, t, :, None, :]).sum(-1) + D * x[:, t]
    y = y.reshape(batch, length, d_ssm)

    gate = F.silu(z)
    if not layer.rmsnorm:
        y = y * gate
    else:
        if not layer.norm_before_gate:
            y = y * gate
        grouped = y.reshape(batch, length, ngroups, d_ssm // ngroups)
        grouped = grouped / torch.sqrt(grouped.square().mean(-1, keepdim=True) + 1e-5)
        y = grouped.reshape(batch, length, d_ssm) * p["norm.weight"]
        if layer.norm_before_gate:
            y = y * gate
    if d_mlp:
        y = torch.cat([F.silu(z0) * x0, y], dim=-1)
    out = y @ p["out_proj.weight"].T + p.get("out_proj.bias", 0)
    return out, conv_window, state


def inputs(batch, length, d_model, seed=1):
    return torch.randn(batch, length, d_model, generator=torch.Generator().manual_seed(seed))


# --- the forward pass -------------------------------------------------------------------------

@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("length", [3, 40])
def test_forward_matches_float64_recurrence(name, length):
    layer = make_layer(**CONFIGS[name])
    u = inputs(2, length, layer.d_model)
    out = layer(u)
    assert out.shape == u.shape and out.dtype == torch.float32
    assert_close(out, reference_layer(layer, u)[0], TOL, f"{name} out")


def test_forward_two_chunks_and_flat_input():
    layer = make_layer(**CONFIGS["ngroups"])
    u = inputs(1, 70, layer.d_model)
    out = layer(u)
    assert_close(out, reference_layer(layer, u)[0], TOL, "out over two chunks")
    flat = layer(u.flatten(0, 1), seqlen=70)       # mamba_ssm's (batch * seqlen, d_model) form
    assert torch.equal(flat, out.flatten(0, 1))


def test_packed_sequences_match_each_sequence_alone():
    """With seq_idx neither the scan nor the convolution sees the previous sequence."""
    layer = make_layer(**CONFIGS["ngroups"])
    lengths = [5, 1, 2, 17]
    u = inputs(1, sum(lengths), layer.d_model)
    seq_idx = torch.repeat_interleave(torch.arange(len(lengths), dtype=torch.int32),
                                      torch.tensor(lengths))[None]
    packed = layer(u, seq_idx=seq_idx)
    assert_close(packed, reference_layer(layer, u, seq_idx)[0], TOL, "packed out")
    start = 0
    for n in lengths:
        alone = layer(u[:, start:start + n])
        assert_close(packed[:, start:start + n], alone, TOL, f"sequence at {start}")
        start += n


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("name", ["ngroups", "d_mlp"])
def test_half_precision_layer(name, dtype):
    """A layer in bfloat16 / float16 (parameters, input, caches), against float64 fed the same
    rounded parameters: worst seen 1.3e-2 (bfloat16) and 1.7e-3 (float16) over CONFIGS."""
    layer = make_layer(**CONFIGS[name], dtype=dtype)
    u = inputs(2, 14, layer.d_model).to(dtype)
    out, _, state_ref = reference_layer(layer, u)
    assert layer(u).dtype == dtype
    assert_close(layer(u), out, TOLERANCES[dtype], f"{name} {dtype} forward")
    generated, (_, ssm_state) = generate(layer, u, 9)
    assert ssm_state.dtype == dtype                   # mamba_ssm's cache: the parameters' dtype
    assert_close(generated, out, TOLERANCES[dtype], f"{name} {dtype} prefill + steps")
    assert_close(ssm_state, state_ref, TOLERANCES[dtype], f"{name} {dtype} ssm_state")


def scan_in_float64_torch(x, dt, A, B, C, chunk_size, seq_idx=None, cu_seqlens=None,
                          return_varlen_states=False, **kwargs):
    """The chunked PyTorch baseline in float64 under autograd: a scan whose gradients torch
    derives, for the layer's backward test (unpacked calls only)."""
    assert seq_idx is None and not return_varlen_states
    return mamba_chunk_scan_torch(x, dt, A, B, C, chunk_size, compute_dtype=torch.float64,
                                  **kwargs)


@pytest.mark.parametrize("name", ["plain", "ngroups", "no_rmsnorm", "dt_limit", "biases"])
def test_backward_matches_autograd_through_the_torch_baseline(name, monkeypatch):
    """Every parameter's gradient (in_proj, conv1d, A_log, D, dt_bias, norm, out_proj) through
    the cuTile backward kernels, against the same layer with the scan in float64 PyTorch."""
    layer = make_layer(**CONFIGS[name])
    u = inputs(2, 70, layer.d_model)
    target = torch.randn(2, 70, layer.d_model, generator=torch.Generator().manual_seed(3))

    def parameter_gradients():
        layer.zero_grad()
        (layer(u) * target).sum().backward()
        return {n: p.grad.clone() for n, p in layer.named_parameters()}

    ours = parameter_gradients()
    monkeypatch.setattr(mamba2_tile.layer, "mamba_chunk_scan_combined", scan_in_float64_torch)
    expected = parameter_gradients()
    for parameter, grad in expected.items():
        assert_close(ours[parameter], grad, TOL, f"{name}: d {parameter}")


def scan_recurrence_float64(x, dt, A, B, C, chunk_size, D=None, z=None, dt_bias=None,
                            initial_states=None, seq_idx=None, cu_seqlens=None,
                            dt_softplus=False, dt_limit=(0.0, float("inf")),
                            return_final_states=False, return_varlen_states=False):
    """The scan token by token in float64 under autograd, the state reset where ``seq_idx``
    changes: an independent scan whose gradients torch derives, for the packed backward test
    (``y`` only)."""
    assert initial_states is None and not return_final_states and not return_varlen_states
    out_dtype = x.dtype
    x, dt, A, B, C = (t.double() for t in (x, dt, A, B, C))
    heads_per_group = x.shape[2] // B.shape[2]
    B, C = (t.repeat_interleave(heads_per_group, dim=2) for t in (B, C))
    dt = dt + dt_bias.double() if dt_bias is not None else dt
    dt = (torch.where(dt <= 20.0, F.softplus(dt), dt) if dt_softplus else dt).clamp(*dt_limit)
    state = x.new_zeros(x.shape[0], x.shape[2], x.shape[3], B.shape[3])
    ys = []
    for t in range(x.shape[1]):
        keep = x.new_ones(x.shape[0]) if seq_idx is None or t == 0 else \
            (seq_idx[:, t] == seq_idx[:, t - 1]).double()
        decay = torch.exp(dt[:, t] * A) * keep[:, None]
        state = (decay[..., None, None] * state
                 + (dt[:, t, :, None] * x[:, t])[..., None] * B[:, t, :, None, :])
        ys.append(torch.einsum("bhpn,bhn->bhp", state, C[:, t]))
    y = torch.stack(ys, dim=1)
    if D is not None:
        y = y + x * (D.double()[:, None] if D.dim() == 1 else D.double())
    if z is not None:
        y = y * F.silu(z.double())
    return y.to(out_dtype)


@pytest.mark.parametrize("name", ["plain", "ngroups", "no_rmsnorm"])
def test_packed_backward_matches_autograd_through_a_float64_recurrence(name, monkeypatch):
    """With seq_idx (sequences of 1, 29, 1 and 39 tokens in one row, then 70 in a row that
    starts at sequence 3): every parameter's gradient and the input's through the cuTile
    backward kernels, against the same layer with the scan a float64 recurrence with resets."""
    layer = make_layer(**CONFIGS[name])
    u = inputs(2, 70, layer.d_model).requires_grad_()
    seq_idx = torch.tensor([[0] + [1] * 29 + [2] + [3] * 39, [3] * 70], dtype=torch.int32)
    target = torch.randn(2, 70, layer.d_model, generator=torch.Generator().manual_seed(3))

    def gradients():
        layer.zero_grad()
        u.grad = None
        (layer(u, seq_idx=seq_idx) * target).sum().backward()
        return {"u": u.grad.clone(), **{n: p.grad.clone() for n, p in layer.named_parameters()}}

    ours = gradients()
    monkeypatch.setattr(mamba2_tile.layer, "mamba_chunk_scan_combined", scan_recurrence_float64)
    expected = gradients()
    for parameter, grad in expected.items():
        assert_close(ours[parameter], grad, TOL, f"{name} packed: d {parameter}")


def test_packed_prefill_with_cu_seqlens_has_the_gradients_of_the_plain_packed_call():
    """A packed prefill filling one cache row per sequence (the scan's return_varlen_states)
    trains too: its output's gradients are those of the same call without the cache."""
    layer = make_layer(**CONFIGS["plain"])
    u = inputs(1, 70, layer.d_model)
    seq_idx = torch.tensor([[0] * 30 + [1] * 40], dtype=torch.int32)
    cu_seqlens = torch.tensor([0, 30, 70], dtype=torch.int32)

    def gradients(**cache):
        layer.zero_grad()
        layer(u, seq_idx=seq_idx, **cache).square().sum().backward()
        return {n: p.grad.clone() for n, p in layer.named_parameters()}

    plain = gradients()
    cached = gradients(cu_seqlens=cu_seqlens,
                       inference_params=InferenceParams(max_seqlen=70, max_batch_size=2))
    for parameter, grad in plain.items():
        torch.testing.assert_close(cached[parameter], grad, msg=f"d {parameter}")


def test_the_scan_gets_views_of_the_projections(monkeypatch):
    """x, B, C are cut from the convolution's output and dt, z from the in-projection's, as
    torch.split views: the layer copies none of them for the scan."""
    import mamba2_tile.layer

    seen = {}

    def scan(x, dt, A, B, C, chunk_size, **kwargs):
        seen.update(x=x, dt=dt, B=B, C=C, z=kwargs["z"])
        return mamba_chunk_scan(x, dt, A, B, C, chunk_size, **kwargs)

    mamba_chunk_scan = mamba2_tile.layer.mamba_chunk_scan_combined
    monkeypatch.setattr(mamba2_tile.layer, "mamba_chunk_scan_combined", scan)
    layer = make_layer(**CONFIGS["no_rmsnorm"])        # z goes to the scan as its gate
    layer(inputs(1, 6, layer.d_model))
    storage = {name: t.untyped_storage().data_ptr() for name, t in seen.items()}
    assert storage["x"] == storage["B"] == storage["C"]
    assert storage["dt"] == storage["z"] != storage["x"]
    assert not seen["x"].is_contiguous() and not seen["dt"].is_contiguous()


def test_gated_rmsnorm_groups():
    norm = GatedRMSNorm(8, group_size=4)
    y = torch.tensor([[1.0, 1, 1, 1, 2, 2, 2, 2]])
    assert torch.allclose(norm(y), torch.ones(1, 8), atol=1e-5)   # each group normalised alone


def test_exported_from_the_package():
    assert mamba2_tile.Mamba2 is Mamba2 and mamba2_tile.InferenceParams is InferenceParams


# --- mamba_ssm's parameters -------------------------------------------------------------------

def mamba_ssm_state_dict(d_model, d_state=128, d_conv=4, expand=2, headdim=64, d_ssm=None,
                         ngroups=1, D_has_hdim=False, rmsnorm=True, bias=False, conv_bias=True,
                         **_):
    """The (name, shape) list of mamba_ssm's ``Mamba2(...).state_dict()``, in its order, as
    read from mamba_ssm/modules/mamba2.py: its own parameters dt_bias, A_log, D first (a
    module's state_dict lists its own parameters before its children's), then the children in
    the order ``__init__`` makes them: in_proj, conv1d, norm (layernorm_gated.RMSNorm: weight,
    no bias), out_proj."""
    d_inner = expand * d_model
    d_ssm = d_inner if d_ssm is None else d_ssm
    nheads = d_ssm // headdim
    conv_dim = d_ssm + 2 * ngroups * d_state
    entries = [("dt_bias", (nheads,)), ("A_log", (nheads,)),
               ("D", (d_ssm,) if D_has_hdim else (nheads,))]
    entries += [("in_proj.weight", (2 * d_inner + 2 * ngroups * d_state + nheads, d_model))]
    entries += [("in_proj.bias", (2 * d_inner + 2 * ngroups * d_state + nheads,))] * bias
    entries += [("conv1d.weight", (conv_dim, 1, d_conv))]
    entries += [("conv1d.bias", (conv_dim,))] * conv_bias
    entries += [("norm.weight", (d_ssm,))] * rmsnorm
    entries += [("out_proj.weight", (d_model, d_inner))]
    entries += [("out_proj.bias", (d_model,))] * bias
    return entries


@pytest.mark.parametrize("name", CONFIGS)
def test_state_dict_is_mamba_ssms(name):
    layer = make_layer(**CONFIGS[name])
    got = [(key, tuple(value.shape)) for key, value in layer.state_dict().items()]
    assert got == mamba_ssm_state_dict(**CONFIGS[name])


def test_parameter_dtypes_as_mamba_ssm():
    layer = Mamba2(16, d_state=8, headdim=4, chunk_size=64, dtype=torch.bfloat16)
    assert layer.D.dtype == torch.float32            # D stays float32 there too
    assert {layer.in_proj.weight.dtype, layer.A_log.dtype, layer.dt_bias.dtype,
            layer.norm.weight.dtype} == {torch.bfloat16}


def test_loads_into_mamba_ssm_and_back():
    try:
        module = importlib.import_module("mamba_ssm.modules.mamba2")
    except Exception as error:      # no mamba_ssm, or its Triton / CUDA imports fail on a CPU
        pytest.skip(f"mamba_ssm.modules.mamba2 does not import here: {error!r}")
    config = CONFIGS["ngroups"]
    ours = make_layer(**config)
    theirs = module.Mamba2(**config, chunk_size=64)
    theirs.load_state_dict(ours.state_dict())
    ours.load_state_dict(theirs.state_dict())


# --- generation -------------------------------------------------------------------------------

def generate(layer, u, prompt):
    """Prefill ``u[:, :prompt]`` through ``inference_params``, then each following token one
    at a time through the cache; returns the outputs, concatenated, and the caches."""
    params = InferenceParams(max_seqlen=u.shape[1], max_batch_size=u.shape[0])
    outs = [layer(u[:, :prompt], inference_params=params)]
    params.seqlen_offset += prompt
    for t in range(prompt, u.shape[1]):
        outs.append(layer(u[:, t:t + 1], inference_params=params))
        params.seqlen_offset += 1
    return torch.cat(outs, dim=1), params.key_value_memory_dict[layer.layer_idx]


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("prompt", [2, 9])
def test_prefill_then_steps_equal_one_forward(name, prompt):
    layer = make_layer(**CONFIGS[name])
    u = inputs(2, 14, layer.d_model, seed=3)
    generated, (conv_state, ssm_state) = generate(layer, u, prompt)
    assert_close(generated, layer(u), TOL, f"{name}: prefill {prompt} + steps")
    out, conv_ref, state_ref = reference_layer(layer, u)
    assert_close(generated, out, TOL, f"{name}: against float64")
    assert_close(ssm_state, state_ref, TOL, f"{name}: ssm_state")
    assert_close(conv_state, conv_ref, TOL, f"{name}: conv_state")


def test_prefill_caches():
    layer = make_layer(**CONFIGS["plain"])
    u = inputs(2, 9, layer.d_model, seed=4)
    params = InferenceParams(max_seqlen=9, max_batch_size=2)
    layer(u, inference_params=params)
    conv_state, ssm_state = params.key_value_memory_dict[0]
    assert conv_state.shape == (2, layer.conv_dim, layer.d_conv)
    assert conv_state.stride(1) == 1                  # mamba_ssm's transposed layout
    assert ssm_state.shape == (2, layer.nheads, layer.headdim, layer.d_state)
    _, conv_ref, state_ref = reference_layer(layer, u)
    assert_close(conv_state, conv_ref, TOL, "conv_state")
    assert_close(ssm_state, state_ref, TOL, "ssm_state")


def test_allocate_inference_cache_and_step():
    layer = make_layer(**CONFIGS["D_has_hdim"])
    conv_state, ssm_state = layer.allocate_inference_cache(3, 100)
    assert conv_state.shape == (3, layer.conv_dim, layer.d_conv) and conv_state.stride(1) == 1
    assert ssm_state.shape == (3, layer.nheads, layer.headdim, layer.d_state)
    u = inputs(3, 1, layer.d_model)
    out, conv_after, ssm_after = layer.step(u, conv_state, ssm_state)
    assert conv_after is conv_state and ssm_after is ssm_state
    assert_close(out, reference_layer(layer, u)[0], TOL, "one step from zero")


def test_packed_prefill_fills_one_cache_row_per_sequence():
    layer = make_layer(**CONFIGS["ngroups"])
    lengths = [6, 2, 11]
    u = inputs(1, sum(lengths), layer.d_model, seed=5)
    seq_idx = torch.repeat_interleave(torch.arange(3, dtype=torch.int32),
                                      torch.tensor(lengths))[None]
    cu_seqlens = torch.tensor([0, 6, 8, 19], dtype=torch.int32)
    params = InferenceParams(max_seqlen=19, max_batch_size=3)
    layer(u, seq_idx=seq_idx, cu_seqlens=cu_seqlens, inference_params=params)
    conv_state, ssm_state = params.key_value_memory_dict[0]
    assert ssm_state.shape[0] == 3
    for i, (start, end) in enumerate(zip(cu_seqlens[:-1].tolist(), cu_seqlens[1:].tolist())):
        _, conv_ref, state_ref = reference_layer(layer, u[:, start:end])
        assert_close(conv_state[i], conv_ref[0], TOL, f"conv_state of sequence {i}")
        assert_close(ssm_state[i], state_ref[0], TOL, f"ssm_state of sequence {i}")


def test_packed_prefill_without_cu_seqlens_keeps_only_the_last_sequence():
    layer = make_layer(**CONFIGS["plain"])
    u = inputs(1, 8, layer.d_model, seed=6)
    seq_idx = torch.tensor([[0, 0, 0, 0, 0, 0, 1, 1]], dtype=torch.int32)
    params = InferenceParams(max_seqlen=8, max_batch_size=1)
    layer(u, seq_idx=seq_idx, inference_params=params)
    conv_state, ssm_state = params.key_value_memory_dict[0]
    _, conv_ref, state_ref = reference_layer(layer, u[:, 6:])
    assert_close(conv_state, conv_ref, TOL, "conv_state")
    assert_close(ssm_state, state_ref, TOL, "ssm_state")


# --- bad arguments ----------------------------------------------------------------------------

@pytest.mark.parametrize("config, match", [
    (dict(d_model=10, headdim=8), r"d_ssm \(20.*multiple of headdim \(8\)"),
    (dict(d_model=16, headdim=4, ngroups=3), r"ngroups \(3\) must divide.*8"),
    (dict(d_model=16, headdim=4, d_ssm=40), r"d_ssm \(40\) must be at most d_inner"),
    (dict(d_model=16, headdim=4, chunk_size=32), r"chunk_size must be one of"),
    (dict(d_model=16, headdim=4, A_init_range=(0, 1)), r"A_init_range"),
    (dict(d_model=16, headdim=4, dt_limit=(1.0, 0.1)), r"dt_limit"),
    (dict(d_model=0, headdim=4), r"d_model must be a positive integer"),
    (dict(d_model=16, headdim=4, process_group=object()), r"process_group must be None"),
])
def test_bad_constructor_arguments(config, match):
    with pytest.raises(ValueError, match=match):
        Mamba2(**config)


def test_bad_call_arguments_leave_the_caches_untouched():
    layer = make_layer(**CONFIGS["plain"])
    u = inputs(2, 5, layer.d_model)
    with pytest.raises(ValueError, match=r"u must be \(batch, seqlen, d_model = 16\)"):
        layer(u[..., :8])
    with pytest.raises(ValueError, match=r"seq_idx must be a \(batch, seqlen\) = \(2, 5\) tensor"):
        layer(u, seq_idx=torch.zeros(2, 4, dtype=torch.int32))
    with pytest.raises(ValueError, match="layer_idx"):
        make_layer(**CONFIGS["plain"], layer_idx=None)(
            u, inference_params=InferenceParams(5, 2))
    params = InferenceParams(max_seqlen=5, max_batch_size=2)
    decreasing = torch.tensor([[1, 1, 0, 0, 0]] * 2, dtype=torch.int32)
    with pytest.raises(ValueError, match="seq_idx"):
        layer(u, seq_idx=decreasing, inference_params=params)
    for state in params.key_value_memory_dict[0]:
        assert not state.any()
    conv_state, ssm_state = layer.allocate_inference_cache(2, 5)
    with pytest.raises(ValueError, match="one token at a time"):
        layer.step(u, conv_state, ssm_state)
    with pytest.raises(ValueError, match=r"ssm_state must be a tensor of shape"):
        layer.step(u[:, :1], conv_state, ssm_state[:, :1])
    params = InferenceParams(max_seqlen=5, max_batch_size=2)
    layer(u, inference_params=params)
    with pytest.raises(ValueError, match="cache of layer 0 has 2 rows, this call needs 1"):
        layer(u[:1], inference_params=params)
