"""mamba2_tile: Mamba-2's SSD forward pass, from the math to NVIDIA cuTile kernels.

    from mamba2_tile import mamba_chunk_scan_combined   # drop-in for mamba_ssm's forward

The map of the package, in three layers that import only downwards (docs/architecture.md has
the picture, the data path and the notation; tests/test_architecture.py enforces the rules):

core, the library
* ``api``              ``mamba_chunk_scan_combined`` on torch tensors
* ``decode``           ``selective_state_update``: the decode step, one token, state in place
* ``reference_decode`` its float64 NumPy reference
* ``layer``            ``Mamba2``: mamba_ssm's Mamba-2 layer (same parameters) on these kernels,
                       with its generation cache (``InferenceParams``)
* ``model``            ``Mamba2LM``: a small byte-level language model of ``Mamba2`` layers
* ``autograd``         the backward pass: ``SSDFunction`` (what ``api`` routes a call through
                       when an input requires a gradient) on the backward kernels
* ``reference``        float64 NumPy references: recurrence, quadratic form, chunked stages
* ``reference_backward`` their gradients, recurrent and chunked (the backward's ground truth)
* ``torch_reference``  the chunked algorithm in plain PyTorch (baseline, float64 ground truth)
* ``problem``          ``Problem``, the sizes of one call (with its label), and the argument
                       shape checks shared by the references and the API
* ``cost``             FLOPs and bytes of each algorithm and stage, and the memory a sequence
                       costs a model
* ``kernels``          the three cuTile kernels and the fused stages 2+3, one file each, host
                       launcher beside the kernel; ``kernels.options``: the performance switches
* ``tile``             ``ct``: real ``cuda.tile`` where it installs, the interpreter's otherwise
* ``dispatch``         where a launch runs: cuTile on a GPU, the CPU tile interpreter elsewhere
* ``interpreter``      runs unmodified ``@ct.kernel`` functions on the CPU, block by block
* ``compiler``         compiles a kernel to a cubin for sm_80/sm_90/sm_100 without a GPU
* ``autotune``         per-GPU, per-shape choice of the switches, cached on disk
* ``tolerances``       the per-dtype tolerances the kernels are held to

tools (``mamba2_tile.tools``), commands that measure and store
* ``bench``            ``python -m mamba2_tile.tools.bench``: GPU timings against mamba_ssm
* ``scaling``          ``python -m mamba2_tile.tools.scaling``: time and memory up to 256k tokens
* ``golden``           ``python -m mamba2_tile.tools.golden``: the golden vectors in data/golden/
* ``train``            ``python -m mamba2_tile.tools.train``: trains ``Mamba2LM`` on a text file
* ``results``          reads the measured GPU results stored in ``data/``

course (``mamba2_tile.course``), what the notebooks call
* ``checks``           learner checks for the notebooks' exercises
* ``plots``, ``widgets``  the notebooks' pictures and interactive explorers
* ``exercises``        ``python -m mamba2_tile.course.exercises``: makes notebooks/ from solutions/
* ``environment``      what this machine can run
"""

__version__ = "0.1.0"


def __getattr__(name):
    # Imported on first use: the NumPy references should not pay for importing torch.
    if name == "mamba_chunk_scan_combined":
        from mamba2_tile.api import mamba_chunk_scan_combined

        return mamba_chunk_scan_combined
    if name == "selective_state_update":
        from mamba2_tile.decode import selective_state_update

        return selective_state_update
    if name in ("Mamba2", "InferenceParams"):
        from mamba2_tile import layer

        return getattr(layer, name)
    raise AttributeError(f"module 'mamba2_tile' has no attribute {name!r}")
