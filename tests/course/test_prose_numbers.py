"""Measured numbers the notebooks and the README state in prose agree with the files in data/
they come from (issue #16 item 3: nb09 once quoted tuning times that its own table, two cells
later, contradicted). The README's tables are held row by row in test_readme_tables.py.

Prose reads better than a printed sentence, so most measured figures stay in the markdown; each
one is listed here with the file and the rounding it is quoted at. A claim is a pattern with one
group per number: it must still be found in the notebook's markdown (reworded text fails here
until the claim is updated), and each group must read as the data rounds. A figure that changes
with every run or has no source in data/ is printed by a code cell instead (nb09's tuning times).
"""

import json
import math
import re
from pathlib import Path

import nbformat
import pytest

from mamba2_tile.cost import H200_HBM_BANDWIDTH, forward_cost, minimal_bytes
from mamba2_tile.problem import Problem
from mamba2_tile.tools.results import (DATA_DIR, load_models_results, load_results,
                                       load_scaling_results)
from mamba2_tile.tools.scaling import loglog_slope

SOLUTIONS = Path(__file__).resolve().parents[2] / "solutions"


def _rows(name):
    if name in ("h200_decode", "h200_packing"):   # their rows have no Problem fields to check
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


def _decode_from(batch, state_dtype, key="speedup"):
    """The decode rows from ``batch`` up keeping the state in ``state_dtype``."""
    return [row[key] for row in _rows("h200_decode")
            if row["batch"] >= batch and row["state_dtype"] == state_dtype]


def _growth(method, key="ms"):
    """The growth exponent over the last doubling of data/h200_scaling.json, as notebook 10
    prints it."""
    return loglog_slope(load_scaling_results()["rows"], method, key)


def _first_measurement():
    """Notebook 08's first H200 measurement of the three straightforward kernels (bfloat16, 2048
    tokens, data/h200_forward.json), as notebook 09's section 1 reads it: (ms, minimal bytes
    over the time and over the bytes the kernels move, each as a fraction of the data sheet's
    4.8 TB/s)."""
    [row] = [row for row in _rows("h200_forward") if row["seqlen"] == 2048
             and row["dtype"] == "bfloat16"]
    problem = Problem(row["batch"], row["seqlen"], row["nheads"], row["headdim"], row["dstate"],
                      row["ngroups"], row["chunk_size"], dtype="bfloat16")
    seconds = row["mamba2_tile_ms"] * 1e-3
    return (row["mamba2_tile_ms"], minimal_bytes(problem) / seconds / H200_HBM_BANDWIDTH,
            forward_cost(problem).bytes / seconds / H200_HBM_BANDWIDTH)


def _copy_rate(name, method):
    """A copy's rate in the run of data/<name>.json, in TB/s (the kernel copy or a graph memcpy)."""
    return json.loads((DATA_DIR / f"{name}.json").read_text())["copy_gbps_by_method"][method] / 1e3


def _bandwidth_copy():
    """Fractions of the copy bandwidth of the eight shapes of data/h200_bandwidth.json."""
    return [row["copy_fraction"] for row in _rows("h200_bandwidth")]


def _float32_model_row(tf32=False, remeasured=True):
    """The float32 model row, exact or ``tf32``: as re-measured (data/h200_models_float32.json)
    or, with ``remeasured=False``, as first measured (data/h200_models.json)."""
    rows = (load_models_results() if remeasured else load_models_results(remeasured=()))["rows"]
    [row] = [row for row in rows if row["dtype"] == "float32" and row["tf32"] == tf32]
    return row


def _ceil_percent(value):
    """A bound in whole percent: 2.1 -> "3"."""
    return str(math.ceil(value))


def _about(value):
    """"About 50×": to the nearest ten."""
    return f"{round(value, -1):.0f}"


def _packing():
    """Per shape of data/h200_packing.json, its rows by layout ("batch", "one_row",
    "packed_equal", "packed_mixed", "packed_varlen")."""
    by_shape = {}
    for row in _rows("h200_packing"):
        by_shape.setdefault((row["nheads"], row["sequences"], row["seqlen"]), {})[row["layout"]] = row
    return list(by_shape.values())


