"""Every performance switch, alone and combined, on the CPU interpreter against float64.

The switches change how the kernels compute, never what: each must meet the dtype's tolerance
(TF32 its own, looser one), and the ones that keep every rounding in place must give exactly the
default kernels' results.
"""

import pytest
import torch

from mamba2_tile.api import forward_with_options, mamba_chunk_scan_combined
from mamba2_tile.kernels import (ForwardOptions, KernelOptions, compute_out_launch,
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
    case = make(dtype, seqlen=200)
    y, final_states = run(case, ForwardOptions(), chunk_size)
    switches = dict(SWITCHES["all"], block_p=None, block_m=None)
    y_opt, final_opt = run(case, ForwardOptions().with_switches(**switches), chunk_size)
    assert torch.equal(y, y_opt) and torch.equal(final_states, final_opt)


def test_tf32_is_ignored_for_16_bit_inputs():
    case = make(torch.bfloat16)
    y, _ = run(case, ForwardOptions())
    y_tf32, _ = run(case, ForwardOptions.uniform(tf32=True))
    assert torch.equal(y, y_tf32)


def test_default_options_are_the_public_api():
    case = make(torch.bfloat16)
    y, final_states = run(case, ForwardOptions())
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
    # LATENCY, SWAP_OPERANDS, STATES_TRANSPOSED, TF32 close the argument list.
    assert launch.args[-4:] == (0, False, True, False)
    out, _ = compute_out_launch(x, dA, dA, B, B, states, transposed_layout=True,
                                options=KernelOptions(latency=4, tf32=True))
    assert out.args[-4:] == (4, False, True, False)      # TF32 only for float32 inputs


def test_switches_off_launch_the_kernel_notebook_06_builds():
    x = torch.zeros(1, 70, 2, 8)
    B = torch.zeros(1, 70, 1, 8)
    dA = torch.zeros(1, 2, 2, 64)
    plain, _ = fwd_pass_state_launch(x, B, dA, dA, options=KernelOptions(block_p=4))
    assert plain.kernel is fwd_pass_state_kernel and len(plain.args) == 11
    switched, _ = fwd_pass_state_launch(x, B, dA, dA, options=KernelOptions(block_p=4, tf32=True))
    assert switched.kernel is fwd_pass_state_switched_kernel
    assert switched.args[7:11] == plain.args[7:]
    assert switched.args[11:] == (0, False, False, True)      # LATENCY, SWAP, TRANSPOSED, TF32


def test_occupancy_is_a_hint_on_one_shared_kernel_object():
    x = torch.zeros(1, 70, 2, 8)
    B = torch.zeros(1, 70, 1, 8)
    dA = torch.zeros(1, 2, 2, 64)
    plain, _ = fwd_pass_state_launch(x, B, dA, dA)
    hinted, _ = fwd_pass_state_launch(x, B, dA, dA, options=KernelOptions(occupancy=2))
    again, _ = fwd_pass_state_launch(x, B, dA, dA, options=KernelOptions(occupancy=2))
    assert hinted.kernel is again.kernel and hinted.kernel is not plain.kernel


@pytest.mark.parametrize("bad, message", [
    (dict(block_p=48), "power of two"), (dict(latency=0), "latency"),
    (dict(latency=11), "latency"), (dict(occupancy=0), "occupancy"),
])
def test_bad_options_are_refused(bad, message):
    with pytest.raises(ValueError, match=message):
        KernelOptions(**bad)


def test_options_roundtrip_through_a_dict():
    options = ForwardOptions.uniform(latency=3, swap_operands=True, transposed_layout=True)
    assert ForwardOptions.from_dict(options.to_dict()) == options
