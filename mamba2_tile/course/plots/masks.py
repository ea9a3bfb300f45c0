"""Pictures of the quadratic form (notebook 02): the decay mask ``L``, the three matrices of
``L ∘ C Bᵀ`` side by side, where the naive ``exp(prefix sum)`` leaves floating point, and the
mask for given ``A`` and ``dt`` (what the decay-mask explorer redraws)."""

import matplotlib.pyplot as plt
import numpy as np

from mamba2_tile.reference import segsum

DPI = 90
# The decay explorer's log axis floor: smaller weights are drawn on it (a log axis has no 0).
_FLOOR = 1e-12


def _matrix(ax, M, title, cmap="viridis", symmetric=False):
    """One heatmap; entries above the diagonal that are exactly 0 are left blank (masked)."""
    T = M.shape[-1]
    future = np.triu(np.ones((T, T), dtype=bool), k=1) & (M == 0)
    shown = np.ma.masked_where(future, M)
    limit = np.abs(M).max() if symmetric else None
    image = ax.imshow(shown, cmap=cmap, vmin=-limit if symmetric else 0, vmax=limit,
                      interpolation="nearest")
    ax.set_title(title)
    ax.set_xlabel("s (input token)")
    ax.set_ylabel("t (output token)")
    plt.colorbar(image, ax=ax, fraction=0.046, pad=0.04)


def plot_decay_mask(L, title="decay mask L = exp(segsum(dt·A))"):
    """Heatmap of one head's ``L`` (seqlen, seqlen): row t shows how much of each past token
    s is still remembered at t. The blank upper triangle is the future (exactly 0)."""
    fig, ax = plt.subplots(figsize=(4.8, 4), dpi=DPI)
    _matrix(ax, L, title)
    fig.tight_layout()


def plot_quadratic_factors(L, CB):
    """``L``, ``C Bᵀ`` and their elementwise product: the matrix that multiplies ``dt·x``."""
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6), dpi=DPI)
    _matrix(axes[0], L, "L (decay, causal)")
    _matrix(axes[1], CB, "C Bᵀ (like Q Kᵀ)", cmap="RdBu_r", symmetric=True)
    _matrix(axes[2], L * CB, "L ∘ C Bᵀ (like masked scores)", cmap="RdBu_r", symmetric=True)
    fig.tight_layout()


def plot_prefix_underflow(prefix_sum):
    """The running sum ``cumsum(dt·A)`` of one head against the points where ``exp`` of it stops
    being a normal float: below about -708 (float64) or -87 (float32) it is subnormal, then 0."""
    fig, ax = plt.subplots(figsize=(7, 3.2), dpi=DPI)
    ax.plot(prefix_sum, color="C0", label="cumsum(dt·A)")
    for dtype, color in ((np.float32, "C3"), (np.float64, "C1")):
        limit = np.log(np.finfo(dtype).tiny)
        ax.axhline(limit, color=color, linestyle="--",
                   label=f"log(smallest normal {np.dtype(dtype).name}) = {limit:.0f}")
    ax.set_xlabel("token t")
    ax.set_ylabel("log of the decay from token 0")
    ax.legend(loc="lower left")
    fig.tight_layout()


def spiked_dt(seqlen, dt, spike=0.0):
    """A constant step ``dt`` for every token, plus ``spike`` on token ``seqlen * 5 // 8``: the
    input the decay-mask explorer draws (token 40 of 64, as in notebook 02's picture)."""
    steps = np.full(seqlen, float(dt))
    steps[seqlen * 5 // 8] += spike
    return steps


def plot_decay_mask_for(A, dt, spike=0.0, seqlen=64):
    """The decay mask of one head for a constant ``dt`` (plus an optional spike, see
    :func:`spiked_dt`) and the decay rate ``A``; returns the figure.

    Left, ``L = exp(segsum(dt·A))`` over (t, s) on a fixed 0..1 colour scale, so that a wider or
    narrower band is the mask changing, not the colour bar. Right, its last row on a log scale:
    how much of each past token the last output still sees. A constant ``dt·A`` forgets by
    ``e`` every ``1 / |dt·A|`` tokens; a spike cuts the memory of everything before it.
    """
    steps = spiked_dt(seqlen, dt, spike)
    L = np.exp(segsum(steps * A))
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.6, 3.9), dpi=DPI,
                                      gridspec_kw=dict(width_ratios=[1.1, 1]))
    future = np.triu(np.ones((seqlen, seqlen), dtype=bool), k=1)
    image = left.imshow(np.ma.masked_where(future, L), cmap="viridis", vmin=0, vmax=1,
                        interpolation="nearest")
    left.set_title(f"L for A = {A:g}, dt = {dt:g}" + (f", spike {spike:g}" if spike else ""),
                   fontsize=10)
    left.set_xlabel("s (input token)")
    left.set_ylabel("t (output token)")
    plt.colorbar(image, ax=left, fraction=0.046, pad=0.04)

    last = L[-1]
    right.semilogy(np.arange(seqlen), np.maximum(last, _FLOOR), marker=".", color="C0")
    right.set_ylim(_FLOOR / 3, 3)
    right.axhline(np.exp(-1), color="0.6", linestyle=":", label="1/e")
    horizon = 1 / abs(dt * A)
    right.set_title(f"row t = {seqlen - 1}: 1/e of a token is left after "
                    f"{horizon:.3g} tokens", fontsize=10)
    right.set_xlabel("s (input token)")
    right.set_ylabel(f"L[{seqlen - 1}, s]")
    right.legend(loc="lower right", fontsize=8)
    right.grid(True, alpha=0.3)
    fig.tight_layout()
    return fig