def _packed_claims():
    """The README's packing paragraph, in its order: a packed row's time over the unpacked
    batch's (min, max); the seq_idx masks' cost in percent, packed equal sequences against one
    unpacked row (min, max); what return_varlen_states adds in ms (min, max); mamba_ssm's packed
    time over ours (min, max)."""
    shapes = _packing()
    over_batch = [rows["packed_mixed"]["ms"] / rows["batch"]["ms"] for rows in shapes]
    masks = [100 * (rows["packed_equal"]["ms"] / rows["one_row"]["ms"] - 1) for rows in shapes]
    varlen = [rows["packed_varlen"]["ms"] - rows["packed_mixed"]["ms"] for rows in shapes]
    peer = [rows["packed_mixed"]["mamba_ssm_ms"] / rows["packed_mixed"]["ms"] for rows in shapes]
    return tuple(f(values) for values in (over_batch, masks, varlen, peer) for f in (min, max))


def _backward(key, name="h200_backward"):
    """Per row of data/<name>.json (by default the first training rows, of the earlier kernels):
    mamba_ssm's time over ours ("speed"), our time or mamba_ssm's ("ms_ours", "ms_theirs"), our
    peak memory over mamba_ssm's ("memory"), or our gradient error for ``key`` over
    mamba_ssm's."""
    rows = json.loads((DATA_DIR / f"{name}.json").read_text())["rows"]
    if key == "speed":
        return [row["ms"]["mamba_ssm"] / row["ms"]["mamba2_tile"] for row in rows]
    if key in ("ms_ours", "ms_theirs"):
        return [row["ms"]["mamba2_tile" if key == "ms_ours" else "mamba_ssm"] for row in rows]
    if key == "memory":
        return [row["peak_mb"]["mamba2_tile"] / row["peak_mb"]["mamba_ssm"] for row in rows]
    return [row["grad_error"]["mamba2_tile"][key] / row["grad_error"]["mamba_ssm"][key]
            for row in rows]


def _profile_share(kernel, dstate, chunk_size):
    """The percentage of a b8 h64 p64 L2048 bf16 training step's GPU time that ``kernel`` took in
    data/h200_backward_profile_2026-12-04.txt (from its ms and the step's, not its printed share)."""
    text = (DATA_DIR / "h200_backward_profile_2026-12-04.txt").read_text()
    found = re.search(rf"mamba2_tile, Problem\(batch=8, seqlen=2048, nheads=64, headdim=64, "
                      rf"dstate={dstate}, ngroups=1, chunk_size={chunk_size}, dtype='bfloat16'\): "
                      rf"([\d.]+) ms of GPU time per step\n(?:.*\n){{2}}{kernel}\S*\s+\d+\s+([\d.]+)",
                      text)
    assert found, f"no profile of {kernel} at dstate {dstate}, chunk {chunk_size}"
    step, ms = map(float, found.groups())
    return 100 * ms / step


def _split_probe(line):
    """The ms of the line of data/h200_bwd_chunk_split.txt that starts with ``line``."""
    text = (DATA_DIR / "h200_bwd_chunk_split.txt").read_text()
    [ms] = re.findall(rf"^{re.escape(line)}: ([\d.]+) ms", text, re.MULTILINE)
    return float(ms)


def _backward_at(key, name="h200_backward", **fields):
    """:func:`_backward` for the rows of data/<name>.json whose fields equal ``fields`` (in file
    order)."""
    rows = json.loads((DATA_DIR / f"{name}.json").read_text())["rows"]
    return [value for row, value in zip(rows, _backward(key, name), strict=True)
            if all(row[field] == wanted for field, wanted in fields.items())]


def _backward_row(key, dstate, chunk_size):
    """:func:`_backward` for the batch-8, 2048-token row at ``dstate`` and ``chunk_size``."""
    [value] = _backward_at(key, dstate=dstate, chunk_size=chunk_size, seqlen=2048)
    return value


def _models_rows(**fields):
    return [row for row in _rows("h200_models")
            if all(row[key] == value for key, value in fields.items())]


def _scaling(method, seqlen, key="ms"):
    """One measurement of data/h200_scaling.json (ms, or peak_bytes / state_bytes)."""
    [row] = [row for row in load_scaling_results()["rows"]
             if row["method"] == method and row["seqlen"] == seqlen]
    return row[key] if key else row


def _accuracy(dtype, key):
    """One error column of data/h200_forward.json's rows in ``dtype``."""
    return [row[key] for row in _rows("h200_forward") if row["dtype"] == dtype]


def _milli(value):
    """A relative error quoted as the mantissa of ``…e-3``."""
    return f"{value * 1e3:.1f}"


NUMBER = r"([\d.]+)"

