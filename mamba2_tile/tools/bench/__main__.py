"""The benchmark's command line: ``python -m mamba2_tile.tools.bench --help``."""

import argparse
import datetime
import fcntl
import os
import sys

import torch
from tqdm.auto import tqdm

from mamba2_tile.problem import KERNEL_DTYPES, Problem
from mamba2_tile.tools import arguments, bench
from mamba2_tile.tools.bench import measurement, reporting, training
from mamba2_tile.tools.bench.presets import PRESETS, grid_presets, sweep
from mamba2_tile.tools.results import DATA_DIR

AXES = ("batch", "seqlen", "nheads", "headdim", "dstate", "ngroups", "chunk_size")


def parse_args(argv=None):
    """The options, checked: bad values, overrides a preset cannot take, and options that would
    do nothing are refused (exit status 2) before anything runs, with or without a GPU."""
    parser = argparse.ArgumentParser(prog="python -m mamba2_tile.tools.bench",
                                     description=" ".join(bench.__doc__.split("\n\n")[0].split()),
                                     allow_abbrev=False)
    parser.add_argument("--preset", choices=sorted(PRESETS),
                        help="the shapes (default: 'ablation' with --ablation, 'training' with "
                             "--backward, else 'default')")
    parser.add_argument("--ablation", action="store_true",
                        help="time the optimizations one by one (see the module doc)")
    parser.add_argument("--backward", action="store_true",
                        help="time forward + backward (training) and gradient errors")
    for axis in AXES:
        parser.add_argument(f"--{axis.replace('_', '-')}", nargs="+", dest=axis,
                            type=arguments.chunk_size if axis == "chunk_size"
                            else arguments.positive_int,
                            help=f"replace the {axis} values of a grid preset "
                                 f"({', '.join(grid_presets())}); of another preset, keep the "
                                 f"shapes with one of these values")
    parser.add_argument("--dtype", nargs="+", choices=KERNEL_DTYPES,
                        help="replace the dtypes of a grid preset; of another, keep the shapes "
                             "with one of these dtypes")
    parser.add_argument("--reps", type=arguments.positive_int, default=30,
                        help="timed replays per measurement")
    parser.add_argument("--name", type=arguments.file_stem,
                        help="output file stem under data/ (default: bench_<preset>)")
    parser.add_argument("--no-save", action="store_true", help="print only, write no files")
    parser.add_argument("--resume", action="store_true",
                        help="keep the rows already in the output file; measure only the rest")
    parser.add_argument("--shard", type=arguments.shard, metavar="K/N",
                        help="measure only rows K, K+N, K+2N, ... of the preset: N processes, "
                             "one a GPU of one host (CUDA_VISIBLE_DEVICES=K), fill one output "
                             "file together, each merging its rows in as it goes; implies "
                             "--resume (delete the file to start afresh)")
    parser.add_argument("--totals-only", action="store_true",
                        help="skip the per-kernel times and the PyTorch baseline (faster)")
    args = parser.parse_args(argv)
    if args.ablation and args.backward:
        parser.error("--ablation and --backward cannot be combined: the ladder is the forward's")
    args.preset = args.preset or ("ablation" if args.ablation else
                                  "training" if args.backward else "default")
    arguments.refuse_repeats(parser, args, *AXES, "dtype")
    arguments.refuse_unused(parser, {"--totals-only": args.totals_only},
                            args.ablation or args.backward or args.preset == "models",
                            "to --ablation, --backward or --preset models, which time totals "
                            "only")
    arguments.refuse_unused(parser, {"--name": args.name}, args.no_save,
                            "with --no-save, which writes no file")
    arguments.refuse_unused(parser, {"--shard": args.shard}, args.no_save,
                            "with --no-save: the shards meet in the output file")
    try:
        args.problems = sweep(args.preset, {k: getattr(args, k) for k in (*AXES, "dtype")})
    except ValueError as error:
        parser.error(str(error))
    return args


