"""Argument checking shared by the NumPy references and the public API.

Every SSD entry point takes the same family of arguments (COURSE.md §2). This module checks
their *shapes* against each other and returns the named sizes; it works on anything with
``.shape`` (NumPy arrays, torch tensors), so each caller only adds its own dtype/device rules.
Errors name the argument and say what was expected.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class SSDDims:
    batch: int
    seqlen: int
    nheads: int
    headdim: int
    ngroups: int
    dstate: int

    @property
    def heads_per_group(self):
        return self.nheads // self.ngroups


def _shape_str(shape):
    return str(tuple(int(s) for s in shape))


def expect_shape(name, value, expected, names):
    """Raise ValueError unless ``value.shape == expected``; ``names`` spells out the layout."""
    shape = tuple(value.shape)
    if shape != tuple(expected):
        raise ValueError(
            f"{name} must have shape {names} = {_shape_str(expected)}, got {_shape_str(shape)}"
        )


def ssd_dims(x, dt, A, B, C, D=None, initial_states=None, z=None, dt_bias=None):
    """Check the shapes of the SSD arguments against each other; return the named sizes."""
    if len(x.shape) != 4:
        raise ValueError(
            f"x must be 4-D (batch, seqlen, nheads, headdim), got shape {_shape_str(x.shape)}"
        )
    batch, seqlen, nheads, headdim = x.shape
    if seqlen < 1:
        raise ValueError("x must hold at least one token (seqlen >= 1), got seqlen 0")
    if len(B.shape) != 4:
        raise ValueError(
            f"B must be 4-D (batch, seqlen, ngroups, dstate), got shape {_shape_str(B.shape)}"
        )
    ngroups, dstate = B.shape[2], B.shape[3]
    expect_shape("dt", dt, (batch, seqlen, nheads), "(batch, seqlen, nheads)")
    expect_shape("A", A, (nheads,), "(nheads,)")
    expect_shape("B", B, (batch, seqlen, ngroups, dstate), "(batch, seqlen, ngroups, dstate)")
    if ngroups < 1 or nheads % ngroups != 0:
        raise ValueError(
            f"B has ngroups={ngroups}, which must divide nheads={nheads} "
            "(head h reads group h // (nheads // ngroups))"
        )
    expect_shape("C", C, (batch, seqlen, ngroups, dstate), "(batch, seqlen, ngroups, dstate)")
    if D is not None and tuple(D.shape) not in ((nheads,), (nheads, headdim)):
        raise ValueError(
            f"D must have shape (nheads,) = ({nheads},) or (nheads, headdim) = "
            f"({nheads}, {headdim}), got {_shape_str(D.shape)}"
        )
    if initial_states is not None:
        expect_shape(
            "initial_states", initial_states, (batch, nheads, headdim, dstate),
            "(batch, nheads, headdim, dstate)",
        )
    if z is not None:
        expect_shape("z", z, (batch, seqlen, nheads, headdim), "(batch, seqlen, nheads, headdim)")
    if dt_bias is not None:
        expect_shape("dt_bias", dt_bias, (nheads,), "(nheads,)")
    return SSDDims(batch, seqlen, nheads, headdim, ngroups, dstate)


def check_chunk_size(chunk_size):
    """chunk_size is a positive int; the kernels further restrict it to 64, 128 or 256."""
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int):
        raise TypeError(f"chunk_size must be an int, got {type(chunk_size).__name__}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
