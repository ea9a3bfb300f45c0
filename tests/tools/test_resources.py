"""The resources tool compiles the kernels a call launches, as planned for an H200, on a CPU: the
launches it finds are the plan's (a training step's too), and the float32 TF32 row's fused kernel
no longer spills."""

import pytest

from mamba2_tile.compiler import _kernel_name, compiler_available
from mamba2_tile.problem import Problem
from mamba2_tile.tools import resources

needs_compiler = pytest.mark.skipif(not compiler_available(), reason="cuda-tile is not installed")


def kernel_names(problem):
    return [_kernel_name(kernel).removesuffix("_kernel")
            for kernel, _args in resources.planned_launches(problem)]


@pytest.mark.parametrize("problem, names", [
    (Problem(8, 8192, 64, 64, 128, 1, 256), ["chunk_cumsum", "fused_state_out"]),
    (Problem(8, 2048, 64, 64, 256, 1, 64), ["chunk_cumsum", "chunk_scores", "fused_state_out"]),
    # Batch-1 prefill: the sequence cut into segments.
    (Problem(1, 131072, 80, 64, 128, 1, 256),
     ["chunk_cumsum", "segment_states", "segment_pass", "fused_state_out"]),
])
def test_the_launches_are_those_of_the_plan(problem, names):
    assert kernel_names(problem) == names


# The chunk states kept by the forward at chunk 256 (dstate 256 <= 256), recomputed at chunk 64
# (mamba2_tile.autograd.keeps_chunk_states).
@pytest.mark.parametrize("chunk_size, recomputed", [(256, []), (64, ["fwd_pass_state"])])
def test_a_training_step_launches_the_backward_kernels_after_the_forward(chunk_size, recomputed):
    names = [_kernel_name(kernel).removesuffix("_kernel") for kernel, _args
             in resources.planned_launches(Problem(8, 2048, 64, 64, 256, 1, chunk_size),
                                           backward=True)]
    assert names == ["chunk_cumsum", "chunk_scores", "fused_state_out",        # forward
                     "chunk_cumsum", *recomputed,
                     "bwd_state_pass", "bwd_chunk_dx", "bwd_chunk_dscores", "bwd_chunk_dB_dC",
                     "bwd_chunk_cumsum"]


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


@pytest.mark.parametrize("argv, message", [
    (["--dtype", "bfloat16", "--tf32"], "--tf32 acts on float32 inputs only"),
    (["--tf32", "--backward"], "--tf32 is a forward option"),
])
def test_options_that_would_do_nothing_are_refused(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        resources.parse_args(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
