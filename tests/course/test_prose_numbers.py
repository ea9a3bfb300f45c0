"""Measured numbers the notebooks state in prose agree with the files in data/ they come from
(issue #16 item 3: nb09 once quoted tuning times that its own table, two cells later,
contradicted).

Prose reads better than a printed sentence, so most measured figures stay in the markdown; each
one is listed here with the file and the rounding it is quoted at. A claim is a pattern with one
group per number: it must still be found in the notebook's markdown (reworded text fails here
until the claim is updated), and each group must read as the data rounds. A figure that changes
with every run or has no source in data/ is printed by a code cell instead (nb09's tuning times).
"""

import json
import re
from pathlib import Path

import nbformat
import pytest

from mamba2_tile.tools.results import (DATA_DIR, load_models_results, load_results,
                                       load_scaling_results)
from mamba2_tile.tools.scaling import loglog_slope

SOLUTIONS = Path(__file__).resolve().parents[2] / "solutions"


def _rows(name):
    if name == "h200_decode":   # the decode sweep's rows have no Problem fields to check
        return json.loads((DATA_DIR / f"{name}.json").read_text())["rows"]
    results = load_models_results(name) if name == "h200_models" else load_results(name)
    assert results is not None, f"data/{name}.json is missing"
    return results["rows"]


def _forward(dtype):
    """mamba_ssm's time over ours, per shape of data/h200_forward.json in this dtype."""
    return [row["speedup"] for row in _rows("h200_forward") if row["dtype"] == dtype]


def _geomean(values):
    product = 1.0
    for value in values:
        product *= value
    return product ** (1 / len(values))


def _default(chunk_size):
    """Speed-ups over mamba_ssm of the default sweep at one chunk size (data/h200_default.json)."""
    return [row["speedup"] for row in _rows("h200_default") if row["chunk_size"] == chunk_size]


def _ablation(dtype, chunk_size, variant, key="mamba2_tile_ms"):
    """One step of the ladder in data/h200_ablation.json."""
    [row] = [row for row in _rows("h200_ablation") if row["dtype"] == dtype
             and row["chunk_size"] == chunk_size and row["variant"] == variant]
    return row[key]


def _step(dtype, chunk_size, before, after):
    """How many times faster ``after`` is than ``before`` (above 1: faster)."""
    return _ablation(dtype, chunk_size, before) / _ablation(dtype, chunk_size, after)


def _slower(dtype, chunk_size, before, after):
    """How many times longer ``after`` takes than ``before`` (a cost, quoted as a time change)."""
    return 1 / _step(dtype, chunk_size, before, after)


def _percent(ratio):
    return f"{abs(ratio - 1) * 100:.0f}"


def _fixed(digits):
    return lambda value: f"{value:.{digits}f}"


def _long_dstate64_copy():
    """Fractions of the copy bandwidth on the default sweep's long dstate-64 shapes."""
    return [row["copy_fraction"] for row in _rows("h200_default")
            if row["seqlen"] >= 4096 and row["dstate"] == 64]


def _models(batch=None, tf32=False):
    """Our speed over the faster peer's, per shape of data/h200_models.json (16-bit inputs, or
    the float32 row with ``tf32``)."""
    return [row["vs_best_peer"] for row in _rows("h200_models")
            if (batch is None or row["batch"] == batch)
            and (row["dtype"] == "float32" and row["tf32"] if tf32 else row["dtype"] != "float32")]


def _decode(key="speedup", state_dtype=None):
    """One column of data/h200_decode.json (the decode step, batch 1-256), all rows or those
    keeping the state in ``state_dtype``."""
    return [row[key] for row in _rows("h200_decode")
            if state_dtype is None or row["state_dtype"] == state_dtype]


def _growth(method, key="ms"):
    """The growth exponent over the last doubling of data/h200_scaling.json, as notebook 10
    prints it."""
    return loglog_slope(load_scaling_results()["rows"], method, key)


NUMBER = r"([\d.]+)"

