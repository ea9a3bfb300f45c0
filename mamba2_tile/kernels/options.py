"""The performance switches of the kernels, in one place.

    from mamba2_tile.kernels.options import ForwardOptions
    options = ForwardOptions.uniform(latency=4, swap_operands=True, transposed_layout=True)
    options.compute_out    # ComputeOutOptions(..., latency=4, swap_operands=True, ...)

``ForwardOptions()`` is the validated three-kernel pipeline with every switch off (the launchers'
own tile-size rules, no hints, no swap, the natural layouts, split TF32 for float32 inputs):
the ablation's baseline. :data:`DEFAULT_OPTIONS`, what the public API runs, is what the
H200 measurements chose (``data/h200_ablation.json``): the fused kernel with two blocks per SM
wherever there are enough (batch x heads) blocks to fill the GPU, the three kernels otherwise.
Each switch is a real code path picked at compile time (a ``ct.Constant`` or a compiler hint),
so turning one on costs nothing when it is off, and each can be measured on its own
(``python -m mamba2_tile.bench --ablation``) or chosen per shape by :mod:`mamba2_tile.autotune`.

Per kernel, one type each, holding only the options that kernel has (a :class:`KernelOptions`;
an option it does not have is refused, never silently dropped):

=====================  =====================================================================
kernel                 options
=====================  =====================================================================
``chunk_cumsum``       ``block_h``, ``occupancy``
``fwd_pass_state``     ``block_p``, ``block_n``, ``latency``, ``swap_operands``, ``tf32``,
                       ``occupancy``
``compute_out``        ``block_m``, ``block_p``, ``latency``, ``swap_operands``, ``tf32``,
                       ``occupancy``
``fused_state_out``    ``block_m``, ``block_p``, ``latency``, ``tf32``, ``occupancy``,
                       ``worker_warps``
=====================  =====================================================================

* Tile sizes ``block_h`` (chunk_cumsum heads), ``block_p`` / ``block_n`` (headdim / dstate),
  ``block_m`` (rows of ``y``). ``None`` keeps the launcher's rule
  (:mod:`mamba2_tile.kernels.plan` fills it in). Bigger tiles reuse each
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
  (The fused kernel is written swapped: it has no such option.)
* ``tf32``: float32 inputs only (the plan turns it off for others). Rounds float32 ``mma``
  operands to TF32 (10-bit mantissa), one tensor-core product each. cuTile runs a float32
  ``mma`` in full IEEE float32 off the tensor cores (20-50x slower on an H200), so without
  ``tf32`` the kernels multiply float32 as split TF32 instead: three TF32 products per float32
  one, float32's accuracy at a third of TF32's rate (:mod:`mamba2_tile.kernels.split_tf32`).
  mamba_ssm's Triton kernels run plain TF32. Costs accuracy: float16-level operand rounding
  (``tolerances.TF32_TOLERANCE``), so it stays off unless asked for.
* ``occupancy``: the compiler hint for how many blocks should share one SM (``None``: the
  compiler's choice). More blocks hide memory latency; each then gets fewer registers.
* ``worker_warps`` (fused kernel): the compiler hint for how many warps compute a block's
  tiles, 4 or 8 (what tileiras 13.4 takes; ``None``: the launcher's rule, 8 for float32 inputs,
  the compiler's 4 otherwise). Twice the warps spread the same tiles over twice the registers:
  fewer spills, or more blocks' worth of warps an SM.

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
  (:mod:`mamba2_tile.kernels.plan`): the fused kernel, cut into segments when it alone has
  fewer blocks than the GPU has SMs. The layout and low-precision switches then have nothing to
  act on.
* ``segment_chunks``: on the fused path, cut the sequence into segments of this many chunks and
  run them in parallel (:mod:`mamba2_tile.kernels.sequence_parallel`). ``None``: one segment,
  unless ``fuse_state_passing`` is ``None``, when the plan picks
  (:func:`mamba2_tile.kernels.sequence_parallel.choose_segment_chunks`).
"""

from dataclasses import dataclass, field, fields, replace

import torch

