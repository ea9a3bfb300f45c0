"""The decode step (``mamba2_tile.selective_state_update``) on the interpreter, against the
float64 reference, and chained after a prefill against one long prefill."""

import numpy as np
import pytest
import torch

from mamba2_tile import api
from mamba2_tile.decode import selective_state_update
from mamba2_tile.kernels.selective_state_update import (BLOCKS_PER_SM, NARROW_TILE_BYTES,
                                                         WIDE_TILE_BYTES, decode_block_p,
                                                         selective_state_update_launch)
from mamba2_tile.reference_decode import selective_state_update as reference
from mamba2_tile.tolerances import TOLERANCES, assert_close, to_numpy


def make_step(batch, nheads, headdim, ngroups, dstate, dtype, per_head=True, slots=None,
              seed=0):
    """Decode-step arguments; ``per_head`` gives dt, dt_bias, A, D as mamba_ssm's Mamba2 does
    (stride-0 broadcasts of one value per head), else full tensors."""
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g)
    u = lambda lo, hi, *s: lo + (hi - lo) * torch.rand(*s, generator=g)
    if per_head:
        dt = u(-3, 1, batch, nheads)[..., None].expand(batch, nheads, headdim)
        dt_bias = u(-1, 1, nheads)[:, None].expand(nheads, headdim)
        A = -u(0.5, 4, nheads)[:, None, None].expand(nheads, headdim, dstate)
        D = r(nheads)[:, None].expand(nheads, headdim)
    else:
        dt, dt_bias = u(-3, 1, batch, nheads, headdim), u(-1, 1, nheads, headdim)
        A, D = -u(0.5, 4, nheads, headdim, dstate), r(nheads, headdim)
    return dict(
        state=r(slots or batch, nheads, headdim, dstate).to(dtype),
        x=r(batch, nheads, headdim).to(dtype), dt=dt.to(dtype), A=A.float(),
        B=r(batch, ngroups, dstate).to(dtype), C=r(batch, ngroups, dstate).to(dtype),
        D=D.float(), z=r(batch, nheads, headdim).to(dtype), dt_bias=dt_bias.float(),
    )


def run_both(args, **flags):
    np_args = {k: (to_numpy(v) if isinstance(v, torch.Tensor) else v) for k, v in args.items()}
    if "state_batch_indices" in flags:
        np_args["state_batch_indices"] = flags["state_batch_indices"].cpu().numpy()
    y_ref, state_ref = reference(**{**np_args, **{k: v for k, v in flags.items()
                                                   if k not in ("state_batch_indices",
                                                                "block_p")}})
    state = args["state"].clone()
    y = selective_state_update(**{**args, "state": state}, **flags)
    return y, state, y_ref, state_ref


