"""The real cuTile compiler builds every kernel for sm_80, sm_90 and sm_100, no GPU needed.

Nothing is cached between runs: `compile_kernel` bypasses cuTile's on-disk cubin cache, so each
test is a real compilation. Measured on a 2-core CPU: 0.1-0.6 s for each small kernel below; the
package's kernels take 0.3-28 s each (the compiler, `tileiras`, is nearly all of it), about 70 s
per target for all of `compile_kernels.package_examples()`.
"""

from pathlib import Path

import numpy as np
import pytest
import torch

from mamba2_tile.compiler import TARGETS, CompileError, compile_kernel, compiler_available

if not compiler_available():
    pytest.skip("cuda-tile is not installed", allow_module_level=True)

try:  # tests/ is a plain directory on sys.path, or a package if it gains an __init__.py
    import compile_kernels as kernels
except ImportError:
    from tests import compile_kernels as kernels

CUBIN_MAGIC = b"\x7fELF"


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("example", kernels.examples(), ids=lambda e: e[0])
def test_course_style_kernels_compile(example, target):
    name, kernel, args = example
    result = compile_kernel(kernel, args, target)
    assert (result.kernel_name, result.target) == (name, target)
    assert result.cubin[:4] == CUBIN_MAGIC and result.size_bytes > 1000
    assert result.registers is not None and 0 < result.registers <= 255
    assert result.threads is not None and result.threads % 32 == 0    # whole warps
    assert f"{name} for {target}" in repr(result)


@pytest.mark.parametrize("warps", [4, 8])
def test_the_block_size_is_the_worker_warps_hint(warps):
    # scale_add's block is its worker warps; the split dx kernel's has 128 threads more
    # (data/cpu_bwd_chunk_dx_warps_2026-12-07.txt).
    _, kernel, args = next(e for e in kernels.examples() if e[0] == "scale_add")
    result = compile_kernel(kernel.replace_hints(num_worker_warps=warps), args, "sm_90")
    assert result.threads == 32 * warps, result.summary()
    assert f"{32 * warps} threads/block" in result.summary()


def test_torch_cpu_tensors_specialise_like_numpy_arrays():
    a = np.zeros((128, 96), np.float16)
    b = np.zeros((96, 64), np.float16)
    c = np.zeros((128, 64), np.float32)
    from_numpy = compile_kernel(kernels.matmul, (a, b, c, 64, 64, 32))
    tensors = tuple(torch.from_numpy(array) for array in (a, b, c))
    from_torch = compile_kernel(kernels.matmul, tensors + (64, 64, 32))
    assert from_numpy.symbol == from_torch.symbol


def test_a_transposed_view_is_specialised_differently():
    # The unit stride moves to the first dimension; the compiled code has to know.
    a = np.zeros((128, 96), np.float16)
    b = np.zeros((96, 64), np.float16)
    c = np.zeros((128, 64), np.float32)
    contiguous = compile_kernel(kernels.matmul, (a, b, c, 64, 64, 32))
    b_transposed = np.zeros((64, 96), np.float16).T
    transposed = compile_kernel(kernels.matmul, (a, b_transposed, c, 64, 64, 32))
    assert contiguous.symbol != transposed.symbol


def test_compile_error_names_the_kernel_and_the_problem():
    x = np.zeros(64, np.float32)
    with pytest.raises(CompileError) as info:
        compile_kernel(kernels.broken_mma, (x, x, 16))
    message = str(info.value)
    assert "broken_mma" in message and "sm_90" in message
    assert "2D" in message  # the compiler's own explanation
    assert "ct.mma(t, t, t)" in message  # and the offending source line


def test_compile_error_summary_is_one_line_with_the_problem_and_its_line():
    x = np.zeros(64, np.float32)
    with pytest.raises(CompileError) as info:
        compile_kernel(kernels.broken_mma, (x, x, 16))
    source = Path(kernels.__file__).read_text().splitlines()
    line = next(i for i, text in enumerate(source, 1) if "ct.mma(t, t, t)" in text)
    summary = info.value.summary
    assert "\n" not in summary
    assert f" at line {line}: " in summary and "2D" in summary
    assert summary.split(" at line")[0] in str(info.value)  # the error's type, in both


def test_wrong_number_of_arguments_is_explained():
    x = np.zeros(64, np.float32)
    with pytest.raises(TypeError, match=r"scale_add' takes 5 arguments \(x, y, out, alpha, TILE\)"):
        compile_kernel(kernels.scale_add, (x, x, x, 16))


