"""`ct`: the cuTile module kernels are written against.

    from mamba2_tile.tile import ct

is the real `cuda.tile` when it can be imported (Linux with cuda-tile installed), and
otherwise the CPU interpreter's stand-in with the same names (mamba2_tile/interpreter/
api.py), so the same kernel source defines kernels everywhere; on a machine without
cuda-tile, run them with `mamba2_tile.interpreter.launch`.
"""
try:
    import cuda.tile as ct
except ImportError:
    from mamba2_tile.interpreter import api as ct

__all__ = ["ct"]
