"""Checks for notebook 09, making the forward pass fast: two counting exercises and a compile.

* ``check_chunk_states_bytes``: the bytes the chunk states cost the three-kernel pipeline
  (written by stage 2, read back by stage 3), the traffic that fusing the two stages removes;
* ``check_achieved_gbps``: from a measured time to an effective bandwidth, on the minimal bytes;
* ``check_registers_per_thread``: compile stage 2 with and without ``occupancy=2`` (no GPU
  needed, only cuda-tile's compiler) and read the registers each thread may use.

The counting checks run the learner's function on several sizes (realistic ones and odd ones,
so that no two factors can be confused), compare with :mod:`mamba2_tile.cost`, and on a
mismatch recompute the answer the usual wrong ways to name the likely mistake.
"""

import numpy as np
import torch

from mamba2_tile.compiler import NO_COMPILER, CompiledKernel, compile_kernel, compiler_available
from mamba2_tile.course.checks.feedback import (NOT_DONE, attempt, compare, compare_counts,
                                                 exercise)
from mamba2_tile.kernels.fwd_pass_state import fwd_pass_state_launch
from mamba2_tile.kernels.options import FwdPassStateOptions
from mamba2_tile.cost import chunk_states_bytes as _states_bytes, minimal_bytes
from mamba2_tile.problem import Problem


# --------------------------------------------------------------------------------------------
# Exercise 1: the chunk states' traffic
# --------------------------------------------------------------------------------------------

def chunk_states_bytes(batch, seqlen, nheads, headdim, dstate, chunk_size, bytes_per_value):
    """The answer: stage 2 writes one ``(headdim, dstate)`` state per (batch, head, chunk),
    stage 3 reads it back (:func:`mamba2_tile.cost.chunk_states_bytes`)."""
    problem = Problem(batch, seqlen, nheads, headdim, dstate, chunk_size=chunk_size)
    return _states_bytes(problem, bytes_per_value)


_STATES_CASES = [  # batch, seqlen, nheads, headdim, dstate, chunk_size, bytes_per_value
    dict(batch=8, seqlen=4096, nheads=64, headdim=64, dstate=128, chunk_size=64,
         bytes_per_value=4),
    dict(batch=3, seqlen=1000, nheads=5, headdim=7, dstate=11, chunk_size=128,
         bytes_per_value=4),                          # a partial last chunk
    dict(batch=2, seqlen=300, nheads=3, headdim=64, dstate=16, chunk_size=256,
         bytes_per_value=2),
    dict(batch=1, seqlen=257, nheads=13, headdim=5, dstate=3, chunk_size=64, bytes_per_value=2),
]


