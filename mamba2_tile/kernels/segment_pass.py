"""Sequence parallelism, step 2: pass the state along the segments.

Stage 2 of the chunked algorithm one level up (see :mod:`mamba2_tile.kernels.segment_states`
for the whole path). With ``local_s`` the state segment ``s`` adds from a zero start and
``decay_s`` its total ``Σ dA`` (both from ``segment_states``, for every segment but the last),
the state entering each segment follows from the one before, the jump formula with the segment
as the chunk::

    h_0 = initial_states (or 0)
    h_{s+1} = exp(decay_s) * h_s + local_s

One block owns a ``(BLOCK_P, BLOCK_N)`` tile of one head's state and walks the segments in
order, storing every ``h_s``: a few dozen steps on states that are already in L2, against
a step per chunk (hundreds) for the three-kernel pipeline's stage 2.
"""

from mamba2_tile.kernels.launching import (KernelLaunch, cdiv, expect_options, next_power_of_2,
                                           placeholder, with_hints)
from mamba2_tile.kernels.options import FwdPassStateOptions
from mamba2_tile.tile import ct


@ct.kernel
def segment_pass_kernel(
    segment_states, segment_decay,   # (b, h, segments - 1, p, n), (b, h, segments - 1) float32
    initial_states,                  # (b, h, p, n), any float dtype
    entering_states,                 # out: (b, h, segments, p, n) float32
    BLOCK_P: ct.Constant[int],
    BLOCK_N: ct.Constant[int],
    HAS_INITIAL_STATES: ct.Constant[bool],
):
    nheads = segment_states.shape[1]
    b = ct.bid(0) // nheads
    h = ct.bid(0) % nheads
    p_tile = ct.bid(1)
    n_tile = ct.bid(2)
    zero = ct.PaddingMode.ZERO

    if HAS_INITIAL_STATES:
        state = ct.load(initial_states, (b, h, p_tile, n_tile), (1, 1, BLOCK_P, BLOCK_N),
                        padding_mode=zero)
        state = ct.reshape(state, (1, 1, 1, BLOCK_P, BLOCK_N)).astype(ct.float32)
    else:
        state = ct.zeros((1, 1, 1, BLOCK_P, BLOCK_N), dtype=ct.float32)
    for s in range(segment_states.shape[2]):
        ct.store(entering_states, (b, h, s, p_tile, n_tile), state)
        decay = ct.reshape(ct.load(segment_decay, (b, h, s), (1, 1, 1)), (1, 1, 1, 1, 1))
        local = ct.load(segment_states, (b, h, s, p_tile, n_tile), (1, 1, 1, BLOCK_P, BLOCK_N),
                        padding_mode=zero)
        state = state * ct.exp(decay) + local
    ct.store(entering_states, (b, h, segment_states.shape[2], p_tile, n_tile), state)


def segment_pass_launch(segment_states, segment_decay, initial_states=None,
                        options=FwdPassStateOptions()):
    """Allocate ``entering_states`` (one segment more than ``segment_states``) and plan the
    launch; returns ``(KernelLaunch, entering_states)``. Stage 2's options (it is stage 2 one
    level up): tiles default to 64 x 64, the occupancy hint is kept."""
    expect_options(options, FwdPassStateOptions)
    batch, nheads, segments, headdim, dstate = segment_states.shape
    entering_states = segment_states.new_empty(batch, nheads, segments + 1, headdim, dstate)
    block_p = options.block_p or min(next_power_of_2(headdim), 64)
    block_n = options.block_n or min(next_power_of_2(dstate), 64)
    grid = (batch * nheads, cdiv(headdim, block_p), cdiv(dstate, block_n))
    args = (segment_states, segment_decay,
            placeholder(segment_states) if initial_states is None else initial_states,
            entering_states, block_p, block_n, initial_states is not None)
    kernel = with_hints(segment_pass_kernel, options.occupancy)
    return KernelLaunch(grid, kernel, args), entering_states


def segment_pass(segment_states, segment_decay, initial_states=None,
                 options=FwdPassStateOptions()):
    """Run it; returns ``entering_states`` (b, h, segments, p, n) float32."""
    launch, entering_states = segment_pass_launch(segment_states, segment_decay,
                                                  initial_states, options)
    launch.run()
    return entering_states
