"""The decode step: one token through the SSM, updating the cached state in place.

Reference: :func:`mamba2_tile.reference_decode.selective_state_update`. One block handles one
batch entry, one head and ``BLOCK_P`` of its channels: it reads that ``(BLOCK_P, dstate)`` slice
of the state, decays it by ``exp(dt A)``, adds ``(dt x) ⊗ B``, writes it back over itself and
reads the output out with ``C``. The step streams the state once in and once out and does a few
FLOPs per element, so it is memory-bound: the kernel is one load and one store of the state
tile, with every other operand a small vector.

mamba_ssm's ``Mamba2`` passes ``dt``, ``dt_bias``, ``A`` and ``D`` as stride-0 broadcasts of one
value per head (``(b, h) -> (b, h, p)``, ``(h,) -> (h, p, n)``); the launcher passes such a
tensor as its one value per head and the ``*_PER_HEAD`` constant makes the kernel load a
``(1, 1)`` tile that broadcasts, so the broadcast is never materialised.

Speed is bytes in flight, and few instructions per byte: a copy-speed step needs many blocks per
SM, each with its loads issued at once, and little else to issue. Four choices give that
(sm_90 SASS of the 80-head x 64 x 128 launch, bfloat16 inputs, as compiled by
``tests/compile_kernels.py``'s compiler; instruction counts are the straight path to ``EXIT``):

* **No TMA** (``allow_tma=False`` on every access, :func:`load_tile`). Left to choose, the
  compiler loads the state tile with TMA and warp-specialises the kernel: 8 warps (4 compute,
  the rest issuing copies) with 255 registers per thread, so one block fills an SM's register
  file and each SM holds one 16 KB tile at a time, then waits for its load, its maths and its
  store in turn. That kernel reached 13-33% of copy bandwidth on an H200
  (``data/h200_decode.json``, before this change). Plain loads give 4 warps, no shared-memory
  staging of the state, each thread reading its share of a row with 16-byte ``LDG.E.128`` and
  writing it back with ``STG.E.128``; 31-94 registers per thread by tile size (1-8 KB), so
  5-16 blocks share an SM.
* **Tiles by grid size and state bytes** (:func:`decode_block_p`): ``BLOCK_P`` rows of the
  state per block, ``WIDE_TILE_BYTES`` of state in a tile when there are blocks enough to give
  every SM ``BLOCKS_PER_SM`` of them, halved (down to ``NARROW_TILE_BYTES``) while there are
  not, so a small batch still spreads over every SM. Wide tiles matter because a block's fixed
  work (indices, per-head parameters, softplus, the reduction, the gate) is issued for every
  tile: at 4 warps per block an SM issues about one cycle per instruction per tile, against
  ``tile bytes x 2 / 16`` cycles of its share of the copy bandwidth (~4.2 TB/s over 132 SMs at
  ~2 GHz is ~16 bytes per cycle). Float32 state: 226 instructions per 2 KB tile (``BLOCK_P``
  4; 256 cycles of copy), 446 per 8 KB (``BLOCK_P`` 16; 1024). Bfloat16 state: 234 per 1 KB
  (``BLOCK_P`` 4, 128 cycles of copy: issue-bound, as mamba_ssm's Triton kernel with its 4
  rows per 4-warp program seems to be: on the H200 it reached 39% of copy bandwidth with a
  bfloat16 state, 78% with float32), 650 per 8 KB (``BLOCK_P`` 32; 1024). So the wide tile
  is the same 8 KB for both dtypes: twice the rows for bfloat16.
* **No bounds checks where none can fail** (``EXACT_TILES``: ``BLOCK_P`` divides headdim and
  dstate is a power of two; for the state, also no ``state_batch_indices``, whose values nobody
  checks on CUDA): ``check_bounds=False`` takes the predicates and branches around each access
  away.
* **An approximate division in the gate** ``silu(z) = z / (1 + exp(-z))``: the IEEE division
  is a reciprocal, a check and a call to a slow path for each value; the approximate one
  (``RoundingMode.APPROX``, within a few float32 ulps) is the reciprocal alone. With the bounds
  checks, float32 ``BLOCK_P`` 16 went from 809 to 446 instructions, ``BLOCK_P`` 4 from 419 to
  226 (35 -> 32 registers).
"""

import torch

from mamba2_tile.kernels.exp2 import LOG2E
from mamba2_tile.kernels.launching import KernelLaunch, cdiv, next_power_of_2, placeholder
from mamba2_tile.kernels.plan import device_sm_count
from mamba2_tile.tile import ct

# As mamba_ssm: above this softplus(dt) == dt to float32 precision, and exp would overflow.
SOFTPLUS_THRESHOLD = 20.0
# The state tile of one block, BLOCK_P x dstate values (module doc), in bytes. Wide: four
# 16-byte loads per thread of a 4-warp block; narrow: one.
WIDE_TILE_BYTES = 8192
NARROW_TILE_BYTES = 2048
# Blocks per SM that the wide tile needs the grid to provide before it is used: about what fits
# (5-12 by registers at these tiles), so the loads of several blocks overlap on every SM.
BLOCKS_PER_SM = 8


