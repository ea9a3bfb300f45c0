"""Golden vectors: fixed inputs and their float64 outputs, for checks that must not drift.

Each case is one ``.npz`` in ``data/golden/`` holding float32 inputs (what a kernel is fed) and
the float64 ``y`` and ``final_states`` of :func:`~mamba2_tile.reference.ssd_recurrent` on them.
The shapes are deliberately untidy: seqlen not a multiple of any chunk size, several groups,
``D`` of both shapes, an initial state.

    python -m mamba2_tile.tools.golden     # (re)write data/golden/
"""

import argparse
import sys

import numpy as np

from mamba2_tile.reference import ssd_recurrent
from mamba2_tile.tools.results import DATA_DIR

GOLDEN_DIR = DATA_DIR / "golden"

# name: (seed, batch, seqlen, nheads, headdim, ngroups, dstate, D shape, initial state?)
CASES = {
    "single_head": (0, 1, 64, 1, 8, 1, 16, None, False),
    "grouped_heads": (1, 2, 100, 4, 16, 2, 8, "per_head", True),
    "one_group_per_head": (2, 1, 300, 8, 4, 8, 4, "per_channel", False),
}


def make_inputs(seed, batch, seqlen, nheads, headdim, ngroups, dstate, d_shape, with_state):
    """Random SSD inputs in float32 with realistic ranges (dt in (0.001, 0.1), A in (-8, -0.5))."""
    rng = np.random.default_rng(seed)
    f32 = np.float32
    inputs = {
        "x": rng.standard_normal((batch, seqlen, nheads, headdim)).astype(f32),
        "dt": np.exp(rng.uniform(np.log(1e-3), np.log(1e-1), (batch, seqlen, nheads))).astype(f32),
        "A": -rng.uniform(0.5, 8.0, nheads).astype(f32),
        "B": rng.standard_normal((batch, seqlen, ngroups, dstate)).astype(f32),
        "C": rng.standard_normal((batch, seqlen, ngroups, dstate)).astype(f32),
    }
    if d_shape == "per_head":
        inputs["D"] = rng.standard_normal(nheads).astype(f32)
    elif d_shape == "per_channel":
        inputs["D"] = rng.standard_normal((nheads, headdim)).astype(f32)
    if with_state:
        inputs["initial_states"] = rng.standard_normal((batch, nheads, headdim, dstate)).astype(f32)
    return inputs


def make_case(name):
    """The arrays of one golden case: its inputs plus ``y`` and ``final_states`` (float64)."""
    inputs = make_inputs(*CASES[name])
    y, final_states = ssd_recurrent(**inputs, return_final_states=True)
    return {**inputs, "y": y, "final_states": final_states}


def load_case(name):
    with np.load(GOLDEN_DIR / f"{name}.npz") as stored:
        return dict(stored)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m mamba2_tile.tools.golden", allow_abbrev=False,
        description=f"(Re)write the golden vectors, one .npz per case in {GOLDEN_DIR}: "
                    f"{', '.join(CASES)}. It takes no options.")
    parser.parse_args(argv)           # --help, or a stray argument, exits before any writing
    GOLDEN_DIR.mkdir(parents=True, exist_ok=True)
    for name in CASES:
        path = GOLDEN_DIR / f"{name}.npz"
        np.savez_compressed(path, **make_case(name))
        print(f"wrote {path.relative_to(GOLDEN_DIR.parent.parent)} ({path.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
