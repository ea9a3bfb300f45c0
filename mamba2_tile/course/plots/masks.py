"""Pictures of the quadratic form (notebook 02): the decay mask ``L``, the three matrices of
``L ∘ C Bᵀ`` side by side, and where the naive ``exp(prefix sum)`` leaves floating point."""

import matplotlib.pyplot as plt
import numpy as np

DPI = 90


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
