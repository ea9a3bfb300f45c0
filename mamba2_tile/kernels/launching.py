"""What every host launcher in this package shares: a launch that can be inspected before it runs.

Each kernel file pairs a ``@ct.kernel`` with a ``*_launch`` function that validates nothing (the
public API does that), allocates the outputs, picks the tile shapes and the grid, and returns a
:class:`KernelLaunch` together with the outputs. Tests and the compiler check read
``launch.grid``, ``launch.kernel`` and ``launch.args`` (or ``launch.named_args()``) without
running anything; ``launch.run()`` sends it to :func:`mamba2_tile.dispatch.launch` (real cuTile
for CUDA tensors, the CPU interpreter for CPU tensors).
"""

from functools import lru_cache
from typing import NamedTuple

import torch

from mamba2_tile import dispatch


class KernelLaunch(NamedTuple):
    """One launch, immutable (a named tuple: made on every launch, at half a frozen dataclass's
    cost)."""

    grid: tuple
    kernel: object
    args: tuple

    def run(self):
        dispatch.launch(self.grid, self.kernel, self.args)

    def named_args(self):
        """``{parameter name: argument}``: what a test or a reader checks, by name."""
        return dict(zip(dispatch.parameter_names(self.kernel), self.args))


def expect_options(options, kind):
    """Refuse another kernel's options: each kernel has its own type (kernels.options)."""
    if type(options) is not kind:
        raise TypeError(f"options must be a {kind.__name__}, got {type(options).__name__}")


def next_power_of_2(n):
    """cuTile tile shapes must be powers of two; sizes that are not get padded up to one."""
    return 1 << (int(n) - 1).bit_length()


def cdiv(a, b):
    return -(-a // b)


_placeholders = {}


def placeholder(like, dtype=None):
    """A one-element tensor passed in the slot of an absent optional input.

    The kernel never reads it: the matching ``HAS_...`` constant removes the load at compile
    time (and the interpreter never reaches it), but every kernel parameter still needs an array.
    One per device and dtype, made once: never read nor written, it can be shared by every launch,
    which then allocates nothing for it.
    """
    key = (like.device, like.dtype if dtype is None else dtype)
    found = _placeholders.get(key)
    if found is None:
        found = _placeholders[key] = like.new_zeros(1, dtype=key[1])
    return found


def seq_placeholder(like):
    """:func:`placeholder` for an absent ``seq_idx``: int32, on ``like``'s device."""
    return placeholder(like, torch.int32)


@lru_cache(maxsize=None)
def with_hints(kernel, occupancy=None, num_worker_warps=None):
    """``kernel`` with compiler hints replaced; ``None`` keeps a hint as declared.

    Memoised: cuTile keeps one JIT cache per kernel object, so a fresh ``replace_hints`` object
    on every launch would recompile every time.
    """
    hints = {name: value for name, value in [("occupancy", occupancy),
                                             ("num_worker_warps", num_worker_warps)]
             if value is not None}
    return kernel.replace_hints(**hints) if hints else kernel
