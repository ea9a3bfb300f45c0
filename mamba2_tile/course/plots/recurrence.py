"""Pictures of the recurrence's memory: how fast the state forgets, and how ``dt`` gates it.

In ``h_t = exp(dt_t A) h_{t-1} + dt_t x_t ⊗ B_t`` token ``s`` enters the state with weight
``dt_s`` and then shrinks by ``exp(dt_r A)`` at every later step ``r``; so its share of ``h_t`` is
``dt_s exp(A (dt_{s+1} + ... + dt_t))``. ``plot_decay``'s two panels draw that number;
``plot_state_norm`` draws what it adds up to, the size of the state over a long sequence.
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


def state_norms(x, dt, A, B):
    """``‖h_t‖`` (Frobenius) after every token of one head's recurrence, from ``h = 0``.

    x: (seqlen, headdim), dt: (seqlen,), A: a negative float, B: (seqlen, dstate) -> (seqlen,).
    """
    x, dt, B = (np.asarray(a, dtype=np.float64) for a in (x, dt, B))
    if x.ndim != 2 or dt.shape != x.shape[:1] or B.shape[:1] != x.shape[:1] or B.ndim != 2:
        raise ValueError(f"need x (seqlen, headdim), dt (seqlen,) and B (seqlen, dstate), got "
                         f"{x.shape}, {dt.shape} and {B.shape}")
    state = np.zeros((x.shape[1], B.shape[1]))
    norms = np.empty(len(dt))
    for t in range(len(dt)):
        state = np.exp(dt[t] * A) * state + dt[t] * np.outer(x[t], B[t])
        norms[t] = np.linalg.norm(state)
    return norms


def expected_state_norm(steps, A, dt, scale, headdim, dstate):
    """The root-mean-square ``‖h_t‖`` after ``steps`` tokens for a constant ``dt`` and random
    inputs, ``x`` of standard deviation ``scale`` and ``B`` of 1.

    Each token adds ``u = dt x ⊗ B`` with ``E‖u‖² = (dt scale)² headdim dstate`` and every step
    multiplies what is there by ``a = exp(dt A)``; independent tokens add in square, so
    ``E‖h_t‖² = E‖u‖² (1 - a^{2t}) / (1 - a²)``: it grows like ``√t`` while ``t|dt A|`` is small
    and levels off at ``E‖u‖² / (1 - a²)``. (``expm1`` keeps a tiny ``dt A`` exact.)
    """
    steps = np.asarray(steps, dtype=np.float64)
    rate = 2 * dt * A
    # A = 0 forgets nothing: the tokens' squares simply add up, t of them.
    growth = steps if rate == 0 else np.expm1(rate * steps) / np.expm1(rate)
    return dt * scale * np.sqrt(headdim * dstate * growth)


def plot_state_norm(A, dt, scale, seqlen=4096, headdim=8, dstate=16, seed=0):
    """``‖h_t‖`` over a long sequence of random tokens for one head with a constant ``dt``, against
    its expected size (:func:`expected_state_norm`); returns the figure.

    Both axes are logarithmic, the y axis fixed: a larger input scale lifts the whole curve,
    growth like ``√t`` is a straight line of slope 1/2, and it bends flat near the dotted line,
    ``1 / |dt A|`` tokens, the memory after which the state stops growing.
    """
    rng = np.random.default_rng(seed)
    x = scale * rng.standard_normal((seqlen, headdim))
    B = rng.standard_normal((seqlen, dstate))
    t = np.arange(1, seqlen + 1)
    fig, ax = plt.subplots(figsize=(8.5, 3.6), dpi=90)
    ax.plot(t, state_norms(x, np.full(seqlen, float(dt)), A, B), color="C0", linewidth=1,
            label="‖h_t‖, one random sequence")
    ax.plot(t, expected_state_norm(t, A, dt, scale, headdim, dstate), color="C3",
            linestyle="--", label="expected ‖h_t‖ (root mean square)")
    horizon = 1 / abs(dt * A)
    if horizon < seqlen:
        ax.axvline(horizon, color="0.4", linestyle=":", label=f"1/|dt·A| = {horizon:.3g} tokens")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(1e-4, 1e4)
    ax.set_xlim(1, seqlen)
    ax.set_xlabel("token t")
    ax.set_ylabel("‖h_t‖ (Frobenius)")
    ax.set_title(f"A = {A:g}, dt = {dt:g}, input scale {scale:g}: dt·A = {dt * A:.3g}, "
                 f"so the state forgets by 1/e every {horizon:.3g} tokens", fontsize=10)
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    return fig
