"""The resources tool compiles the kernels a call launches, as planned for an H200, on a CPU: the
launches it finds are the plan's, and the float32 TF32 row's fused kernel no longer spills."""

import pytest
import torch

from mamba2_tile.compiler import _kernel_name, compiler_available
from mamba2_tile.kernels.plan import REFERENCE_SM_COUNT, plan
from mamba2_tile.problem import Problem
from mamba2_tile.tools import resources

needs_compiler = pytest.mark.skipif(not compiler_available(), reason="cuda-tile is not installed")


def kernel_names(problem, tf32=False):
    return [_kernel_name(kernel).removesuffix("_kernel")
            for kernel, _args in resources.planned_launches(problem, tf32)]


@pytest.mark.parametrize("problem, names", [
    (Problem(8, 8192, 64, 64, 128, 1, 256), ["chunk_cumsum", "fused_state_out"]),
    (Problem(8, 2048, 64, 64, 256, 1, 64), ["chunk_cumsum", "chunk_scores", "fused_state_out"]),
    # Batch-1 prefill: the sequence cut into segments, even though the tool's tensors are short.
    (Problem(1, 131072, 80, 64, 128, 1, 256),
     ["chunk_cumsum", "segment_states", "segment_pass", "fused_state_out"]),
])
def test_the_launches_are_those_of_the_plan_for_the_real_length(problem, names):
    assert kernel_names(problem) == names


def test_short_tensors_keep_the_remainder_the_compiler_specialises_on():
    problem = Problem(1, 131072 + 5, 80, 64, 128, 1, 256)
    segment_chunks = plan(1, problem.seqlen, 80, 64, 1, 128, 256, torch.bfloat16,
                          REFERENCE_SM_COUNT).segment_chunks
    seqlen = resources.short_seqlen(problem, segment_chunks)
    assert seqlen == 2 * segment_chunks * 256 + 5
    assert resources.short_seqlen(Problem(2, 100, 4, 16, 16, 1, 64)) == 100   # never longer


@needs_compiler
def test_the_float32_tf32_row_keeps_its_fused_kernel_in_registers():
    # With the 16-bit hints (4 warps, two blocks an SM) this kernel spilled 328 bytes a thread.
    rows = resources.resource_rows([Problem(8, 8192, 64, 64, 128, 1, 256, "float32")],
                                   tf32=True, progress=False)
    (*_, local_bytes, _), = [row for row in rows
                                                   if row[1] == "fused_state_out_kernel"]
    assert local_bytes <= 64, rows


@needs_compiler
def test_command_line_prints_a_row_per_launch(capsys):
    assert resources.main(["--preset", "quick", "--target", "sm_80"]) == 0
    out = capsys.readouterr().out
    assert "compiled for sm_80" in out
    assert "b2 L1024 h8 p64 n64 g1 c64 bf16  chunk_cumsum_kernel" in out
    assert "fused_state_out_kernel" in out


def test_tf32_without_float32_is_refused(capsys):
    with pytest.raises(SystemExit) as exit_info:
        resources.parse_args(["--dtype", "bfloat16", "--tf32"])
    assert exit_info.value.code == 2
    assert "--tf32 acts on float32 inputs only" in capsys.readouterr().err
