"""What packing sequences costs, measured on a GPU: the same tokens as a batch and as one row.

    python -m mamba2_tile.tools.packing                  # writes data/h200_packing.json
    python -m mamba2_tile.tools.packing --nheads 24 --sequences 4 --seqlen 2048 --no-save

For each shape it times ``mamba_chunk_scan_combined`` on ``sequences x seqlen`` tokens laid out
five ways (same values, same heads and sizes):

* ``batch``: ``sequences`` rows of ``seqlen`` tokens, no ``seq_idx`` (the unpacked baseline);
* ``one_row``: the tokens in one row, no ``seq_idx`` (one long sequence: the path a packed row
  takes, without its masks);
* ``packed_equal``: one row, ``seq_idx`` marking ``sequences`` sequences of ``seqlen`` tokens;
* ``packed_mixed``: one row, sequences of random lengths from 1 to ``2 * seqlen`` (the same total);
* ``packed_varlen``: ``packed_mixed`` with ``cu_seqlens`` and ``return_varlen_states``.

``packed_equal`` against ``one_row`` is the masks' cost; against ``batch``, packing's whole cost
(the batch runs one block per sequence and head, the row the sequence-parallel path when that
leaves SMs idle). mamba_ssm is timed on ``batch`` and ``packed_mixed`` when it imports.
Kernel times are medians of CUDA-graph replays with the L2 flushed before each
(:func:`mamba2_tile.tools.bench.measurement.median_ms`); a graph skips the host's check of the
``seq_idx`` / ``cu_seqlens`` values (a synchronisation), which ``check_ms`` times on its own:
the median of eager calls of that check.
"""

import argparse
import datetime
import json
import sys
import time

import numpy as np
import torch
from tabulate import tabulate

from mamba2_tile import api
from mamba2_tile.problem import Problem
from mamba2_tile.tools.bench import measurement
from mamba2_tile.tools.results import DATA_DIR

LAYOUTS = ("batch", "one_row", "packed_equal", "packed_mixed", "packed_varlen")
DEFAULT_NAME = "h200_packing"
# (nheads, headdim, dstate, chunk_size, sequences, seqlen): Mamba-2 layer sizes, from a 370M
# model's 32 heads to a 2.7B's 80, training-like packs of 2k-token and 8k-token documents.
DEFAULT_SHAPES = (
    (32, 64, 128, 256, 8, 2048),
    (80, 64, 128, 256, 8, 2048),
    (80, 64, 128, 256, 4, 8192),
    (24, 64, 128, 256, 16, 1024),
)


def mixed_lengths(total, mean, seed=0):
    """Random sequence lengths from 1 to ``2 * mean`` adding up to ``total`` (the last one
    takes the rest)."""
    rng = np.random.default_rng(seed)
    lengths = []
    while sum(lengths) < total:
        lengths.append(int(min(rng.integers(1, 2 * mean + 1), total - sum(lengths))))
    return lengths


def packing_tensors(lengths, device="cuda"):
    """``(seq_idx (1, sum) int32, cu_seqlens int32)`` of sequences of these lengths."""
    counts = torch.tensor(lengths, device=device)
    seq_idx = torch.repeat_interleave(torch.arange(len(lengths), device=device,
                                                   dtype=torch.int32), counts)[None]
    cu_seqlens = torch.nn.functional.pad(torch.cumsum(counts, 0), (1, 0)).to(torch.int32)
    return seq_idx, cu_seqlens


def layouts(inputs, sequences, seqlen):
    """``{layout: (tensors, keyword arguments)}`` for the five layouts (module doc)."""
    as_row = {name: value.reshape(1, sequences * seqlen, *value.shape[2:])
              if name in ("x", "dt", "B", "C") else value for name, value in inputs.items()}
    equal = packing_tensors([seqlen] * sequences, inputs["x"].device)
    mixed = packing_tensors(mixed_lengths(sequences * seqlen, seqlen), inputs["x"].device)
    return {
        "batch": (inputs, {}),
        "one_row": (as_row, {}),
        "packed_equal": (as_row, dict(seq_idx=equal[0])),
        "packed_mixed": (as_row, dict(seq_idx=mixed[0])),
        "packed_varlen": (as_row, dict(seq_idx=mixed[0], cu_seqlens=mixed[1],
                                       return_varlen_states=True)),
    }


