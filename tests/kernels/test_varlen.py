"""Packed sequences (seq_idx, cu_seqlens, return_varlen_states) on every path the plan can
choose, on the interpreter, against the float64 recurrence of mamba2_tile.reference.

Chunk sizes 16 and 32 (below what the public API takes) go through the same kernels by calling
``api._forward`` with a plan for them: more chunk and row-block boundaries per token, so a
sequence boundary lands on, just before and just after each of them in small problems.
"""

import inspect

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from mamba2_tile import api, reference
from mamba2_tile.api import forward_with_options, mamba_chunk_scan_combined
from mamba2_tile.kernels import DEFAULT_OPTIONS
from mamba2_tile.kernels.plan import plan_for
from mamba2_tile.tolerances import TOLERANCES, assert_close, to_numpy
from ssd_cases import DTYPES, Case, api_kwargs, make_case, prepared_dt

PATHS = {
    "three-kernel": DEFAULT_OPTIONS.with_switches(fuse_state_passing=False),
    "three-kernel-switches": DEFAULT_OPTIONS.with_switches(
        fuse_state_passing=False, transposed_layout=True, low_precision_states=True,
        swap_operands=True, latency=2),
    "fused": DEFAULT_OPTIONS.with_switches(fuse_state_passing=True, segment_chunks=None),
    "segmented-1": DEFAULT_OPTIONS.with_switches(fuse_state_passing=True, segment_chunks=1),
    "segmented-2": DEFAULT_OPTIONS.with_switches(fuse_state_passing=True, segment_chunks=2),
}


def packing(lengths, first=0, device="cpu"):
    """``(seq_idx (1, l) int32, cu_seqlens int32)`` for sequences of these lengths, numbered
    from ``first``."""
    seq_idx = np.repeat(np.arange(first, first + len(lengths)), lengths)[None]
    cu_seqlens = np.concatenate([[0], np.cumsum(lengths)])
    return (torch.tensor(seq_idx, dtype=torch.int32, device=device),
            torch.tensor(cu_seqlens, dtype=torch.int32, device=device))


def expected(case, seq_idx, cu_seqlens=None):
    """``(y, final_states, varlen_states)`` in float64 by the resetting recurrence."""
    t = {name: to_numpy(value) for name, value in case.tensors.items()}
    dt = prepared_dt(t["dt"], t.get("dt_bias"), case.dt_softplus, case.dt_limit)
    results = reference.ssd_recurrent(
        t["x"], dt, t["A"], t["B"], t["C"], D=t.get("D"), initial_states=t.get("initial_states"),
        seq_idx=to_numpy(seq_idx).astype(np.int64), return_final_states=True,
        cu_seqlens=None if cu_seqlens is None else to_numpy(cu_seqlens).astype(np.int64),
        return_varlen_states=cu_seqlens is not None)
    y = results[0]
    if "z" in t:
        y = y * t["z"] / (1.0 + np.exp(-t["z"]))
    return (y, *results[1:])


def run_path(case, chunk_size, options, seq_idx, cu_seqlens=None):
    """The kernels of ``options`` at any chunk size (api._forward, as the API runs them)."""
    t = case.tensors
    planned = plan_for(t["x"], t["B"], chunk_size, options)
    return api._forward(t["x"], t["dt"], t["A"], t["B"], t["C"], chunk_size, t.get("D"),
                        t.get("z"), t.get("dt_bias"), t.get("initial_states"), seq_idx,
                        cu_seqlens, case.dt_softplus, case.dt_limit, True,
                        cu_seqlens is not None, planned)


def check(case, chunk_size, options, lengths, first=0, where=""):
    make_case(case)
    seq_idx, cu_seqlens = packing(lengths, first)
    with_varlen = first == 0        # cu_seqlens goes with seq_idx numbered from 0 here
    got = run_path(case, chunk_size, options, seq_idx, cu_seqlens if with_varlen else None)
    want = expected(case, seq_idx, cu_seqlens if with_varlen else None)
    tol = TOLERANCES[case.dtype]
    where = f"{where} chunk {chunk_size}, lengths {lengths}"
    assert got[0].dtype == case.dtype and got[1].dtype == torch.float32
    for name, g, w in zip(("y", "final_states", "varlen_states"), got, want):
        assert_close(g, w, tol, f"{name} ({where})")


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("chunk_size", [16, 32, 64])
def test_every_path_keeps_sequences_apart(path, chunk_size):
    # Lengths 1 (alone, and twice in a row), boundaries on, before and after chunk boundaries,
    # and a sequence over several chunks.
    c = chunk_size
    lengths = [1, c - 1, 1, 1, c + 1, 3 * c + 2, 2, c]
    case = Case(batch=1, seqlen=sum(lengths), nheads=2, headdim=8, dstate=8, D="channel",
                z=True, initial_states=True, dt_bias=True, dt_softplus=True, seed=chunk_size)
    check(case, chunk_size, PATHS[path], lengths, where=path)


