"""Float32 products on tensor cores: each float32 operand split into two TF32 parts.

``ct.mma`` of float32 tiles is exact float32 arithmetic, but tensor cores do not take float32:
for sm_90 the compiler unrolls it into one ``FMUL`` and one ``FADD`` per product on the CUDA
cores, with the whole tile product in registers. Already a ``(64, 64) @ (64, 64)`` spills (read
off the cubin with nvdisasm: 6,368 instructions, 688 ``STL`` and 934 ``LDL``); the backward
kernel at dstate 128 compiled to ~111,000 instructions with ~41,000 spill loads and stores.

TF32 (``ct.tfloat32``: float32's 8 exponent bits, 10 mantissa bits) runs on tensor cores, and a
float32 value is nearly the sum of two TF32 values: ``a_hi = tf32(a)`` and ``a_lo = tf32(a -
a_hi)`` (the subtraction is exact), with ``|a - a_hi - a_lo| <= 2^-22 |a|``. Then

    a b = a_hi b_hi + a_hi b_lo + a_lo b_hi + a_lo b_lo

and the last term, ``<= 2^-22 |a b|``, is dropped: three TF32 ``mma`` per float32 ``mma``,
accumulated in float32, the small terms first. The result carries float32's accuracy (a relative
error of order 2^-21 per product, next to float32 rounding's 2^-24 and the float32 sums'), not
TF32's (2^-11): the error is that of float32, the speed that of tensor cores at a third of TF32's
rate. The trick is the "3xTF32" of NVIDIA CUTLASS (example 27, "fast accurate tensorop gemm")
and of Ootomo and Yokota, "Recovering single precision accuracy from Tensor Cores while
surpassing the FP32 theoretical peak performance" (IJHPCA, 2022).

Every kernel's ``mma`` goes through :func:`split_mma`: float32 inputs without ``tf32`` get
float32's accuracy this way; with ``tf32`` the operands are already ``ct.tfloat32`` and 16-bit
ones are their own dtype, and both reach ``ct.mma`` as before (the same machine code).
"""

from mamba2_tile.tile import ct


@ct.function
def split_mma(x, y, acc):
    """``acc + x @ y`` as ``ct.mma``, except that float32 operands are multiplied as three TF32
    products (float32's accuracy on tensor cores); other dtypes go to ``ct.mma`` unchanged."""
    if x.dtype == ct.float32:
        x_hi = x.astype(ct.tfloat32)
        x_lo = (x - x_hi.astype(ct.float32)).astype(ct.tfloat32)
        y_hi = y.astype(ct.tfloat32)
        y_lo = (y - y_hi.astype(ct.float32)).astype(ct.tfloat32)
        acc = ct.mma(x_lo, y_hi, acc)
        acc = ct.mma(x_hi, y_lo, acc)
        return ct.mma(x_hi, y_hi, acc)
    return ct.mma(x, y, acc)