def test_bad_target_is_refused():
    with pytest.raises(ValueError, match="sm_90"):
        compile_kernel(kernels.scale_add, (np.zeros(8, np.float32),) * 3 + (1.0, 8), "hopper")


def _package_cases():
    """One (name, kernel, args, target) case per package kernel configuration and target."""
    return [pytest.param(name, kernel, args, target, id=f"{name}-{target}")
            for name, kernel, args in kernels.package_examples() for target in TARGETS]


@pytest.mark.parametrize("name, kernel, args, target", _package_cases())
def test_every_package_kernel_compiles(name, kernel, args, target):
    result = compile_kernel(kernel, args, target)
    assert result.cubin[:4] == CUBIN_MAGIC, name
    if target == "sm_90" and name in kernels.NO_SPILLS_ON_SM90:
        assert result.local_bytes == 0, result.summary()


def test_the_compilation_key_ignores_sizes_but_not_dtypes():
    from mamba2_tile.compiler import compilation_key

    def key(n, dtype=np.float32):
        return compilation_key(kernels.scale_add, (np.zeros(n, dtype),) * 3 + (1.0, 16))
    assert key(64) == key(4096)                      # both divide by 16: one cubin
    assert key(64) != key(65)                        # the compiler specialises on that
    assert key(64) != key(64, np.float16)


def test_spilled_registers_show_as_local_memory():
    # A (64, 64) @ (64, 64) float32 ct.mma is scalar code holding the whole product: it spills
    # on sm_90 (~2.7 KB a thread); the same product in float16 runs on tensor cores, no spill.
    def compiled(dtype):
        a = np.zeros((64, 64), dtype)
        return compile_kernel(kernels.matmul, (a, a, np.zeros((64, 64), np.float32), 64, 64, 64),
                              "sm_90")
    spilling = compiled(np.float32)
    assert spilling.local_bytes > 0 and "local memory" in spilling.summary()
    assert compiled(np.float16).local_bytes == 0