@pytest.mark.parametrize("path", ["three-kernel", "three-kernel-switches"])
def test_float32_chunk_states_summed_in_blocks_keep_sequences_apart(path):
    # Float32 at chunk 256: fwd_pass_state sums a chunk 64 positions a product (FLOAT32_ROWS),
    # with boundaries inside and across those blocks and a last chunk of 112 tokens.
    case = Case(batch=1, seqlen=368, nheads=2, headdim=8, dstate=8, initial_states=True, seed=21)
    check(case, 256, PATHS[path], [1, 100, 37, 200, 30], where=path)


@pytest.mark.parametrize("path", PATHS)
def test_precomputed_scores_are_masked_too(path):
    # Above dstate 128 the fused kernel reads C Bᵀ from chunk_scores instead of forming it.
    case = Case(batch=1, seqlen=75, nheads=2, headdim=4, dstate=256, D="head",
                initial_states=True, seed=12)
    check(case, 16, PATHS[path], [1, 20, 3, 16, 35], where=path)


@pytest.mark.parametrize("path", PATHS)
def test_initial_states_go_to_sequence_zero_only(path):
    # A row numbered from 2 has no sequence 0: initial_states is ignored (as in mamba_ssm).
    case = Case(batch=1, seqlen=70, nheads=2, headdim=4, dstate=4, initial_states=True, seed=5)
    check(case, 16, PATHS[path], [20, 50], first=2, where=path)


@settings(max_examples=12, deadline=None)
@given(chunk_size=st.sampled_from([16, 32, 64]), path=st.sampled_from(sorted(PATHS)),
       data=st.data(), dtype=st.sampled_from(DTYPES), ngroups=st.sampled_from([1, 2]),
       D=st.sampled_from([None, "head", "channel"]), z=st.booleans(),
       initial_states=st.booleans(), seed=st.integers(0, 2**16))
def test_random_packings(chunk_size, path, data, dtype, ngroups, D, z, initial_states, seed):
    lengths = data.draw(st.lists(st.integers(1, 3 * chunk_size + 2), min_size=1, max_size=6))
    case = Case(batch=1, seqlen=sum(lengths), nheads=2, headdim=6, ngroups=ngroups, dstate=10,
                dtype=dtype, D=D, z=z, initial_states=initial_states, seed=seed)
    check(case, chunk_size, PATHS[path], lengths, where=path)


@pytest.mark.parametrize("path", PATHS)
def test_rows_of_a_batch_pack_differently(path):
    case = Case(batch=2, seqlen=50, nheads=2, headdim=4, dstate=4, initial_states=True, seed=6)
    make_case(case)
    seq_idx = torch.tensor([[0] * 7 + [1] * 30 + [2] * 13, [0] * 50], dtype=torch.int32)
    y, final_states = run_path(case, 16, PATHS[path], seq_idx)
    want_y, want_final = expected(case, seq_idx)
    assert_close(y, want_y, TOLERANCES[torch.float32], f"y ({path})")
    assert_close(final_states, want_final, TOLERANCES[torch.float32], f"final ({path})")
    # The second row is one sequence: exactly the unpacked result.
    alone = run_path(case, 16, PATHS[path], None)
    assert torch.equal(y[1], alone[0][1]) and torch.equal(final_states[1], alone[1][1])


