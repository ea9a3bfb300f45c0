"""Packed sequences on a real GPU: sequences of 1 to 10k tokens in one row, every path, chunk
64 / 128 / 256, against each sequence run alone in float64 (and mamba_ssm where it imports).

Skipped unless torch sees a CUDA device and the real ``cuda.tile`` imports. The oracle is
independent of the packing code: each sequence is cut out and run by itself through
``mamba2_tile.torch_reference`` in float64 (the first with ``initial_states``), so ``y``, the
final state and every ``varlen_states`` entry must be what the sequence gets alone.
"""

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "kernels"))  # ssd_cases

from ssd_cases import Case, make_case  # noqa: E402
from mamba2_tile.tolerances import GPU_TOLERANCES, assert_close, to_numpy  # noqa: E402

from mamba2_tile import dispatch  # noqa: E402
from mamba2_tile.api import forward_with_options, mamba_chunk_scan_combined  # noqa: E402
from mamba2_tile.kernels import DEFAULT_OPTIONS  # noqa: E402
from mamba2_tile.torch_reference import mamba_chunk_scan_torch  # noqa: E402

pytestmark = pytest.mark.skipif(not dispatch.gpu_available(),
                                reason="needs a GPU that cuTile supports and the real cuda.tile")

# 1 to 10k tokens, on and around chunk boundaries of every chunk size.
LENGTHS = [1, 10_000, 2, 63, 64, 65, 1, 127, 255, 256, 257, 1000, 4096, 3, 511]
PATHS = {"default": None,
         "three_kernel": dict(fuse_state_passing=False),
         "fused": dict(fuse_state_passing=True),
         "sequence_parallel": dict(fuse_state_passing=True, segment_chunks=3)}


def packing(lengths, device="cuda"):
    seq_idx = torch.repeat_interleave(torch.arange(len(lengths), dtype=torch.int32),
                                      torch.tensor(lengths))[None]
    cu_seqlens = torch.tensor(np.concatenate([[0], np.cumsum(lengths)]), dtype=torch.int32)
    return seq_idx.to(device), cu_seqlens.to(device)


def alone(t, lengths, chunk_size):
    """``(y, states)``: each sequence run by itself in float64; states[i] its last state."""
    ys, states = [], []
    start = 0
    t = {k: None if v is None else v.double() for k, v in t.items()}   # y comes back in float64
    for i, length in enumerate(lengths):
        part = {k: None if t[k] is None else t[k][:, start:start + length]
                for k in ("x", "dt", "B", "C", "z")}
        y, state = mamba_chunk_scan_torch(
            part["x"], part["dt"], t["A"], part["B"], part["C"], chunk_size, D=t["D"],
            z=part["z"], dt_bias=t["dt_bias"], dt_softplus=True,
            initial_states=t["initial_states"] if i == 0 else None,
            return_final_states=True, compute_dtype=torch.float64)
        ys.append(y)
        states.append(state[0])
        start += length
    return torch.cat(ys, dim=1), torch.stack(states)


def run(t, chunk_size, seq_idx, cu_seqlens, path):
    kwargs = dict(t, chunk_size=chunk_size, seq_idx=seq_idx, cu_seqlens=cu_seqlens,
                  dt_softplus=True, return_final_states=True, return_varlen_states=True)
    if PATHS[path] is None:
        outputs = mamba_chunk_scan_combined(**kwargs)
    else:
        outputs = forward_with_options(options=DEFAULT_OPTIONS.with_switches(**PATHS[path]),
                                       **kwargs)
    torch.cuda.synchronize()
    assert dispatch.last_backend() == dispatch.CUTILE, "the kernels did not run on cuTile"
    return outputs


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("chunk_size", [64, 128, 256])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_one_pack_of_1_to_10k_tokens(dtype, chunk_size, path):
    case = Case(batch=1, seqlen=sum(LENGTHS), nheads=8, headdim=64, ngroups=1, dstate=128,
                dtype=dtype, D="head", z=True, dt_bias=True, initial_states=True,
                dt_softplus=True, seed=chunk_size)
    t = make_case(case, device="cuda")
    seq_idx, cu_seqlens = packing(LENGTHS)
    y, final_states, varlen_states = run(t, chunk_size, seq_idx, cu_seqlens, path)
    want_y, want_states = alone(t, LENGTHS, chunk_size)
    tol = GPU_TOLERANCES[dtype]
    where = f"{path}, chunk {chunk_size}"
    assert varlen_states.shape == (len(LENGTHS), 8, 64, 128)
    assert_close(y, to_numpy(want_y), tol, f"y ({where})")
    assert_close(final_states[0], to_numpy(want_states[-1]), tol, f"final_states ({where})")
    start = 0
    for i, length in enumerate(LENGTHS):
        piece = f"sequence {i} ({length} tokens, {where})"
        assert_close(y[:, start:start + length], to_numpy(want_y[:, start:start + length]), tol,
                     f"y of {piece}")
        assert_close(varlen_states[i], to_numpy(want_states[i]), tol, f"state of {piece}")
        start += length


