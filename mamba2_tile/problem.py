"""The problem: the sizes of one SSD call, and the checks that read them off its arguments.

Every part of the package talks about the same thing: a batch of sequences, ``seqlen`` tokens
each, ``nheads`` heads of ``headdim`` channels, a state of ``dstate`` per channel, ``B`` and ``C``
shared by groups of heads (``ngroups``), the sequence cut into chunks of ``chunk_size``, inputs
of one ``dtype``. :class:`Problem` holds those sizes, with one label format; what a problem
costs (FLOPs, bytes moved, the minimal bytes, the bytes of a state) is counted in
:mod:`mamba2_tile.cost`. The names and shapes are those of docs/architecture.md.

:func:`ssd_dims` checks the *shapes* of the SSD arguments against each other and returns the
problem they describe; it works on anything with ``.shape`` (NumPy arrays, torch tensors), so
each caller only adds its own dtype/device rules. Errors name the argument and say what was
expected.
"""

import numbers
from dataclasses import dataclass, fields

DTYPE_BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2}
KERNEL_DTYPES = ("bfloat16", "float16", "float32")   # the input dtypes the kernels take
_DTYPE_SHORT = {"float64": "fp64", "float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}


@dataclass(frozen=True)
class Problem:
    """The sizes of one SSD call. ``chunk_size`` is ``None`` where no chunking is chosen yet
    (the shapes of the arguments do not fix it)."""

    batch: int
    seqlen: int
    nheads: int
    headdim: int
    dstate: int
    ngroups: int = 1
    chunk_size: int = 256
    dtype: str = "bfloat16"

    @classmethod
    def from_row(cls, row):
        """The problem a result row (``python -m mamba2_tile.tools.bench``) measured."""
        missing = [f.name for f in fields(cls) if row.get(f.name) is None]
        if missing:
            raise ValueError(f"the row lacks {', '.join(missing)}")
        return cls(**{f.name: row[f.name] for f in fields(cls)})

    def validate(self):
        """Refuse sizes no kernel can run, naming the field; returns the problem."""
        for name in ("batch", "seqlen", "nheads", "headdim", "dstate", "ngroups", "chunk_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.nheads % self.ngroups:
            raise ValueError(f"nheads must be a multiple of ngroups, got nheads {self.nheads} "
                             f"and ngroups {self.ngroups}")
        if self.dtype not in KERNEL_DTYPES:
            raise ValueError(f"dtype must be {', '.join(KERNEL_DTYPES[:-1])} or "
                             f"{KERNEL_DTYPES[-1]}, got {self.dtype!r}")
        return self

    @property
    def dtype_bytes(self):
        """Bytes per element of the inputs and of ``y``."""
        if self.dtype not in DTYPE_BYTES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPE_BYTES)}, got {self.dtype!r}")
        return DTYPE_BYTES[self.dtype]

    @property
    def heads_per_group(self):
        return self.nheads // self.ngroups

    @property
    def nchunks(self):
        return -(-self.seqlen // self.chunk_size)

    @property
    def padded_seqlen(self):
        """seqlen rounded up to whole chunks: the positions the chunked kernels compute."""
        return self.nchunks * self.chunk_size

    def label(self):
        """``b8 L4096 h64 p64 n128 g1 c64 bf16``: batch, seqlen, heads, headdim, dstate, groups,
        chunk size, dtype."""
        return (f"b{self.batch} L{self.seqlen} h{self.nheads} p{self.headdim} n{self.dstate} "
                f"g{self.ngroups} c{self.chunk_size} {_DTYPE_SHORT.get(self.dtype, self.dtype)}")


def seqlen_label(seqlen):
    """``32768 -> '32k'``; lengths that are not whole thousands of 1024 stay as they are."""
    return f"{seqlen // 1024}k" if seqlen % 1024 == 0 else str(seqlen)


# --------------------------------------------------------------------------------------------
# Reading a problem off the arguments
# --------------------------------------------------------------------------------------------

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
    """Check the shapes of the SSD arguments against each other; return the :class:`Problem`
    they describe (``dtype`` is ``x``'s, ``chunk_size`` ``None``: the arguments do not fix it)."""
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
    # "torch.bfloat16" -> "bfloat16"; a NumPy dtype prints its name already.
    dtype = str(getattr(x, "dtype", "unknown")).rsplit(".", 1)[-1]
    return Problem(int(batch), int(seqlen), int(nheads), int(headdim), int(dstate), int(ngroups),
                   chunk_size=None, dtype=dtype)


def check_chunk_size(chunk_size):
    """chunk_size is a positive integer (a NumPy integer too, never a bool); returns it as an
    ``int``. The kernels further restrict it to 64, 128 or 256."""
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, numbers.Integral):
        raise TypeError(f"chunk_size must be an int, got {type(chunk_size).__name__}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    return int(chunk_size)
