"""Pick the kernels' tile sizes, occupancy and switches per GPU and shape, and remember them.

    MAMBA2_TILE_AUTOTUNE=1 python train.py     # tune each new shape class once, then reuse

Off by default: the first call on a new shape class spends seconds compiling and timing
candidates, which a drop-in forward pass should not do unasked, and the defaults
(:data:`mamba2_tile.kernels.DEFAULT_OPTIONS`) are already what tuning chose on an H200 for the
benchmark's shapes. :func:`mamba2_tile.api.mamba_chunk_scan_combined` runs those defaults, as
planned for its shape, unless ``MAMBA2_TILE_AUTOTUNE=1``; then it hands the planned options to
:func:`tuned_options`.
``MAMBA2_TILE_AUTOTUNE=0`` (or unset) turns tuning off; CPU tensors (the interpreter) are never
tuned, whatever the switch says.

What is tuned. Only what leaves the results unchanged: occupancy, latency hints, tile sizes,
operand swap and the ``chunk_states`` layout. ``tf32`` and ``low_precision_states`` change the
numerics and stay as the caller set them (``base`` options), and so does the path, which
:mod:`mamba2_tile.kernels.plan` decides (the tuner is a plug-in the plan never imports). Each
search is one ``cuda.tile.tune.exhaustive_search`` (compile, warm up, time with L2 flushed), in
two stages per kernel:

1. tile sizes x occupancy (x worker warps, fused kernel), hints off (:func:`tile_space`);
2. with the best of those: latency hint (x operand swap, three-kernel path) (:func:`switch_space`).

Fused path: 6 + 2 configurations of one kernel (stage 1 keeps its defaults: it reads
1/headdim of the bytes). Three-kernel path: ``transposed_layout`` is shared by stage 2 and
stage 3 (one writes ``chunk_states``, the other reads it), so it is chosen for the pair: the
layout whose two best times add up to less; 26 configurations in all. Each configuration is a
compilation (1-3 s) plus a few timed runs: well under a minute per new shape class.

What is remembered. One JSON file, ``$MAMBA2_TILE_CACHE_DIR/autotune.json`` (default
``~/.cache/mamba2_tile/``), one entry per (GPU name, kernel, shape class) — the shape class
being (chunk_size, headdim, dstate, ngroups == 1, seqlen bucket, dtype), see
:func:`shape_class` — holding the chosen kernel options, the layout and the time. A
second run (or process) reads the file instead of tuning; delete the file to re-tune.
Processes tuning at once each merge their entries into the file under a lock
(:func:`save_cache`); a file that cannot be read, or cannot be written, costs a
:class:`CacheWarning` and a tuning, never the forward call.
"""

import json
import os
import tempfile
import warnings
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
from filelock import FileLock

from mamba2_tile.kernels import (DEFAULT_OPTIONS, ChunkCumsumOptions, ComputeOutOptions,
                                 FusedStateOutOptions, FwdPassStateOptions, chunk_cumsum,
                                 chunk_cumsum_launch, chunk_scores, compute_out_launch,
                                 fused_state_out_launch, fwd_pass_state, fwd_pass_state_launch,
                                 segment_pass, segment_states)
from mamba2_tile.kernels.fused_state_out import fused_block_m, scores_given
from mamba2_tile.kernels.launching import next_power_of_2
from mamba2_tile.kernels.options import OPTION_TYPES, WORKER_WARPS
from mamba2_tile.kernels.plan import plan_for

AUTOTUNE_ENV = "MAMBA2_TILE_AUTOTUNE"
CACHE_DIR_ENV = "MAMBA2_TILE_CACHE_DIR"
CACHE_FILE = "autotune.json"
THREE_KERNELS = ("chunk_cumsum", "fwd_pass_state", "compute_out")
FUSED = ("fused_state_out",)
KERNELS = THREE_KERNELS + FUSED
OCCUPANCIES = (None, 2)         # None: the compiler's choice
FUSED_OCCUPANCIES = (None, 2, 3)   # 4 leaves the fused block 64 registers a thread: spills
LATENCY_HINT = 4            # a mid-range "this comes from DRAM" hint; 1-10, higher = farther
MIN_SEQLEN_BUCKET = 1024    # shorter sequences all tune alike: few chunks, launch-bound


