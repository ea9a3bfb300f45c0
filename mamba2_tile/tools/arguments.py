"""The argument types and checks the command lines share (``bench``, ``scaling``, ``golden``).

Each type is an ``argparse`` ``type=``: it turns the text into a value or raises
``argparse.ArgumentTypeError`` saying what was expected, which argparse prints after the option's
name (``argument --reps: expected a positive integer, got '0'``) before exiting with status 2.
The checks here run after parsing, for what one option alone cannot tell: a value given twice,
an option that does nothing in the company of another.
"""

import argparse
import math
import re

from mamba2_tile.api import CHUNK_SIZES

_STEM = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def positive_int(text):
    """An integer >= 1, written as one (``"1.5"``, ``"1e3"`` and ``"0"`` are refused)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def chunk_size(text):
    """A chunk size the kernels take (:data:`mamba2_tile.api.CHUNK_SIZES`)."""
    try:
        value = int(text)
    except ValueError:
        value = None
    if value not in CHUNK_SIZES:
        raise argparse.ArgumentTypeError(
            f"expected a chunk size the kernels take, one of "
            f"{', '.join(map(str, CHUNK_SIZES))}, got {text!r}")
    return value


def positive_float(text):
    """A finite number > 0 (``nan``, ``inf``, ``0`` and ``-1`` are refused)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text!r}")
    return value


def shard(text):
    """``K/N`` with ``0 <= K < N``: this process's share of a list, as ``(K, N)``."""
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        index = count = None
    if index is None or not 0 <= index < count:
        raise argparse.ArgumentTypeError(f"expected K/N with 0 <= K < N, got {text!r}")
    return index, count


def file_stem(text):
    """A file name without directory or extension, for a file written under the data directory:
    letters, digits, ``_``, ``-`` and ``.``, not starting with ``.`` or ``-``."""
    if not _STEM.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"expected a file name stem (letters, digits, '_', '-', '.'; no '/'), got {text!r}")
    return text


def refuse_repeats(parser, args, *names):
    """Exit with a usage error when a list option holds a value twice (it would be measured,
    and stored, twice)."""
    for name in names:
        values = getattr(args, name) or []
        repeated = sorted({v for v in values if values.count(v) > 1}, key=values.index)
        if repeated:
            parser.error(f"argument --{name.replace('_', '-')}: "
                         f"{', '.join(map(str, repeated))} given more than once")


def refuse_unused(parser, given, unless, why):
    """Exit with a usage error naming the options in ``given`` (``{"--name": value}``) that were
    set although ``unless`` makes them do nothing; ``why`` says what."""
    used = [option for option, value in given.items() if value not in (None, False, [])]
    if unless and used:
        parser.error(f"{', '.join(used)} {'does' if len(used) == 1 else 'do'} not apply {why}")
