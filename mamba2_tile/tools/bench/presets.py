"""What the benchmark measures: its presets (sets of problems) and the ablation ladder.

A preset is data: either a grid, ``{axis: values}`` (every combination; the command line can
replace any axis, and each combination must be one the kernels run), or a list of
:class:`Problem` (measured as listed; the command line can select some of them by value).
Adding a preset is adding one entry to :data:`PRESETS`.
"""

import itertools

from mamba2_tile.autotune import LATENCY_HINT
from mamba2_tile.problem import Problem

# Correctness against float64 and mamba_ssm over varied shapes (odd seqlen included), each in
# bf16 and fp32: (batch, seqlen, nheads, headdim, dstate, ngroups, chunk_size).
_ACCURACY_SHAPES = [
    (1, 256, 8, 64, 64, 1, 64), (8, 2048, 64, 64, 128, 1, 64), (2, 1000, 16, 64, 64, 8, 64),
    (1, 16384, 8, 64, 128, 1, 64), (4, 4096, 32, 64, 128, 8, 128), (8, 2048, 64, 64, 64, 8, 128),
    (1, 256, 8, 64, 128, 8, 64), (2, 16384, 64, 64, 64, 8, 256),
]

PRESETS = {
    # The sweep the performance targets are stated on (batch 8, 64 heads, headdim 64).
    "default": dict(batch=[8], seqlen=[1024, 4096, 16384], nheads=[64], headdim=[64],
                    dstate=[64, 128], ngroups=[1, 8], chunk_size=[64, 128], dtype=["bfloat16"]),
    "quick": dict(batch=[2], seqlen=[1024], nheads=[8], headdim=[64], dstate=[64],
                  ngroups=[1], chunk_size=[64], dtype=["bfloat16"]),
    "accuracy": [Problem(*dims, dtype) for dims, dtype
                 in itertools.product(_ACCURACY_SHAPES, ["bfloat16", "float32"])],
    # The targets' batch / heads / headdim at dstate 128, chunk 64 with one group and chunk 128
    # with eight, and float32 (where TF32 is the step that matters). Three, so the whole ladder
    # (two autotune steps each) fits in a few minutes of GPU time.
    "ablation": [Problem(8, 4096, 64, 64, 128, 1, 64, "bfloat16"),
                 Problem(8, 4096, 64, 64, 128, 8, 128, "bfloat16"),
                 Problem(8, 2048, 64, 64, 128, 1, 64, "float32")],
}

# Issue 12's model shapes, as it lists them (bfloat16 unless said). float32 problems are
# measured twice, exact and with TF32 (:func:`.measurement.measure_models`).
_MODEL_SHAPES = [
    *[(8, seqlen, 64, 64, 128, 1, chunk, "bfloat16")
      for seqlen in (2048, 8192, 16384) for chunk in (64, 128, 256)],
    *[(8, 8192, 64, 64, 64, 1, chunk, "bfloat16") for chunk in (64, 256)],
    *[(8, seqlen, 64, 64, 256, 1, chunk, "bfloat16") for seqlen in (2048, 8192)
      for chunk in (64, 256)],
    (8, 8192, 64, 64, 128, 8, 256, "bfloat16"),
    (4, 8192, 32, 128, 128, 1, 256, "bfloat16"),
    (8, 8192, 64, 64, 128, 8, 256, "float16"),
    # Batch-1 prefill of 130M, 780M and 2.7B-size layers (24, 48, 80 heads).
    *[(1, seqlen, nheads, 64, 128, 1, 256, "bfloat16") for nheads in (24, 48, 80)
      for seqlen in (8192, 32768, 131072)],
    (8, 8192, 64, 64, 128, 1, 256, "float32"),
]
PRESETS["models"] = [Problem(*dims) for dims in _MODEL_SHAPES]

# Issue 13's training rows, forward + backward (``--backward``): the models preset's batch 8 x 64
# heads, bfloat16, dstate 64-256, chunk 64-256. Ordered so that a run cut short (``--resume``
# continues it) has measured every dstate and chunk size at 2048 tokens first.
PRESETS["training"] = [Problem(*dims) for dims in [
    *[(8, 2048, 64, 64, 128, 1, chunk, "bfloat16") for chunk in (64, 128, 256)],
    *[(8, 2048, 64, 64, 256, 1, chunk, "bfloat16") for chunk in (64, 256)],
    *[(8, 8192, 64, 64, 64, 1, chunk, "bfloat16") for chunk in (64, 256)],
    *[(8, 8192, 64, 64, 128, 1, chunk, "bfloat16") for chunk in (64, 128, 256)],
    *[(8, 8192, 64, 64, 256, 1, chunk, "bfloat16") for chunk in (64, 256)],
    *[(8, 16384, 64, 64, 128, 1, chunk, "bfloat16") for chunk in (64, 128, 256)],
]]