@ct.function
def load_tile(array, index, shape, EXACT):
    """A plain (not TMA) load: unchecked when ``EXACT`` (the tile lies inside ``array``),
    else zero where it sticks out."""
    if EXACT:
        tile = ct.load(array, index, shape, check_bounds=False, allow_tma=False)
    else:
        tile = ct.load(array, index, shape, padding_mode=ct.PaddingMode.ZERO, allow_tma=False)
    return tile


@ct.function
def load_column(array, index, shape, BLOCK_P, EXACT):
    """A ``shape`` tile of ``BLOCK_P`` channels (its last axis) as a float32 ``(BLOCK_P, 1)``
    column."""
    return ct.reshape(load_tile(array, index, shape, EXACT), (BLOCK_P, 1)).astype(ct.float32)


@ct.function
def load_scalar(array, index, shape):
    """One value (a stride-0 broadcast's), at ``index`` in a ``shape`` of ones, as a float32
    ``(1, 1)`` tile."""
    return ct.reshape(load_tile(array, index, shape, True), (1, 1)).astype(ct.float32)


@ct.kernel
def selective_state_update_kernel(
    state,                        # (slots, nheads, headdim, dstate), read and written in place
    x, dt, A, B, C,               # (b, h, p), (b, h, p | 1), (h, p | 1, n | 1), (b, g, n) x2
    D, z, dt_bias,                # (h, p | 1), (b, h, p), (h, p | 1); placeholders when absent
    state_batch_indices,          # (b,) int32: the row of state for each batch entry
    out,                          # (b, h, p)
    BLOCK_P: ct.Constant[int],
    BLOCK_N: ct.Constant[int],
    HEADS_PER_GROUP: ct.Constant[int],
    DT_PER_HEAD: ct.Constant[bool],
    DT_BIAS_PER_HEAD: ct.Constant[bool],
    A_PER_HEAD: ct.Constant[bool],
    D_PER_HEAD: ct.Constant[bool],
    HAS_D: ct.Constant[bool],
    HAS_Z: ct.Constant[bool],
    HAS_DT_BIAS: ct.Constant[bool],
    HAS_INDICES: ct.Constant[bool],
    DT_SOFTPLUS: ct.Constant[bool],
    EXACT_TILES: ct.Constant[bool],   # BLOCK_P divides headdim, BLOCK_N is dstate
):
    b = ct.bid(0)
    h = ct.bid(1)
    pb = ct.bid(2)
    g = h // HEADS_PER_GROUP

    row = b
    if HAS_INDICES:
        row = ct.load(state_batch_indices, (b,), (), allow_tma=False)
    # Channels past headdim and state entries past dstate load as 0 and are never stored. With
    # exact tiles nothing can stick out, so no access is checked (fewer instructions each),
    # except the state's when its rows come from indices: on CUDA nobody checked those.
    state_exact = EXACT_TILES and not HAS_INDICES
    state_tile = (1, 1, BLOCK_P, BLOCK_N)

    h_tile = load_tile(state, (row, h, pb, 0), state_tile, state_exact)
    h_tile = ct.reshape(h_tile, (BLOCK_P, BLOCK_N)).astype(ct.float32)
    x_t = load_column(x, (b, h, pb), (1, 1, BLOCK_P), BLOCK_P, EXACT_TILES)

    if DT_PER_HEAD:
        dt_t = load_scalar(dt, (b, h, 0), (1, 1, 1))
    else:
        dt_t = load_column(dt, (b, h, pb), (1, 1, BLOCK_P), BLOCK_P, EXACT_TILES)
    if HAS_DT_BIAS:
        if DT_BIAS_PER_HEAD:
            dt_t = dt_t + load_scalar(dt_bias, (h, 0), (1, 1))
        else:
            dt_t = dt_t + load_column(dt_bias, (h, pb), (1, BLOCK_P), BLOCK_P, EXACT_TILES)
    if DT_SOFTPLUS:
        dt_t = ct.where(dt_t <= SOFTPLUS_THRESHOLD,
                        ct.log(1.0 + ct.exp2(dt_t * LOG2E)), dt_t)

    if A_PER_HEAD:
        A_t = load_scalar(A, (h, 0, 0), (1, 1, 1))
    else:
        A_t = load_tile(A, (h, pb, 0), (1, BLOCK_P, BLOCK_N), EXACT_TILES)
        A_t = ct.reshape(A_t, (BLOCK_P, BLOCK_N)).astype(ct.float32)
    B_t = load_tile(B, (b, g, 0), (1, 1, BLOCK_N), EXACT_TILES)
    C_t = load_tile(C, (b, g, 0), (1, 1, BLOCK_N), EXACT_TILES)
    B_t = ct.reshape(B_t, (1, BLOCK_N)).astype(ct.float32)
    C_t = ct.reshape(C_t, (1, BLOCK_N)).astype(ct.float32)

    h_tile = ct.exp2(dt_t * A_t * LOG2E) * h_tile + (dt_t * x_t) * B_t
    ct.store(state, (row, h, pb, 0), ct.reshape(h_tile, state_tile).astype(state.dtype),
             check_bounds=not state_exact, allow_tma=False)

    y = ct.sum(h_tile * C_t, axis=1, keepdims=True)                      # (BLOCK_P, 1)
    if HAS_D:
        if D_PER_HEAD:
            y = y + load_scalar(D, (h, 0), (1, 1)) * x_t
        else:
            y = y + load_column(D, (h, pb), (1, BLOCK_P), BLOCK_P, EXACT_TILES) * x_t
    if HAS_Z:
        z_t = load_column(z, (b, h, pb), (1, 1, BLOCK_P), BLOCK_P, EXACT_TILES)
        y = ct.truediv(y * z_t, 1.0 + ct.exp2(-z_t * LOG2E),
                       rounding_mode=ct.RoundingMode.APPROX)
    ct.store(out, (b, h, pb), ct.reshape(y, (1, 1, BLOCK_P)).astype(out.dtype),
             check_bounds=not EXACT_TILES, allow_tma=False)