def test_bwd_chunk_keeps_its_tiles_in_registers_on_sm90():
    """The 16-bit one-kernel bwd_chunk where it runs (chunk 64, dstate under 256) at a model's
    head shape (headdim 64, dstate 128), with the heads a block the launcher picks at batch 8
    and 2048 tokens: its 8 worker warps (``BWD_CHUNK_WORKER_WARPS``) hold the tiles without
    spilling (4 warps spilled 840 bytes a thread)."""
    from mamba2_tile.kernels.bwd_chunk import bwd_chunk_heads_per_block, bwd_chunk_launch
    chunk_size = 64
    heads = bwd_chunk_heads_per_block(torch.bfloat16, 8, 2048 // chunk_size, 64, 1)
    assert heads == 64
    x = torch.zeros(1, 2 * chunk_size, heads, 64, dtype=torch.bfloat16)
    B = torch.zeros(1, 2 * chunk_size, 1, 128, dtype=torch.bfloat16)
    dA_cumsum = torch.zeros(1, heads, 2, chunk_size)
    states = torch.zeros(1, heads, 2, 64, 128, dtype=torch.bfloat16)
    (launch,), _ = bwd_chunk_launch(x, dA_cumsum, dA_cumsum, B, B.clone(), states, states, x,
                                    torch.zeros(heads), heads_per_block=heads)
    result = compile_kernel(launch.kernel, launch.args, "sm_90")
    assert result.local_bytes == 0, result.summary()


@pytest.mark.parametrize("dstate", [256, 128])
def test_bwd_chunk_split_form_resources_on_sm90(dstate):
    """The split form (kernels/bwd_chunk_split.py), at chunk 256 and the heads a block the
    launcher picks at batch 8, 2048 tokens: its dB/dC kernel, compiled for two blocks an SM
    (``BWD_CHUNK_SPLIT_DB_DC_OCCUPANCY``), stays within 128 registers a thread without spilling
    (it reads dscores in the input dtype: a float32 dscores converted in the kernel spilled 24
    bytes), and the dscores kernel spills nothing. Its dx kernel takes its row-block count at
    run time, even in whole chunks (unrolled for a constant count, it was a third slower on an
    H100: data/h100_bwd_chunk_dx_row_count_2026-12-07.txt): at dstate 128 that compiles to 128
    registers at 256 threads, no spills (a constant count gave 255 registers and 24 bytes); at
    dstate 256 it keeps 168 bytes a thread of local memory (64 with the constant count), and was
    the faster of the two all the same. Held there, so that a change shows. Both run the
    split form by default at chunk 256 (``BWD_CHUNK_SPLIT_CHUNK``)."""
    from mamba2_tile.kernels import bwd_chunk
    heads = bwd_chunk.bwd_chunk_heads_per_block(
        torch.bfloat16, 8, 2048 // 256, 64, 1,
        bwd_chunk.bwd_chunk_column_blocks(torch.bfloat16, 256, dstate))
    x = torch.zeros(1, 512, heads, 64, dtype=torch.bfloat16)
    B = torch.zeros(1, 512, 1, dstate, dtype=torch.bfloat16)
    dA_cumsum = torch.zeros(1, heads, 2, 256)
    states = torch.zeros(1, heads, 2, 64, dstate, dtype=torch.bfloat16)
    launches, _ = bwd_chunk.bwd_chunk_launch(x, dA_cumsum, dA_cumsum, B, B.clone(), states,
                                             states, x, torch.zeros(heads),
                                             heads_per_block=heads)
    dx, dscores, dB_dC = (compile_kernel(launch.kernel, launch.args, "sm_90")
                          for launch in launches)
    assert dB_dC.registers <= 128 and dB_dC.local_bytes == 0, dB_dC.summary()
    assert dscores.local_bytes == 0, dscores.summary()
    assert dx.local_bytes <= {256: 168, 128: 0}[dstate], dx.summary()
    assert dstate == 256 or dx.registers <= 128, dx.summary()


@pytest.mark.parametrize("chunk_size", [64, 128, 256])
def test_backward_state_walks_fit_two_blocks_an_sm_on_sm90(chunk_size):
    """The backward's two walks over the chunks, as the bf16 backward launches them:
    fwd_pass_state again (``autograd.STATE_RECOMPUTE_OPTIONS``) and bwd_state_pass
    (``BWD_STATE_PASS_OCCUPANCY``), compiled for two blocks an SM, fit in 128 registers a
    thread and half an SM's 228 KB of shared memory (without the hint: 255 registers, up to
    209 KB); fwd_pass_state spills at most 8 bytes."""
    from mamba2_tile import autograd
    from mamba2_tile.kernels.bwd_state_pass import bwd_state_pass_launch
    from mamba2_tile.kernels.fwd_pass_state import fwd_pass_state_launch
    x = torch.zeros(1, 2 * chunk_size, 4, 64, dtype=torch.bfloat16)
    B = torch.zeros(1, 2 * chunk_size, 1, 128, dtype=torch.bfloat16)
    dA_cumsum = torch.zeros(1, 4, 2, chunk_size)
    recompute, _ = fwd_pass_state_launch(x, B, dA_cumsum, dA_cumsum,
                                         options=autograd.STATE_RECOMPUTE_OPTIONS,
                                         low_precision_states=True)
    passing, _ = bwd_state_pass_launch(x, B, dA_cumsum, torch.zeros(1, 4, 64, 128),
                                       low_precision_states=True)
    for launch, spill in [(recompute, 8), (passing, 0)]:
        result = compile_kernel(launch.kernel, launch.args, "sm_90")
        assert result.registers <= 128 and result.shared_bytes <= 114 * 1024, result.summary()
        assert result.local_bytes <= spill, result.summary()


def test_decode_kernel_leaves_room_for_many_blocks_per_sm():
    """The decode step is memory-bound: it needs several blocks per SM with their loads in
    flight. With TMA loads the compiler warp-specialised it at 255 registers per thread, one
    block per SM (13-33% of copy bandwidth on an H200); plain loads keep it under 100 (sm_90)
    at the tiles the rule picks (2 KB and 8 KB)."""
    from mamba2_tile.kernels.selective_state_update import selective_state_update_launch
    from mamba2_tile.tools.decode import decode_inputs

    for state_dtype, block_p in [("float32", 4), ("float32", 16), ("bfloat16", 32)]:
        inputs = decode_inputs(16, 80, 64, 128, 1, state_dtype, device="cpu")
        launch, _ = selective_state_update_launch(**inputs, dt_softplus=True, block_p=block_p)
        result = compile_kernel(launch.kernel, launch.args, "sm_90")
        assert result.registers <= 100, (state_dtype, block_p, result.registers)
