"""Every ``exp`` of the kernels is an ``exp2``: ``exp(a) = exp2(a * LOG2E)``.

On sm_90 ``ct.exp`` compiles to a full-precision ``expf``, about eight instructions a value (read
off the cubin); ``ct.exp2(..., flush_to_zero=True)`` is the hardware's approximate exp2
(``MUFU.EX2``, about 22 correct bits), one instruction. The kernels' exponentials are decays,
``exp(dA_i - dA_j)`` with ``dA_i - dA_j <= 0``, so they lie in (0, 1], and the gate's
``exp(-z)``; the decays meet 16-bit ``mma`` operands or a float32 sum of up to a chunk of terms,
where 22 bits never show, while elementwise work on (64, 64) tiles is a large part of what the
kernels' threads execute. ``flush_to_zero`` turns results below float32's normal range (a decay
past ``e^-87``) into 0, which is what they are to every sum they enter.

``dA_cumsum`` stays in natural-log units in memory (it is what the reference returns); a kernel
multiplies the ``dA_cumsum`` values it loads by ``LOG2E`` once, so that a tile of differences
costs one ``MUFU.EX2`` a value and no multiply.
"""

LOG2E = 1.4426950408889634