def _per_head(t, axes):
    """When ``t`` is a stride-0 broadcast along ``axes``, the same memory seen with size 1
    there (a view: nothing is copied); else None."""
    if not all(t.stride(a) == 0 or t.shape[a] == 1 for a in axes):
        return None
    shape = [1 if a in axes else n for a, n in enumerate(t.shape)]
    stride = [1 if a in axes else s for a, s in enumerate(t.stride())]
    return t.as_strided(shape, stride)


def decode_block_p(batch, nheads, headdim, dstate, state_bytes, sm_count):
    """``BLOCK_P``, the rows of the state per block (module doc), for a state of
    ``state_bytes``-byte values: the widest tile up to ``WIDE_TILE_BYTES``, halved while the
    grid gives fewer than ``BLOCKS_PER_SM`` blocks per SM and the tile is wider than
    ``NARROW_TILE_BYTES``. At 80 heads x 64 x 128 on 132 SMs, float32 state: 4 rows at batch 1,
    8 at batch 2, 16 from batch 4 on; bfloat16 state: 8 at batch 1 and 2, 16 at 4, 32
    from batch 8 on."""
    block_n = next_power_of_2(dstate)
    row_bytes = block_n * state_bytes
    block_p = max(1, min(next_power_of_2(headdim), WIDE_TILE_BYTES // row_bytes))
    while (block_p > 1 and block_p * row_bytes > NARROW_TILE_BYTES
           and batch * nheads * cdiv(headdim, block_p) < BLOCKS_PER_SM * sm_count):
        block_p //= 2
    return block_p


def selective_state_update_launch(state, x, dt, A, B, C, D=None, z=None, dt_bias=None,
                                  dt_softplus=False, state_batch_indices=None, block_p=None):
    """Plan the launch for checked arguments (:mod:`mamba2_tile.decode`, int32 indices);
    returns ``(KernelLaunch, out)``. ``block_p``: the rows of the state per block, a power of
    two; ``None`` for :func:`decode_block_p`'s rule on ``x``'s device. Only an ``A`` broadcast
    along one of headdim / dstate is copied (made contiguous)."""
    batch, nheads, headdim = x.shape
    ngroups, dstate = B.shape[1], B.shape[2]
    dt_head = _per_head(dt, (2,))
    A_head = _per_head(A, (1, 2))
    if A_head is None and (A.stride(1) == 0 or A.stride(2) == 0):
        A = A.contiguous()
    bias_head = None if dt_bias is None else _per_head(dt_bias, (1,))
    D_head = None if D is None else _per_head(D, (1,))

    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    block_n = next_power_of_2(dstate)
    if block_p is None:
        block_p = decode_block_p(batch, nheads, headdim, dstate, state.element_size(),
                                 device_sm_count(x.device))
    grid = (batch, nheads, cdiv(headdim, block_p))
    no_indices = torch.empty(0, dtype=torch.int32, device=x.device)
    args = (
        state, x, dt if dt_head is None else dt_head, A if A_head is None else A_head, B, C,
        placeholder(x) if D is None else (D if D_head is None else D_head),
        placeholder(x) if z is None else z,
        placeholder(x) if dt_bias is None else (dt_bias if bias_head is None else bias_head),
        placeholder(no_indices) if state_batch_indices is None else state_batch_indices,
        out,
        block_p, block_n, nheads // ngroups,
        dt_head is not None, bias_head is not None, A_head is not None, D_head is not None,
        D is not None, z is not None, dt_bias is not None, state_batch_indices is not None,
        bool(dt_softplus),
        headdim % block_p == 0 and dstate == block_n,
    )
    return KernelLaunch(grid, selective_state_update_kernel, args), out
