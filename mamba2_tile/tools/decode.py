"""The decode step on a GPU: this package's ``selective_state_update`` against mamba_ssm's Triton.

    python -m mamba2_tile.tools.decode                   # writes data/h200_decode.{json,csv}
    python -m mamba2_tile.tools.decode --batch 16 64 --state-dtype float32 --no-save
    python -m mamba2_tile.tools.decode --block-p auto 4 8 16 32 --name h200_decode_tiles

One token through one Mamba-2 layer, for every batch size (default 1 ... 256) and every state
dtype (default float32 and bfloat16: mamba_ssm keeps the cached state in float32 or in the model
dtype), at a 2.7B-like layer (80 heads of 64 channels, dstate 128, one group). The arguments are
the ones ``mamba_ssm``'s ``Mamba2.step`` passes: ``x``, ``z``, ``B``, ``C`` and ``dt`` in the
input dtype (bfloat16), ``dt`` (batch, nheads) and the float32 parameters ``dt_bias``, ``A``,
``D`` (one number per head) broadcast over ``headdim`` / ``dstate`` as stride-0 views,
``dt_softplus=True``.

Each row: the median time of this package's call and of mamba_ssm's
(``mamba_ssm.ops.triton.selective_state_update``, "not installed" when it does not import), the
speed-up (theirs over ours), the fraction of the copy bandwidth each reaches on the minimal bytes
(:func:`minimal_bytes`: the state read and written once, the per-token inputs read and ``y``
written once), and each one's error against the float64 reference
(:func:`mamba2_tile.reference_decode.selective_state_update`) on ``y`` and on the new state.
``--block-p`` lists the tiles of this package's kernel to time (rows of the state per block,
:func:`mamba2_tile.kernels.selective_state_update.decode_block_p`; ``auto``, the default, is
that rule): one row per tile, mamba_ssm timed once per batch and state dtype and repeated in
each, so one run compares the tiles. ``block_p`` in a row is the tile that ran.
Timing and the copy rate are the benchmark's (:mod:`mamba2_tile.tools.bench.measurement`):
CUDA-graph replays with the L2 flushed before each, the copy measured in the same run. The
state is updated in place by every replay, as in generation.
"""

import argparse
import datetime
import sys

import numpy as np
import torch
from tabulate import tabulate

from mamba2_tile import reference_decode
from mamba2_tile.decode import selective_state_update
from mamba2_tile.kernels.plan import device_sm_count
from mamba2_tile.kernels.selective_state_update import decode_block_p
from mamba2_tile.tools import arguments
from mamba2_tile.tools.bench import measurement, reporting
from mamba2_tile.tools.results import DATA_DIR

DEFAULT_NAME = "h200_decode"
DEFAULT_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
STATE_DTYPES = ("float32", "bfloat16")
INPUT_DTYPES = ("bfloat16", "float16", "float32")
# Mamba-2 2.7B: d_model 2560, expand 2 -> d_inner 5120 = 80 heads x 64; d_state 128, ngroups 1.
LAYER = dict(nheads=80, headdim=64, dstate=128, ngroups=1)
NOT_INSTALLED = "not installed"
AUTO = "auto"
# The per-head parameters dt_bias, A and D are float32 in Mamba2 (its A_log, D, dt_bias).
PARAMETER_BYTES = 4


def _bytes(dtype):
    return torch.empty((), dtype=getattr(torch, dtype)).element_size()


def minimal_bytes(batch, nheads, headdim, dstate, ngroups, state_dtype, dtype):
    """What a decode step must move at least: the state read and written once; ``x``, ``z`` read
    and ``y`` written; ``B``, ``C`` read per group, ``dt`` per head; ``dt_bias``, ``A``, ``D``
    one float32 per head (the stride-0 broadcasts Mamba2 passes)."""
    state = 2 * batch * nheads * headdim * dstate * _bytes(state_dtype)
    per_token = (3 * batch * nheads * headdim + 2 * batch * ngroups * dstate
                 + batch * nheads) * _bytes(dtype)
    return state + per_token + 3 * nheads * PARAMETER_BYTES


