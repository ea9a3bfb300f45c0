"""In-kernel printing with the text the GPU prints.

On the GPU, `print(f"{t:.1f}")` and `ct.print` are lowered to a C printf: a Python format
spec becomes a C conversion (`.1f` -> `%.1f`; no type letter -> `%d` for integers and
bools, `%f` for floats) applied to every element, and a tile prints as a nested list,
`[[14.0, 14.0], [14.0, 14.0]]`; a 0-d tile prints as a bare number. Python's `%` operator
formats numbers like C's printf, so we reuse it.

Because the builtin `print` calls `str()`/`format()` on its arguments, and `Tile` routes
both here, a kernel's plain `print(...)` works unchanged; `ct.print`/`ct.printf` are also
provided. Output goes to `sys.stdout` and is flushed at once, block by block.
"""
import re
import sys

from .errors import TileTypeError, TileUnsupportedFeatureError

_C_CONVERSIONS = "diuoxXeEfFgG"
# %[flags][width][.precision][length]conversion, as cuTile's printf validator accepts
_C_SPEC = re.compile(r"%%|%[-+ #0]*\d*(?:\.\d+)?(?:hh|h|ll|l|L|z|j|t)?([a-zA-Z])")


def c_conversion(spec: str, dtype) -> str:
    """The C printf conversion the GPU uses for a Python format spec on this dtype."""
    inferred = "d" if dtype.kind in "biu" else "f"
    if spec and spec[-1].isalpha():
        if spec[-1] not in _C_CONVERSIONS:
            raise TileUnsupportedFeatureError(f"format spec {spec!r} is not supported in print")
        if (spec[-1] in "diuoxX") != (dtype.kind in "biu"):
            raise TileTypeError(f"format spec {spec!r} does not match a {dtype} tile")
        return "%" + spec
    return "%" + spec + inferred


_LENGTH_MODIFIER = re.compile(r"(hh|h|ll|l|L|z|j|t)(?=[a-zA-Z]$)")


def _render(values, conversion):
    if isinstance(values, list):
        return "[" + ", ".join(_render(v, conversion) for v in values) + "]"
    return conversion % (int(values) if isinstance(values, bool) else values)


def format_tile(tile, spec: str) -> str:
    # C length modifiers (%lld) only matter to C's varargs; Python's % rejects some.
    conversion = _LENGTH_MODIFIER.sub("", c_conversion(spec, tile.dtype))
    return _render(tile.data.tolist(), conversion)


def _emit(text: str):
    sys.stdout.write(text)
    sys.stdout.flush()


def tile_print(*args, sep=" ", end="\n"):
    """ct.print: like the builtin print, with tiles formatted as on the GPU."""
    _emit(sep.join(str(a) for a in args) + end)


def printf(format, *args):
    """ct.printf: a C format string with one conversion per tile argument."""
    pieces, next_arg, position = [], 0, 0
    for match in _C_SPEC.finditer(format):
        pieces.append(format[position:match.start()])
        position = match.end()
        if match.group(0) == "%%":
            pieces.append("%")
            continue
        if next_arg >= len(args):
            raise TileTypeError(f"printf format {format!r} has more conversions than arguments")
        tile = args[next_arg]
        next_arg += 1
        pieces.append(format_tile(tile, match.group(0)[1:]))
    if next_arg != len(args):
        raise TileTypeError(f"printf format {format!r} has fewer conversions than arguments")
    pieces.append(format[position:])
    _emit("".join(pieces))