# (notebook or "README", pattern with one group per number, () -> the numbers, how each is
# rounded: one function for all, or a tuple of one per number)
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
    ("09", rf"batch 8, 2048 tokens, 64 heads, `dstate` 128 and chunk 64 took {NUMBER} ms",
     lambda: _first_measurement()[:1], _fixed(3)),
    ("09", rf"Measured on the minimal bytes the straightforward kernels reach only {NUMBER}% of the "
           r"H200's bandwidth\b.*? they are not slow at all: well over half the peak",
     lambda: (100 * _first_measurement()[1],), _fixed(0)),
    ("09", rf"the straightforward kernels reach about {NUMBER}% of the H200's peak by that measure "
           r"while moving their own bytes at over half of it",
     lambda: (100 * _first_measurement()[1],), _fixed(0)),
    ("09", rf"its baseline multiplies in exact float32, off the tensor cores, and takes {NUMBER} ms",
     lambda: (_ablation("float32", 64, "baseline"),), _fixed(0)),
    ("09", rf"the hint, the swap and the layout move it by {NUMBER} to −{NUMBER}%",
     lambda: (1 - _ablation("float32", 64, "+latency", "vs_baseline"),
              max(1 - _ablation("float32", 64, variant, "vs_baseline")
                  for variant in ("+swap", "+transposed"))),
     lambda value: f"{abs(value) * 100:.0f}"),
    ("09", rf"a device-to-device copy kernel timed in the same run, {NUMBER} TB/s\. \(A "
           rf"`dst\.copy_\(src\)` captured in a CUDA graph records a \*memcpy node\*, which the "
           rf"H200 ran at only {NUMBER} TB/s",
     lambda: (_copy_rate("h200_default", "kernel"), _copy_rate("h200_default", "memcpy")),
     _fixed(2)),
    ("09", rf"All eight reach the target: {NUMBER}–{NUMBER}% of the copy, one group or eight",
     lambda: (100 * min(_bandwidth_copy()), 100 * max(_bandwidth_copy())), _fixed(0)),
    ("09", rf"(?s)it spilled registers and took {NUMBER} ms on the float32 row, about {NUMBER}× the "
           rf"peers' time.*?The same row now takes {NUMBER} ms: {NUMBER}× the faster peer, which "
           rf"uses plain TF32.*?With `tf32=True` it is {NUMBER}× the faster peer",
     lambda: (_float32_model_row(remeasured=False)["ms"]["mamba2_tile"],
              1 / _float32_model_row(remeasured=False)["vs_best_peer"],
              _float32_model_row()["ms"]["mamba2_tile"], _float32_model_row()["vs_best_peer"],
              *_models(tf32=True)),
     (_fixed(1), _about, _fixed(2), _fixed(2), _fixed(2))),
    ("10", rf"slope 1 once the sequence is long enough to keep the GPU busy \(measured: {NUMBER}\)\. "
           rf"Flash attention's rises with slope 2 \({NUMBER}\)\. Naive attention's measured exponent "
           rf"over its last doubling \(16k → 32k, after which it runs out of memory\) is only {NUMBER}",
     lambda: (_growth("mamba2_tile"), _growth("sdpa_attention"), _growth("naive_attention")),
     _fixed(2)),
    ("10", rf"1 for the SSD \({NUMBER}\), 2 for flash attention's time \({NUMBER}\), 2 for naive "
           rf"attention's memory\. Naive attention's time reaches only {NUMBER}",
     lambda: (_growth("mamba2_tile"), _growth("sdpa_attention"), _growth("naive_attention")),
     _fixed(2)),
    ("13", rf"with a bfloat16 state this package's `selective_state_update` runs at "
           rf"{NUMBER}–{NUMBER}× mamba_ssm's speed; with a float32 state at {NUMBER}–{NUMBER}×, "
           rf"that is, \*slower\* from batch 4 up, reaching {NUMBER}–{NUMBER}% of the copy "
           rf"bandwidth where mamba_ssm reaches {NUMBER}–{NUMBER}%",
     lambda: (min(_decode(state_dtype="bfloat16")), max(_decode(state_dtype="bfloat16")),
              min(_decode(state_dtype="float32")), max(_decode(state_dtype="float32")),
              *(100 * f(_decode(key, "float32")) for key in
                ("mamba2_tile_copy_fraction", "mamba_ssm_copy_fraction") for f in (min, max))),
     (_fixed(2),) * 4 + (_fixed(0),) * 4),
    # README, "Measured on an H200"
    ("README", rf"\*\*Batch 8 × 64 heads, every dstate and chunk:\*\* {NUMBER}–{NUMBER}× the faster "
               rf"peer\. dstate 256 runs\s+`chunk_scores`.*?at {NUMBER}–{NUMBER}% of copy bandwidth",
     lambda: (min(_models(batch=8)), max(_models(batch=8)),
              100 * min(row["copy_fraction"] for row in _models_rows(dstate=256)),
              100 * max(row["copy_fraction"] for row in _models_rows(dstate=256))),
     lambda value: f"{value:.1f}" if value < 10 else f"{value:.0f}"),
    ("README", rf"\*\*Batch-1 prefill:\*\* {NUMBER}–{NUMBER}×",
     lambda: (min(_models(batch=1)), max(_models(batch=1))), _fixed(1)),
    ("README", rf"is \*\*{NUMBER}×\*\*, under our 1\.5× target; batch-1 rows\s+reach only "
               rf"{NUMBER}–{NUMBER}% of copy bandwidth",
     lambda: (min(_models(batch=1)),
              100 * min(row["copy_fraction"] for row in _models_rows(batch=1)),
              100 * max(row["copy_fraction"] for row in _models_rows(batch=1))),
     lambda value: f"{value:.2f}" if value < 10 else f"{value:.0f}"),
    ("README", rf"(?s)exact float32 \(our default, error {NUMBER}e-7\) is \*\*{NUMBER}×\*\* the faster "
               rf"peer.*?took {NUMBER} ms here \(`data/h200_models\.json`\), about {NUMBER}× the "
               rf"peers' time.*?\({NUMBER} ms before, {NUMBER} ms now",
     lambda: (1e7 * _float32_model_row()["error"]["mamba2_tile"],
              _float32_model_row()["vs_best_peer"],
              _float32_model_row(remeasured=False)["ms"]["mamba2_tile"],
              1 / _float32_model_row(remeasured=False)["vs_best_peer"],
              _float32_model_row(tf32=True, remeasured=False)["ms"]["mamba2_tile"],
              _float32_model_row(tf32=True)["ms"]["mamba2_tile"]),
     (_fixed(1), _fixed(2), _fixed(1), _about, _fixed(2), _fixed(2))),
    ("README", rf"With `tf32=True` we are\s+\*\*{NUMBER}×\*\* the faster\s+peer",
     lambda: tuple(_models(tf32=True)), _fixed(2)),
    ("README", rf"Geometric mean over the faster peer: {NUMBER}× on all 29 rows, {NUMBER}× without the "
               "two float32 rows",
     lambda: (_geomean([row["vs_best_peer"] for row in _rows("h200_models")]),
              _geomean(_models())), _fixed(2)),
    ("README", rf"(?s)Packing is \*\*not\*\* free here: .*?\*\*{NUMBER}–{NUMBER}×\*\* the time of the "
               rf"unpacked batch .*? masks are {NUMBER}–{NUMBER}% \(packed against one unpacked row\); "
               rf"`return_varlen_states` adds another\s+{NUMBER}–{NUMBER} ms\. Packed, we are still "
               rf"{NUMBER}–{NUMBER}× faster than mamba_ssm's packed call",
     _packed_claims, (_fixed(1),) * 2 + (_fixed(0),) * 2 + (_fixed(2),) * 4),
    ("12", rf"dstate 128, chunk 64\) now takes {NUMBER} ms against\s+mamba_ssm's {NUMBER} ms",
     lambda: tuple(_backward_row(key, 128, 64) for key in ("ms_ours", "ms_theirs")), _fixed(2)),
    ("12", rf"at\s+chunk 256 it takes {NUMBER} ms against mamba_ssm's {NUMBER} ms",
     lambda: tuple(_backward_row(key, 128, 256) for key in ("ms_ours", "ms_theirs")), _fixed(2)),
    ("12", rf"at dstate 256 and chunk 256 the step takes {NUMBER} ms against\s+mamba_ssm's {NUMBER} "
           rf"ms, and `bwd_chunk` alone is {NUMBER}% of it",
     lambda: (*(_backward_row(key, 256, 256) for key in ("ms_ours", "ms_theirs")),
              _profile_share("bwd_chunk_kernel", dstate=256, chunk_size=256)),
     (_fixed(2), _fixed(2), _fixed(0))),
    ("README", rf"Ours is {NUMBER}–{NUMBER}× mamba_ssm, with {NUMBER}–{NUMBER}× its peak memory, "
               rf"and\s+the chunk size decides: {NUMBER}–{NUMBER}× at chunk 64, {NUMBER}–{NUMBER}× "
               rf"at chunk 128, {NUMBER}–{NUMBER}× at chunk\s+256\. \*\*We lose at dstate 256 with "
               rf"chunk 256\*\* \({NUMBER}× at 2048 tokens, {NUMBER}× at 8192\)",
     lambda: (min(_backward("speed")), max(_backward("speed")), min(_backward("memory")),
              max(_backward("memory")),
              *(f(_backward_at("speed", chunk_size=chunk)) for chunk in (64, 128, 256)
                for f in (min, max)),
              *(_backward_at("speed", dstate=256, chunk_size=256, seqlen=seqlen)[0]
                for seqlen in (2048, 8192))), _fixed(2)),
    ("README", rf"at\s+{NUMBER} ms the chunk-256 step would still be slower than mamba_ssm's {NUMBER} ms",
     lambda: (_split_probe("L2048 n256 c256 split-64-dbdc-occ2"), _backward_row("ms_theirs", 256, 256)),
     _fixed(2)),
    ("README", rf"step is {NUMBER}–{NUMBER}× mamba_ssm's speed on the\s+five 2048-token training "
               rf"shapes, geometric mean {NUMBER}×",
     lambda: (*(f(_backward("speed", "h100_backward_L2048_2026-12-07e")) for f in (min, max)),
              _geomean(_backward("speed", "h100_backward_L2048_2026-12-07e"))),
     _fixed(2)),
    ("README", rf"slowest at dstate 256\s+with chunk 256 \({NUMBER}×, under the 1.5× goal\); the "
               rf"H200's rows, {NUMBER}–{NUMBER}×",
     lambda: (_backward_at("speed", "h100_backward_L2048_2026-12-07e", dstate=256,
                           chunk_size=256)[0],
              *(f(_backward("speed", "h200_backward_2026-12-05")) for f in (min, max))),
     _fixed(2)),
    ("README", rf"`bwd_chunk` alone takes {NUMBER}% of our step",
     lambda: (_profile_share("bwd_chunk_kernel", dstate=256, chunk_size=256),), _fixed(0)),
    ("README", rf"1\.5× on every row holds on {NUMBER} of {NUMBER} rows, and the geometric mean is "
               rf"{NUMBER}× \(target 2×\)",
     lambda: (sum(speed >= 1.5 for speed in _backward("speed")), len(_backward("speed")),
              _geomean(_backward("speed"))), (_fixed(0), _fixed(0), _fixed(2))),
    ("README", rf"`A`'s are {NUMBER}–{NUMBER}×\s+mamba_ssm's and `D`'s \(~1e-7\) {NUMBER}–{NUMBER}×",
     lambda: (min(_backward("A")), max(_backward("A")), min(_backward("D")), max(_backward("D"))),
     _fixed(2)),
    ("README", rf"dstate 128 at 2048 tokens \(`A`, {NUMBER}×\), dstate 64 at 8192 \(`D`\) and "
               rf"dstate 256\s+at 8192 \(`A` {NUMBER}×, `D` {NUMBER}×\)",
     lambda: (_backward_at("A", dstate=128, chunk_size=256, seqlen=2048)[0],
              _backward_at("A", dstate=256, chunk_size=256, seqlen=8192)[0],
              _backward_at("D", dstate=256, chunk_size=256, seqlen=8192)[0]),
     (_fixed(4), _fixed(3), _fixed(3))),
    ("README", rf"of `x`, `dt`, `B` and `C` equal mamba_ssm's to within {NUMBER}%",
     lambda: (100 * max(abs(r - 1) for key in ("x", "dt", "B", "C") for r in _backward(key)),),
     _ceil_percent),
    ("README", rf"\(dstate 128,\s+2048 tokens: {NUMBER} against {NUMBER} ms; dstate 256: {NUMBER} "
               rf"against {NUMBER} ms\)",
     lambda: tuple(_backward_at("ms_ours", dstate=dstate, chunk_size=chunk, seqlen=2048)[0]
                   for dstate in (128, 256) for chunk in (64, 256)), _fixed(2)),
    ("README", rf"Geometric-mean speed-up over\s+mamba_ssm: \*\*{NUMBER}× at chunk 64\*\* \(min "
               rf"{NUMBER}×, max {NUMBER}×, 12 shapes\) and \*\*{NUMBER}× at chunk 128\*\*\s+\(min "
               rf"{NUMBER}×, max {NUMBER}×\)",
     lambda: (_geomean(_default(64)), min(_default(64)), max(_default(64)),
              _geomean(_default(128)), min(_default(128)), max(_default(128))), _fixed(2)),
    ("README", rf"Against the plain-PyTorch chunked reference \(float32\) the speed-up is "
               rf"{NUMBER}–{NUMBER}×",
     lambda: (min(row["torch_speedup"] for row in _rows("h200_default")),
              max(row["torch_speedup"] for row in _rows("h200_default"))), _fixed(0)),
    ("README", rf"Errors are mamba_ssm's to within {NUMBER}e-5 on every row \({NUMBER}–{NUMBER}e-3\)",
     lambda: (max(abs(row["rel_err"] - row["mamba_ssm_rel_err"]) for row in _rows("h200_default")),
              min(row["rel_err"] for row in _rows("h200_default")),
              max(row["rel_err"] for row in _rows("h200_default"))),
     (lambda value: f"{math.ceil(value * 1e5)}", _milli, _milli)),
    ("README", rf"With a bfloat16 state\s+ours is {NUMBER}–{NUMBER}× mamba_ssm's Triton "
               rf"`selective_state_update` \({NUMBER}–{NUMBER}× from batch 16, the\s+rows the 1\.2× "
               rf"target is about\)\. \*\*With a float32 state we lose from batch 4 up:\*\* "
               rf"{NUMBER}–{NUMBER}×, at\s+{NUMBER}–{NUMBER}% of copy bandwidth against "
               rf"mamba_ssm's {NUMBER}–{NUMBER}%",
     lambda: (min(_decode(state_dtype="bfloat16")), max(_decode(state_dtype="bfloat16")),
              min(_decode_from(16, "bfloat16")), max(_decode_from(16, "bfloat16")),
              min(_decode(state_dtype="float32")), max(_decode(state_dtype="float32")),
              *(100 * f(_decode(key, "float32")) for key in
                ("mamba2_tile_copy_fraction", "mamba_ssm_copy_fraction") for f in (min, max))),
     (_fixed(2),) * 6 + (_fixed(0),) * 4),
    ("README", rf"The forward pass takes {NUMBER} ms at 1k tokens and {NUMBER} ms at 256k \(linear\),"
               rf"\s+its peak memory {NUMBER} GiB at 256k, its carried state {NUMBER} MiB at every "
               rf"length\. Naive attention needs\s+{NUMBER} GiB at 32k and runs out of memory at 64k; "
               rf"`scaled_dot_product_attention` \(flash\) takes\s+{NUMBER} ms at 256k",
     lambda: (_scaling("mamba2_tile", 1024), _scaling("mamba2_tile", 262144),
              _scaling("mamba2_tile", 262144, "peak_bytes") / 2**30,
              _scaling("mamba2_tile", 262144, "state_bytes") / 2**20,
              _scaling("naive_attention", 32768, "peak_bytes") / 2**30,
              _scaling("sdpa_attention", 262144)),
     (_fixed(2), _fixed(1), _fixed(1), _fixed(0), _fixed(0), _fixed(0))),
    ("README", rf"bfloat16 errors equal mamba_ssm's \({NUMBER}–{NUMBER}e-3\); float32 errors\s+"
               rf"{NUMBER}–{NUMBER}e-7 \(full float32 `ct\.mma`\) against mamba_ssm's TF32 "
               rf"{NUMBER}–{NUMBER}e-3",
     lambda: (min(_accuracy("bfloat16", "rel_err")), max(_accuracy("bfloat16", "rel_err")),
              1e4 * min(_accuracy("float32", "rel_err")), 1e4 * max(_accuracy("float32", "rel_err")),
              min(_accuracy("float32", "mamba_ssm_rel_err")),
              max(_accuracy("float32", "mamba_ssm_rel_err"))), _milli),
    ("README", rf"a\s+copy kernel reached {NUMBER} GB/s \(a CUDA-graph memcpy only {NUMBER}\)\. The "
               rf"forward pass reaches {NUMBER}–{NUMBER}% of\s+it on all eight shapes",
     lambda: (1e3 * _copy_rate("h200_bandwidth", "kernel"), 1e3 * _copy_rate("h200_bandwidth", "memcpy"),
              100 * min(_bandwidth_copy()), 100 * max(_bandwidth_copy())), _fixed(0)),
    ("README", rf"The default sweep's `%copy` column agrees \({NUMBER}–{NUMBER}% on the same shapes\)",
     lambda: (100 * min(_long_dstate64_copy()), 100 * max(_long_dstate64_copy())), _fixed(1)),
    ("README", rf"from the three baseline kernels at {NUMBER} \({NUMBER}\) ms: latency hint {NUMBER}×"
               rf"\s+\({NUMBER}×\); operand swap and transposed layout on top {NUMBER}× \({NUMBER}×\); "
               rf"autotuned three kernels {NUMBER}×\s+\({NUMBER}×\); 16-bit states {NUMBER}× "
               rf"\({NUMBER}×\); fused {NUMBER}× \({NUMBER}×\); fused and tuned {NUMBER}× "
               rf"\({NUMBER}×\), which\s+is {NUMBER}× \({NUMBER}×\) mamba_ssm",
     lambda: tuple(value for pair in (
         [_ablation("bfloat16", chunk, "baseline") for chunk in (64, 128)],
         *([_ablation("bfloat16", chunk, variant, "vs_baseline") for chunk in (64, 128)]
           for variant in ("+latency", "+transposed", "+autotune", "+bf16_states", "+fused",
                           "+fused_autotune")),
         [_ablation("bfloat16", chunk, "+fused_autotune", "speedup") for chunk in (64, 128)])
         for value in pair), _fixed(2)),
    ("README", rf"the exact float32 baseline takes {NUMBER} ms; `tf32=True` brings it to {NUMBER} ms, "
               rf"the\s+tuned three kernels {NUMBER} ms, the fused kernel {NUMBER} ms, {NUMBER}× "
               rf"mamba_ssm \({NUMBER} ms\)",
     lambda: (_ablation("float32", 64, "baseline"), _ablation("float32", 64, "+tf32"),
              _ablation("float32", 64, "+autotune"), _ablation("float32", 64, "+fused"),
              _ablation("float32", 64, "+fused", "speedup"),
              _ablation("float32", 64, "+fused", "mamba_ssm_ms")),
     lambda value: f"{value:.0f}" if value > 10 else f"{value:.2f}"),
]