def measure_shape(shape, dtype, reps, flush_buffer, mamba_ssm=None):
    """One row per layout for ``shape`` (see :data:`DEFAULT_SHAPES`)."""
    nheads, headdim, dstate, chunk_size, sequences, seqlen = shape
    problem = Problem(batch=sequences, seqlen=seqlen, nheads=nheads, headdim=headdim,
                      dstate=dstate, ngroups=1, chunk_size=chunk_size, dtype=dtype)
    inputs = measurement.make_inputs(problem)
    rows = []
    for layout, (t, packing) in layouts(inputs, sequences, seqlen).items():
        def ours(t=t, packing=packing):
            return api.mamba_chunk_scan_combined(t["x"], t["dt"], t["A"], t["B"], t["C"],
                                                 chunk_size, D=t["D"], **packing)
        row = dict(layout=layout, nheads=nheads, headdim=headdim, dstate=dstate,
                   chunk_size=chunk_size, sequences=sequences, seqlen=seqlen, dtype=dtype,
                   tokens=sequences * seqlen,
                   path=_path(t, chunk_size),
                   ms=measurement.median_ms(ours, reps, flush_buffer))
        if "seq_idx" in packing:
            row["check_ms"] = _check_ms(packing, sequences * seqlen, reps)
        if mamba_ssm is not None and layout in ("batch", "packed_mixed"):
            row["mamba_ssm_ms"] = measurement.median_ms(
                lambda t=t, packing=packing: mamba_ssm(
                    t["x"], t["dt"], t["A"], t["B"], t["C"], chunk_size, D=t["D"], **packing),
                reps, flush_buffer)
        rows.append(row)
    baseline = rows[0]["ms"]
    for row in rows:
        row["vs_batch"] = row["ms"] / baseline
    return rows


def _path(t, chunk_size):
    options = api.forward_options(t["x"], t["dt"], t["A"], t["B"], t["C"], chunk_size)
    if not options.fuse_state_passing:
        return "three_kernel"
    return "fused" if options.segment_chunks is None else f"segments_{options.segment_chunks}"


def _check_ms(packing, seqlen, reps):
    """Median milliseconds of the host's check of the packing values, synchronisation included."""
    times = []
    for _ in range(max(reps, 5)):
        torch.cuda.synchronize()
        start = time.perf_counter()
        api._check_packing_values(packing["seq_idx"], packing.get("cu_seqlens"), seqlen)
        times.append((time.perf_counter() - start) * 1e3)
    return sorted(times)[len(times) // 2]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m mamba2_tile.tools.packing",
                                     description=__doc__.splitlines()[0])
    for name in ("nheads", "headdim", "dstate", "chunk-size", "sequences", "seqlen"):
        parser.add_argument(f"--{name}", type=int,
                            help="one shape of these sizes (the rest from the first default)")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--reps", type=int, default=30, help="timed replays per measurement")
    parser.add_argument("--name", default=DEFAULT_NAME, help="output file stem under data/")
    parser.add_argument("--no-save", action="store_true", help="print only, write no file")
    return parser.parse_args(argv)


def shapes_from(args):
    given = (args.nheads, args.headdim, args.dstate, args.chunk_size, args.sequences,
             args.seqlen)
    if all(value is None for value in given):
        return DEFAULT_SHAPES
    return (tuple(d if v is None else v for v, d in zip(given, DEFAULT_SHAPES[0])),)


def main(argv=None, data_dir=DATA_DIR):
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("No CUDA GPU found: this measurement times GPU kernels and needs one. "
              "Stored H200 results are in data/h200_packing.json.")
        return 0
    others, _ = measurement.load_implementations(
        [i for i in measurement.IMPLEMENTATIONS if i.name == "mamba_ssm"])
    mamba_ssm = None
    if "mamba_ssm" in others:
        from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined as mamba_ssm
    flush_buffer = measurement.l2_flush_buffer()
    rows = []
    for shape in shapes_from(args):
        rows += measure_shape(shape, args.dtype, args.reps, flush_buffer, mamba_ssm)
    columns = ["layout", "nheads", "sequences", "seqlen", "path", "ms", "vs_batch", "check_ms",
               "mamba_ssm_ms"]
    print(tabulate([[row.get(c) for c in columns] for row in rows], headers=columns,
                   floatfmt=".3f"))
    if not args.no_save:
        command = argv if argv is not None else sys.argv[1:]
        result = {"device": torch.cuda.get_device_name(),
                  "date": datetime.date.today().isoformat(),
                  "versions": measurement.versions(), "reps": args.reps,
                  "command": " ".join(["python -m mamba2_tile.tools.packing", *command]),
                  "rows": rows}
        path = data_dir / f"{args.name}.json"
        path.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