def main(argv=None, data_dir=DATA_DIR):
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("No CUDA GPU found: this benchmark times GPU kernels and needs one. "
              "Stored H200 results are in data/ (see notebooks 08 and 09).")
        return 0
    problems = args.problems
    others, missing = measurement.load_implementations()
    for name, why in missing.items():
        print(f"{name} is not importable ({why}); its columns stay empty.")
    flush_buffer = measurement.l2_flush_buffer()
    copy_rates = measurement.copy_bandwidth(flush_buffer, args.reps)
    copy_rate = measurement.copy_reference(copy_rates)
    device = torch.cuda.get_device_name()
    command = argv if argv is not None else sys.argv[1:]
    if args.shard:
        # Every shard writes the file: its command names them all, not the last writer.
        at = next(i for i, word in enumerate(command) if word.partition("=")[0] == "--shard")
        width = 1 if "=" in command[at] else 2          # --shard=K/N or --shard K/N
        command = [*command[:at], *command[at + width:], "--shard", f"K/{args.shard[1]}"]
    meta = {"device": device, "date": datetime.date.today().isoformat(),
            "versions": measurement.versions(), "copy_gbps": copy_rate / 1e9,
            "copy_gbps_by_method": {k: v / 1e9 for k, v in copy_rates.items()}, "reps": args.reps,
            "command": " ".join(["python -m mamba2_tile.tools.bench", *command])}
    default_name = (f"bench_{args.preset}_ablation" if args.ablation and args.preset != "ablation"
                    else f"bench_{args.preset}_backward" if args.backward
                    and args.preset != "training" else f"bench_{args.preset}")
    stem = data_dir / (args.name or default_name)
    rows = reporting.previous_rows(stem) if args.resume or args.shard else []
    done = reporting.measured_problems(rows)
    if args.shard:
        index, count = args.shard
        problems = problems[index::count]
        rows = [row for row in rows if Problem.from_row(row) in problems]
    for problem in tqdm(problems, desc="bench"):
        if problem in done:
            continue
        if args.ablation:
            rows.extend(measurement.measure_ablation(problem, args.reps, flush_buffer, others))
        elif args.backward:
            rows.append(training.measure_training(problem, args.reps, flush_buffer))
        elif args.preset == "models":
            rows.extend(measurement.measure_models(problem, args.reps, flush_buffer, copy_rate,
                                                   others, missing))
        else:
            rows.append(measurement.measure(problem, args.reps, flush_buffer, copy_rate, others,
                                            stages=not args.totals_only))
        if args.shard:
            merge_into(stem, meta, rows, args.problems)
        elif not args.no_save:        # after every row, so an interrupted sweep keeps its rows
            reporting.save(stem, meta, rows)

    print(f"\n{device}; device-to-device copy {copy_rate / 1e9:.0f} GB/s; times in ms "
          f"(median of {args.reps} CUDA-graph replays, L2 flushed)")
    if args.ablation:
        print(reporting.format_ablation(rows))
        print(reporting.summary(rows))
    elif args.backward:
        print(reporting.format_training(rows))
        print(reporting.models_summary(rows))
    elif args.preset == "models":
        print(reporting.format_models(rows))
        print(reporting.models_summary(rows))
    else:
        print(reporting.format_table(rows))
        print(reporting.summary(rows))
    if not args.no_save:
        print(f"wrote {stem.with_suffix('.json')} and .csv")
    return 0


def merge_into(stem, meta, rows, order):
    """Save ``rows`` into ``<stem>``'s files beside the other shards' rows (``rows`` replace
    any of the same problem), in ``order``'s order, holding a lock on the data directory so
    shards take turns."""
    directory = os.open(stem.parent, os.O_RDONLY)
    try:
        fcntl.flock(directory, fcntl.LOCK_EX)
        ours = reporting.measured_problems(rows)
        merged = [row for row in reporting.previous_rows(stem)
                  if Problem.from_row(row) not in ours] + rows
        position = {problem: i for i, problem in enumerate(order)}
        merged.sort(key=lambda row: position.get(Problem.from_row(row), len(position)))
        reporting.save(stem, meta, merged)
    finally:
        os.close(directory)         # releases the lock


if __name__ == "__main__":
    sys.exit(main())
