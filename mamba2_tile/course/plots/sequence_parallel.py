"""Why one long sequence needs the sequence-parallel path: SMs over time, two ways.

Top: the fused kernel's one block per head walks the whole sequence, chunk after chunk, while
the SMs without a head idle. Bottom: the sequence cut into segments; every (head, segment)
block computes its segment's own state, one short walk per head passes the states across the
segments (the jump formula of notebook 06, a segment as the jump), and every block then writes
its segment's output from the state that enters it.
"""

import matplotlib.pyplot as plt
from matplotlib.patches import Patch

from mamba2_tile.kernels.launching import cdiv

# A segment's step of the pass is one state update (a multiply-add of the state), not a chunk's
# products: a quarter of a chunk-time is the order of magnitude, not a measurement.
PASS_STEP = 0.25

_COLOURS = {"walk": "tab:green", "segment_states": "tab:blue", "segment_pass": "tab:orange",
            "fused_state_out": "tab:green"}


def sequence_parallel_timeline(nheads, nchunks, segment_chunks, sm_count):
    """Idealised schedules, one bar ``(sm, start, length, stage)`` per block, in chunk-times.

    One block per SM at a time, every chunk costing one unit, the pass :data:`PASS_STEP` per
    segment.
    Returns ``(one_block_per_head, segmented)``, each a list of bars.
    """
    if nheads > sm_count:
        raise ValueError(f"nheads ({nheads}) must not exceed sm_count ({sm_count}): with more "
                         f"heads than SMs one block per head already fills the GPU")
    walk = [(head, 0, nchunks, "walk") for head in range(nheads)]
    nsegments = cdiv(nchunks, segment_chunks)
    blocks = [(head, segment) for head in range(nheads) for segment in range(nsegments)]
    segmented, start = [], 0
    for stage in ("segment_states", None, "fused_state_out"):
        if stage is None:          # the pass: one block per head, one step per segment
            segmented += [(head, start, nsegments * PASS_STEP, "segment_pass")
                          for head in range(nheads)]
            start += nsegments * PASS_STEP
            continue
        finish = start
        for slot, (head, segment) in enumerate(blocks):
            wave, sm = divmod(slot, sm_count)
            length = min(segment_chunks, nchunks - segment * segment_chunks)
            begin = start + wave * segment_chunks
            segmented.append((sm, begin, length, stage))
            finish = max(finish, begin + length)
        start = finish
    return walk, segmented


def plot_sequence_parallel(nheads=4, nchunks=32, segment_chunks=4, sm_count=32):
    """Two Gantt charts of SMs over time (:func:`sequence_parallel_timeline`), sharing the
    time axis, each titled with its length."""
    walk, segmented = sequence_parallel_timeline(nheads, nchunks, segment_chunks, sm_count)
    fig, axes = plt.subplots(2, 1, figsize=(9, 5.2), dpi=90, sharex=True)
    schedules = [(f"one block per head: {nheads} of {sm_count} SMs busy", walk),
                 (f"segments of {segment_chunks} chunks: "
                  f"{nheads * cdiv(nchunks, segment_chunks)} blocks per parallel stage",
                  segmented)]
    for ax, (title, bars) in zip(axes, schedules):
        for sm, start, length, stage in bars:
            ax.broken_barh([(start, length)], (sm - 0.4, 0.8), color=_COLOURS[stage])
        end = max(start + length for _, start, length, _ in bars)
        ax.set_title(f"{title} — {end:g} chunk-times")
        ax.set_ylim(sm_count - 0.5, -0.5)
        ax.set_ylabel("SM")
    axes[-1].set_xlabel("time (one unit = one chunk through one block)")
    handles = [Patch(color=_COLOURS["walk"], label="walk chunks, write y (fused kernel)"),
               Patch(color=_COLOURS["segment_states"], label="segment_states: each segment's own state"),
               Patch(color=_COLOURS["segment_pass"], label="segment_pass: the jump formula, per segment")]
    axes[0].legend(handles=handles, loc="lower right", fontsize=8)
    fig.tight_layout()
    return fig