def _markdown(number):
    if number == "README":
        readme = SOLUTIONS.parent / "README.md"
        return readme.name, readme.read_text(encoding="utf-8")
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
    values = numbers()
    formats = rounded if isinstance(rounded, tuple) else (rounded,) * len(values)
    expected = tuple(rounded(value) for rounded, value in zip(formats, values, strict=True))
    assert stated == expected, (f"{name}: {found.group(0)!r} states {stated}, "
                                f"but data/ gives {expected}")


def test_welcome_speed_claims_match_the_models_file():
    """Notebook 00, section 3: "In bfloat16 the finished layer beats both on every stored shape
    ...; the narrowest lead is on the smallest problem (one sequence, 24 heads) ... The last row
    is a loss" — against data/h200_models.json and the rows its table shows."""
    from mamba2_tile.course.plots.model_speeds import showcase_rows

    name, text = _markdown("00")
    assert "In bfloat16 the finished layer beats both on every stored shape" in text, name
    assert "the narrowest lead is on the smallest problem (one sequence, 24 heads)" in text, name
    assert "The last row is a loss" in text, name
    sixteen_bit = [row for row in _rows("h200_models") if row["dtype"] == "bfloat16"]
    assert sixteen_bit and all(row["vs_best_peer"] > 1 for row in sixteen_bit)
    shown = showcase_rows()
    shown_bf16 = [row for row in shown if row["dtype"] == "bfloat16"]
    narrowest = min(shown_bf16, key=lambda row: row["vs_best_peer"])
    assert (narrowest["batch"], narrowest["nheads"]) == (1, 24)
    assert narrowest["nheads"] * narrowest["seqlen"] * narrowest["batch"] == min(
        row["nheads"] * row["seqlen"] * row["batch"] for row in shown_bf16)
    assert shown[-1]["dtype"] == "float32" and shown[-1]["vs_best_peer"] < 1


