"""The performance switches of the kernels, in one place.

    from mamba2_tile.kernels.options import ForwardOptions, KernelOptions
    options = ForwardOptions.uniform(latency=4, swap_operands=True, transposed_layout=True)

``ForwardOptions()`` is the validated three-kernel pipeline with every switch off (the launchers'
own tile-size rules, no hints, no swap, the natural layouts, float32 ``ct.mma`` for float32
inputs): the ablation's baseline. :data:`DEFAULT_OPTIONS`, what the public API runs, is what the
H200 measurements chose (``data/h200_ablation.json``): the fused kernel with two blocks per SM
wherever there are enough (batch x heads) blocks to fill the GPU, the three kernels otherwise.
Each switch is a real code path picked at compile time (a ``ct.Constant`` or a compiler hint),
so turning one on costs nothing when it is off, and each can be measured on its own
(``python -m mamba2_tile.bench --ablation``) or chosen per shape by :mod:`mamba2_tile.autotune`.

Per kernel (:class:`KernelOptions`; a kernel ignores the fields it has no use for):

* Tile sizes ``block_h`` (chunk_cumsum heads), ``block_p`` / ``block_n`` (headdim / dstate),
  ``block_m`` (compute_out rows). ``None`` keeps the launcher's rule. Bigger tiles reuse each
  loaded byte more; smaller ones give more blocks (parallelism) and fewer registers per block.
* ``latency`` (1-10, ``None`` = no hint): tells the compiler the loads that stream ``x``, ``B``,
  ``C``, ``z`` and the entering states come from DRAM (stages 2 and 3; stage 1 reads 1/headdim
  of their bytes and takes no hint), so it issues them earlier / pipelines
  them deeper. Costs shared memory or registers for the extra buffers in flight.
* ``swap_operands``: compute the transposed product so that the transpose an ``mma`` needs
  falls on a tile loaded from memory (which the hardware can read transposed for free) rather
  than on one computed in registers, and so that the larger tile dimension is the ``mma``'s M:
  stage 2 accumulates the state as ``(dstate, headdim)`` (``Bᵀ @ x_w`` instead of
  ``x_wᵀ @ B``); stage 3 accumulates ``yᵀ`` (headdim rows), which keeps tensor cores busy when
  ``block_m`` is small. Costs one register transpose where the result leaves the kernel.
  (The fused kernel is written swapped: it has no switch.)
* ``tf32``: float32 inputs only (ignored otherwise). Rounds float32 ``mma`` operands to TF32
  (10-bit mantissa), which tensor cores multiply at 8x+ the float32 rate; cuTile runs float32
  ``mma`` in full IEEE float32 off the tensor cores (20-50x slower on an H200). mamba_ssm's
  Triton kernels do exactly this. Costs accuracy: float16-level operand rounding
  (``tolerances.TF32_TOLERANCE``), so it stays off unless asked for.
* ``occupancy``: the compiler hint for how many blocks should share one SM (``None``: the
  compiler's choice). More blocks hide memory latency; each then gets fewer registers.

For the whole forward pass (:class:`ForwardOptions`), because producer and consumer must agree:

* ``transposed_layout``: ``chunk_states`` is stored ``(batch, nheads, nchunks, dstate,
  headdim)`` instead of ``(..., headdim, dstate)``. Stage 3's inter-chunk product
  ``C_i @ h_enterᵀ`` then loads its K x N operand directly as a tile whose contiguous dimension is
  headdim (a TMA box, no transpose in registers, once per row block of every chunk); stage 2
  stores it with no transpose when it also swaps operands (its state is then ``(dstate,
  headdim)`` already). A swapping stage 3 wants the natural layout back (its A operand is the
  state as ``(headdim, dstate)``), which is why the autotuner picks the layout for the pair. ``dt`` / ``dA_cumsum`` need no such switch: stage 1 already stores them
  head-major, ``(batch, nheads, nchunks, chunk_size)``, so every later load of them is one
  contiguous 16-byte-aligned row (the transpose of ``dt``'s ``(batch, seqlen, nheads)``, paid
  once in stage 1's registers). ``final_states`` and the public results never change layout.
* ``low_precision_states``: store ``chunk_states`` in the input dtype (bfloat16 / float16; a
  no-op for float32). It halves the state traffic (written by stage 2, read by stage 3, the
  largest intermediate). Stage 3 rounds the entering state to the input dtype before its
  ``mma`` anyway, so ``y`` is bit-for-bit the same; ``final_states`` stays float32.
* ``fuse_state_passing``: run stages 2 and 3 as one kernel
  (:mod:`mamba2_tile.kernels.fused_state_out`, options ``fused_state_out``) that keeps the state
  in registers: no chunk states in global memory at all. ``None`` decides per call
  (:func:`mamba2_tile.kernels.fused_state_out.fused_fills_gpu`): fused when it has at least one
  block per SM. The layout and low-precision switches then have nothing to act on.
"""