# Valid values, checked once here so a kernel never sees a bad constant.
LATENCY_RANGE = range(1, 11)
OCCUPANCY_RANGE = range(1, 33)
WORKER_WARPS = (4, 8)           # what tileiras 13.4 accepts for num_worker_warps
TILE_FIELDS = ("block_h", "block_p", "block_n", "block_m")
FORWARD_FIELDS = ("transposed_layout", "low_precision_states", "fuse_state_passing",
                  "segment_chunks")


@dataclass(frozen=True)
class KernelOptions:
    """What every kernel's options share: validation and the reading of stored dicts."""

    def __post_init__(self):
        values = vars(self)
        for name in TILE_FIELDS:
            size = values.get(name)
            if size is not None and (not isinstance(size, int) or size < 1 or size & (size - 1)):
                raise ValueError(f"{type(self).__name__}: {name} must be a power of two or None, "
                                 f"got {size!r}")
        if values.get("latency") not in (None, *LATENCY_RANGE):
            raise ValueError(f"{type(self).__name__}: latency must be an integer in 1..10 or None, "
                             f"got {values['latency']!r}")
        if values.get("occupancy") not in (None, *OCCUPANCY_RANGE):
            raise ValueError(f"{type(self).__name__}: occupancy must be in 1..32 or None, "
                             f"got {values['occupancy']!r}")
        warps = values.get("worker_warps")
        if warps is not None and (type(warps) is not int or warps not in WORKER_WARPS):
            raise ValueError(f"{type(self).__name__}: worker_warps must be 4, 8 or None, "
                             f"got {values['worker_warps']!r}")
        for name in ("swap_operands", "tf32"):
            if name in values and not isinstance(values[name], bool):
                raise ValueError(f"{type(self).__name__}: {name} must be True or False, "
                                 f"got {values[name]!r}")

    @classmethod
    def names(cls):
        return tuple(f.name for f in fields(cls))

    @classmethod
    def from_dict(cls, data):
        """The options ``to_dict`` / ``vars`` wrote; a field of another kernel is accepted only
        while off (the stored files' older form listed every field for every kernel)."""
        own = cls.names()
        for name, value in data.items():
            if name not in own and (name not in ALL_KERNEL_FIELDS or value not in (None, False)):
                raise ValueError(f"{cls.__name__} has no option {name!r} (set to {value!r}); "
                                 f"its options are {', '.join(own)}")
        return cls(**{name: value for name, value in data.items() if name in own})

    def latency_constant(self):
        """The kernels' ``LATENCY`` constant: 0 means no hint (a constant cannot be None)."""
        return self.latency or 0

    def use_tf32(self, dtype):
        return self.tf32 and dtype == torch.float32


@dataclass(frozen=True)
class ChunkCumsumOptions(KernelOptions):
    """Stage 1: the heads tile and occupancy only (it streams 1/headdim of the later stages'
    bytes, so no other switch could show)."""

    block_h: int | None = None
    occupancy: int | None = None


@dataclass(frozen=True)
class FwdPassStateOptions(KernelOptions):
    block_p: int | None = None
    block_n: int | None = None
    latency: int | None = None
    swap_operands: bool = False
    tf32: bool = False
    occupancy: int | None = None


@dataclass(frozen=True)
class ComputeOutOptions(KernelOptions):
    block_m: int | None = None
    block_p: int | None = None
    latency: int | None = None
    swap_operands: bool = False
    tf32: bool = False
    occupancy: int | None = None


@dataclass(frozen=True)
class FusedStateOutOptions(KernelOptions):
    """The fused kernel is written swapped and holds the whole dstate: no swap, no ``block_n``."""

    block_m: int | None = None
    block_p: int | None = None
    latency: int | None = None
    tf32: bool = False
    occupancy: int | None = None
    worker_warps: int | None = None


OPTION_TYPES = {"chunk_cumsum": ChunkCumsumOptions, "fwd_pass_state": FwdPassStateOptions,
                "compute_out": ComputeOutOptions, "fused_state_out": FusedStateOutOptions}
