"""Measured GPU results stored in ``data/``, so a learner without a GPU can still read them.

The benchmark is run on an H200 and its results are committed, one JSON file per experiment, e.g.
``data/h200_forward.json``::

    {"device": "NVIDIA H200", "date": "...",
     "versions": {"torch": ..., "cuda": ..., "cuda_tile": ..., "triton": ..., "mamba_ssm": ...},
     "rows": [{"batch": 8, "seqlen": 4096, "nheads": 64, "headdim": 64, "dstate": 128,
               "ngroups": 1, "chunk_size": 64, "dtype": "bfloat16",
               "mamba2_tile_ms": ..., "mamba_ssm_ms": ..., "speedup": ...,
               "max_abs_err": ..., "max_rel_err": ...}, ...]}

``load_results`` reads and checks one such file; ``results_table`` prints its rows with fixed
number formats, so a notebook that shows them has reproducible output; ``bench_rows`` checks
rows handed over directly. ``mamba_ssm_ms``, ``speedup`` and
the error columns may be ``null`` or absent (no mamba_ssm on the machine that measured).

The scaling sweep (``python -m mamba2_tile.tools.scaling``, notebook 10) stores rows of another
kind, one per (sequence length, method), in ``data/h200_scaling.json``::

    {"device": ..., "date": ..., "versions": {...}, "command": ..., "config": {...},
     "rows": [{"seqlen": 32768, "method": "naive_attention", "ms": null, "peak_bytes": null,
               "status": "oom", "state_bytes": null, "note": "out of memory: ..."}, ...]}

``load_scaling_results`` reads those, with the same checks plus the allowed methods and statuses.
"""

import json
from dataclasses import fields
from pathlib import Path

from tabulate import tabulate

from mamba2_tile.problem import KERNEL_DTYPES, Problem

DATA_DIR = Path(__file__).resolve().parents[2] / "data"   # the repository's data/

REQUIRED_KEYS = ("device", "rows")
PROBLEM_KEYS = tuple(field.name for field in fields(Problem))
REQUIRED_ROW_KEYS = (*PROBLEM_KEYS, "mamba2_tile_ms")
OPTIONAL_ROW_KEYS = ("mamba_ssm_ms", "speedup", "max_abs_err", "max_rel_err")

# The scaling sweep's rows (mamba2_tile.tools.scaling writes them; notebook 10 reads them).
SCALING_ROW_KEYS = ("seqlen", "method", "ms", "peak_bytes", "status", "state_bytes")
SCALING_OPTIONAL_ROW_KEYS = ("note",)
SCALING_METHODS = ("mamba2_tile", "naive_attention", "sdpa_attention")
SCALING_STATUSES = ("ok", "oom", "skipped")

# The model-shape preset's rows (bench --preset models): one time and one error per implementation.
MODELS_ROW_KEYS = (*PROBLEM_KEYS, "ms", "error", "copy_fraction", "vs_best_peer")
MODELS_OPTIONAL_ROW_KEYS = ("eager_ms", "tf32", "path")


def results_path(name, data_dir=DATA_DIR):
    """``data/<name>.json`` (``name`` may carry the ``.json`` already)."""
    filename = name if name.endswith(".json") else f"{name}.json"
    return Path(data_dir) / filename


def load_results(name, data_dir=DATA_DIR, required_row_keys=REQUIRED_ROW_KEYS,
                 optional_row_keys=OPTIONAL_ROW_KEYS):
    """The stored results ``data/<name>.json`` as a dict, or ``None`` if there is no such file.

    Missing optional fields are filled in (``date`` "unknown", ``versions`` empty, the
    ``optional_row_keys`` of a row ``None``); a missing required field raises ``ValueError``
    naming it. The row keys default to the benchmark's; other experiments pass their own (see
    :func:`load_scaling_results`).
    """
    path = results_path(name, data_dir)
    if not path.exists():
        return None
    results = json.loads(path.read_text(encoding="utf-8"))
    missing = [key for key in REQUIRED_KEYS if key not in results]
    if missing:
        raise ValueError(f"{path.name} lacks the field(s) {', '.join(missing)}")
    results.setdefault("date", "unknown")
    results.setdefault("versions", {})
    for number, row in enumerate(results["rows"]):
        missing = [key for key in required_row_keys if key not in row]
        if missing:
            raise ValueError(f"{path.name}, row {number}: lacks the field(s) {', '.join(missing)}")
        for key in optional_row_keys:
            row.setdefault(key, None)
    return results


def load_scaling_results(name="h200_scaling", data_dir=DATA_DIR):
    """The scaling sweep's stored rows (see the module doc), or ``None`` if there is no file.

    Checks the row fields as :func:`load_results` does, and that every ``method`` and ``status``
    is one the sweep writes, so a plot never meets a name it has no colour for.
    """
    results = load_results(name, data_dir, required_row_keys=SCALING_ROW_KEYS,
                           optional_row_keys=SCALING_OPTIONAL_ROW_KEYS)
    if results is None:
        return None
    for number, row in enumerate(results["rows"]):
        for key, allowed in (("method", SCALING_METHODS), ("status", SCALING_STATUSES)):
            if row[key] not in allowed:
                raise ValueError(f"{results_path(name, data_dir).name}, row {number}: {key} "
                                 f"{row[key]!r} is not one of {', '.join(allowed)}")
    results.setdefault("config", {})
    return results