def decode_inputs(batch, nheads, headdim, dstate, ngroups, state_dtype, dtype="bfloat16",
                  device="cuda", seed=0):
    """The arguments of one decode step as ``Mamba2.step`` builds them (module doc); ``dt``
    around a trained layer's softplus input, ``A`` in (-16, -1) as the benchmark's inputs."""
    gen = torch.Generator(device=device).manual_seed(seed)
    low = getattr(torch, dtype)

    def randn(*size, to=low):
        return torch.randn(*size, device=device, generator=gen).to(to)

    def uniform(lo, hi, size):
        return lo + (hi - lo) * torch.rand(size, device=device, generator=gen)

    return dict(
        state=randn(batch, nheads, headdim, dstate, to=getattr(torch, state_dtype)),
        x=randn(batch, nheads, headdim),
        dt=uniform(-4.0, 0.0, (batch, nheads)).to(low)[..., None].expand(-1, -1, headdim),
        A=(-torch.exp(uniform(0.0, np.log(16.0), (nheads,))))[:, None, None].expand(
            -1, headdim, dstate),
        B=randn(batch, ngroups, dstate),
        C=randn(batch, ngroups, dstate),
        D=randn(nheads, to=torch.float32)[:, None].expand(-1, headdim),
        z=randn(batch, nheads, headdim),
        dt_bias=uniform(-2.0, 0.0, (nheads,))[:, None].expand(-1, headdim),
    )


def load_mamba_ssm():
    """``(mamba_ssm's selective_state_update, None)``, or ``(None, why)`` where it does not
    import."""
    try:
        from mamba_ssm.ops.triton.selective_state_update import selective_state_update as theirs
    except Exception as error:                       # noqa: BLE001 - any import failure counts
        return None, f"{type(error).__name__}: {error}"
    return theirs, None


def block_p_option(text):
    """``--block-p``: ``auto`` (the kernel's rule) or a power of two >= 1."""
    if text == AUTO:
        return AUTO
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1 or value & (value - 1):
        raise argparse.ArgumentTypeError(f"expected {AUTO!r} or a power of two >= 1, got {text!r}")
    return value


def planned_rows(args):
    """``[(state_dtype, batch), ...]`` in the order they are measured; each gives one row per
    ``--block-p`` tile."""
    return [(state_dtype, batch) for state_dtype in args.state_dtype for batch in args.batch]


def _reference(inputs):
    numpy = {name: value.detach().cpu().double().numpy() for name, value in inputs.items()}
    y, state = reference_decode.selective_state_update(**numpy, dt_softplus=True)
    return torch.from_numpy(y), torch.from_numpy(state)


def _call(fn, inputs, state, **options):
    return lambda: fn(state, inputs["x"], inputs["dt"], inputs["A"], inputs["B"], inputs["C"],
                      D=inputs["D"], z=inputs["z"], dt_bias=inputs["dt_bias"], dt_softplus=True,
                      **options)


def _measure(fn, name, inputs, y_ref, state_ref, reps, flush_buffer, nbytes, copy_rate,
             **options):
    """``<name>_ms``, its copy fraction and its errors on ``y`` and the new state."""
    state = inputs["state"].clone()              # one step from the same state, for the errors
    y = _call(fn, inputs, state, **options)()
    fields = {f"{name}_rel_err": measurement.errors(y.cpu(), y_ref)[0],
              f"{name}_state_rel_err": measurement.errors(state.cpu(), state_ref)[0]}
    ms = measurement.median_ms(_call(fn, inputs, state, **options), reps, flush_buffer)
    fields[f"{name}_ms"] = ms
    fields[f"{name}_copy_fraction"] = nbytes / (ms * 1e-3) / copy_rate
    return fields


