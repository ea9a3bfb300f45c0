"""Log-log pictures of the memory one sequence costs (the formulas: ``mamba2_tile.cost``).

* ``plot_kv_cache_vs_state``: a whole model, a Transformer's KV cache vs Mamba-2's state (00);
* ``plot_layer_memory``: one layer, the three things that can grow with the sequence: the state
  (does not), the KV cache (linearly) and a materialised T x T score matrix, T = seqlen
  (quadratically) (01);
* ``plot_decode_memory``: one layer during generation, the state measured at every token
  against the KV cache an attention layer of the same heads would hold (08).
"""

import matplotlib.pyplot as plt
import numpy as np

from mamba2_tile.cost import (
    FP16, MAMBA2, TRANSFORMER, attention_scores_bytes, crossover_seqlen, kv_cache_bytes,
    ssm_state_bytes,
)


def _log_axes(ax, seqlens):
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlim(seqlens[0], seqlens[-1])
    ax.set_xlabel("sequence length (tokens)")
    ax.grid(True, which="major", alpha=0.3)
    ticks = [2.0 ** k for k in range(10, 41, 10)]     # KiB, MiB, GiB, TiB
    ax.set_yticks(ticks, ["1 KiB", "1 MiB", "1 GiB", "1 TiB"])


def plot_kv_cache_vs_state(max_seqlen=2 ** 20, transformer=TRANSFORMER, mamba=MAMBA2,
                           bytes_per_value=FP16):
    """Whole-model memory per sequence vs sequence length, log-log."""
    seqlens = 2.0 ** np.arange(4, np.log2(max_seqlen) + 1)
    kv = kv_cache_bytes(seqlens, transformer["nlayers"], transformer["nheads"],
                        transformer["headdim"], bytes_per_value)
    state = ssm_state_bytes(mamba["nlayers"], mamba["nheads"], mamba["headdim"], mamba["dstate"],
                            bytes_per_value)
    fig, ax = plt.subplots(figsize=(6.5, 3.8), dpi=90)
    ax.plot(seqlens, kv, "o-", ms=3, label=f"{transformer['name']}: KV cache")
    ax.plot(seqlens, np.full_like(seqlens, state), "s-", ms=3, label=f"{mamba['name']}: state")
    cross = crossover_seqlen(transformer, mamba, bytes_per_value)
    ax.axvline(cross, color="gray", ls=":", lw=1)
    ax.annotate(f"equal at ~{cross} tokens", (cross, state), xytext=(8, -28),
                textcoords="offset points", fontsize=8, color="gray")
    ax.axhline(80e9, color="crimson", ls="--", lw=1)
    ax.annotate("80 GB: all the memory of an H100", (seqlens[0], 80e9),
                xytext=(4, 4), textcoords="offset points", fontsize=8, color="crimson")
    _log_axes(ax, seqlens)
    ax.set_ylim(2 ** 20, 2 ** 40)
    ax.set_ylabel(f"memory per sequence (fp16, {bytes_per_value} B/value)")
    ax.set_title("What a model must remember to generate the next token", fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


def plot_layer_memory(max_seqlen=2 ** 20, transformer=TRANSFORMER, mamba=MAMBA2,
                      bytes_per_value=FP16):
    """One layer: SSM state (constant) vs KV cache (linear) vs the T x T scores (quadratic)."""
    seqlens = 2.0 ** np.arange(4, np.log2(max_seqlen) + 1)
    one_layer = dict(nlayers=1, bytes_per_value=bytes_per_value)
    kv = kv_cache_bytes(seqlens, nheads=transformer["nheads"], headdim=transformer["headdim"],
                        **one_layer)
    scores = attention_scores_bytes(seqlens, transformer["nheads"], bytes_per_value)
    state = ssm_state_bytes(nheads=mamba["nheads"], headdim=mamba["headdim"],
                            dstate=mamba["dstate"], **one_layer)
    fig, ax = plt.subplots(figsize=(6.5, 3.8), dpi=90)
    ax.plot(seqlens, scores, "^-", ms=3, label="attention: T x T scores, all heads  ~ T²")
    ax.plot(seqlens, kv, "o-", ms=3, label="attention: KV cache  ~ T")
    ax.plot(seqlens, np.full_like(seqlens, state), "s-", ms=3,
            label="recurrence: state (headdim x dstate per head)  ~ 1")
    _log_axes(ax, seqlens)
    ax.set_ylim(2 ** 10, 2 ** 46)
    ax.set_ylabel("memory of one layer, one sequence")
    ax.set_title(f"One layer, fp16: {transformer['nheads']} attention heads of "
                 f"{transformer['headdim']} vs {mamba['nheads']} SSM heads of "
                 f"{mamba['headdim']} x {mamba['dstate']}", fontsize=9)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig


def plot_decode_memory(state_bytes, nheads, headdim, prompt_len, bytes_per_value):
    """Bytes one layer keeps per sequence while it reads a prompt and then generates.

    ``state_bytes[i]``: the SSM state's size after token ``i + 1`` (the notebook's prefill and
    decode loop, which reads it off the state tensor); the KV cache of attention with the same
    ``nheads`` x ``headdim`` grows by a key and a value per token
    (:func:`mamba2_tile.cost.kv_cache_bytes`).
    """
    tokens = np.arange(1, len(state_bytes) + 1)
    kv = kv_cache_bytes(tokens, 1, nheads, headdim, bytes_per_value)
    fig, ax = plt.subplots(figsize=(6.0, 3.2), dpi=90)
    ax.plot(tokens, kv, "o-", ms=3, label="attention: KV cache (a key and a value per token)")
    ax.plot(tokens, state_bytes, "s-", ms=3, label="Mamba-2: state (its size in the run)")
    ax.axvline(prompt_len + 0.5, color="gray", ls=":", lw=1)
    ax.annotate("prefill | decode", (prompt_len + 0.5, 0), xytext=(-28, 6),
                textcoords="offset points", fontsize=8, color="gray")
    ax.set_xlim(0, len(tokens) + 1)
    ax.set_ylim(0, max(kv.max(), max(state_bytes)) * 1.1)
    ax.set_xlabel("tokens seen (prompt, then generated)")
    ax.set_ylabel("bytes per sequence, one layer")
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    return fig
