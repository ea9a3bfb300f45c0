"""Benchmark the SSD forward pass on a GPU: this package against the implementations registered
in :data:`.measurement.IMPLEMENTATIONS` (mamba_ssm's Triton, flash-linear-attention, plain
PyTorch).

    python -m mamba2_tile.tools.bench                    # the default sweep, bf16
    python -m mamba2_tile.tools.bench --preset accuracy  # the correctness sweep (bf16, fp32)
    python -m mamba2_tile.tools.bench --seqlen 4096 --dstate 128 --chunk-size 64 --ngroups 1
    python -m mamba2_tile.tools.bench --ablation         # the optimizations one by one (see below)
    python -m mamba2_tile.tools.bench --preset models --name h200_models   # issue 12's shapes
    python -m mamba2_tile.tools.bench --backward --name h200_backward      # training
    python -m mamba2_tile.tools.bench --backward --preset training-shapes  # training, other shapes
    python -m mamba2_tile.tools.bench --preset models --dtype float32     # some of a preset's shapes

For every shape it prints one row: per-kernel and total time of this package, mamba_ssm's
``mamba_chunk_scan_combined`` (when importable) and the PyTorch baseline
(:mod:`mamba2_tile.torch_reference`, float32); the speed-ups, measured side by side in this run;
the achieved bandwidth on the minimal bytes (read x, dt, B, C once, write y once) and as a
fraction of a device-to-device copy measured in the same run (the faster of a memcpy and a copy
kernel, see :func:`.measurement.copy_bandwidth`); and the error of each
implementation against a float64 reference.

Timing: each implementation is captured in a CUDA graph after warm-up (so Python launch overhead
is not measured), then replayed ``--reps`` times with the L2 cache flushed before each replay;
the median is reported. Results go to ``data/<name>.csv`` and ``.json`` with the GPU, driver,
CUDA, torch, cuda-tile, tileiras and Triton versions and the date.

Ablation (``--ablation``, preset ``ablation`` unless ``--preset`` is given): for every shape,
one row per step of the ladder in :data:`.presets.LADDER`, each step adding one optimization to
the previous (baseline = the three kernels with every switch off, +latency hints, +operand swap,
+transposed layout, +tf32 for float32 inputs, +autotune, then beyond: +low-precision states for
16-bit inputs, +fused (stages 2 and 3 in one kernel), +fused_autotune), each with its time, its
speed-up over the baseline and over mamba_ssm, and its error against float64. The autotune
steps tune the shape (or read ``mamba2_tile.autotune``'s cache) whatever
``MAMBA2_TILE_AUTOTUNE`` says, and record how long that took (``autotune_s``) and how long
reading the choice back from the cache file then takes (``autotune_cached_s``).

Models (``--preset models``, issue 12): the shapes models run (batch 8 x 64 heads at dstate
64-256, chunk 64-256; batch-1 prefill of 130M / 780M / 2.7B-size layers up to 128k tokens;
float16; float32 exact and with TF32), each timed side by side for this package, mamba_ssm and
flash-linear-attention (``fla-core``'s ``chunk_simple_gla``: Mamba-2's SSD as simple GLA). One
row per problem (two for float32): ``ms`` and ``error`` per implementation, ``copy_fraction``,
``eager_ms`` (this package called eagerly, Python included), ``vs_best_peer`` and the planned
``path`` (:func:`.measurement.measure_models`).

Training (``--backward``, preset ``training`` unless ``--preset`` is given): forward + backward
of this package, mamba_ssm and flash-linear-attention side by side, with each step's peak memory
and each gradient's error against float64 (:mod:`.training`).

The axis options (``--seqlen``, ``--dtype``, ...) replace the values of a grid preset's axes; on a
preset that is a list of problems they select the problems with those values, in its order.

``--resume`` keeps the rows already in the output file and measures only the missing shapes, so a
sweep cut short (a time limit) continues where it stopped.

The package, one concern per module: :mod:`.presets` (what is measured: the problems of each
preset, the ablation ladder), :mod:`.measurement` (inputs, timing, copy bandwidth, errors, the
implementations compared), :mod:`.training` (forward + backward), :mod:`.reporting` (the rows
stored as CSV/JSON, resumed, printed as tables) and ``__main__`` (the command line).
"""