# Training on the other shapes people run (``--backward --preset training-shapes``), which the
# issue's rows above leave out: the models preset's headdim 128, eight groups and float16 rows,
# batch-1 prefill of a 130M- and a 2.7B-size layer (as packed sequences train), float32, and a
# last chunk cut short (seqlen not a multiple of the chunk).
PRESETS["training-shapes"] = [Problem(*dims) for dims in [
    (4, 8192, 32, 128, 128, 1, 256, "bfloat16"),
    (8, 8192, 64, 64, 128, 8, 256, "bfloat16"),
    (8, 2048, 64, 64, 128, 1, 256, "float16"),
    (1, 8192, 24, 64, 128, 1, 256, "bfloat16"),
    (1, 32768, 80, 64, 128, 1, 256, "bfloat16"),
    *[(8, 2100, 64, 64, dstate, 1, 256, "bfloat16") for dstate in (128, 256)],
    *[(8, 2048, 64, 64, 128, 1, chunk, "float32") for chunk in (64, 256)],
]]

# The ablation (``--ablation``): (step, switches added to the previous step or "autotune",
# which input dtypes the step applies to; None: all).
LADDER = [
    ("baseline", {}, None),
    ("+latency", dict(latency=LATENCY_HINT), None),
    ("+swap", dict(swap_operands=True), None),
    ("+transposed", dict(transposed_layout=True), None),
    ("+tf32", dict(tf32=True), ("float32",)),
    ("+autotune", "autotune", None),
    ("+bf16_states", dict(low_precision_states=True), ("bfloat16", "float16")),
    ("+fused", dict(fuse_state_passing=True), None),
    ("+fused_autotune", "autotune", None),
]
STEPS = tuple(name for name, _, _ in LADDER)
"""The ladder's step names in order (the course's ablation plots sort and colour by them)."""


def ladder(dtype):
    """``[(step name, switches or "autotune")]`` for one input dtype, in order."""
    return [(name, change) for name, change, dtypes in LADDER if dtypes is None or dtype in dtypes]


def grid_presets():
    """The names of the presets that take overrides (the grids), sorted."""
    return sorted(name for name, spec in PRESETS.items() if isinstance(spec, dict))


def sweep(preset, overrides):
    """The problems of a preset, a list. ``overrides`` (axis -> values; ``None`` or empty: keep
    the preset's) replace a grid preset's axes, and select among a fixed list's problems (those
    whose value on each given axis is one of the given values, in the list's order).

    Raises ``ValueError`` instead of measuring less or other than asked: a selection that keeps
    no problem, or a grid combination the kernels cannot run (``nheads`` not a multiple of
    ``ngroups``, ...), named.
    """
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {', '.join(sorted(PRESETS))}, got {preset!r}")
    spec = PRESETS[preset]
    given = {k: v for k, v in overrides.items() if v}
    if not isinstance(spec, dict):
        chosen = [problem for problem in spec
                  if all(getattr(problem, axis) in values for axis, values in given.items())]
        if not chosen:
            asked = ", ".join(f"{axis} in {values}" for axis, values in given.items())
            raise ValueError(f"no problem of preset {preset!r} has {asked}")
        return chosen
    unknown = sorted(set(given) - set(spec))
    if unknown:
        raise ValueError(f"preset {preset!r} has no axis {', '.join(unknown)}; "
                         f"its axes are {', '.join(spec)}")
    axes = {**spec, **given}
    problems = [Problem(**dict(zip(axes, values))) for values in itertools.product(*axes.values())]
    for problem in problems:
        try:
            problem.validate()
        except ValueError as error:
            origin = (f"{', '.join(given)} from the overrides, the rest from preset {preset!r}"
                      if given else f"preset {preset!r}")
            raise ValueError(f"{error} (in {problem.label()}: {origin})") from None
    return problems