def bench_rows(results, required=("mamba2_tile_ms",)):
    """The rows of ``results`` (a results dict or a list of rows), each checked for the problem's
    fields and ``required``; a clear ``ValueError`` / ``TypeError`` otherwise."""
    if isinstance(results, dict):
        if "rows" not in results:
            raise ValueError("results must be a dict with 'rows' (as load_results returns) "
                             "or a list of rows")
        rows = results["rows"]
    elif isinstance(results, (list, tuple)):
        rows = results
    else:
        raise TypeError(f"results must be a dict with 'rows' or a list of rows, got "
                        f"{type(results).__name__} (did load_results return None? then the "
                        "file is not in data/ yet)")
    if not rows:
        raise ValueError("results has no rows")
    for number, row in enumerate(rows):
        if not isinstance(row, dict):
            raise TypeError(f"row {number} must be a dict, got {type(row).__name__}")
        missing = [key for key in (*PROBLEM_KEYS, *required) if row.get(key) is None]
        if missing:
            raise ValueError(f"row {number} lacks {', '.join(missing)}")
        if row["dtype"] not in KERNEL_DTYPES:
            raise ValueError(f"row {number}: unknown dtype {row['dtype']!r} "
                             f"(expected one of {', '.join(KERNEL_DTYPES)})")
    return list(rows)


def _number(value, spec):
    """Format a measurement, or '-' where none was taken."""
    return "-" if value is None else format(value, spec)


_COLUMNS = (  # header, how to format the row
    ("batch", lambda r: str(r["batch"])),
    ("seqlen", lambda r: str(r["seqlen"])),
    ("heads", lambda r: str(r["nheads"])),
    ("hdim", lambda r: str(r["headdim"])),
    ("dstate", lambda r: str(r["dstate"])),
    ("groups", lambda r: str(r["ngroups"])),
    ("chunk", lambda r: str(r["chunk_size"])),
    ("dtype", lambda r: r["dtype"]),
    ("mamba2_tile ms", lambda r: _number(r["mamba2_tile_ms"], ".3f")),
    ("mamba_ssm ms", lambda r: _number(r["mamba_ssm_ms"], ".3f")),
    ("speedup", lambda r: _number(r["speedup"], ".2f")),
    ("max rel err", lambda r: _number(r["max_rel_err"], ".1e")),
)


def results_table(rows):
    """A text table of result rows (one line per configuration), numbers in fixed formats so a
    notebook that prints it has reproducible output."""
    return tabulate([[cell(row) for _, cell in _COLUMNS] for row in rows],
                    headers=[header for header, _ in _COLUMNS], disable_numparse=True,
                    stralign="right")


def describe_results(results):
    """One line: which device measured, when, and with which software versions."""
    versions = ", ".join(f"{name} {value}" for name, value in results["versions"].items()
                         if value is not None)
    line = f"{results['device']}, measured {results['date']}"
    return f"{line} ({versions})" if versions else line


# Later runs of some of the model-shape preset's problems, which replace those rows of
# data/h200_models.json: its float32 rows, measured again after the kernels took split TF32
# (bench --preset models --dtype float32 --name h200_models_float32).
MODELS_REMEASURED = ("h200_models_float32",)


def load_models_results(name="h200_models", data_dir=DATA_DIR, remeasured=MODELS_REMEASURED):
    """The model-shape preset's stored rows (``ms`` and ``error`` are dicts keyed by
    implementation), or ``None`` if there is no such file.

    The rows of each file named in ``remeasured`` that exists replace the rows of the same
    problem and ``tf32``, in place; those rows carry their file's ``date``, and the result's
    ``remeasured`` lists ``{"name", "date", "rows"}`` per file used, so a table can say which
    rows are newer.
    """
    def load(stem):
        return load_results(stem, data_dir, required_row_keys=MODELS_ROW_KEYS,
                            optional_row_keys=MODELS_OPTIONAL_ROW_KEYS)

    def key(row):
        return Problem.from_row(row), bool(row["tf32"])

    results = load(name)
    if results is None:
        return None
    results["remeasured"] = []
    for later_name in remeasured:
        later = load(later_name)
        if later is None:
            continue
        newer = {key(row): {**row, "date": later["date"]} for row in later["rows"]}
        unknown = set(newer) - {key(row) for row in results["rows"]}
        if unknown:
            raise ValueError(f"{later_name}.json re-measures problems {name}.json does not hold: "
                             f"{sorted(problem.label() for problem, _ in unknown)}")
        results["rows"] = [newer.get(key(row), row) for row in results["rows"]]
        results["remeasured"].append({"name": later_name, "date": later["date"],
                                      "rows": len(newer)})
    return results