@pytest.mark.parametrize("path", PATHS)
def test_dstate_256_reads_precomputed_scores(path):
    # Above dstate 128 the fused kernel reads C Bᵀ from chunk_scores: masked all the same.
    lengths = [5, 700, 1, 300]
    case = Case(batch=1, seqlen=sum(lengths), nheads=4, headdim=64, dstate=256,
                dtype=torch.bfloat16, D="channel", initial_states=True, seed=3)
    t = make_case(case, device="cuda")
    t.update(z=None, dt_bias=None)
    seq_idx, cu_seqlens = packing(lengths)
    y, final_states, varlen_states = run(t, 64, seq_idx, cu_seqlens, path)
    want_y, want_states = alone(t, lengths, 64)
    tol = GPU_TOLERANCES[torch.bfloat16]
    assert_close(y, to_numpy(want_y), tol, f"y ({path})")
    assert_close(varlen_states, to_numpy(want_states), tol, f"varlen_states ({path})")


def test_packing_matches_mamba_ssm():
    try:
        ssd = importlib.import_module("mamba_ssm.ops.triton.ssd_combined")
    except Exception as error:  # not installed, or its Triton kernels do not build here
        pytest.skip(f"mamba_ssm unavailable: {error}")
    lengths = [1, 300, 64, 2000, 7]
    case = Case(batch=1, seqlen=sum(lengths), nheads=8, headdim=64, dstate=128,
                dtype=torch.bfloat16, D="head", z=True, dt_bias=True, initial_states=True,
                dt_softplus=True, seed=4)
    t = make_case(case, device="cuda")
    seq_idx, cu_seqlens = packing(lengths)
    args = (t["x"], t["dt"], t["A"], t["B"], t["C"], 256, t["D"], t["z"], t["dt_bias"],
            t["initial_states"], seq_idx, cu_seqlens, True, (0.0, float("inf")), True, True)
    ours = mamba_chunk_scan_combined(*args)
    theirs = ssd.mamba_chunk_scan_combined(*args)
    torch.cuda.synchronize()
    tol = GPU_TOLERANCES[torch.bfloat16]
    for name, a, b in zip(("y", "final_states", "varlen_states"), ours, theirs):
        assert a.shape == b.shape, name
        assert_close(a, to_numpy(b.double()), tol, f"{name} against mamba_ssm")


def test_cuda_graph_capture_skips_the_value_check():
    lengths = [100, 28]
    case = Case(batch=1, seqlen=128, nheads=8, headdim=64, dstate=64, dtype=torch.bfloat16,
                seed=5)
    t = make_case(case, device="cuda")
    seq_idx, _ = packing(lengths)
    eager = mamba_chunk_scan_combined(**t, chunk_size=64, seq_idx=seq_idx)
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        mamba_chunk_scan_combined(**t, chunk_size=64, seq_idx=seq_idx)   # compile first
        with torch.cuda.graph(graph, stream=stream):
            captured = mamba_chunk_scan_combined(**t, chunk_size=64, seq_idx=seq_idx)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, eager)


def test_bad_seq_idx_on_the_gpu_is_refused():
    t = make_case(Case(batch=1, seqlen=6, nheads=2, headdim=4, dstate=4), device="cuda")
    with pytest.raises(ValueError, match="nondecreasing"):
        mamba_chunk_scan_combined(**t, chunk_size=64, seq_idx=torch.tensor(
            [[0, 1, 1, 0, 1, 1]], dtype=torch.int32, device="cuda"))
    with pytest.raises(ValueError, match="same device"):
        mamba_chunk_scan_combined(**t, chunk_size=64, seq_idx=torch.zeros(1, 6, dtype=torch.int32))