def enabled():
    """True only when ``MAMBA2_TILE_AUTOTUNE`` is set to 1 / true / yes / on."""
    return os.environ.get(AUTOTUNE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def cache_path():
    directory = os.environ.get(CACHE_DIR_ENV) or Path.home() / ".cache" / "mamba2_tile"
    return Path(directory) / CACHE_FILE


@dataclass(frozen=True)
class ShapeClass:
    """Shapes that share their best options: the kernels' tiles and loops depend on these."""

    chunk_size: int
    headdim: int
    dstate: int
    single_group: bool       # ngroups == 1: every head reads the same B and C (L2 reuse)
    seqlen_bucket: int       # next power of two of seqlen, at least MIN_SEQLEN_BUCKET
    dtype: str

    def tag(self):
        return (f"c{self.chunk_size}-p{self.headdim}-n{self.dstate}-"
                f"g{'1' if self.single_group else 'n'}-l{self.seqlen_bucket}-{self.dtype}")


def shape_class(x, B, chunk_size):
    _, seqlen, _, headdim = x.shape
    return ShapeClass(chunk_size, headdim, B.shape[3], B.shape[2] == 1,
                      next_power_of_2(max(seqlen, MIN_SEQLEN_BUCKET)),
                      str(x.dtype).removeprefix("torch."))


def cache_key(gpu, kernel, shape, base=DEFAULT_OPTIONS):
    """One entry per (GPU, kernel, shape class), and per numerics the caller fixed (``base``):
    TF32 and low-precision states change the timings, so they are tuned separately."""
    # Stage 1 has no TF32 of its own: it is keyed with the pass it belongs to (the stored cache
    # was written when every kernel carried the switch, and the ablation set it everywhere).
    options = getattr(base, kernel, base.fwd_pass_state)
    tf32 = getattr(options, "tf32", base.fwd_pass_state.tf32) and shape.dtype == "float32"
    low_states = base.low_precision_states and kernel in THREE_KERNELS
    numerics = "".join(["-tf32" if tf32 else "", "-lowstates" if low_states else ""])
    return f"{gpu} | {kernel} | {shape.tag()}{numerics}"


# ------------------------------------------------------------------------------ the cache

class CacheWarning(UserWarning):
    """The autotune cache file could not be read or written; tuning goes on without it."""


LOCK_TIMEOUT_S = 60.0
"""How long a save waits for another process's save to finish before giving up (and warning)."""


def _lock(path):
    # The lock is a file of its own beside the cache: the cache file itself is replaced on every
    # save, so a lock held on it would lock a file that is no longer there.
    return FileLock(path.with_name(path.name + ".lock"), timeout=LOCK_TIMEOUT_S)


def _read_object(path):
    """The JSON object stored at ``path`` ({} when there is no file); ``ValueError`` naming the
    file, with why, when it cannot be read as one."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as error:       # a directory, no permission, binary
        raise ValueError(f"cannot read {path}: {error}") from error
    try:
        stored = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not JSON ({error})") from error
    if not isinstance(stored, dict):
        raise ValueError(f"{path} holds a JSON {type(stored).__name__}, not an object of entries")
    return stored


def entry_problem(key, entry):
    """Why ``entry`` stored under ``key`` cannot be used (a string), or ``None`` if it can."""
    parts = key.split(" | ")
    if len(parts) != 3 or parts[1] not in OPTION_TYPES:
        return f"key {key!r} is not 'GPU | kernel | shape' with a kernel of {', '.join(KERNELS)}"
    if not isinstance(entry, dict) or not isinstance(entry.get("options"), dict):
        return f"entry {key!r} has no 'options' object"
    if not isinstance(entry.get("transposed_layout"), bool):
        return f"entry {key!r} has no true/false 'transposed_layout'"
    try:
        OPTION_TYPES[parts[1]].from_dict(entry["options"])
    except (TypeError, ValueError) as error:
        return f"entry {key!r}: {error}"
    return None


def load_cache(path=None):
    """The usable entries of the cache file, ``{key: entry}``.

    Never raises on a bad file: a missing file is an empty cache, and a file that cannot be read
    (a directory, binary data, JSON that is not an object) is treated as empty, and entries that
    do not describe options of this version (an unknown option, a malformed entry) are left out,
    each with one :class:`CacheWarning` naming the file: the cost is tuning again, not a crash.
    """
    path = Path(path or cache_path())
    try:
        stored = _read_object(path)
    except ValueError as error:
        warnings.warn(f"ignoring the autotune cache: {error}", CacheWarning, stacklevel=2)
        return {}
    problems = {key: entry_problem(key, entry) for key, entry in stored.items()}
    bad = [problem for problem in problems.values() if problem is not None]
    if bad:
        warnings.warn(f"ignoring {len(bad)} of {len(stored)} entries of the autotune cache "
                      f"{path}: {'; '.join(bad[:3])}{'; ...' if len(bad) > 3 else ''}",
                      CacheWarning, stacklevel=2)
    return {key: entry for key, entry in stored.items() if problems[key] is None}


def save_cache(entries, path=None):
    """Merge ``entries`` into the cache file, safely against other processes saving at once.

    Under a lock file (``autotune.json.lock``), the file is read again and ``entries`` added to
    what it holds (another process may have added shapes meanwhile; entries this version cannot
    use are kept for the version that wrote them), written to a temporary file of a unique name
    in the same directory, then moved over the old one: a reader never sees half a file. A file
    that is not a JSON object is replaced. Raises ``OSError`` when the directory cannot be
    written (:func:`tuned_options` turns that into a :class:`CacheWarning`).
    """
    path = Path(path or cache_path())
    path.parent.mkdir(parents=True, exist_ok=True)
    with _lock(path):
        try:
            merged = {**_read_object(path), **entries}
        except ValueError:
            merged = dict(entries)
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp",
                                             dir=path.parent)
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as file:
                file.write(json.dumps(merged, indent=1, sort_keys=True) + "\n")
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise


def options_from_entries(entries, base=DEFAULT_OPTIONS):
    """The :class:`ForwardOptions` the cached entries describe (tf32 etc. from ``base``): the
    fused path's one entry, or the three kernels' three."""
    chosen = {}
    for kernel, entry in entries.items():
        options = OPTION_TYPES[kernel].from_dict(entry["options"])
        if "tf32" in options.names():
            options = replace(options, tf32=getattr(base, kernel).tf32)
        chosen[kernel] = options
    if "fused_state_out" in entries:
        return replace(base, **chosen, fuse_state_passing=True)
    return replace(base, **chosen, fuse_state_passing=False,
                   transposed_layout=entries["fwd_pass_state"]["transposed_layout"])


# ------------------------------------------------------------------------------ search spaces

def tile_space(kernel, x, B):
    """Stage 1: tile sizes x occupancy, as the kernel's options type (switches off)."""
    headdim, dstate, nheads = x.shape[3], B.shape[3], x.shape[2]
    p_max, n_max = next_power_of_2(headdim), next_power_of_2(dstate)
    if kernel == "chunk_cumsum":
        return [ChunkCumsumOptions(block_h=h) for h in sorted({min(h, next_power_of_2(nheads))
                                                               for h in (8, 16)})]
    if kernel == "fused_state_out":
        # Smaller headdim / row tiles measured slower on the H200 (data/h200_probe.txt): only
        # occupancy and worker warps are searched, with the launcher's tiles. 8 warps take the
        # bfloat16 dstate-128 kernel's spills on sm_90 from 24-56 bytes a thread to 0-8, at one
        # block an SM or two (data/cpu_fused_float32_tiles.txt): untimed, hence searched.
        return [FusedStateOutOptions(occupancy=o, worker_warps=w)
                for o in FUSED_OCCUPANCIES for w in WORKER_WARPS]
    if kernel == "fwd_pass_state":
        tiles = sorted({(min(p, p_max), min(n, n_max)) for p, n in ((64, 64), (32, 64))})
        return [FwdPassStateOptions(block_p=p, block_n=n, occupancy=o)
                for p, n in tiles for o in OCCUPANCIES]
    return [ComputeOutOptions(block_m=m, block_p=p, occupancy=o)
            for m, p in sorted({(m, min(p, p_max)) for m in (32, 64) for p in (64,)})
            for o in OCCUPANCIES]


def switch_space(best):
    """Stage 2: latency hint (x operand swap, for a kernel that has it) around the best tiles
    (searched once per layout on the three-kernel path)."""
    swaps = (False, True) if "swap_operands" in best.names() else (None,)
    return [replace(best, latency=latency, **({} if swapped is None else
                                              {"swap_operands": swapped}))
            for latency in (None, LATENCY_HINT) for swapped in swaps]


# ------------------------------------------------------------------------------ tuning

def _exhaustive_search(space, plan):
    """``cuda.tile.tune.exhaustive_search`` over ``space``, ``plan(config)`` giving the launch."""
    import cuda.tile.tune

    return cuda.tile.tune.exhaustive_search(
        space, torch.cuda.current_stream(),
        grid_fn=lambda config: plan(config).grid,
        kernel=lambda config: plan(config).kernel,
        args_fn=lambda config: plan(config).args,
        quiet=True,
    )


def _memoised(make):
    """One launch per configuration: the search calls grid, kernel and args many times."""
    plans = {}

    def plan(config):
        if config not in plans:
            plans[config] = make(config)
        return plans[config]
    return plan


def tune(x, dt, A, B, C, chunk_size, base=DEFAULT_OPTIONS, search=_exhaustive_search):
    """Tune the kernels of ``base``'s path on these inputs; returns ``{kernel: entry}``.

    ``search(space, plan)`` returns an object with ``.best.config`` and ``.best.mean_us``
    (cuTile's ``TuningResult``); tests inject a fake one.
    """
    base = plan_for(x, B, chunk_size, base)
    dA_cumsum, dt_c = chunk_cumsum(dt, A, chunk_size)
    if base.fuse_state_passing:
        tf32 = base.fused_state_out.tf32
        # Timed as the API runs it: over the planned segments, from their entering states, and
        # reading C Bᵀ precomputed where the kernel does (dstate 256).
        segment_chunks, entering, scores = base.segment_chunks, None, None
        if segment_chunks is not None and segment_chunks >= dA_cumsum.shape[2]:
            segment_chunks = None                           # one segment: the plain kernel
        if segment_chunks is not None:
            entering = segment_pass(*segment_states(x, B, dt_c, dA_cumsum, segment_chunks,
                                                    base.fused_state_out))
        if scores_given(B.shape[3]):
            scores = chunk_scores(B, C, fused_block_m(chunk_size), tf32)

        def make(options):
            return fused_state_out_launch(x, dt_c, dA_cumsum, B, C, entering,
                                          options=replace(options, tf32=tf32), scores=scores,
                                          segment_chunks=segment_chunks)[0]
        tiles = search(tile_space("fused_state_out", x, B), _memoised(make)).best.config
        best = search(switch_space(tiles), _memoised(make)).best
        return {"fused_state_out": dict(options=asdict(best.config), transposed_layout=False,
                                        mean_us=best.mean_us)}
    entries = {}

    def tile_stage(kernel, make):
        result = search(tile_space(kernel, x, B), _memoised(lambda options: make(options, False)))
        return result.best

    cumsum = tile_stage("chunk_cumsum", lambda options, _: chunk_cumsum_launch(
        dt, A, chunk_size, options=options)[0])
    entries["chunk_cumsum"] = dict(options=asdict(cumsum.config), transposed_layout=False,
                                   mean_us=cumsum.mean_us)

    # compute_out reads chunk_states in the layout (and dtype) stage 2 writes: one per layout.
    states = {layout: fwd_pass_state(x, B, dt_c, dA_cumsum, transposed_layout=layout,
                                     low_precision_states=base.low_precision_states)[0]
              for layout in (False, True)}
    makers = {
        "fwd_pass_state": lambda options, layout: fwd_pass_state_launch(
            x, B, dt_c, dA_cumsum, None, replace(options, tf32=base.fwd_pass_state.tf32),
            layout, base.low_precision_states)[0],
        "compute_out": lambda options, layout: compute_out_launch(
            x, dt_c, dA_cumsum, B, C, states[layout],
            options=replace(options, tf32=base.compute_out.tf32), transposed_layout=layout)[0],
    }
    by_layout = {}
    for kernel, make in makers.items():
        tiles = tile_stage(kernel, make).config
        for layout in (False, True):
            by_layout[kernel, layout] = search(
                switch_space(tiles),
                _memoised(lambda options, layout=layout: make(options, layout))).best
    layout = min((False, True), key=lambda lay: sum(by_layout[k, lay].mean_us for k in makers))
    for kernel in makers:
        best = by_layout[kernel, layout]
        entries[kernel] = dict(options=asdict(best.config), transposed_layout=layout,
                               mean_us=best.mean_us)
    return entries


# In-process memory of the file, so a tuned shape costs one dict lookup per call.
_memory = {}


def tuned_options(x, dt, A, B, C, chunk_size, base=DEFAULT_OPTIONS, search=None):
    """The cached choice for (GPU, kernel, shape class), tuning first if there is none, on the
    path and with the numerics of ``base`` as :func:`mamba2_tile.kernels.plan.plan_for` plans
    it (the API passes options it has planned already; planning again changes nothing)."""
    base = plan_for(x, B, chunk_size, base)
    gpu = torch.cuda.get_device_name(x.device)
    shape = shape_class(x, B, chunk_size)
    kernels = FUSED if base.fuse_state_passing else THREE_KERNELS
    keys = {kernel: cache_key(gpu, kernel, shape, base) for kernel in kernels}
    if not all(key in _memory for key in keys.values()):
        _memory.update(load_cache())
    if not all(key in _memory for key in keys.values()):
        entries = tune(x, dt, A, B, C, chunk_size, base, search or _exhaustive_search)
        tuned = {keys[kernel]: entry for kernel, entry in entries.items()}
        _memory.update(tuned)
        try:
            save_cache(tuned)
        except OSError as error:      # a read-only home, a full disk: keep going, untuned later
            warnings.warn(f"could not save the autotune cache {cache_path()} ({error}); the "
                          "tuned options are kept for this process only", CacheWarning,
                          stacklevel=2)
    return options_from_entries({kernel: _memory[key] for kernel, key in keys.items()}, base)


def clear_memory():
    """Forget what this process has read from the cache file (tests; after deleting it)."""
    _memory.clear()


__all__ = ["enabled", "cache_path", "ShapeClass", "shape_class", "cache_key",
           "CacheWarning", "entry_problem", "load_cache",
           "save_cache", "options_from_entries", "tile_space", "switch_space", "tune",
           "tuned_options", "clear_memory"]