def _states_hint(got):
    def matches(fn):
        return np.allclose(got, [fn(**case) for case in _STATES_CASES])

    def one_way(batch, seqlen, nheads, headdim, dstate, chunk_size, bytes_per_value):
        return chunk_states_bytes(batch, seqlen, nheads, headdim, dstate, chunk_size,
                                  bytes_per_value) / 2

    def floor_chunks(batch, seqlen, nheads, headdim, dstate, chunk_size, bytes_per_value):
        return 2 * batch * nheads * (seqlen // chunk_size) * headdim * dstate * bytes_per_value

    def per_token(batch, seqlen, nheads, headdim, dstate, chunk_size, bytes_per_value):
        return 2 * batch * nheads * seqlen * headdim * dstate * bytes_per_value

    if matches(one_way):
        return ("that is one way only: stage 2 writes each state AND stage 3 reads it back, "
                "so count the bytes twice.")
    if matches(floor_chunks):
        return ("the last chunk counts too, even when it is partial: ceil(seqlen / chunk_size) "
                "chunks, not seqlen // chunk_size.")
    if matches(per_token):
        return ("one state per chunk, not per token: the recurrence's states inside a chunk "
                "are never stored.")
    return ("2 (write + read) x batch x nheads x ceil(seqlen / chunk_size) x headdim x dstate "
            "x bytes_per_value.")


@exercise("09.2")
def check_chunk_states_bytes(fn):
    """Check ``chunk_states_bytes(batch, seqlen, nheads, headdim, dstate, chunk_size,
    bytes_per_value)``."""
    return compare_counts("chunk_states_bytes", fn, chunk_states_bytes, _STATES_CASES,
                          hint=_states_hint)


# --------------------------------------------------------------------------------------------
# Exercise 2: from a time to a bandwidth
# --------------------------------------------------------------------------------------------

def achieved_gbps(batch, seqlen, nheads, headdim, dstate, ngroups, bytes_per_value, ms):
    """The answer: the minimal bytes (read x, dt, B, C once, write y once; all in the input
    dtype, B and C once per group) over the time, in GB/s (1 GB = 1e9 bytes)."""
    # Only the size of a value matters here: any dtype of that size.
    dtype = {2: "bfloat16", 4: "float32"}[bytes_per_value]
    problem = Problem(batch, seqlen, nheads, headdim, dstate, ngroups, dtype=dtype)
    return minimal_bytes(problem) / (ms * 1e-3) / 1e9


_GBPS_CASES = [
    dict(batch=8, seqlen=4096, nheads=64, headdim=64, dstate=128, ngroups=1, bytes_per_value=2,
         ms=0.5),
    dict(batch=8, seqlen=16384, nheads=64, headdim=64, dstate=64, ngroups=8, bytes_per_value=2,
         ms=1.7),
    dict(batch=3, seqlen=1000, nheads=10, headdim=7, dstate=11, ngroups=5, bytes_per_value=4,
         ms=0.013),
    dict(batch=2, seqlen=777, nheads=6, headdim=48, dstate=96, ngroups=3, bytes_per_value=2,
         ms=0.004),
]


def _gbps_variant(case, per_head=False, with_y=True, with_dt=True, seconds=1e-3, giga=1e9):
    """A plausible wrong answer: B and C counted per head, y or dt forgotten, the time taken as
    seconds, or GiB instead of GB."""
    c = case
    tokens = c["batch"] * c["seqlen"]
    x = tokens * c["nheads"] * c["headdim"]
    dt = tokens * c["nheads"] if with_dt else 0
    bc = 2 * tokens * (c["nheads"] if per_head else c["ngroups"]) * c["dstate"]
    y = x if with_y else 0
    return (x + dt + bc + y) * c["bytes_per_value"] / (c["ms"] * seconds) / giga


def _gbps_hint(got):
    def matches(**variant):
        return np.allclose(got, [_gbps_variant(case, **variant) for case in _GBPS_CASES],
                           rtol=1e-6)

    if matches(per_head=True):
        return ("B and C are (batch, seqlen, ngroups, dstate): the minimal bytes read them once "
                "per group, not once per head (ngroups, not nheads).")
    if matches(with_y=False):
        return "the output counts too: y is written once, as many bytes as x."
    if matches(with_dt=False):
        return "dt is an input too: batch x seqlen x nheads values, read once."
    if matches(seconds=1.0):
        return "ms is in milliseconds: divide by ms * 1e-3 seconds."
    if matches(giga=2 ** 30):
        return "1 GB here is 1e9 bytes (the unit of bandwidth data sheets), not 2**30."
    return ("(x + dt + B + C + y) bytes / seconds / 1e9: x and y are batch x seqlen x nheads x "
            "headdim values, dt batch x seqlen x nheads, B and C batch x seqlen x ngroups x "
            "dstate each; every value bytes_per_value bytes.")


@exercise("09.1")
def check_achieved_gbps(fn):
    """Check ``achieved_gbps(batch, seqlen, nheads, headdim, dstate, ngroups, bytes_per_value,
    ms)``."""
    return compare_counts("achieved_gbps", fn, achieved_gbps, _GBPS_CASES, hint=_gbps_hint)


# --------------------------------------------------------------------------------------------
# Exercise 3: what occupancy=2 does to the registers of a thread
# --------------------------------------------------------------------------------------------

SM_REGISTERS = 65536   # 32-bit registers of one SM on sm_80, sm_90 and sm_100


def occupancy_problem():
    """Stage 2's inputs for one small bfloat16 layer (chunk 64, headdim 64, dstate 128), as CPU
    zeros: compiling reads only their shapes, dtypes and strides."""
    batch, seqlen, nheads, headdim, ngroups, dstate, chunk_size = 1, 256, 4, 64, 1, 128, 64
    x = torch.zeros(batch, seqlen, nheads, headdim, dtype=torch.bfloat16)
    B = torch.zeros(batch, seqlen, ngroups, dstate, dtype=torch.bfloat16)
    dt = torch.zeros(batch, nheads, seqlen // chunk_size, chunk_size)
    return x, B, dt, torch.zeros_like(dt)


def registers_per_thread(x, B, dt, dA_cumsum, occupancy):
    """The answer: stage 2 planned with ``occupancy`` (None: the compiler's choice), compiled for
    sm_90, and the registers per thread its cubin records."""
    launch, _ = fwd_pass_state_launch(x, B, dt, dA_cumsum,
                                      options=FwdPassStateOptions(occupancy=occupancy))
    return compile_kernel(launch.kernel, launch.args, target="sm_90").registers


@exercise("09.3")
def check_registers_per_thread(fn):
    """Check ``registers_per_thread(x, B, dt, dA_cumsum, occupancy)`` at the default and at 2.

    Needs cuda-tile's compiler (no GPU); without it, says so and returns False.
    """
    name = "registers_per_thread"
    if not compiler_available():
        print(f"⏭ {name} cannot be checked here: {NO_COMPILER}. The registers it would show are "
              "in the text above.")
        return False
    problem = occupancy_problem()
    occupancies = (None, 2)
    answers = []
    for occupancy in occupancies:
        answer = attempt(name, fn, *problem, occupancy)
        if answer is NOT_DONE:
            return False
        answers.append(answer)
    expected = [registers_per_thread(*problem, occupancy) for occupancy in occupancies]
    if any(isinstance(answer, CompiledKernel) for answer in answers):
        print(f"❌ {name}: returned the compiled kernel; return its `.registers` (an int).")
        return False
    if not all(isinstance(answer, (int, np.integer)) for answer in answers):
        print(f"❌ {name}: returned {answers[0]!r} and {answers[1]!r}; return the registers per "
              "thread, an int (`compile_kernel(...).registers`).")
        return False
    hint = None
    if answers[0] == answers[1]:
        hint = ("the same count both times: the occupancy never reached the compiler. Plan the "
                "launch with options=FwdPassStateOptions(occupancy=occupancy) and compile "
                "launch.kernel, which carries the hint, not the bare fwd_pass_state_kernel.")
    if not compare(f"{name} at occupancy None and 2", answers, expected, atol=0, rtol=0,
                   hint=hint or "compile the launch's kernel and args for target='sm_90'."):
        return False
    print(f"   The compiler's choice: {expected[0]} registers a thread; asking for 2 blocks per SM: "
          f"{expected[1]}. Both blocks' threads share the SM's {SM_REGISTERS:,} registers.")
    return True
