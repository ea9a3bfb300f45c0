"""The ``Mamba2`` layer on a GPU through real cuTile: against the float64 token-by-token
re-implementation of tests/test_layer.py (float32 and bfloat16, several chunks, packed
sequences, prefill + decode), and against mamba_ssm's own ``Mamba2`` loaded with the same
``state_dict`` where mamba_ssm imports (forward, prefill and decode steps).

Skipped unless torch sees a CUDA device and the real ``cuda.tile`` imports.
"""

import importlib
import importlib.util
import sys
import types
from pathlib import Path

import pytest
import torch

from mamba2_tile import dispatch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import mamba2_tile.layer  # noqa: E402
from test_layer import (generate, inputs, make_layer, reference_layer,  # noqa: E402
                        scan_recurrence_float64)
from mamba2_tile.layer import InferenceParams  # noqa: E402
from mamba2_tile.tolerances import GPU_TOLERANCES, assert_close, relative_errors  # noqa: E402

pytestmark = pytest.mark.skipif(not dispatch.gpu_available(),
                                reason="needs a GPU that cuTile supports and the real cuda.tile")

DTYPES = [torch.float32, torch.bfloat16]
# Sizes of a small real model (headdim 64, dstate 64 or 128), and one with the options on.
CONFIGS = {
    "model": dict(d_model=256, d_state=64, headdim=64),
    "options": dict(d_model=192, d_state=128, headdim=32, ngroups=4, d_ssm=256,
                    D_has_hdim=True, dt_limit=(0.0, 0.3), bias=True),
}


def gpu_layer(name, dtype, chunk_size=64, seed=0):
    return make_layer(seed=seed, dtype=dtype, chunk_size=chunk_size, **CONFIGS[name]).cuda()


@pytest.mark.parametrize("chunk_size", [64, 256])
@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_forward_matches_float64(dtype, name, chunk_size):
    layer = gpu_layer(name, dtype, chunk_size)
    u = inputs(2, 300, layer.d_model).to("cuda", dtype)
    with torch.no_grad():
        out = layer(u)
    assert_close(out, reference_layer(layer, u)[0], GPU_TOLERANCES[dtype], f"{name} out")


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_prefill_and_steps_match_float64(dtype, name):
    layer = gpu_layer(name, dtype)
    u = inputs(4, 140, layer.d_model, seed=2).to("cuda", dtype)
    with torch.no_grad():
        generated, (conv_state, ssm_state) = generate(layer, u, 130)
        whole = layer(u)
    out, conv_ref, state_ref = reference_layer(layer, u)
    tol = GPU_TOLERANCES[dtype]
    assert_close(generated, out, tol, f"{name}: prefill 130 + 10 steps")
    assert_close(whole, out, tol, f"{name}: one forward")
    assert_close(ssm_state, state_ref, tol, f"{name}: ssm_state")
    assert_close(conv_state, conv_ref, tol, f"{name}: conv_state")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_packed_prefill_matches_float64(dtype):
    layer = gpu_layer("model", dtype)
    lengths = [1, 70, 3, 200]
    u = inputs(1, sum(lengths), layer.d_model, seed=3).to("cuda", dtype)
    seq_idx = torch.repeat_interleave(torch.arange(len(lengths), dtype=torch.int32),
                                      torch.tensor(lengths))[None].cuda()
    cu_seqlens = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()],
                              dtype=torch.int32).cuda()
    params = InferenceParams(max_seqlen=sum(lengths), max_batch_size=len(lengths))
    with torch.no_grad():
        out = layer(u, seq_idx=seq_idx, cu_seqlens=cu_seqlens, inference_params=params)
    tol = GPU_TOLERANCES[dtype]
    assert_close(out, reference_layer(layer, u, seq_idx.cpu())[0], tol, "packed out")
    conv_state, ssm_state = params.key_value_memory_dict[0]
    for i, (start, end) in enumerate(zip(cu_seqlens[:-1].tolist(), cu_seqlens[1:].tolist())):
        _, conv_ref, state_ref = reference_layer(layer, u[:, start:end])
        assert_close(ssm_state[i], state_ref[0], tol, f"ssm_state of sequence {i}")
        assert_close(conv_state[i], conv_ref[0], tol, f"conv_state of sequence {i}")


