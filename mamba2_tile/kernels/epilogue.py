"""The end of every output tile: the skip connection ``D x`` and the gate ``silu(z)``.

Stage 3 (``compute_out``) and the fused stages 2+3 (``fused_state_out``) finish each
``(BLOCK_M, BLOCK_P)`` tile of ``y`` the same way, as mamba_ssm does::

    y = (y_ssd + D * x) * silu(z),        silu(z) = z / (1 + exp(-z))

each step optional (the ``HAS_D`` / ``HAS_Z`` compile-time constants). They are tile functions
(``@ct.function``: inlined into each kernel by the compiler, plain calls on the interpreter), so
the two kernels cannot drift apart. ``D`` is loaded apart from its use because the fused kernel
loads it once per block, before its loop over row blocks.
"""

from mamba2_tile.kernels.exp2 import LOG2E
from mamba2_tile.tile import ct


@ct.function
def load_skip(D, h, p_tile, BLOCK_P, HAS_D, D_PER_CHANNEL):
    """Head ``h``'s ``D`` as float32, shaped to broadcast over rows: ``(1, BLOCK_P)`` when ``D``
    is ``(nheads, headdim)``, ``(1, 1)`` when it is ``(nheads,)``; unread zeros without ``D``."""
    if HAS_D:
        if D_PER_CHANNEL:
            D_h = ct.load(D, (h, p_tile), (1, BLOCK_P), padding_mode=ct.PaddingMode.ZERO)
        else:
            D_h = ct.reshape(ct.load(D, (h,), (1,)), (1, 1))
        D_h = D_h.astype(ct.float32)
    else:
        D_h = ct.zeros((1, 1), dtype=ct.float32)
    return D_h


@ct.function
def skip_and_gate(acc, x_rows, D_h, z, b, row_block, h, p_tile, BLOCK_M, BLOCK_P, HAS_D, HAS_Z,
                  LATENCY):
    """``(acc + D_h * x_rows) * silu(z rows)``, float32 ``(BLOCK_M, BLOCK_P)``.

    ``x_rows`` is the tile's ``x`` in float32; ``z`` is read here, rows ``row_block`` (in
    ``BLOCK_M`` units) of head ``h``, channel tile ``p_tile``, with the DRAM latency hint
    ``LATENCY`` (0: none).
    """
    if HAS_D:
        acc = acc + x_rows * D_h
    if HAS_Z:
        z_rows = ct.load(z, (b, row_block, h, p_tile), (1, BLOCK_M, 1, BLOCK_P),
                         padding_mode=ct.PaddingMode.ZERO,
                         latency=LATENCY if LATENCY > 0 else None)
        z_rows = ct.reshape(z_rows, (BLOCK_M, BLOCK_P)).astype(ct.float32)
        acc = acc * z_rows / (1.0 + ct.exp2(-z_rows * LOG2E, flush_to_zero=True))
    return acc
