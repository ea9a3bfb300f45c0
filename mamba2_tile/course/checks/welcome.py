"""Checks for notebook 00's warm-up: how many bytes a KV cache and an SSM state take.

Each check tries the learner's function on a handful of seeded model sizes (realistic ones and
deliberately odd ones, so that no two sizes can be confused), compares all the answers at once,
and on a mismatch names the call that went wrong.
"""

import numpy as np

from mamba2_tile.course.checks.feedback import compare_counts, exercise
from mamba2_tile.cost import kv_cache_bytes, ssm_state_bytes

# Distinct primes make every factor visible: a wrong product cannot match by accident.
_ODD_KV = dict(seqlen=1031, nlayers=7, nheads=3, headdim=11, bytes_per_value=2)
_ODD_STATE = dict(nlayers=7, nheads=3, headdim=11, dstate=13, bytes_per_value=4)


def _kv_cases(seed=0):
    rng = np.random.default_rng(seed)
    cases = [dict(seqlen=4096, nlayers=32, nheads=32, headdim=80, bytes_per_value=2), _ODD_KV]
    for _ in range(4):
        cases.append(dict(seqlen=int(rng.integers(1, 200_000)), nlayers=int(rng.integers(1, 97)),
                          nheads=int(rng.integers(1, 65)), headdim=int(rng.choice([64, 80, 128])),
                          bytes_per_value=int(rng.choice([1, 2, 4]))))
    return cases


def _state_cases(seed=0):
    rng = np.random.default_rng(seed)
    cases = [dict(nlayers=64, nheads=80, headdim=64, dstate=128, bytes_per_value=2), _ODD_STATE]
    for _ in range(4):
        cases.append(dict(nlayers=int(rng.integers(1, 97)), nheads=int(rng.integers(1, 129)),
                          headdim=int(rng.choice([32, 64, 128])),
                          dstate=int(rng.choice([16, 64, 128, 256])),
                          bytes_per_value=int(rng.choice([2, 4]))))
    return cases


@exercise("00.1")
def check_kv_cache_bytes(fn):
    """Check ``kv_cache_bytes(seqlen, nlayers, nheads, headdim, bytes_per_value)``."""
    return compare_counts(
        "kv_cache_bytes", fn, kv_cache_bytes, _kv_cases(),
        hint="every layer caches TWO vectors of headdim values per head and per token: "
             "a key and a value. Multiply all five arguments together, and by 2.")


@exercise("00.2")
def check_ssm_state_bytes(fn):
    """Check ``ssm_state_bytes(nlayers, nheads, headdim, dstate, bytes_per_value)``."""
    return compare_counts(
        "ssm_state_bytes", fn, ssm_state_bytes, _state_cases(),
        hint="each head of each layer keeps ONE (headdim x dstate) matrix, nothing per token "
             "and no separate key/value: nlayers * nheads * headdim * dstate * bytes_per_value.")
