"""How much memory one sequence costs: attention's KV cache and score matrix vs an SSM state.

The formulas (notebook 00's warm-up exercises) and two log-log pictures:

* ``plot_kv_cache_vs_state``: a whole model, a Transformer's KV cache vs Mamba-2's state (00);
* ``plot_layer_memory``: one layer, the three things that can grow with the sequence: the state
  (does not), the KV cache (linearly) and a materialised L x L score matrix (quadratically) (01).

The two reference models have nearly the same size and width (d_model 2560), using the sizes in
their published configurations: Pythia-2.8B (EleutherAI; 32 layers of 32 heads of 80) and
Mamba-2 2.7B (state-spaces; 64 layers, expand 2 -> 5120 channels = 80 heads of headdim 64,
dstate 128).
"""

import matplotlib.pyplot as plt
import numpy as np

FP16 = 2  # bytes per value: what inference typically stores

TRANSFORMER = dict(name="Pythia-2.8B (Transformer)", nlayers=32, nheads=32, headdim=80)
MAMBA2 = dict(name="Mamba-2 2.7B", nlayers=64, nheads=80, headdim=64, dstate=128)


def kv_cache_bytes(seqlen, nlayers, nheads, headdim, bytes_per_value):
    """Bytes of one sequence's KV cache: a key and a value vector per token, head and layer."""
    return 2 * seqlen * nlayers * nheads * headdim * bytes_per_value


def ssm_state_bytes(nlayers, nheads, headdim, dstate, bytes_per_value):
    """Bytes of one sequence's SSM state: a (headdim, dstate) matrix per head and layer.

    No ``seqlen``: that is the point. (A real Mamba-2 layer also keeps the last few inputs of
    its short convolution, a few tokens' worth, ignored here.)
    """
    return nlayers * nheads * headdim * dstate * bytes_per_value


def attention_scores_bytes(seqlen, nheads, bytes_per_value):
    """Bytes of one layer's ``seqlen x seqlen`` attention scores, if written out per head."""
    return seqlen * seqlen * nheads * bytes_per_value


def format_bytes(n):
    """``1536 -> '1.5 KiB'``: a fixed format, so printed tables are reproducible."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def crossover_seqlen(transformer=TRANSFORMER, mamba=MAMBA2, bytes_per_value=FP16):
    """The sequence length from which the KV cache outgrows the (fixed) state."""
    per_token = kv_cache_bytes(1, transformer["nlayers"], transformer["nheads"],
                               transformer["headdim"], bytes_per_value)
    state = ssm_state_bytes(mamba["nlayers"], mamba["nheads"], mamba["headdim"], mamba["dstate"],
                            bytes_per_value)
    return int(np.ceil(state / per_token))


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
    """One layer: SSM state (constant) vs KV cache (linear) vs the L x L scores (quadratic)."""
    seqlens = 2.0 ** np.arange(4, np.log2(max_seqlen) + 1)
    one_layer = dict(nlayers=1, bytes_per_value=bytes_per_value)
    kv = kv_cache_bytes(seqlens, nheads=transformer["nheads"], headdim=transformer["headdim"],
                        **one_layer)
    scores = attention_scores_bytes(seqlens, transformer["nheads"], bytes_per_value)
    state = ssm_state_bytes(nheads=mamba["nheads"], headdim=mamba["headdim"],
                            dstate=mamba["dstate"], **one_layer)
    fig, ax = plt.subplots(figsize=(6.5, 3.8), dpi=90)
    ax.plot(seqlens, scores, "^-", ms=3, label="attention: L x L scores, all heads  ~ L²")
    ax.plot(seqlens, kv, "o-", ms=3, label="attention: KV cache  ~ L")
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
