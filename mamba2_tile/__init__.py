"""mamba2_tile: Mamba-2's SSD forward pass, from the math to NVIDIA cuTile kernels.

The map of the package (one idea per module):

* ``reference``   float64 NumPy references: recurrence, quadratic form, chunked stages
* ``shapes``      argument checks shared by the references and the public API
* ``checks``      learner checks for the notebooks' exercises
* ``plots``       the notebooks' pictures; ``widgets`` the interactive explorers
* ``exercises``   makes ``notebooks/`` from ``solutions/``
* ``golden``      writes the golden vectors in ``data/golden/``
"""

__version__ = "0.1.0"
