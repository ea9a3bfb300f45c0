"""The CPU interpreter agrees with real cuTile on a GPU.

Each case runs one kernel from tests/interpreter/kernels.py twice: through
`ct.launch(torch.cuda.current_stream(), ...)` on CUDA tensors and through
`mamba2_tile.interpreter.launch` on CPU copies of the same inputs, then compares every
output: exactly for copies, integer and padding ops and single IEEE roundings, with a
tight tolerance where the GPU may order or approximate float math differently.

Skipped unless a CUDA device and the real cuda.tile package are available.
"""
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)
try:
    import cuda.tile as ct
except ImportError:
    pytest.skip("needs the real cuda.tile package", allow_module_level=True)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))     # tests/ -> `interpreter`
from interpreter import kernels  # noqa: E402

from mamba2_tile import interpreter  # noqa: E402

EXACT = dict(rtol=0, atol=0)
gen = torch.Generator().manual_seed(0)


def randn(*shape, dtype=torch.float32):
    return torch.randn(*shape, generator=gen).to(dtype)


def uniform(low, high, *shape):
    return torch.rand(*shape, generator=gen) * (high - low) + low


def run_both(grid, kernel, args):
    """Launch on the GPU and in the interpreter; return (gpu tensors, cpu tensors)."""
    gpu = [a.clone().cuda() if isinstance(a, torch.Tensor) else a for a in args]
    cpu = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    ct.launch(torch.cuda.current_stream(), grid, kernel, tuple(gpu))
    torch.cuda.synchronize()
    interpreter.launch(grid, kernel, tuple(cpu))
    return gpu, cpu


def assert_agree(grid, kernel, args, outputs, **tolerance):
    gpu, cpu = run_both(grid, kernel, args)
    for i in outputs:
        torch.testing.assert_close(cpu[i], gpu[i].cpu(), equal_nan=True,
                                   **(tolerance or EXACT))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_vector_add(dtype):
    n = 1000
    assert_agree((8,), kernels.vector_add,
                 (randn(n, dtype=dtype), randn(n, dtype=dtype), torch.zeros(n, dtype=dtype), 128),
                 outputs=[2])


def test_row_softmax():
    assert_agree((6,), kernels.row_softmax, (randn(6, 50), torch.zeros(6, 50), 64),
                 outputs=[1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype,tol", [(torch.float16, 1e-3), (torch.bfloat16, 1e-3),
                                       (torch.float32, 1e-4)])
def test_tiled_matmul(dtype, tol):
    """fp32 inputs: the interpreter multiplies in full fp32; a TF32 GPU path would fail here."""
    assert_agree((3, 2), kernels.tiled_matmul,
                 (randn(40, 72, dtype=dtype), randn(72, 24, dtype=dtype), torch.zeros(40, 24),
                  16, 16, 32), outputs=[2], rtol=tol, atol=tol)


@pytest.mark.parametrize("reverse", [False, True])
def test_row_cumsum(reverse):
    assert_agree((5,), kernels.row_cumsum, (randn(5, 30), torch.zeros(5, 30), 32, reverse),
                 outputs=[1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])
def test_copy_2d_edges(dtype):
    x = (randn(10, 13) * 100).to(dtype)
    assert_agree((3, 2), kernels.copy_2d, (x, torch.zeros(10, 13, dtype=dtype), 4, 8),
                 outputs=[1])


def test_transpose_copy():
    assert_agree((2, 3), kernels.transpose_copy, (randn(12, 6), torch.zeros(6, 12), 4, 4),
                 outputs=[1])


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
def test_padding_modes(mode):
    assert_agree((1,), kernels.load_with_padding,
                 (torch.arange(5, dtype=torch.float32), torch.zeros(8), 8, mode), outputs=[1])


def test_gather_scatter():
    idx = torch.tensor([0, 3, 9, 12], dtype=torch.int32)
    assert_agree((1,), kernels.gather_scatter,
                 (torch.arange(10, dtype=torch.float32) * 10, idx, torch.full((11,), -1.0), 4),
                 outputs=[2])


@pytest.mark.parametrize("op", range(len(kernels.UNARY_OPS)), ids=kernels.UNARY_OPS)
def test_unary_math(op):
    assert_agree((2,), kernels.unary_math, (uniform(0.1, 4, 64), torch.zeros(64), op, 32),
                 outputs=[1], rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("op", range(len(kernels.BINARY_OPS)), ids=kernels.BINARY_OPS)
def test_binary_arith(op):
    assert_agree((2,), kernels.binary_arith,
                 (uniform(0.5, 2, 64), uniform(0.5, 2, 64), torch.zeros(64), op, 32),
                 outputs=[2], rtol=1e-6, atol=1e-7)


def test_reductions():
    assert_agree((1,), kernels.reductions, (uniform(0.5, 1.5, 4, 8), torch.zeros(4, 4), 4, 8),
                 outputs=[1], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cast_rounding(dtype):
    x = randn(64) * 3
    assert_agree((2,), kernels.cast_to, (x, torch.zeros(64, dtype=dtype), 32), outputs=[1])


def test_tf32_rounding():
    assert_agree((2,), kernels.tf32_round, (randn(64), torch.zeros(64), 32), outputs=[1])


def test_shapes_and_cat():
    assert_agree((1,), kernels.shapes_and_cat, (randn(4, 8), torch.zeros(16, 4), 4, 8),
                 outputs=[1])


def test_ssd_like_block():
    args = (randn(256, 64), randn(256, 64), randn(256, 64), torch.zeros(256, 64), 64, 64)
    assert_agree((4,), kernels.ssd_like_block, args, outputs=[3], rtol=1e-3, atol=1e-3)


def test_print_output_agrees(capfd):
    """Device printf reaches the process's stdout at synchronization, so capfd sees it."""
    ct.launch(torch.cuda.current_stream(), (1,), kernels.print_tiles, ())
    torch.cuda.synchronize()
    gpu_text = capfd.readouterr().out
    if not gpu_text:
        pytest.skip("device printf output was not captured on this driver")
    interpreter.launch((1,), kernels.print_tiles, ())
    assert capfd.readouterr().out == gpu_text == kernels.PRINT_TILES_OUTPUT
