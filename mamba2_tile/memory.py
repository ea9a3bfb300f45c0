"""How many bytes one sequence costs: a Transformer's KV cache and scores vs a Mamba-2 state."""

import numpy as np

FP16 = 2  # bytes per value: what inference typically stores

# The two reference models (notebook 00) have nearly the same size and width (d_model 2560),
# with the sizes of their published configurations: Pythia-2.8B (EleutherAI; 32 layers of 32
# heads of 80) and Mamba-2 2.7B (state-spaces; 64 layers, expand 2 -> 5120 channels = 80 heads
# of headdim 64, dstate 128).
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