@pytest.mark.parametrize("path", PATHS)
def test_one_sequence_packed_changes_nothing(path):
    """The masks of a single sequence are all true: bit for bit the unpacked result (its
    varlen state is its final state, summed in other steps: equal to rounding)."""
    case = Case(batch=1, seqlen=90, nheads=2, headdim=8, dstate=8, D="head", z=True,
                initial_states=True, dtype=torch.bfloat16, seed=7)
    make_case(case)
    seq_idx, cu_seqlens = packing([90])
    packed = run_path(case, 32, PATHS[path], seq_idx, cu_seqlens)
    plain = run_path(case, 32, PATHS[path], None)
    assert torch.equal(packed[0], plain[0]) and torch.equal(packed[1], plain[1])
    assert_close(packed[2][0], to_numpy(plain[1][0]), TOLERANCES[torch.bfloat16], "varlen")


# --- the public function: signature, return order, the default plan ---------------------------

MAMBA_SSM_PARAMETERS = ["x", "dt", "A", "B", "C", "chunk_size", "D", "z", "dt_bias",
                        "initial_states", "seq_idx", "cu_seqlens", "dt_softplus", "dt_limit",
                        "return_final_states", "return_varlen_states"]


def test_signature_is_mamba_ssms():
    """mamba_ssm.ops.triton.ssd_combined.mamba_chunk_scan_combined's parameters, in order."""
    assert list(inspect.signature(mamba_chunk_scan_combined).parameters) == MAMBA_SSM_PARAMETERS


def test_positional_call_and_return_order():
    case = Case(batch=1, seqlen=100, nheads=2, headdim=4, dstate=4, D="head", z=True,
                dt_bias=True, initial_states=True, dt_softplus=True, seed=8)
    t = make_case(case)
    seq_idx, cu_seqlens = packing([30, 1, 69])
    positional = [t["x"], t["dt"], t["A"], t["B"], t["C"], 64, t["D"], t["z"], t["dt_bias"],
                  t["initial_states"], seq_idx, cu_seqlens, True, (0.0, float("inf"))]
    y = mamba_chunk_scan_combined(*positional, False, False)
    y_v, varlen = mamba_chunk_scan_combined(*positional, False, True)
    y_f, final_states = mamba_chunk_scan_combined(*positional, True, False)
    y_fv, final_fv, varlen_fv = mamba_chunk_scan_combined(*positional, True, True)
    want_y, want_final, want_varlen = expected(case, seq_idx, cu_seqlens)
    tol = TOLERANCES[torch.float32]
    for got in (y, y_v, y_f, y_fv):
        assert_close(got, want_y, tol, "y")
    for got in (final_states, final_fv):
        assert_close(got, want_final, tol, "final_states")
    for got in (varlen, varlen_fv):
        assert got.shape == (3, 2, 4, 4) and got.dtype == torch.float32
        assert_close(got, want_varlen, tol, "varlen_states")


def test_cu_seqlens_is_ignored_without_return_varlen_states():
    """As in mamba_ssm: cu_seqlens only serves return_varlen_states."""
    t = make_case(Case(batch=1, seqlen=20, nheads=2, headdim=4, dstate=4))
    seq_idx, _ = packing([5, 15])
    y = mamba_chunk_scan_combined(**t, chunk_size=64, seq_idx=seq_idx, cu_seqlens="unused")
    assert isinstance(y, torch.Tensor)


@pytest.mark.parametrize("cu_dtype", [torch.int32, torch.int64])
def test_default_plan_long_and_short_sequences(cu_dtype):
    # Batch 1, few heads: the plan cuts the row into segments (sequence parallel).
    lengths = [1, 200, 64, 1, 130, 4]
    case = Case(batch=1, seqlen=sum(lengths), nheads=2, headdim=8, dstate=16, D="channel",
                z=True, initial_states=True, dt_bias=True, dt_softplus=True, seed=9)
    t = make_case(case)
    seq_idx, cu_seqlens = packing(lengths)
    y, final_states, varlen = mamba_chunk_scan_combined(
        **t, chunk_size=64, seq_idx=seq_idx, cu_seqlens=cu_seqlens.to(cu_dtype),
        return_final_states=True, return_varlen_states=True, **api_kwargs(case))
    for name, got, want in zip(("y", "final_states", "varlen_states"),
                               (y, final_states, varlen), expected(case, seq_idx, cu_seqlens)):
        assert_close(got, want, TOLERANCES[torch.float32], name)


