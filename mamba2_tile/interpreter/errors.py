"""Errors raised by the CPU tile interpreter.

The real cuTile compiler rejects bad kernels at compile time with `TileTypeError`,
`TileValueError`, ...; the interpreter raises errors with the same class names when a
block reaches the offending line, so a learner sees the same kind of message on a laptop
as on a GPU. All of them derive from `TileInterpreterError`.

`launch` appends the kernel source location (file, line, source text) to the message of
any of these errors raised while a block runs: see `launch.locate`.
"""


class TileInterpreterError(Exception):
    """Base class of every error the interpreter raises on behalf of cuTile."""


class TileTypeError(TileInterpreterError):
    """A dtype, rank or argument kind that cuTile's compiler would reject."""


class TileValueError(TileInterpreterError):
    """A value that cuTile's compiler (or the hardware) would reject: bad shape, bad index."""


class TileSyntaxError(TileInterpreterError):
    """Python syntax that cuTile's front end rejects (a list, a `try`, ...): see syntax.py."""


class TileStaticAssertionError(TileInterpreterError):
    """`ct.static_assert` failed."""


class TileUnsupportedFeatureError(TileInterpreterError, NotImplementedError):
    """A cuTile feature that this interpreter does not implement.

    It is also a `NotImplementedError`, so callers can tell "not supported here" apart
    from "wrong kernel".
    """


def unsupported(name: str) -> TileUnsupportedFeatureError:
    """The error raised when a kernel uses a part of `cuda.tile` we do not interpret."""
    return TileUnsupportedFeatureError(
        f"ct.{name} is not supported by the mamba2_tile CPU interpreter")
