"""The picture a failing check draws: where an array answer is wrong, over two of its axes.

A list of wrong positions hides the shape of a mistake; a heat-map shows it at once: a missing
causal mask is a triangle, a mask without its diagonal is a diagonal line, an off-by-one is a
shifted band, a wrong padding is the last chunk's tail. The map shows ``|got − expected|`` where
the answer is outside the check's tolerance and white where it is right; an error that is not a
finite number (a NaN, or ``0`` where ``-inf`` belongs) is drawn black, since it has no size.
"""

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import MaxNLocator

DPI = 80
BAD_COLOUR = "black"


def _names(spec):
    """An axis spec is one axis name or a tuple of names merged (row-major) into one axis."""
    return (spec,) if isinstance(spec, str) else tuple(spec)


def error_map(got, expected, wrong, axes, rows, cols):
    """Reduce an error to 2-D: ``(errors, not_finite, reduced)``.

    ``errors[r, c]`` is the largest ``|got − expected|`` among the wrong positions that land on
    (r, c) (0 where all are right), ``not_finite[r, c]`` whether one of them has no finite error,
    and ``reduced`` the names of the axes the maximum was taken over. ``rows`` and ``cols`` name
    axes of ``axes`` (one name, or a tuple of names flattened in that order).
    """
    rows, cols = _names(rows), _names(cols)
    unknown = [name for name in rows + cols if name not in axes]
    if unknown:
        raise ValueError(f"picture axes {unknown} are not among the array's axes {axes}")
    if len(set(rows + cols)) != len(rows + cols):
        raise ValueError(f"picture axes repeat an axis: rows {rows}, columns {cols}")
    order = [axes.index(name) for name in rows + cols]
    rest = [i for i in range(len(axes)) if i not in order]
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(got.astype(np.float64) - expected.astype(np.float64))
    not_finite = wrong & ~np.isfinite(diff)
    errors = np.where(wrong & ~not_finite, diff, 0.0)
    shape = (int(np.prod([got.shape[axes.index(n)] for n in rows])),
             int(np.prod([got.shape[axes.index(n)] for n in cols])), -1)
    errors = errors.transpose(order + rest).reshape(shape).max(axis=-1)
    not_finite = not_finite.transpose(order + rest).reshape(shape).any(axis=-1)
    return errors, not_finite, tuple(axes[i] for i in rest)


def plot_error(what, got, expected, wrong, axes, rows, cols):
    """A small heat-map of where ``what`` is wrong, over ``rows`` × ``cols``; returns it."""
    errors, not_finite, reduced = error_map(got, expected, wrong, axes, rows, cols)
    cmap = plt.get_cmap("Reds").with_extremes(bad=BAD_COLOUR)
    fig, ax = plt.subplots(figsize=(4.6, 3.4), dpi=DPI)
    largest = float(errors.max())
    image = ax.imshow(np.ma.masked_where(not_finite, errors), cmap=cmap, vmin=0,
                      vmax=largest if largest > 0 else 1.0,   # all wrong values may be NaN/inf
                      aspect="auto", interpolation="nearest")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(" · ".join(_names(rows)))
    ax.set_xlabel(" · ".join(_names(cols)))
    notes = ["white: right"]
    if not_finite.any():
        notes.append(f"{BAD_COLOUR}: NaN or ±inf")
    if reduced:
        notes.append("max over " + ", ".join(reduced))
    ax.set_title(f"where {what} is wrong: |got − expected|\n({'; '.join(notes)})", fontsize=9)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    fig.tight_layout()
    return fig
