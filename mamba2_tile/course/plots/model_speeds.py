"""The finished layer's measured speed on a few model shapes, for notebook 00's top-down start.

The numbers are the stored benchmark (``data/h200_models.json``, written by
``python -m mamba2_tile.tools.bench --preset models``, its float32 rows as re-measured in
``data/h200_models_float32.json``); nothing is timed here.
"""

import matplotlib.pyplot as plt
import numpy as np

from mamba2_tile.tools.results import load_models_results

# (batch, seqlen, nheads, headdim, dstate, ngroups, chunk_size, dtype, tf32): a short and a long batch of sequences, one
# 128k-token sequence with Mamba-2 2.7B's 80 heads, the shape where we lead least, and float32
# without TF32, where we lose (three TF32 products for each float32 one, against the peers' one).
SHOWCASE = (
    (8, 2048, 64, 64, 128, 1, 256, "bfloat16", False),
    (8, 16384, 64, 64, 128, 1, 256, "bfloat16", False),
    (1, 131072, 80, 64, 128, 1, 256, "bfloat16", False),
    (1, 8192, 24, 64, 128, 1, 256, "bfloat16", False),
    (8, 8192, 64, 64, 128, 1, 256, "float32", False),
)
IMPLEMENTATIONS = ("mamba2_tile", "mamba_ssm", "fla")


def _key(row):
    return (row["batch"], row["seqlen"], row["nheads"], row["headdim"], row["dstate"],
            row["ngroups"], row["chunk_size"], row["dtype"], bool(row.get("tf32", False)))


def showcase_rows(results=None, picks=SHOWCASE):
    """The stored rows named by ``picks``, in that order (a pick with no row raises KeyError)."""
    results = load_models_results() if results is None else results
    by_key = {_key(row): row for row in results["rows"]}
    missing = [pick for pick in picks if pick not in by_key]
    if missing:
        raise KeyError(f"no stored row for {missing} in the models results")
    return [by_key[pick] for pick in picks]


def _label(row):
    return (f"batch {row['batch']}, {row['seqlen'] // 1024}k tokens,\n"
            f"{row['nheads']} heads, {row['dtype']}")


def speed_table(rows):
    """Lines of text: per row, milliseconds per implementation and our speed-up on the best."""
    lines = [f"{'shape':<44} | " + " | ".join(f"{name:>11}" for name in IMPLEMENTATIONS)
             + " | speed-up vs best"]
    for row in rows:
        times = " | ".join(f"{row['ms'].get(name, float('nan')):>8.3f} ms" for name in IMPLEMENTATIONS)
        lines.append(f"{_label(row).replace(chr(10), ' '):<44} | {times} | {row['vs_best_peer']:>6.2f}×")
    return "\n".join(lines)


def plot_model_speeds(rows, ax=None):
    """Grouped bars, milliseconds per layer call on a log axis (a tenth of a millisecond to
    several)."""
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 3.8))
    positions = np.arange(len(rows))
    width = 0.8 / len(IMPLEMENTATIONS)
    for index, name in enumerate(IMPLEMENTATIONS):
        times = [row["ms"].get(name) or np.nan for row in rows]
        ax.bar(positions + (index - 1) * width, times, width, label=name)
    ax.set_yscale("log")
    ax.set_xticks(positions, [_label(row) for row in rows], fontsize=8)
    ax.set_ylabel("ms per forward call (log)")
    ax.set_title("measured on an H200: lower is faster")
    ax.legend()
    ax.grid(True, axis="y", which="both", alpha=0.3)
    return ax
