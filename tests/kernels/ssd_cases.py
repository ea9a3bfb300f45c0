"""Random SSD problems and their float64 answers, shared by the kernel and GPU tests.

``make_case`` builds torch inputs (any dtype / device) and ``expected_output`` computes, from the
very same rounded values in float64, what ``mamba_chunk_scan_combined`` must return: the
recurrence of ``mamba2_tile.reference`` with mamba_ssm's ``dt`` preparation and ``z`` gate
applied around it.
"""

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import torch
from hypothesis import strategies as st

from mamba2_tile import reference
from mamba2_tile.tolerances import to_numpy


@dataclass
class Case:
    batch: int = 1
    seqlen: int = 70
    nheads: int = 2
    headdim: int = 8
    ngroups: int = 1
    dstate: int = 8
    dtype: torch.dtype = torch.float32
    D: str | None = None                 # None, "head" (nheads,) or "channel" (nheads, headdim)
    z: bool = False
    dt_bias: bool = False
    initial_states: bool = False
    dt_softplus: bool = False
    dt_limit: tuple = (0.0, float("inf"))
    dt_range: tuple = (0.01, 0.2)        # dt drawn uniformly here (before bias / softplus)
    A_range: tuple = (-2.0, -0.2)
    seed: int = 0
    tensors: dict = field(default_factory=dict, repr=False)


def make_case(case, device="cpu"):
    """Fill ``case.tensors`` with the inputs of ``mamba_chunk_scan_combined``; returns them."""
    rng = np.random.default_rng(case.seed)
    b, l, h, p, g, n = (case.batch, case.seqlen, case.nheads, case.headdim, case.ngroups,
                        case.dstate)

    def tensor(shape, dtype=case.dtype, low=None, high=None):
        values = rng.standard_normal(shape) if low is None else rng.uniform(low, high, shape)
        return torch.tensor(values, dtype=dtype, device=device)

    t = dict(
        x=tensor((b, l, h, p)),
        dt=tensor((b, l, h), torch.float32, *case.dt_range),
        A=tensor((h,), torch.float32, *case.A_range),
        B=tensor((b, l, g, n)) * 0.5,
        C=tensor((b, l, g, n)) * 0.5,
    )
    if case.D == "head":
        t["D"] = tensor((h,), torch.float32)
    elif case.D == "channel":
        t["D"] = tensor((h, p), torch.float32)
    if case.z:
        t["z"] = tensor((b, l, h, p))
    if case.dt_bias:
        t["dt_bias"] = tensor((h,), torch.float32, -0.5, 0.5)
    if case.initial_states:
        t["initial_states"] = tensor((b, h, p, n), torch.float32)
    case.tensors = t
    return t


DTYPES = [torch.float32, torch.float16, torch.bfloat16]


@st.composite
def random_cases(draw, nheads=(1, 2, 4, 8), headdims=(4, 6, 8, 24), dstates=(4, 8, 10, 32),
                 max_seqlen=600):
    """Hypothesis strategy: a ``Case`` with every optional input and ``dt`` option drawn."""
    nheads = draw(st.sampled_from(nheads))
    return Case(
        batch=draw(st.integers(1, 2)),
        seqlen=draw(st.integers(1, max_seqlen)),
        nheads=nheads,
        headdim=draw(st.sampled_from(headdims)),
        ngroups=draw(st.sampled_from(sorted({1, max(1, nheads // 2), nheads}))),
        dstate=draw(st.sampled_from(dstates)),
        dtype=draw(st.sampled_from(DTYPES)),
        D=draw(st.sampled_from([None, "head", "channel"])),
        z=draw(st.booleans()),
        dt_bias=draw(st.booleans()),
        initial_states=draw(st.booleans()),
        dt_softplus=draw(st.booleans()),
        dt_limit=draw(st.sampled_from([(0.0, float("inf")), (0.02, 0.15)])),
        dt_range=draw(st.sampled_from([(0.01, 0.2), (-3.0, 0.0)])),
        seed=draw(st.integers(0, 2**16)),
    )


@st.composite
def stage_shapes(draw):
    """Hypothesis strategy for one stage kernel's test: the sizes ``stage_inputs`` takes.

    Groups are one, between (half the heads) or all; headdim 33 / dstate 12 are padded tiles.
    """
    nheads = draw(st.sampled_from([1, 2, 4, 8]))
    group_choice = draw(st.sampled_from(["one", "between", "all"]))
    return dict(
        batch=draw(st.integers(1, 2)),
        seqlen=draw(st.integers(1, 600)),
        nheads=nheads,
        headdim=draw(st.sampled_from([4, 6, 16, 33, 64])),
        ngroups={"one": 1, "between": max(1, nheads // 2), "all": nheads}[group_choice],
        dstate=draw(st.sampled_from([4, 8, 12, 64])),
        chunk_size=draw(st.sampled_from([64, 128, 256])),
        dtype=draw(st.sampled_from(DTYPES)),
    )


DT_LIMITS = [(0.0, float("inf")), (0.05, 0.5), (0.0, 0.1)]


class Stage1Problem(NamedTuple):
    batch: int
    seqlen: int
    nheads: int
    chunk_size: int
    dtype: torch.dtype
    has_bias: bool
    dt_softplus: bool
    dt_limit: tuple
    seed: int                                   # for the values of dt, A, dt_bias, gradients


@st.composite
def stage_1_problems(draw):
    """Hypothesis strategy for the stage-1 kernels' tests (``chunk_cumsum`` and its backward):
    a :class:`Stage1Problem`."""
    return Stage1Problem(
        batch=draw(st.integers(1, 2)),
        seqlen=draw(st.integers(1, 300)),
        nheads=draw(st.integers(1, 20)),           # > 16 heads: more than one block of heads
        chunk_size=draw(st.sampled_from([64, 128, 256])),
        dtype=draw(st.sampled_from(DTYPES)),
        has_bias=draw(st.booleans()),
        dt_softplus=draw(st.booleans()),
        dt_limit=draw(st.sampled_from(DT_LIMITS)),
        seed=draw(st.integers(0, 2**16)),
    )


def api_kwargs(case):
    """The keyword arguments of ``mamba_chunk_scan_combined`` besides the tensors."""
    return dict(dt_softplus=case.dt_softplus, dt_limit=case.dt_limit)


def prepared_dt(dt, dt_bias=None, dt_softplus=False, dt_limit=(0.0, float("inf"))):
    """mamba_ssm's dt preparation in float64: bias, softplus (identity above 20), clamp."""
    dt = to_numpy(dt)
    if dt_bias is not None:
        dt = dt + to_numpy(dt_bias)
    if dt_softplus:
        with np.errstate(invalid="ignore"):        # a NaN dt stays NaN, as it should
            dt = np.where(dt <= 20.0, np.logaddexp(0.0, dt), dt)
    return np.clip(dt, dt_limit[0], dt_limit[1])


def expected_output(case):
    """``(y, final_states)`` in float64 by the token-by-token recurrence."""
    t = {name: to_numpy(value) for name, value in case.tensors.items()}
    dt = prepared_dt(t["dt"], t.get("dt_bias"), case.dt_softplus, case.dt_limit)
    y, final_states = reference.ssd_recurrent(
        t["x"], dt, t["A"], t["B"], t["C"], D=t.get("D"),
        initial_states=t.get("initial_states"), return_final_states=True,
    )
    if "z" in t:
        y = y * t["z"] / (1.0 + np.exp(-t["z"]))
    return y, final_states