KERNEL_FIELDS = tuple(OPTION_TYPES)
ALL_KERNEL_FIELDS = frozenset(name for kind in OPTION_TYPES.values() for name in kind.names())


@dataclass(frozen=True)
class ForwardOptions:
    chunk_cumsum: ChunkCumsumOptions = field(default_factory=ChunkCumsumOptions)
    fwd_pass_state: FwdPassStateOptions = field(default_factory=FwdPassStateOptions)
    compute_out: ComputeOutOptions = field(default_factory=ComputeOutOptions)
    transposed_layout: bool = False
    low_precision_states: bool = False
    fused_state_out: FusedStateOutOptions = field(default_factory=FusedStateOutOptions)
    fuse_state_passing: bool | None = False        # None: the plan decides per call
    segment_chunks: int | None = None              # fused path cut into segments of this many

    def __post_init__(self):
        for name, kind in OPTION_TYPES.items():
            if type(getattr(self, name)) is not kind:
                raise TypeError(f"ForwardOptions.{name} must be a {kind.__name__}, "
                                f"got {type(getattr(self, name)).__name__}")
        for name in ("transposed_layout", "low_precision_states"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.fuse_state_passing not in (True, False, None):
            raise ValueError("fuse_state_passing must be True, False or None (decide per call), "
                             f"got {self.fuse_state_passing!r}")
        if self.segment_chunks is not None and (
                isinstance(self.segment_chunks, bool) or not isinstance(self.segment_chunks, int)
                or self.segment_chunks < 1):
            raise ValueError("segment_chunks must be a positive integer or None, "
                             f"got {self.segment_chunks!r}")

    def __hash__(self):
        # Hashed on every call of the API (the plan is memoised on it): computed once per object.
        if "_hash" not in self.__dict__:
            object.__setattr__(self, "_hash", hash(tuple(getattr(self, f.name)
                                                         for f in fields(self))))
        return self.__dict__["_hash"]

    @classmethod
    def uniform(cls, transposed_layout=False, low_precision_states=False,
                fuse_state_passing=False, **kernel_options):
        """Every kernel given the options it has among ``kernel_options`` (see
        :meth:`with_switches`)."""
        return cls(transposed_layout=transposed_layout, low_precision_states=low_precision_states,
                   fuse_state_passing=fuse_state_passing).with_switches(**kernel_options)

    def with_switches(self, **switches):
        """A copy with the given forward-level fields changed, and each given kernel option
        changed in every kernel that has it; an option no kernel has is refused."""
        unknown = sorted(set(switches) - ALL_KERNEL_FIELDS - set(FORWARD_FIELDS))
        if unknown:
            raise ValueError(f"no kernel has the option {', '.join(map(repr, unknown))}; "
                             f"kernel options: {', '.join(sorted(ALL_KERNEL_FIELDS))}; "
                             f"forward options: {', '.join(FORWARD_FIELDS)}")
        kernels = {}
        for name, kind in OPTION_TYPES.items():
            own = {k: v for k, v in switches.items() if k in kind.names()}
            if own:
                kernels[name] = replace(getattr(self, name), **own)
        return replace(self, **{k: v for k, v in switches.items() if k in FORWARD_FIELDS},
                       **kernels)

    def to_dict(self):
        return {f.name: (vars(getattr(self, f.name)) if f.name in OPTION_TYPES
                         else getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_dict(cls, data):
        """What :meth:`to_dict` wrote (or its older form, see the module doc)."""
        unknown = sorted(set(data) - set(OPTION_TYPES) - set(FORWARD_FIELDS))
        if unknown:
            raise ValueError(f"ForwardOptions has no field {', '.join(map(repr, unknown))}")
        return cls(**{k: OPTION_TYPES[k].from_dict(v) if k in OPTION_TYPES else v
                      for k, v in data.items()})


# Chosen on the H200 (data/h200_ablation.json): two fused blocks per SM hide each other's loads;
# the compiler then fits the block in 128 registers a thread.
DEFAULT_OPTIONS = ForwardOptions(fused_state_out=FusedStateOutOptions(occupancy=2),
                                 fuse_state_passing=None)