def measure_rows(args, state_dtype, batch, block_ps, reps, flush_buffer, copy_rate, theirs):
    """The rows of one batch size and state dtype, one per tile in ``block_ps`` (ints or
    ``"auto"``): this package's time, errors and bandwidth with that tile, and mamba_ssm's
    (with ``theirs``), measured once and repeated in each row. The inputs and the float64
    reference are made once. A failure of mamba_ssm's call is stored in ``mamba_ssm_error``
    and the run goes on."""
    layer = dict(nheads=args.nheads, headdim=args.headdim, dstate=args.dstate,
                 ngroups=args.ngroups)
    inputs = decode_inputs(batch, **layer, state_dtype=state_dtype, dtype=args.dtype)
    y_ref, state_ref = _reference(inputs)
    nbytes = minimal_bytes(batch, **layer, state_dtype=state_dtype, dtype=args.dtype)
    auto = decode_block_p(batch, args.nheads, args.headdim, args.dstate,
                          inputs["state"].element_size(), device_sm_count(inputs["x"].device))
    rows, mamba_ssm = [], {"mamba_ssm_ms": None}
    for block_p in block_ps:
        tile = auto if block_p == AUTO else block_p
        row = dict(batch=batch, **layer, state_dtype=state_dtype, dtype=args.dtype,
                   minimal_bytes=nbytes, copy_gbps=copy_rate / 1e9, block_p=tile,
                   block_p_option=block_p)
        row.update(_measure(selective_state_update, "mamba2_tile", inputs, y_ref, state_ref,
                            reps, flush_buffer, nbytes, copy_rate, block_p=tile))
        if theirs is not None and not rows:
            try:
                mamba_ssm = _measure(theirs, "mamba_ssm", inputs, y_ref, state_ref, reps,
                                     flush_buffer, nbytes, copy_rate)
            except Exception as error:               # noqa: BLE001 - recorded, not hidden
                mamba_ssm["mamba_ssm_error"] = f"{type(error).__name__}: {str(error)[:300]}"
        row.update(mamba_ssm)
        if row["mamba_ssm_ms"] is not None:
            row["speedup"] = row["mamba_ssm_ms"] / row["mamba2_tile_ms"]
        rows.append(row)
    del inputs
    torch.cuda.empty_cache()
    return rows


def measure_row(args, state_dtype, batch, reps, flush_buffer, copy_rate, theirs, block_p=AUTO):
    """:func:`measure_rows` for one tile."""
    return measure_rows(args, state_dtype, batch, [block_p], reps, flush_buffer, copy_rate,
                        theirs)[0]


# (header, row field, format)
COLUMNS = [
    ("state", "state_dtype", "{}"), ("batch", "batch", "{}"), ("block_p", "block_p", "{}"),
    ("ms", "mamba2_tile_ms", "{:.4f}"),
    ("mamba_ssm", "mamba_ssm_ms", "{:.4f}"), ("xTriton", "speedup", "{:.2f}"),
    ("%copy", "mamba2_tile_copy_fraction", "{:.0%}"),
    ("ssm_%copy", "mamba_ssm_copy_fraction", "{:.0%}"),
    ("y_err", "mamba2_tile_rel_err", "{:.1e}"), ("ssm_y_err", "mamba_ssm_rel_err", "{:.1e}"),
    ("state_err", "mamba2_tile_state_rel_err", "{:.1e}"),
    ("ssm_state_err", "mamba_ssm_state_rel_err", "{:.1e}"),
]


def format_table(rows, mamba_ssm_missing=False):
    """The rows as text; mamba_ssm's columns say "not installed" where it did not import,
    "failed" where its call raised (``mamba_ssm_error``) and ``-`` where a value is absent
    otherwise. ``block_p`` says ``(auto)`` where the kernel's rule chose it. Errors are
    relative (``‖out − ref‖ / ‖ref‖``)."""
    def cell(row, key, fmt):
        value = row.get(key)
        if key == "block_p" and value is not None and row.get("block_p_option") == AUTO:
            return f"{value} ({AUTO})"
        if value is not None:
            return fmt.format(value)
        if "mamba_ssm" in key or key == "speedup":
            if mamba_ssm_missing:
                return NOT_INSTALLED
            if row.get("mamba_ssm_error"):
                return "failed"
        return "-"
    body = [[cell(row, key, fmt) for _, key, fmt in COLUMNS] for row in rows]
    return tabulate(body, headers=[header for header, _, _ in COLUMNS], disable_numparse=True,
                    colalign=("left", *["right"] * (len(COLUMNS) - 1)))


