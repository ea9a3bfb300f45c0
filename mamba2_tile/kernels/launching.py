"""What every host launcher in this package shares: a launch that can be inspected before it runs.

Each kernel file pairs a ``@ct.kernel`` with a ``*_launch`` function that validates nothing (the
public API does that), allocates the outputs, picks the tile shapes and the grid, and returns a
:class:`KernelLaunch` together with the outputs. Tests and the compiler check read
``launch.grid``, ``launch.kernel`` and ``launch.args`` without running anything; ``launch.run()``
sends it to :func:`mamba2_tile.dispatch.launch` (real cuTile for CUDA tensors, the CPU
interpreter for CPU tensors).
"""

from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True)
class KernelLaunch:
    grid: tuple
    kernel: object
    args: tuple

    def run(self):
        # Imported here so that building a launch (e.g. to compile it) never needs a device.
        from mamba2_tile.dispatch import launch

        launch(self.grid, self.kernel, self.args)


def next_power_of_2(n):
    """cuTile tile shapes must be powers of two; sizes that are not get padded up to one."""
    return 1 << (int(n) - 1).bit_length()


def cdiv(a, b):
    return -(-a // b)


def placeholder(like):
    """A one-element tensor passed in the slot of an absent optional input.

    The kernel never reads it: the matching ``HAS_...`` constant removes the load at compile
    time (and the interpreter never reaches it), but every kernel parameter still needs an array.
    """
    return like.new_zeros(1)


@lru_cache(maxsize=None)
def with_hints(kernel, occupancy=None):
    """``kernel`` with compiler hints replaced; ``None`` keeps the kernel as declared.

    Memoised: cuTile keeps one JIT cache per kernel object, so a fresh ``replace_hints`` object
    on every launch would recompile every time.
    """
    return kernel if occupancy is None else kernel.replace_hints(occupancy=occupancy)
