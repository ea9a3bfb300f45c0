"""Pictures of the recurrence's memory: how fast the state forgets, and how ``dt`` gates it.

In ``h_t = exp(dt_t A) h_{t-1} + dt_t x_t ⊗ B_t`` token ``s`` enters the state with weight
``dt_s`` and then shrinks by ``exp(dt_r A)`` at every later step ``r``; so its share of ``h_t`` is
``dt_s exp(A (dt_{s+1} + ... + dt_t))``. Both panels draw that number.
"""

import matplotlib.pyplot as plt
import numpy as np


def token_weights(dt, A):
    """Weight of each token ``s`` in the final state: ``dt_s * exp(A * sum_{r>s} dt_r)``."""
    dt = np.asarray(dt, dtype=np.float64)
    later = np.cumsum(dt[::-1])[::-1] - dt                          # sum of dt_r for r > s
    return dt * np.exp(A * later)


def plot_decay(dA_values=(-0.01, -0.05, -0.2, -1.0), steps=100, seed=0):
    """Left: share of token 0 left after t steps, ``exp(t dt A)``, for constant ``dt A``.

    Right: a selective state, where ``dt`` changes per token: the weight of every past token in
    the last state, for a random ``dt`` with two spikes.
    """
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4), dpi=90)
    t = np.arange(steps + 1)
    for dA in dA_values:
        half_life = np.log(2) / -dA
        left.plot(t, np.exp(dA * t), label=f"dt·A = {dA:g}  (half-life {half_life:.3g} steps)")
    left.set_yscale("log")
    left.set_ylim(1e-6, 1.5)
    left.set_xlabel("steps t after token 0")
    left.set_ylabel("share of token 0 still in h_t")
    left.set_title("Constant dt: exponential forgetting", fontsize=10)
    left.legend(fontsize=7, loc="lower left")
    left.grid(True, alpha=0.3)

    rng = np.random.default_rng(seed)
    dt = rng.uniform(0.01, 0.1, steps)
    dt[[30, 70]] = 3.0                                               # two "pay attention" tokens
    A = -1.0
    right.bar(np.arange(steps), token_weights(dt, A), width=1.0)
    right.set_yscale("log")
    right.set_xlabel("token s")
    right.set_ylabel(f"weight of token s in h_{steps - 1}")
    right.set_title(f"dt per token (A = {A:g}): spikes at 30 and 70", fontsize=10)
    right.grid(True, alpha=0.3)
    fig.tight_layout()
    return fig