# (notebook, pattern with one group per number, () -> the numbers, how each is rounded)
CLAIMS = [
    ("08", rf"In bfloat16 the cuTile kernels run at {NUMBER}–{NUMBER}× mamba_ssm's speed",
     lambda: (min(_forward("bfloat16")), max(_forward("bfloat16"))), _fixed(2)),
    ("08", rf"The float32 rows are {NUMBER}–{NUMBER}× slower",
     lambda: (1 / max(_forward("float32")), 1 / min(_forward("float32"))), _fixed(0)),
    ("09", rf"notebook 08 measured float32 layers {NUMBER}–{NUMBER}× slower than mamba_ssm",
     lambda: (1 / max(_forward("float32")), 1 / min(_forward("float32"))), _fixed(0)),
    ("09", rf"\*\*The latency hint alone\*\* gains {NUMBER}% in bfloat16",
     lambda: (_step("bfloat16", 64, "baseline", "+latency"),), _percent),
    ("09", rf"\*costs\* {NUMBER}–{NUMBER}%",
     lambda: (_slower("bfloat16", 64, "+latency", "+swap"),
              _slower("bfloat16", 128, "+latency", "+swap")), _percent),
    ("09", rf"changes little \({NUMBER}% slower at chunk 64, {NUMBER}% faster at chunk 128\)",
     lambda: (_slower("bfloat16", 64, "+swap", "+transposed"),
              _slower("bfloat16", 128, "+swap", "+transposed")), _percent),
    ("09", rf"\*\*Autotuning the three kernels\*\* is the first large step, {NUMBER}–{NUMBER}× the "
           "baseline",
     lambda: (_step("bfloat16", 128, "baseline", "+autotune"),
              _step("bfloat16", 64, "baseline", "+autotune")), _fixed(1)),
    ("09", rf"\*\*16-bit states\*\* gain another {NUMBER}–{NUMBER}×",
     lambda: (_step("bfloat16", 128, "+autotune", "+bf16_states"),
              _step("bfloat16", 64, "+autotune", "+bf16_states")), _fixed(2)),
    ("09", rf"\*\*Fusion\*\* with the compiler's default occupancy is {NUMBER}× the baseline at "
           rf"chunk 64 and {NUMBER}× at chunk 128: {NUMBER}–{NUMBER}× the tuned three kernels",
     lambda: (_step("bfloat16", 64, "baseline", "+fused"),
              _step("bfloat16", 128, "baseline", "+fused"),
              _step("bfloat16", 64, "+bf16_states", "+fused"),
              _step("bfloat16", 128, "+bf16_states", "+fused")), _fixed(1)),
    ("09", rf"{NUMBER}× the baseline and {NUMBER}× mamba_ssm at chunk 64, {NUMBER}× the baseline "
           rf"and {NUMBER}× mamba_ssm at chunk 128",
     lambda: tuple(_ablation("bfloat16", chunk, "+fused_autotune", key)
                   for chunk in (64, 128) for key in ("vs_baseline", "speedup")), _fixed(1)),
    ("09", rf"the exact baseline takes {NUMBER} ms",
     lambda: (_ablation("float32", 64, "baseline"),), _fixed(0)),
    ("09", rf"`\+tf32` is the step that matters: {NUMBER} ms, {NUMBER}× the baseline and about "
           rf"mamba_ssm's {NUMBER} ms",
     lambda: (_ablation("float32", 64, "+tf32"), _step("float32", 64, "baseline", "+tf32"),
              _ablation("float32", 64, "+tf32", "mamba_ssm_ms")),
     lambda value: f"{value:.0f}" if value > 10 else f"{value:.2f}"),
    ("09", rf"tuning the three kernels gives {NUMBER} ms, the fused kernel {NUMBER} ms, "
           rf"{NUMBER}× mamba_ssm",
     lambda: (_ablation("float32", 64, "+autotune"), _ablation("float32", 64, "+fused"),
              _ablation("float32", 64, "+fused", "speedup")), _fixed(2)),
    ("09", rf"a geometric mean of {NUMBER}× at chunk 64 \(every shape between {NUMBER}× and "
           rf"{NUMBER}×\) and {NUMBER}× at chunk 128 \({NUMBER}× to {NUMBER}×\)",
     lambda: (_geomean(_default(64)), min(_default(64)), max(_default(64)),
              _geomean(_default(128)), min(_default(128)), max(_default(128))), _fixed(2)),
    ("09", rf"{NUMBER}× mamba_ssm's speed \(geometric mean\) at chunk 64 and {NUMBER}× at chunk 128",
     lambda: (_geomean(_default(64)), _geomean(_default(128))), _fixed(2)),
    ("09", rf"All eight reach the target: {NUMBER}–{NUMBER}% of the copy",
     lambda: (min(_long_dstate64_copy()) * 100, max(_long_dstate64_copy()) * 100), _fixed(0)),
    ("09", rf"and {NUMBER}–{NUMBER}% of the copy bandwidth on the long `dstate` 64 shapes",
     lambda: (min(_long_dstate64_copy()) * 100, max(_long_dstate64_copy()) * 100), _fixed(0)),
    ("09", rf"At batch 8 the fused kernel is {NUMBER}–{NUMBER}× the faster peer",
     lambda: (min(_models(batch=8)), max(_models(batch=8))), _fixed(1)),
    ("09", rf"With `tf32=True` it is {NUMBER}× the faster peer",
     lambda: tuple(_models(tf32=True)), _fixed(2)),
    ("10", rf"slope 1 once the sequence is long enough to keep the GPU busy \(measured: {NUMBER}\)\. "
           rf"Flash attention's rises with slope 2 \({NUMBER}\)\. Naive attention's measured exponent "
           rf"over its last doubling \(16k → 32k, after which it runs out of memory\) is only {NUMBER}",
     lambda: (_growth("mamba2_tile"), _growth("sdpa_attention"), _growth("naive_attention")),
     _fixed(2)),
    ("10", rf"1 for the SSD \({NUMBER}\), 2 for flash attention's time \({NUMBER}\), 2 for naive "
           rf"attention's memory\. Naive attention's time reaches only {NUMBER}",
     lambda: (_growth("mamba2_tile"), _growth("sdpa_attention"), _growth("naive_attention")),
     _fixed(2)),
    ("13", rf"runs at {NUMBER}–{NUMBER}× mamba_ssm's speed — that is, it is \*slower\*, "
           rf"{NUMBER}–{NUMBER}×",
     lambda: (min(_decode()), max(_decode()), 1 / max(_decode()), 1 / min(_decode())),
     lambda value: f"{value:.2f}" if value < 1 else f"{value:.1f}"),
    ("13", rf"with float32 states it reaches {NUMBER}–{NUMBER}% of the copy bandwidth where "
           rf"mamba_ssm reaches {NUMBER}–{NUMBER}%",
     lambda: tuple(100 * f(_decode(key, "float32")) for key in
                   ("mamba2_tile_copy_fraction", "mamba_ssm_copy_fraction") for f in (min, max)),
     _fixed(0)),
]


def _markdown(number):
    [path] = SOLUTIONS.glob(f"{number}_*.ipynb")
    cells = nbformat.read(path, as_version=4).cells
    return path.name, "\n".join(cell.source for cell in cells if cell.cell_type == "markdown")


@pytest.mark.parametrize("number, pattern, numbers, rounded", CLAIMS,
                         ids=[f"nb{claim[0]}-{index}" for index, claim in enumerate(CLAIMS)])
def test_a_measured_number_in_prose_matches_its_data_file(number, pattern, numbers, rounded):
    name, text = _markdown(number)
    found = re.search(pattern, text)
    assert found, f"{name}: no prose matches {pattern!r}; reworded? update CLAIMS"
    stated = found.groups()
    expected = tuple(rounded(value) for value in numbers())
    assert stated == expected, (f"{name}: {found.group(0)!r} states {stated}, "
                                f"but data/ gives {expected}")


def test_the_tuning_times_are_printed_from_data_not_written_in_prose():
    name, text = _markdown("09")
    assert not re.search(r"a new shape took [\d.]+", text), (
        f"{name}: the tuning times belong to the code cell that reads data/h200_ablation.json")