from dataclasses import dataclass, field, fields, replace

import torch

# Valid values, checked once here so a kernel never sees a bad constant.
LATENCY_RANGE = range(1, 11)
TILE_FIELDS = ("block_h", "block_p", "block_n", "block_m")
KERNEL_FIELDS = ("chunk_cumsum", "fwd_pass_state", "compute_out", "fused_state_out")


@dataclass(frozen=True)
class KernelOptions:
    block_h: int | None = None
    block_p: int | None = None
    block_n: int | None = None
    block_m: int | None = None
    latency: int | None = None
    swap_operands: bool = False
    tf32: bool = False
    occupancy: int | None = None

    def __post_init__(self):
        for name in TILE_FIELDS:
            size = getattr(self, name)
            if size is not None and (size < 1 or size & (size - 1)):
                raise ValueError(f"{name} must be a power of two, got {size}")
        if self.latency is not None and self.latency not in LATENCY_RANGE:
            raise ValueError(f"latency must be an integer in 1..10 or None, got {self.latency}")
        if self.occupancy is not None and not 1 <= self.occupancy <= 32:
            raise ValueError(f"occupancy must be in 1..32 or None, got {self.occupancy}")

    def latency_constant(self):
        """The kernels' ``LATENCY`` constant: 0 means no hint (a constant cannot be None)."""
        return self.latency or 0

    def use_tf32(self, dtype):
        return self.tf32 and dtype == torch.float32


@dataclass(frozen=True)
class ForwardOptions:
    chunk_cumsum: KernelOptions = field(default_factory=KernelOptions)
    fwd_pass_state: KernelOptions = field(default_factory=KernelOptions)
    compute_out: KernelOptions = field(default_factory=KernelOptions)
    transposed_layout: bool = False
    low_precision_states: bool = False
    fused_state_out: KernelOptions = field(default_factory=KernelOptions)
    fuse_state_passing: bool | None = False        # None: decide per call

    def __post_init__(self):
        if self.fuse_state_passing not in (True, False, None):
            raise ValueError("fuse_state_passing must be True, False or None (decide per call), "
                             f"got {self.fuse_state_passing!r}")

    @classmethod
    def uniform(cls, transposed_layout=False, low_precision_states=False,
                fuse_state_passing=False, **kernel_options):
        """The same :class:`KernelOptions` for every kernel."""
        options = KernelOptions(**kernel_options)
        return cls(chunk_cumsum=options, fwd_pass_state=options, compute_out=options,
                   fused_state_out=options, transposed_layout=transposed_layout,
                   low_precision_states=low_precision_states,
                   fuse_state_passing=fuse_state_passing)

    def with_switches(self, **switches):
        """A copy with the given :class:`KernelOptions` fields changed in every kernel and the
        given forward-level fields changed (fields of either class, by name)."""
        forward_names = {"transposed_layout", "low_precision_states", "fuse_state_passing"}
        kernel = {k: v for k, v in switches.items() if k not in forward_names}
        return replace(
            self, **{k: v for k, v in switches.items() if k in forward_names},
            **{name: replace(getattr(self, name), **kernel) for name in KERNEL_FIELDS},
        )

    def to_dict(self):
        return {f.name: (vars(getattr(self, f.name)) if isinstance(getattr(self, f.name),
                                                                   KernelOptions)
                         else getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_dict(cls, data):
        return cls(**{k: KernelOptions(**v) if isinstance(v, dict) else v
                      for k, v in data.items()})


# Chosen on the H200 (data/h200_ablation.json): two fused blocks per SM hide each other's loads;
# the compiler then fits the block in 128 registers a thread.
DEFAULT_OPTIONS = ForwardOptions(fused_state_out=KernelOptions(occupancy=2), fuse_state_passing=None)