def parse_args(argv=None):
    """The options, checked before anything runs (exit status 2 on a bad one)."""
    parser = argparse.ArgumentParser(prog="python -m mamba2_tile.tools.decode",
                                     description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--batch", nargs="+", type=arguments.positive_int,
                        default=list(DEFAULT_BATCHES), help="batch sizes (tokens in flight)")
    parser.add_argument("--state-dtype", nargs="+", choices=STATE_DTYPES,
                        default=list(STATE_DTYPES), help="dtypes of the cached state")
    parser.add_argument("--block-p", nargs="+", type=block_p_option, default=[AUTO],
                        help="tiles of this package's kernel to time, rows of the state per "
                             f"block: {AUTO!r} (the kernel's rule) or powers of two")
    parser.add_argument("--dtype", choices=INPUT_DTYPES, default="bfloat16",
                        help="dtype of x, z, B, C, dt (the model's)")
    for name, value in LAYER.items():
        parser.add_argument(f"--{name}", type=arguments.positive_int, default=value,
                            help=f"the layer's {name} (default {value})")
    parser.add_argument("--reps", type=arguments.positive_int, default=100,
                        help="timed replays per measurement")
    parser.add_argument("--name", type=arguments.file_stem,
                        help=f"output file stem under data/ (default {DEFAULT_NAME})")
    parser.add_argument("--no-save", action="store_true", help="print only, write no files")
    args = parser.parse_args(argv)
    arguments.refuse_repeats(parser, args, "batch", "state_dtype", "block_p")
    arguments.refuse_unused(parser, {"--name": args.name}, args.no_save,
                            "with --no-save, which writes no file")
    if args.nheads % args.ngroups:
        parser.error(f"argument --ngroups: nheads ({args.nheads}) must be a multiple of "
                     f"ngroups ({args.ngroups})")
    return args


def main(argv=None, data_dir=DATA_DIR):
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("No CUDA GPU found: this measurement times GPU kernels and needs one. "
              "Stored H200 results are in data/h200_decode.json.")
        return 0
    theirs, missing = load_mamba_ssm()
    if theirs is None:
        print(f"mamba_ssm is not importable ({missing}); its columns say {NOT_INSTALLED!r}.")
    flush_buffer = measurement.l2_flush_buffer()
    copy_rates = measurement.copy_bandwidth(flush_buffer, args.reps)
    copy_rate = measurement.copy_reference(copy_rates)
    device = torch.cuda.get_device_name()
    command = argv if argv is not None else sys.argv[1:]
    meta = {"device": device, "date": datetime.date.today().isoformat(),
            "versions": measurement.versions(), "copy_gbps": copy_rate / 1e9,
            "copy_gbps_by_method": {k: v / 1e9 for k, v in copy_rates.items()},
            "reps": args.reps, "mamba_ssm_missing": missing,
            "command": " ".join(["python -m mamba2_tile.tools.decode", *command])}
    stem = data_dir / (args.name or DEFAULT_NAME)
    rows = []
    for state_dtype, batch in planned_rows(args):
        rows += measure_rows(args, state_dtype, batch, args.block_p, args.reps, flush_buffer,
                             copy_rate, theirs)
        if not args.no_save:          # after every batch, so an interrupted run keeps its rows
            reporting.save(stem, meta, rows)
    print(f"\n{device}; device-to-device copy {copy_rate / 1e9:.0f} GB/s; times in ms "
          f"(median of {args.reps} CUDA-graph replays, L2 flushed); nheads {args.nheads}, "
          f"headdim {args.headdim}, dstate {args.dstate}, ngroups {args.ngroups}, "
          f"inputs {args.dtype}")
    print(format_table(rows, mamba_ssm_missing=theirs is None))
    for row in rows:
        if row.get("mamba_ssm_error"):
            print(f"mamba_ssm failed at {row['state_dtype']} state, batch {row['batch']}: "
                  f"{row['mamba_ssm_error']}")
    if not args.no_save:
        print(f"wrote {stem.with_suffix('.json')} and .csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