def test_the_tuning_times_are_printed_from_data_not_written_in_prose():
    name, text = _markdown("09")
    assert not re.search(r"a new shape took [\d.]+", text), (
        f"{name}: the tuning times belong to the code cell that reads data/h200_ablation.json")


def test_the_straightforward_kernels_move_their_bytes_at_over_half_the_peak():
    """Notebook 09 says so twice ("well over half the peak", "over half of it")."""
    assert _first_measurement()[2] > 0.5


# Figures from the probe logs (text, not tables): each number the prose quotes must appear in the
# log it comes from, as written there (a weaker check than CLAIMS: the logs have no fields).
PROBE_CLAIMS = [
    ("09", rf"instructions per row block went from {NUMBER} to {NUMBER}", "h200_probe_rowblocks.txt"),
    ("09", rf"and the kernel from {NUMBER} to {NUMBER} ms at chunk 64", "h200_probe_rowblocks.txt"),
    ("09", rf"it still took the kernel from {NUMBER} to {NUMBER} ms", "h200_probe_rowblocks.txt"),
    ("09", rf"took the kernel to {NUMBER} ms", "h200_probe_rowblocks.txt"),
    ("09", rf"Together: {NUMBER} → {NUMBER} ms at chunk 64 and {NUMBER} → {NUMBER} ms at chunk 128",
     "h200_probe_rowblocks.txt"),
    ("12", rf"step went from\s+{NUMBER} ms \(8 heads a block, 1024 blocks\) to {NUMBER} ms",
     "h200_bwd_chunk_heads_per_block.txt"),
    ("12", rf"Timed\s+alone, that step went from {NUMBER} to {NUMBER} ms", "h200_bwd_chunk_split.txt"),
    ("README", rf"at chunk 128 from {NUMBER} ms \(8 heads, 1024 blocks\) to {NUMBER}\s+ms \(64 "
               rf"heads", "h200_bwd_chunk_heads_per_block.txt"),
    ("README", rf"at chunk 256 from {NUMBER} ms \(4 heads\) to {NUMBER} ms \(32 heads",
     "h200_bwd_chunk_heads_per_block.txt"),
    ("README", rf"64 heads at chunk 256 leave 64 blocks and took {NUMBER} ms",
     "h200_bwd_chunk_heads_per_block.txt"),
    ("README", rf"\(1.74 → {NUMBER} ms at\s+chunk 64, 1.95 → {NUMBER} ms at chunk 128\)",
     "h200_bwd_chunk_heads_per_block.txt"),
    ("README", rf"at chunk 128, {NUMBER} ms with 4 warps and {NUMBER} ms with 8, against {NUMBER} ms",
     "h200_bwd_chunk_heads_per_block.txt"),
    ("README", rf"chunk 256: {NUMBER} ms, {NUMBER} ms with the backward at chunk 128, {NUMBER} ms at 64\)",
     "h200_bwd_chunk_split.txt"),
    ("README", rf"`A`'s error grows with\s+the number of chunks \({NUMBER}e-4 → {NUMBER}e-3, against "
               rf"mamba_ssm's {NUMBER}e-4\)", "h200_bwd_chunk_split.txt"),
    ("README", rf"{NUMBER} → {NUMBER} ms at chunk 256 and {NUMBER} → {NUMBER} ms at chunk 64\s+\(2048 "
               rf"tokens\)", "h200_bwd_chunk_split.txt"),
    ("README", rf"\({NUMBER} against {NUMBER} ms or more at chunk 256\)", "h200_bwd_chunk_split.txt"),
    ("README", rf"`exp2` instead of `exp` \({NUMBER} → {NUMBER}\s+instructions per thread per row "
               rf"block\)", "h200_probe_rowblocks.txt"),
    ("README", rf"Fused kernel alone at 4096 tokens, one group: {NUMBER} → {NUMBER} ms \(chunk 64\),"
               rf"\s+{NUMBER} → {NUMBER} ms \(chunk 128\)", "h200_probe_rowblocks.txt"),
]


@pytest.mark.parametrize("number, pattern, log", PROBE_CLAIMS,
                         ids=[f"nb{claim[0]}-probe{index}" for index, claim in enumerate(PROBE_CLAIMS)])
def test_a_probe_figure_in_prose_is_in_its_log(number, pattern, log):
    name, text = _markdown(number)
    found = re.search(pattern, text)
    assert found, f"{name}: no prose matches {pattern!r}; reworded? update PROBE_CLAIMS"
    words = set(re.findall(r"\d+\.?\d*", (DATA_DIR / log).read_text()))
    missing = [value for value in found.groups() if not _in_log(value, words)]
    assert not missing, f"{name}: {found.group(0)!r} quotes {missing}, not in data/{log}"


def _in_log(value, words):
    """``value`` as written in the log, or a log number rounded to ``value``'s decimals
    ("2.34" for a logged 2.341)."""
    decimals = len(value.partition(".")[2])
    return value in words or any(
        f"{float(word):.{decimals}f}" == value for word in words
        if len(word.partition(".")[2]) > decimals)