@pytest.mark.parametrize("batch, nheads, headdim, ngroups, dstate", [
    (1, 1, 8, 1, 16), (3, 4, 5, 2, 7), (2, 8, 64, 8, 64), (2, 6, 24, 3, 128), (5, 2, 3, 1, 1)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_matches_reference(batch, nheads, headdim, ngroups, dstate, dtype):
    args = make_step(batch, nheads, headdim, ngroups, dstate, dtype)
    y, state, y_ref, state_ref = run_both(args, dt_softplus=True)
    assert y.dtype == dtype and y.shape == args["x"].shape
    assert_close(y, y_ref, TOLERANCES[dtype], "y")
    assert_close(state, state_ref, TOLERANCES[dtype], "state")


@pytest.mark.parametrize("per_head", [True, False])
@pytest.mark.parametrize("optional", [(), ("D",), ("z",), ("dt_bias",), ("D", "z", "dt_bias")])
@pytest.mark.parametrize("softplus", [False, True])
def test_optional_arguments(per_head, optional, softplus):
    args = make_step(2, 4, 6, 2, 10, torch.float32, per_head=per_head, seed=1)
    for name in ("D", "z", "dt_bias"):
        if name not in optional:
            args[name] = None
    if not softplus:
        args["dt"] = args["dt"].abs()               # a step size must be >= 0 without softplus
    y, state, y_ref, state_ref = run_both(args, dt_softplus=softplus)
    assert_close(y, y_ref, 1e-5, "y")
    assert_close(state, state_ref, 1e-5, "state")


@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_state_batch_indices_update_named_rows_only(index_dtype):
    args = make_step(3, 2, 4, 1, 8, torch.float32, slots=7, seed=2)
    indices = torch.tensor([5, 0, 3], dtype=index_dtype)
    before = args["state"].clone()
    y, state, y_ref, state_ref = run_both(args, state_batch_indices=indices)
    assert_close(y, y_ref, 1e-5, "y")
    assert_close(state, state_ref, 1e-5, "state")
    untouched = [1, 2, 4, 6]
    assert torch.equal(state[untouched], before[untouched])


def test_updates_state_in_place_and_nothing_else():
    args = make_step(2, 2, 4, 1, 8, torch.float32, seed=3)
    state, inputs = args["state"], {k: v.clone() for k, v in args.items() if k != "state"}
    pointer = state.data_ptr()
    before = state.clone()
    selective_state_update(**args, dt_softplus=True)
    assert state.data_ptr() == pointer and not torch.equal(state, before)
    for name, value in inputs.items():
        assert torch.equal(args[name], value), f"{name} was modified"


def test_without_heads_axis_is_one_head():
    args = make_step(3, 1, 6, 1, 5, torch.float32, per_head=False, seed=4)
    flat = {k: v.squeeze(0 if k in ("A", "D", "dt_bias") else 1) for k, v in args.items()}
    state = flat["state"].clone()
    y = selective_state_update(**{**flat, "state": state}, dt_softplus=True)
    y_ref, state_ref = reference(**{k: to_numpy(v) for k, v in args.items()}, dt_softplus=True)
    assert y.shape == (3, 6)
    assert_close(y, y_ref[:, 0], 1e-5, "y")
    assert_close(state, state_ref[:, 0], 1e-5, "state")


def test_views_of_a_fused_projection():
    """x, B, C as mamba_ssm's Mamba2.step slices them out of one (batch, features) tensor."""
    batch, nheads, headdim, ngroups, dstate = 2, 4, 8, 2, 16
    args = make_step(batch, nheads, headdim, ngroups, dstate, torch.float32, seed=5)
    fused = torch.cat([args["x"].flatten(1), args["B"].flatten(1), args["C"].flatten(1)], 1)
    x, B, C = torch.split(fused, [nheads * headdim, ngroups * dstate, ngroups * dstate], 1)
    views = dict(args, x=x.view(batch, nheads, headdim), B=B.view(batch, ngroups, dstate),
                 C=C.view(batch, ngroups, dstate))
    assert not views["x"].is_contiguous()
    y, state, y_ref, state_ref = run_both(views, dt_softplus=True)
    assert_close(y, y_ref, 1e-5, "y")
    assert_close(state, state_ref, 1e-5, "state")


@pytest.mark.parametrize("ngroups", [1, 2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_prefill_then_decode_equals_one_prefill(ngroups, dtype):
    """mamba_chunk_scan_combined over the first tokens (return_final_states), then one
    selective_state_update per token, gives the outputs of one prefill over all tokens."""
    batch, seqlen, prefill, nheads, headdim, dstate = 2, 12, 7, 4, 8, 16
    g = torch.Generator().manual_seed(6)
    x = torch.randn(batch, seqlen, nheads, headdim, generator=g).to(dtype)
    dt = (torch.rand(batch, seqlen, nheads, generator=g) - 2).to(dtype)
    A = -(0.5 + 3 * torch.rand(nheads, generator=g))
    B = torch.randn(batch, seqlen, ngroups, dstate, generator=g).to(dtype)
    C = torch.randn(batch, seqlen, ngroups, dstate, generator=g).to(dtype)
    D, dt_bias = torch.randn(nheads, generator=g), torch.rand(nheads, generator=g)
    z = torch.randn(batch, seqlen, nheads, headdim, generator=g).to(dtype)
    common = dict(D=D, dt_bias=dt_bias, dt_softplus=True)
    y_all = api.mamba_chunk_scan_combined(x, dt, A, B, C, 64, z=z, **common)
    y_pre, state = api.mamba_chunk_scan_combined(
        x[:, :prefill].contiguous(), dt[:, :prefill].contiguous(), A,
        B[:, :prefill].contiguous(), C[:, :prefill].contiguous(), 64,
        z=z[:, :prefill].contiguous(), return_final_states=True, **common)
    assert_close(y_pre, y_all[:, :prefill], TOLERANCES[dtype], "prefill y")
    for t in range(prefill, seqlen):
        y_t = selective_state_update(
            state, x[:, t], dt[:, t, :, None].expand(batch, nheads, headdim),
            A[:, None, None].expand(nheads, headdim, dstate), B[:, t], C[:, t],
            D=D[:, None].expand(nheads, headdim), z=z[:, t],
            dt_bias=dt_bias[:, None].expand(nheads, headdim), dt_softplus=True)
        assert_close(y_t, y_all[:, t], TOLERANCES[dtype], f"decode y at token {t}")


def test_bad_input_is_named():
    args = make_step(2, 4, 6, 2, 8, torch.float32)
    bad = [
        (dict(x=args["x"].double()), TypeError, "x must have dtype"),
        (dict(dt=args["dt"][:, :2]), ValueError, r"dt must have shape \(2, 4, 6\)"),
        (dict(A=torch.zeros(4, 6, 9)), ValueError, "A must have shape"),
        (dict(B=torch.zeros(2, 3, 8)), ValueError, "multiple of ngroups"),
        (dict(C=torch.zeros(2, 2, 9)), ValueError, "C must have shape"),
        (dict(D=torch.zeros(4)), ValueError, "D must have shape"),
        (dict(z=args["z"][:1]), ValueError, "z must have shape"),
        (dict(state=torch.zeros(3, 4, 6, 8)), ValueError, "state must have batch"),
        (dict(state=args["state"].numpy()), ValueError, "state must be"),
        (dict(dt_softplus=1), TypeError, "dt_softplus"),
    ]
    for change, error, message in bad:
        with pytest.raises(error, match=message):
            selective_state_update(**{**args, **change})
    slots = dict(args, state=torch.zeros(4, 4, 6, 8))
    for indices, message in [(torch.tensor([0, 4]), r"\[0, 4\)"),
                             (torch.tensor([1, 1]), "distinct"),
                             (torch.tensor([0.0, 1.0]), "dtype"), (torch.tensor([0]), "shape")]:
        with pytest.raises((ValueError, TypeError), match=message):
            selective_state_update(**slots, state_batch_indices=indices)


@pytest.mark.parametrize("block_p", [1, 2, 4, 8, 16, 32])
def test_every_block_p_matches_the_reference(block_p):
    """Tiles that split headdim 24 unevenly (a partial last tile) or cover it with padding."""
    args = make_step(3, 4, 24, 2, 20, torch.float32, seed=6)
    y, state, y_ref, state_ref = run_both(args, dt_softplus=True, block_p=block_p)
    assert_close(y, y_ref, 1e-5, "y")
    assert_close(state, state_ref, 1e-5, "state")


def test_block_p_rule_narrows_the_tile_until_the_grid_fills_the_gpu():
    sms, pow2 = 132, lambda n: 1 << (n - 1).bit_length()
    # Mamba-2 2.7B's layer (80 heads x 64 x 128): narrow at batch 1, 8 KB tiles from batch 4/8.
    batches = (1, 2, 4, 8, 16, 256)
    assert [decode_block_p(b, 80, 64, 128, 4, sms) for b in batches] == [4, 8, 16, 16, 16, 16]
    assert [decode_block_p(b, 80, 64, 128, 2, sms) for b in batches] == [8, 8, 16, 32, 32, 32]
    for batch, nheads, headdim, dstate, size in [
            (1, 80, 64, 128, 4), (2, 8, 64, 256, 2), (64, 24, 80, 16, 4), (1, 1, 8, 16, 2),
            (5, 2, 3, 1, 4), (1, 1, 1, 5000, 4), (300, 80, 64, 128, 2)]:
        block_p = decode_block_p(batch, nheads, headdim, dstate, size, sms)
        row = pow2(dstate) * size
        blocks = lambda p: batch * nheads * -(-headdim // p)
        widest = max(1, min(pow2(headdim), WIDE_TILE_BYTES // row))
        assert block_p & (block_p - 1) == 0 and 1 <= block_p <= widest
        if block_p < widest:       # narrowed: the wider tile left the grid short of blocks
            assert blocks(2 * block_p) < BLOCKS_PER_SM * sms
            assert 2 * block_p * row > NARROW_TILE_BYTES
        if blocks(block_p) < BLOCKS_PER_SM * sms:      # still short: as narrow as allowed
            assert block_p == 1 or block_p * row <= NARROW_TILE_BYTES


def test_the_launch_uses_the_rule_unless_block_p_is_given():
    args = make_step(1, 8, 64, 1, 128, torch.float32)
    launch, _ = selective_state_update_launch(*(args[k] for k in ("state", "x", "dt", "A", "B",
                                                                  "C")))
    assert launch.named_args()["BLOCK_P"] == decode_block_p(1, 8, 64, 128, 4, 132) == 4
    assert launch.grid == (1, 8, 16)
    launch, _ = selective_state_update_launch(*(args[k] for k in ("state", "x", "dt", "A", "B",
                                                                  "C")), block_p=32)
    assert launch.named_args()["BLOCK_P"] == 32 and launch.grid == (1, 8, 2)


def test_bounds_checks_are_dropped_only_where_the_tiles_cover_the_arrays_exactly():
    """EXACT_TILES; the kernel still checks the state's accesses when rows come from indices
    (HAS_INDICES), whose values nobody checks on CUDA."""
    def flags(headdim, dstate, block_p, indices=False):
        args = make_step(2, 4, headdim, 1, dstate, torch.float32)
        rows = torch.tensor([1, 0], dtype=torch.int32) if indices else None
        launch, _ = selective_state_update_launch(
            *(args[k] for k in ("state", "x", "dt", "A", "B", "C")),
            state_batch_indices=rows, block_p=block_p)
        return launch.named_args()["EXACT_TILES"], launch.named_args()["HAS_INDICES"]
    assert flags(64, 128, 16) == flags(24, 32, 8) == (True, False)
    assert flags(24, 32, 16) == (False, False)          # a partial last tile of headdim
    assert flags(64, 20, 16) == (False, False)          # dstate padded to 32
    assert flags(64, 128, 16, indices=True) == (True, True)


@pytest.mark.parametrize("block_p", [0, 3, -4, 2.0, True, "16"])
def test_a_bad_block_p_is_refused(block_p):
    args = make_step(1, 2, 4, 1, 8, torch.float32)
    with pytest.raises(ValueError, match="block_p must be None or a power of two"):
        selective_state_update(**args, block_p=block_p)