@pytest.mark.parametrize("chunk_size", [64, 128, 256])
def test_packed_backward_matches_float64_recurrence(chunk_size, monkeypatch):
    """Training on packed sequences: every parameter's gradient and the input's (float32,
    sequences of 1 to 300 tokens over chunk boundaries), against the same layer with the scan
    a float64 recurrence reset where seq_idx changes."""
    layer = gpu_layer("options", torch.float32, chunk_size)
    lengths = [1, 70, 3, 300, 1, 60]
    u = inputs(1, sum(lengths), layer.d_model, seed=4).cuda().requires_grad_()
    seq_idx = torch.repeat_interleave(torch.arange(len(lengths), dtype=torch.int32),
                                      torch.tensor(lengths))[None].cuda()
    target = torch.randn(u.shape, generator=torch.Generator().manual_seed(5)).cuda()

    def gradients():
        layer.zero_grad()
        u.grad = None
        (layer(u, seq_idx=seq_idx) * target).sum().backward()
        return {"u": u.grad.clone(), **{n: p.grad.clone() for n, p in layer.named_parameters()}}

    ours = gradients()
    monkeypatch.setattr(mamba2_tile.layer, "mamba_chunk_scan_combined", scan_recurrence_float64)
    expected = gradients()
    for parameter, grad in expected.items():
        # float32 on the GPU: the kernels' exp2 is the hardware's approximate one.
        assert_close(ours[parameter], grad, 1e-3, f"packed chunk {chunk_size}: d {parameter}")


# --- against mamba_ssm's Mamba2 ---------------------------------------------------------------

def mamba_ssm_mamba2():
    """mamba_ssm's ``mamba_ssm.modules.mamba2`` module, or a skip saying why not. Its
    ``Mamba2`` inherits only Hub save / load helpers from ``huggingface_hub``; where that
    package is missing an empty stand-in lets the module import (no Hub method is used here),
    and is removed again. (Its ``InferenceParams`` is not imported: ``mamba_ssm.utils.generation``
    needs ``transformers``, and its ``Mamba2`` reads only the two fields ours has.)"""
    stand_in = None
    if importlib.util.find_spec("huggingface_hub") is None:
        stand_in = types.ModuleType("huggingface_hub")
        stand_in.PyTorchModelHubMixin = type("PyTorchModelHubMixin", (), {})
        sys.modules["huggingface_hub"] = stand_in
    try:
        return importlib.import_module("mamba_ssm.modules.mamba2")
    except Exception as error:   # not installed, or no working Triton
        pytest.skip(f"mamba_ssm's Mamba2 does not import: {error!r}")
    finally:
        if stand_in is not None:
            del sys.modules["huggingface_hub"]


def check_against(ours, theirs, ref, tol, what):
    """Ours within the bound of float64, and about as accurate as mamba_ssm's (which is the
    yardstick, not held to the bound)."""
    assert_close(ours, ref, tol, f"mamba2_tile {what} vs float64")
    ours_error = relative_errors(ours, ref).max()
    theirs_error = relative_errors(theirs.float(), ref).max()
    print(f"{what}: relative error mamba2_tile {ours_error:.3g}, mamba_ssm {theirs_error:.3g}")
    assert ours_error <= max(tol / 2, 2 * theirs_error), (
        f"{what}: mamba2_tile is off by {ours_error:.3g} relative, mamba_ssm by "
        f"{theirs_error:.3g}")


@pytest.mark.parametrize("use_mem_eff_path", [False, True])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_matches_mamba_ssm(dtype, use_mem_eff_path):
    mamba2 = mamba_ssm_mamba2()
    if use_mem_eff_path and mamba2.causal_conv1d_fn is None:
        pytest.skip("mamba_ssm's fused path (use_mem_eff_path) needs the causal_conv1d package")
    # D per head: mamba_ssm's decode step cannot take D_has_hdim; dt_limit off: its decode
    # step ignores it
    config = dict(d_model=256, d_state=64, headdim=64, ngroups=2, chunk_size=128, layer_idx=0)
    ours = make_layer(dtype=dtype, **config).cuda()
    theirs = mamba2.Mamba2(**config, use_mem_eff_path=use_mem_eff_path, device="cuda",
                           dtype=dtype)
    theirs.load_state_dict(ours.state_dict())
    ours.load_state_dict(theirs.state_dict())
    u = inputs(2, 300, ours.d_model, seed=4).to("cuda", dtype)
    tol = GPU_TOLERANCES[dtype]
    out_ref, _, state_ref = reference_layer(ours, u)
    with torch.no_grad():
        check_against(ours(u), theirs(u), out_ref, tol, f"{dtype} forward")
        # prefill 290 tokens, then 10 decode steps, each through its own inference_params
        outputs = {}
        for who, layer, params in (("ours", ours, InferenceParams(300, 2)),
                                   ("theirs", theirs, InferenceParams(300, 2))):
            pieces = [layer(u[:, :290], inference_params=params)]
            params.seqlen_offset = 290
            for t in range(290, 300):
                pieces.append(layer(u[:, t:t + 1], inference_params=params))
                params.seqlen_offset += 1
            outputs[who] = (torch.cat(pieces, 1), params.key_value_memory_dict[0][1])
    check_against(outputs["ours"][0], outputs["theirs"][0], out_ref, tol,
                  f"{dtype} prefill + steps")
    check_against(outputs["ours"][1], outputs["theirs"][1], state_ref, tol, f"{dtype} ssm_state")
