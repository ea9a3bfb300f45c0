"""Every performance switch, alone and combined, on the CPU interpreter against float64.

The switches change how the kernels compute, never what: each must meet the dtype's tolerance
(TF32 its own, looser one), and the ones that keep every rounding in place must give exactly the
default kernels' results.
"""

import json

import pytest
import torch

from mamba2_tile.api import forward_with_options, mamba_chunk_scan_combined
from mamba2_tile.kernels import (DEFAULT_OPTIONS, ChunkCumsumOptions, ComputeOutOptions,
                                 ForwardOptions, FusedStateOutOptions, FwdPassStateOptions,
                                 compute_out_launch, fused_state_out_launch,
                                 fwd_pass_state_launch)
from mamba2_tile.kernels.fwd_pass_state import (fwd_pass_state_kernel,
                                                fwd_pass_state_switched_kernel)
from mamba2_tile.tolerances import TF32_TOLERANCE, TOLERANCES, assert_close
from ssd_cases import Case, api_kwargs, expected_output, make_case

SWITCHES = {
    "latency": dict(latency=4),
    "swap": dict(swap_operands=True),
    "transposed": dict(transposed_layout=True),
    "low_precision_states": dict(low_precision_states=True),
    "occupancy": dict(occupancy=2),
    "small_tiles": dict(block_h=2, block_p=8, block_n=4, block_m=16),
    "swap+transposed": dict(swap_operands=True, transposed_layout=True),
    "all": dict(latency=4, swap_operands=True, transposed_layout=True, low_precision_states=True,
                occupancy=2, block_p=8, block_m=32),
    "tf32": dict(tf32=True),
    "tf32+all": dict(tf32=True, swap_operands=True, transposed_layout=True, block_m=16),
}
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def make(dtype, seqlen=150, seed=3):
    # headdim 12 and dstate 10 are padded tiles; seqlen 150 ends in a partial chunk.
    case = Case(seqlen=seqlen, nheads=4, headdim=12, ngroups=2, dstate=10, dtype=dtype,
                D="channel", z=True, dt_bias=True, initial_states=True, dt_softplus=True,
                dt_range=(-3.0, 0.0), seed=seed)
    make_case(case)
    return case


def run(case, options, chunk_size=64):
    return forward_with_options(chunk_size=chunk_size, options=options, return_final_states=True,
                                **case.tensors, **api_kwargs(case))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("name", SWITCHES)
