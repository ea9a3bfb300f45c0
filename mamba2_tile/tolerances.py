"""How close the cuTile kernels must come to the float64 references, per input dtype: one place.

The kernel tests, the GPU tests and the notebooks' checks all read these numbers.

The references are fed the *same* (already rounded) inputs as the kernels, so the errors
measured here are the kernels' own: float32 accumulation everywhere, plus the rounding of
tensor-core operands to the input dtype (weighted ``x`` and ``L ∘ C Bᵀ`` scores in the input
dtype, the entering state cast to the dtype of ``C``), exactly as mamba_ssm's Triton kernels do.

A result ``out`` passes against ``ref`` when, elementwise,

    |out - ref| <= tol * (|ref| + rms(ref))

i.e. a relative error of ``tol``, with outputs far below the typical magnitude judged against
the typical magnitude (cancellation in a sum of many terms makes tiny outputs relatively noisy).
Where a test knows what each output sums (``magnitude``: the sum of its terms' magnitudes), that
replaces the typical magnitude: an output that cancels to almost nothing is judged against the
terms its rounding came from.

Why these numbers (unit roundoff u: float32 6e-8, float16 4.9e-4, bfloat16 3.9e-3):

* float32: sums of a few hundred float32 products and float32 ``exp`` of cumsums; worst seen on
  the interpreter over 60 random problems (seqlen up to 700, every chunk size): 5e-6; 1e-4.
  On the GPU (``GPU_TOLERANCES``) the same 1e-4. The H200 measured ``y`` within 1.5-2.2e-7 of
  float64 in norm and 1e-6 at worst as max |error| / max |y| (``data/h200_forward.json``, the
  float32 rows of the accuracy preset), when the kernels ran float32 ``ct.mma`` in full
  float32. They now multiply float32 as split TF32 (three TF32 products per float32 one,
  :mod:`mamba2_tile.kernels.split_tf32`, about 2^-21 relative per product, next to float32
  rounding's 2^-24), float32's accuracy on tensor cores: the interpreter's errors are the same
  order (gradients 1e-7 to 1e-5 of their largest entry either way). The elementwise bound here judges an error against ``|ref| + rms(ref)``, which can
  read a few times the max-relative figure, and the GPU's ``exp2`` is the hardware's (about
  22 correct bits, 2.4e-7 relative, where the interpreter's is exact): a few 1e-6 at worst, so
  1e-4 keeps a margin of more than 10x while a float32 path silently rounded to TF32 or to the
  input dtype (u = 4.9e-4, errors of 1e-3) fails it. (It was the float16 bound, 1e-2, while a
  GPU float32 ``mma`` was thought to run as TF32.)
* float16: each output sums up to ``chunk_size`` products whose operands were rounded (u each),
  and ``y`` itself is rounded to float16; worst seen 2.3e-3 (y), 1.4e-3 (final_states).
  1e-2 leaves a 4x margin and still catches a wrong mask or decay (those give O(1) errors).
* bfloat16: same with u 8x larger; worst seen 2.1e-2 (y), 6.5e-3 (final_states): 6e-2.
* float32 with TF32 operands (``tf32=True`` in a kernel's options, what mamba_ssm does): every ``mma``
  operand is rounded to a 10-bit mantissa, u = 4.9e-4 as in float16, while ``y`` and the states
  stay float32: the float16 bound. Worst seen on the interpreter: 5e-4 (y), 7e-4 (final_states).
* The stage-1 outputs (``dA_cumsum``, ``dt``) are computed in float32 from inputs exactly
  representable in float32: float32 accuracy for every input dtype.
"""

import numpy as np
import torch

TOLERANCES = {            # relative tolerance of outputs (y, chunk_states, final_states)
    torch.float32: 1e-4,
    torch.float16: 1e-2,
    torch.bfloat16: 6e-2,
}
GPU_TOLERANCES = {        # real cuTile (see the float32 note above)
    torch.float32: 1e-4,
    torch.float16: 1e-2,
    torch.bfloat16: 6e-2,
}
TF32_TOLERANCE = TOLERANCES[torch.float16]   # float32 inputs, mma operands rounded to TF32
CUMSUM_TOLERANCE = 1e-5   # chunk_cumsum outputs, any input dtype (float32 arithmetic)

# The three chunk sizes give the same function; they differ only by where the float32 /
# input-dtype roundings happen, so they must agree to the tolerance of the dtype.
CHUNK_AGREEMENT = TOLERANCES


def to_numpy(value):
    """float64 NumPy copy of a tensor (any device / dtype) or array."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", torch.float64).numpy()
    return np.asarray(value, dtype=np.float64)


def relative_errors(actual, expected, magnitude=None):
    """Elementwise ``|actual - expected| / (|expected| + rms(expected))``, in float64; with
    ``magnitude`` (elementwise, e.g. the sum of the magnitudes of what each output adds up, which
    float32 rounding scales with) in place of ``rms(expected)``."""
    actual, expected = to_numpy(actual), to_numpy(expected)
    assert actual.shape == expected.shape, f"shape {actual.shape} != {expected.shape}"
    if magnitude is not None:
        scale = to_numpy(magnitude)
    else:
        scale = np.sqrt(np.mean(expected ** 2)) if expected.size else 0.0
    return np.abs(actual - expected) / (np.abs(expected) + scale + 1e-30)


def assert_close(actual, expected, tol, what, magnitude=None):
    """Assert the bound above; on failure say where and by how much."""
    actual, expected = to_numpy(actual), to_numpy(expected)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    assert np.all(np.isfinite(actual)), f"{what}: non-finite values in the kernel output"
    errors = relative_errors(actual, expected, magnitude)
    if not errors.size:
        return
    worst = np.unravel_index(np.argmax(errors), errors.shape)
    assert errors[worst] <= tol, (
        f"{what}: {np.sum(errors > tol)} of {errors.size} values off by more than {tol:g} "
        f"relative; worst at {tuple(int(i) for i in worst)}: got {actual[worst]:.6g}, "
        f"expected {expected[worst]:.6g} (relative error {errors[worst]:.3g})"
    )
