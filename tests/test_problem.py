"""The one problem type: its label, its derived sizes, and the checks that establish it."""

import dataclasses

import numpy as np
import pytest
import torch

from mamba2_tile.problem import Problem, seqlen_label, ssd_dims


def test_label_names_every_size_once():
    assert Problem(8, 4096, 64, 64, 128, 1, 64, "bfloat16").label() == (
        "b8 L4096 h64 p64 n128 g1 c64 bf16")
    assert Problem(1, 1000, 2, 16, 8, 2, 128, "float32").label().endswith("g2 c128 fp32")


def test_derived_sizes():
    p = Problem(2, 300, 8, 16, 32, 2, 128, "float16")
    assert (p.nchunks, p.padded_seqlen, p.heads_per_group, p.dtype_bytes) == (3, 384, 4, 2)
    with pytest.raises(ValueError, match="dtype must be one of"):
        Problem(1, 1, 1, 1, 1, dtype="int8").dtype_bytes


def test_a_row_round_trips_and_a_short_row_is_named():
    p = Problem(8, 4096, 64, 64, 128, 8, 128, "bfloat16")
    assert Problem.from_row({**dataclasses.asdict(p), "mamba2_tile_ms": 1.0}) == p
    row = {k: v for k, v in dataclasses.asdict(p).items() if k != "dstate"}
    with pytest.raises(ValueError, match="lacks dstate"):
        Problem.from_row(row)


@pytest.mark.parametrize("change, message", [
    (dict(batch=0), "batch must be a positive integer"), (dict(seqlen=2.5), "seqlen"),
    (dict(ngroups=3), "nheads must be a multiple of ngroups, got nheads 4 and ngroups 3"), (dict(dtype="float64"), "dtype"),
    (dict(chunk_size=True), "chunk_size"),
])
def test_validate_names_the_bad_field(change, message):
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(Problem(1, 64, 4, 8, 8), **change).validate()
    assert Problem(1, 64, 4, 8, 8).validate() == Problem(1, 64, 4, 8, 8)


@pytest.mark.parametrize("make, dtype", [(np.zeros, "float64"),
                                         (lambda s: torch.zeros(s, dtype=torch.bfloat16),
                                          "bfloat16")])
def test_ssd_dims_reads_the_problem_off_the_arguments(make, dtype):
    x, dt, A = make((2, 10, 4, 8)), make((2, 10, 4)), make((4,))
    B = C = make((2, 10, 2, 16))
    assert ssd_dims(x, dt, A, B, C) == Problem(2, 10, 4, 8, 16, 2, chunk_size=None, dtype=dtype)


def test_seqlen_label():
    assert [seqlen_label(n) for n in (1024, 262144, 1000)] == ["1k", "256k", "1000"]