def test_switch_matches_float64(name, dtype):
    case = make(dtype)
    y, final_states = run(case, ForwardOptions().with_switches(**SWITCHES[name]))
    ref_y, ref_final = expected_output(case)
    tf32 = SWITCHES[name].get("tf32") and dtype == torch.float32
    tol = TF32_TOLERANCE if tf32 else TOLERANCES[dtype]
    assert y.dtype == dtype and final_states.dtype == torch.float32
    assert_close(y, ref_y, tol, f"y ({name})")
    assert_close(final_states, ref_final, tol, f"final_states ({name})")


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("chunk_size", [64, 128])
def test_exact_switches_change_no_bit(dtype, chunk_size):
    # Swap, layout, tiles and hints reorder no sum whose result is rounded: same bits as default.
    # Low-precision states too: stage 3 rounds the state to the input dtype before using it.
    # Float32 multiplies as split TF32 (kernels/split_tf32.py), adding its two small terms in
    # operand order, which a swapped layout reverses: there, equal to float32 rounding.
    case = make(dtype, seqlen=200)
    y, final_states = run(case, ForwardOptions(), chunk_size)
    switches = dict(SWITCHES["all"], block_p=None, block_m=None)
    y_opt, final_opt = run(case, ForwardOptions().with_switches(**switches), chunk_size)
    if dtype == torch.float32:
        torch.testing.assert_close(y_opt, y, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(final_opt, final_states, rtol=1e-6, atol=1e-6)
    else:
        assert torch.equal(y, y_opt) and torch.equal(final_states, final_opt)


def test_tf32_is_ignored_for_16_bit_inputs():
    case = make(torch.bfloat16)
    y, _ = run(case, ForwardOptions())
    y_tf32, _ = run(case, ForwardOptions.uniform(tf32=True))
    assert torch.equal(y, y_tf32)


def test_default_options_are_the_public_api():
    case = make(torch.bfloat16)
    y, final_states = run(case, DEFAULT_OPTIONS)
    y_api, final_api = mamba_chunk_scan_combined(chunk_size=64, return_final_states=True,
                                                 **case.tensors, **api_kwargs(case))
    assert torch.equal(y, y_api) and torch.equal(final_states, final_api)


def test_layout_and_dtype_of_chunk_states():
    x = torch.zeros(1, 130, 2, 24, dtype=torch.bfloat16)
    B = torch.zeros(1, 130, 1, 40, dtype=torch.bfloat16)
    dA = torch.zeros(1, 2, 3, 64)
    _, (states, final) = fwd_pass_state_launch(x, B, dA, dA)
    assert states.shape == (1, 2, 3, 24, 40) and states.dtype == torch.float32
    launch, (states, final) = fwd_pass_state_launch(x, B, dA, dA, transposed_layout=True,
                                                    low_precision_states=True)
    assert states.shape == (1, 2, 3, 40, 24) and states.dtype == torch.bfloat16
    assert final.shape == (1, 2, 24, 40) and final.dtype == torch.float32
    assert launch.named_args()["STATES_TRANSPOSED"] is True
    assert launch.named_args()["chunk_states"] is states
    out, _ = compute_out_launch(x, dA, dA, B, B, states, transposed_layout=True,
                                options=ComputeOutOptions(latency=4, tf32=True))
    args = out.named_args()
    assert args["STATES_TRANSPOSED"] is True and args["LATENCY"] == 4
    assert args["TF32"] is False                    # TF32 only for float32 inputs


def test_switches_off_launch_the_kernel_notebook_06_builds():
    x = torch.zeros(1, 70, 2, 8)
    B = torch.zeros(1, 70, 1, 8)
    dA = torch.zeros(1, 2, 2, 64)
    plain, _ = fwd_pass_state_launch(x, B, dA, dA, options=FwdPassStateOptions(block_p=4))
    assert plain.kernel is fwd_pass_state_kernel
    assert set(plain.named_args()).isdisjoint({"LATENCY", "SWAP_OPERANDS", "TF32"})
    switched, _ = fwd_pass_state_launch(x, B, dA, dA,
                                        options=FwdPassStateOptions(block_p=4, tf32=True))
    assert switched.kernel is fwd_pass_state_switched_kernel
    named = switched.named_args()
    assert named["TF32"] is True and named["LATENCY"] == 0 and named["SWAP_OPERANDS"] is False
    for name, value in plain.named_args().items():
        if not isinstance(value, torch.Tensor):
            assert named[name] == value, name


def test_absent_inputs_share_one_placeholder_per_device_and_dtype():
    x = torch.zeros(1, 70, 2, 8, dtype=torch.bfloat16)
    dA = torch.zeros(1, 2, 2, 64)
    first = fused_state_out_launch(x, dA, dA, x, x)[0].named_args()
    second = fused_state_out_launch(x, dA, dA, x, x)[0].named_args()
    assert first["z"] is second["z"] and first["initial_states"] is second["initial_states"]
    assert first["z"].dtype == torch.bfloat16 and first["initial_states"].dtype == torch.float32
    assert first["z"].numel() == 1


def test_occupancy_is_a_hint_on_one_shared_kernel_object():
    x = torch.zeros(1, 70, 2, 8)
    B = torch.zeros(1, 70, 1, 8)
    dA = torch.zeros(1, 2, 2, 64)
    plain, _ = fwd_pass_state_launch(x, B, dA, dA)
    hinted, _ = fwd_pass_state_launch(x, B, dA, dA, options=FwdPassStateOptions(occupancy=2))
    again, _ = fwd_pass_state_launch(x, B, dA, dA, options=FwdPassStateOptions(occupancy=2))
    assert hinted.kernel is again.kernel and hinted.kernel is not plain.kernel


@pytest.mark.parametrize("bad, message", [
    (dict(block_p=48), "block_p must be a power of two"), (dict(latency=0), "latency"),
    (dict(latency=11), "latency"), (dict(occupancy=0), "occupancy"),
    (dict(swap_operands="yes"), "swap_operands"),
])
def test_bad_values_are_refused(bad, message):
    with pytest.raises(ValueError, match=message):
        ComputeOutOptions(**bad)


@pytest.mark.parametrize("warps", [0, 2, 16, 8.0, True, "8"])
def test_worker_warps_are_4_or_8(warps):
    # What tileiras 13.4 takes for num_worker_warps; anything else would fail at compile time.
    with pytest.raises(ValueError, match="worker_warps must be 4, 8 or None"):
        FusedStateOutOptions(worker_warps=warps)
    assert FusedStateOutOptions(worker_warps=8).worker_warps == 8


# --- each kernel its own options -------------------------------------------------------------

def test_each_kernel_has_only_its_own_options():
    names = {kind: set(kind.names()) for kind in (ChunkCumsumOptions, FwdPassStateOptions,
                                                   ComputeOutOptions, FusedStateOutOptions)}
    assert names[ChunkCumsumOptions] == {"block_h", "occupancy"}
    assert names[FwdPassStateOptions] == {"block_p", "block_n", "latency", "swap_operands",
                                          "tf32", "occupancy"}
    assert names[ComputeOutOptions] == {"block_m", "block_p", "latency", "swap_operands", "tf32",
                                        "occupancy"}
    assert names[FusedStateOutOptions] == {"block_m", "block_p", "latency", "tf32", "occupancy",
                                           "worker_warps"}


@pytest.mark.parametrize("kind, option", [
    (FusedStateOutOptions, "swap_operands"), (FusedStateOutOptions, "block_n"),
    (ChunkCumsumOptions, "latency"), (ComputeOutOptions, "block_n"),
    (FwdPassStateOptions, "block_m"), (ComputeOutOptions, "worker_warps"),
])
def test_an_option_the_kernel_does_not_have_is_refused(kind, option):
    with pytest.raises(TypeError, match=option):
        kind(**{option: 2})
    with pytest.raises(ValueError, match=f"{kind.__name__} has no option '{option}'"):
        kind.from_dict({option: 2})


def test_a_switch_goes_to_the_kernels_that_have_it():
    options = ForwardOptions().with_switches(swap_operands=True, block_h=4, block_n=16)
    assert options.fwd_pass_state.swap_operands and options.compute_out.swap_operands
    assert options.fused_state_out == FusedStateOutOptions()       # no swap, no block_n
    assert options.chunk_cumsum == ChunkCumsumOptions(block_h=4)
    assert options.fwd_pass_state.block_n == 16
    assert ForwardOptions.uniform(swap_operands=True, latency=2) == \
        ForwardOptions().with_switches(swap_operands=True, latency=2)


def test_a_switch_no_kernel_has_is_refused():
    with pytest.raises(ValueError, match="'swap_operand'"):
        ForwardOptions().with_switches(swap_operand=True)
    with pytest.raises(ValueError, match="'block_x'"):
        ForwardOptions.uniform(block_x=8)


def test_a_kernel_given_another_kernels_options_refuses_them():
    with pytest.raises(TypeError, match="fused_state_out must be a FusedStateOutOptions"):
        ForwardOptions(fused_state_out=ComputeOutOptions())
    x = torch.zeros(1, 70, 2, 8)
    dA = torch.zeros(1, 2, 2, 64)
    with pytest.raises(TypeError, match="options must be a FusedStateOutOptions"):
        fused_state_out_launch(x, dA, dA, x, x, options=ComputeOutOptions())


def test_options_roundtrip_through_a_dict():
    options = ForwardOptions.uniform(latency=3, swap_operands=True, transposed_layout=True,
                                     block_h=2, occupancy=2)
    assert ForwardOptions.from_dict(json.loads(json.dumps(options.to_dict()))) == options


def test_the_older_stored_form_is_read():
    # Every kernel listed every field; a field a kernel does not have is read only while off.
    old = {name: dict(block_h=None, block_m=None, block_n=None, block_p=None, latency=None,
                      occupancy=None, swap_operands=False, tf32=False)
           for name in ("chunk_cumsum", "fwd_pass_state", "compute_out", "fused_state_out")}
    old["compute_out"].update(block_m=32, swap_operands=True)
    old["fused_state_out"].update(occupancy=2)
    options = ForwardOptions.from_dict(dict(old, transposed_layout=True,
                                            low_precision_states=False, fuse_state_passing=None))
    assert options.compute_out == ComputeOutOptions(block_m=32, swap_operands=True)
    assert options.fused_state_out == FusedStateOutOptions(occupancy=2)
    old["fused_state_out"]["swap_operands"] = True
    with pytest.raises(ValueError, match="FusedStateOutOptions has no option 'swap_operands'"):
        ForwardOptions.from_dict(old)