def test_forward_with_options_takes_packing():
    case = Case(batch=1, seqlen=40, nheads=2, headdim=4, dstate=4, seed=11)
    t = make_case(case)
    seq_idx, cu_seqlens = packing([10, 30])
    y, varlen = forward_with_options(**t, chunk_size=64, options=PATHS["three-kernel"],
                                     seq_idx=seq_idx, cu_seqlens=cu_seqlens,
                                     return_varlen_states=True)
    want_y, _, want_varlen = expected(case, seq_idx, cu_seqlens)
    assert_close(y, want_y, TOLERANCES[torch.float32], "y")
    assert_close(varlen, want_varlen, TOLERANCES[torch.float32], "varlen_states")


# --- bad packing: clear errors ----------------------------------------------------------------

def call(**changes):
    t = make_case(Case(batch=1, seqlen=6, nheads=2, headdim=4, dstate=4))
    seq_idx, cu_seqlens = packing([2, 4])
    kwargs = dict(t, chunk_size=64, seq_idx=seq_idx, cu_seqlens=cu_seqlens,
                  return_varlen_states=True)
    kwargs.update(changes)
    return mamba_chunk_scan_combined(**kwargs)


def ints(*values, dtype=torch.int32):
    return torch.tensor(values, dtype=dtype)


BAD_PACKING = [
    (dict(seq_idx=ints([0, 0, 1, 0, 1, 1])), ValueError,
     ["seq_idx", "nondecreasing", "seq_idx[0, 3] = 0 follows 1"]),
    (dict(seq_idx=ints([-1, -1, 0, 0, 0, 0]), return_varlen_states=False), ValueError,
     ["seq_idx", "non-negative"]),
    (dict(seq_idx=ints([0, 0, 1, 1, 1, 1], dtype=torch.int64)), TypeError,
     ["seq_idx", "int32"]),
    (dict(seq_idx=ints([0, 0, 1, 1, 1, 1], dtype=torch.float32)), TypeError, ["seq_idx"]),
    (dict(seq_idx=ints(0, 0, 1, 1, 1, 1)), ValueError, ["seq_idx", "(batch, seqlen) = (1, 6)"]),
    (dict(seq_idx=[[0, 0, 1, 1, 1, 1]]), TypeError, ["seq_idx", "torch.Tensor"]),
    (dict(seq_idx=torch.zeros(1, 6, dtype=torch.int32, device="meta")), ValueError,
     ["same device"]),
    (dict(cu_seqlens=None), ValueError, ["return_varlen_states", "cu_seqlens"]),
    (dict(cu_seqlens=ints(0, 2, 7)), ValueError, ["cu_seqlens", "from 0 to seqlen (6)"]),
    (dict(cu_seqlens=ints(1, 2, 6)), ValueError, ["cu_seqlens", "from 0"]),
    (dict(cu_seqlens=ints(0, 2, 2, 6)), ValueError, ["cu_seqlens", "rise strictly"]),
    (dict(cu_seqlens=ints(0, 3, 6)), ValueError, ["cu_seqlens", "does not match", "[2]"]),
    (dict(cu_seqlens=ints(0, 6)), ValueError, ["cu_seqlens", "does not match"]),
    (dict(cu_seqlens=ints(0.0, 2.0, 6.0, dtype=torch.float32)), TypeError, ["cu_seqlens"]),
    (dict(cu_seqlens=ints([0, 2, 6])), ValueError, ["cu_seqlens", "1-D"]),
    (dict(cu_seqlens=ints(0)), ValueError, ["cu_seqlens", "at least one sequence"]),
    (dict(seq_idx=None), ValueError, ["cu_seqlens", "needs seq_idx"]),
]


@pytest.mark.parametrize("changes, error, words", BAD_PACKING,
                         ids=[f"{i}-{','.join(c)}" for i, (c, _, _) in enumerate(BAD_PACKING)])
def test_bad_packing_is_refused(changes, error, words):
    with pytest.raises(error) as info:
        call(**changes)
    for word in words:
        assert word in str(info.value), f"{word!r} not in {str(info.value)!r}"


def test_cu_seqlens_needs_batch_one():
    t = make_case(Case(batch=2, seqlen=6, nheads=2, headdim=4, dstate=4))
    with pytest.raises(ValueError, match="batch 1"):
        mamba_chunk_scan_combined(**t, chunk_size=64, seq_idx=torch.zeros(2, 6, dtype=torch.int32),
                                  cu_seqlens=ints(0, 6), return_varlen_states=True)
