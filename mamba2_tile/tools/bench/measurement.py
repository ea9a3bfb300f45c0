"""Measuring on a GPU: inputs, timing, the copy bandwidth, errors, and what else is timed.

Shared by the benchmark (:mod:`mamba2_tile.tools.bench`) and the scaling sweep
(:mod:`mamba2_tile.tools.scaling`).

Timing: a call is captured in a CUDA graph after warm-up (so Python launch overhead is not
measured), then replayed ``reps`` times with the L2 cache flushed before each replay; the median
is reported (:func:`median_ms`).

The implementations timed beside this package's are a registry, :data:`IMPLEMENTATIONS`: adding
one to compare is adding one :class:`Implementation`, whose ``load`` says how to call it on the
benchmark's inputs. Its row fields are named after it (``<name>_ms``, ``<name>_rel_err``, ...).
"""

import dataclasses
import importlib.metadata
import json
import math
import platform
import shutil
import subprocess
import time
from typing import Callable

import torch
from torch.utils import collect_env

from mamba2_tile import api, autotune, kernels
from mamba2_tile.cost import minimal_bytes
from mamba2_tile.kernels import DEFAULT_OPTIONS, ForwardOptions
from mamba2_tile.kernels.plan import plan_for
from mamba2_tile.tools.bench.presets import ladder
from mamba2_tile.torch_reference import mamba_chunk_scan_torch

L2_FLUSH_BYTES = 256 * 1024 * 1024      # > 4x the H200's 60 MB L2


# ------------------------------------------------------------------------------ inputs and timing

def make_inputs(problem, device="cuda", seed=0):
    """Inputs in the ranges a trained Mamba-2 layer sees: dt in (1e-3, 1e-1), A in (-16, -1)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    dtype = getattr(torch, problem.dtype)
    b, l, h, p, g, n = (problem.batch, problem.seqlen, problem.nheads, problem.headdim,
                        problem.ngroups, problem.dstate)

    def randn(*size):
        return torch.randn(*size, device=device, generator=gen).to(dtype)

    def uniform(low, high, size):
        return low + (high - low) * torch.rand(size, device=device, generator=gen)

    return dict(
        x=randn(b, l, h, p),
        dt=torch.exp(uniform(math.log(1e-3), math.log(1e-1), (b, l, h))),
        A=-torch.exp(uniform(0.0, math.log(16.0), (h,))),
        B=randn(b, l, g, n),
        C=randn(b, l, g, n),
        D=torch.randn(h, device=device, generator=gen),
    )


def l2_flush_buffer():
    """The buffer :func:`median_ms` writes between replays to flush the L2 cache."""
    return torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.float32, device="cuda")


def flush_l2(buffer):
    buffer.add_(1)


def median_ms(fn, reps, flush_buffer, graph=True):
    """Median time of ``fn`` replayed from a CUDA graph, L2 flushed before each replay.

    ``graph=False`` times eager calls instead, with no warm-up: for calls the caller has already
    warmed up and that are too big to capture (a graph keeps its own memory pool).
    """
    run = fn
    if graph:
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        captured = torch.cuda.CUDAGraph()
        with torch.cuda.graph(captured):
            fn()
        run = captured.replay
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(reps)]
    for start, end in events:
        flush_l2(flush_buffer)
        start.record()
        run()
        end.record()
    torch.cuda.synchronize()
    times = sorted(start.elapsed_time(end) for start, end in events)
    return times[len(times) // 2]


def copy_bandwidth(flush_buffer, reps, nbytes=2 * 1024**3):
    """Device-to-device copy rates in bytes/s (bytes read plus bytes written), measured two ways.

    Returns ``{"memcpy": ..., "kernel": ...}``: ``dst.copy_(src)`` (which a CUDA graph records as
    a memcpy node) and an elementwise kernel that reads and writes every byte once
    (``torch.neg``). On the H200 the memcpy node reached 2.77 TB/s, well under what kernels
    reach; the faster of the two is the yardstick (:func:`copy_reference`).
    """
    src = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda").normal_()
    dst = torch.empty_like(src)
    moved = 2 * src.numel() * src.element_size()
    rates = {"memcpy": moved / (median_ms(lambda: dst.copy_(src), reps, flush_buffer) * 1e-3),
             "kernel": moved / (median_ms(lambda: torch.neg(src, out=dst), reps, flush_buffer)
                                * 1e-3)}
    del src, dst
    torch.cuda.empty_cache()
    return rates


def copy_reference(rates):
    """The copy rate bandwidth fractions are stated against: the faster way to copy."""
    return max(rates.values())


def errors(out, ref):
    """``‖out − ref‖ / ‖ref‖``, ``max |out − ref|`` and that over ``max |ref|``, in float64."""
    ref = ref.double()
    diff = out.double() - ref
    max_abs = diff.abs().max().item()
    return (diff.norm() / ref.norm()).item(), max_abs, max_abs / ref.abs().max().item()


def forward_path(x, B, chunk_size, options=DEFAULT_OPTIONS):
    """Which kernels ``options`` run for these inputs (:func:`mamba2_tile.kernels.plan.plan_for`):
    ``"three_kernel"``, ``"fused"`` or ``"sequence_parallel(N chunks a segment)"``."""
    planned = plan_for(x, B, chunk_size, options)
    if not planned.fuse_state_passing:
        return "three_kernel"
    if planned.segment_chunks is None:
        return "fused"
    return f"sequence_parallel({planned.segment_chunks} chunks a segment)"


# ------------------------------------------------------------------------------ what else is timed

@dataclasses.dataclass(frozen=True)
class Implementation:
    """Another implementation of the forward pass, timed beside this package's.

    ``load()`` returns ``(call, None)``, where ``call(inputs, problem)`` returns a function of no
    arguments that computes ``y`` (batch, seqlen, nheads, headdim) from :func:`make_inputs`'s
    inputs, or ``(None, why)`` where it cannot be imported. Its time goes to ``<name>_ms`` and
    its time over ours to ``speedup_key``; with ``check_errors``, its error against float64 goes
    to ``<name>_rel_err`` (and ``_max_abs_err``, ``_max_rel_err``) and its difference from ours
    to ``vs_<name>_rel_diff`` / ``vs_<name>_max_abs_diff``. A ``slow`` one is timed only with
    the per-kernel times (not with ``--totals-only``, not in the ablation).
    """

    name: str
    load: Callable
    speedup_key: str
    check_errors: bool = True
    slow: bool = False


def _args(inputs, problem):
    return (inputs["x"], inputs["dt"], inputs["A"], inputs["B"], inputs["C"], problem.chunk_size)


def _load_mamba_ssm():
    try:
        from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined
    except Exception as error:                       # noqa: BLE001 - any import failure counts
        return None, f"{type(error).__name__}: {error}"
    return (lambda inputs, problem: lambda: mamba_chunk_scan_combined(
        *_args(inputs, problem), D=inputs["D"])), None


def _load_fla():
    """flash-linear-attention's simple GLA (``pip install fla-core``) computing Mamba-2's SSD:
    ``q = C``, ``k = B`` repeated per head, ``v = dt x`` in the input dtype, ``g = dt A`` in
    float32 (natural-log decay per token), scale 1, then ``+ D x``. The mapping is done once,
    before timing (a model built on fla would produce these tensors directly); ``+ D x`` is
    timed. Its chunk size is its own (64), whatever the problem's."""
    try:
        from fla.ops.simple_gla import chunk_simple_gla
    except Exception as error:                       # noqa: BLE001 - any import failure counts
        return None, f"{type(error).__name__}: {error}"

    def call(inputs, problem):
        x, D = inputs["x"], inputs["D"]
        q, k, v, g = as_simple_gla(*(inputs[k] for k in ("x", "dt", "A", "B", "C")),
                                   problem.heads_per_group)
        skip = D[:, None].to(x.dtype)

        def run():
            out, _ = chunk_simple_gla(q, k, v, g=g, scale=1.0)
            return out + skip * x
        return run
    return call, None


def as_simple_gla(x, dt, A, B, C, heads_per_group):
    """Mamba-2's SSD inputs as simple GLA's ``(q, k, v, g)``: ``q = C`` and ``k = B`` repeated
    per head, ``v = dt x`` in the dtype of ``x``, ``g = dt A`` in float32."""
    q = C.repeat_interleave(heads_per_group, dim=2)
    k = B.repeat_interleave(heads_per_group, dim=2)
    return q, k, (dt[..., None] * x.float()).to(x.dtype), (dt * A).float()


def _load_torch():
    return (lambda inputs, problem: lambda: mamba_chunk_scan_torch(
        *_args(inputs, problem), D=inputs["D"])), None


IMPLEMENTATIONS = (
    # mamba_ssm's Triton kernels (``mamba_chunk_scan_combined``), when importable.
    Implementation("mamba_ssm", _load_mamba_ssm, speedup_key="speedup"),
    # flash-linear-attention's chunk_simple_gla (fla-core), when importable.
    Implementation("fla", _load_fla, speedup_key="fla_speedup"),
    # The chunked algorithm in plain PyTorch (float32), the baseline to beat at all.
    Implementation("torch", _load_torch, speedup_key="torch_speedup", check_errors=False,
                   slow=True),
)


def load_implementations(implementations=IMPLEMENTATIONS):
    """``({name: (implementation, call)}, {name: why it is missing})``."""
    found, missing = {}, {}
    for implementation in implementations:
        call, why = implementation.load()
        if call is None:
            missing[implementation.name] = why
        else:
            found[implementation.name] = (implementation, call)
    return found, missing


# ------------------------------------------------------------------------------ one row

def stage_times(args, D, reps, flush_buffer):
    """Each kernel of the planned default path timed on its own, fed by the previous stages'
    outputs."""
    x, dt, A, B, C, chunk_size = args
    planned = plan_for(x, B, chunk_size)
    fused = planned.fused_state_out
    dA_cumsum, dt_c = kernels.chunk_cumsum(dt, A, chunk_size)
    stages = {"chunk_cumsum": lambda: kernels.chunk_cumsum(dt, A, chunk_size)}
    if planned.fuse_state_passing and planned.segment_chunks is None:
        stages["fused_state_out"] = lambda: kernels.fused_state_out(
            x, dt_c, dA_cumsum, B, C, D=D, options=fused)
    elif planned.fuse_state_passing:
        segments = planned.segment_chunks
        local, decay = kernels.segment_states(x, B, dt_c, dA_cumsum, segments, fused)
        stages["segment_states"] = lambda: kernels.segment_states(x, B, dt_c, dA_cumsum,
                                                                  segments, fused)
        stages["segment_pass"] = lambda: kernels.segment_pass(local, decay)
        stages["sequence_parallel"] = lambda: kernels.sequence_parallel_state_out(
            x, dt_c, dA_cumsum, B, C, D=D, options=fused, segment_chunks=segments)
    else:
        chunk_states, _ = kernels.fwd_pass_state(x, B, dt_c, dA_cumsum)
        stages["fwd_pass_state"] = lambda: kernels.fwd_pass_state(x, B, dt_c, dA_cumsum)
        stages["compute_out"] = lambda: kernels.compute_out(x, dt_c, dA_cumsum, B, C,
                                                            chunk_states, D=D)
    return {f"{name}_ms": median_ms(fn, reps, flush_buffer) for name, fn in stages.items()}


def measure(problem, reps, flush_buffer, copy_rate, others, stages=True):
    """One row: times, speed-ups, bandwidth and errors for one problem; ``others`` as
    :func:`load_implementations` finds them."""
    inputs = make_inputs(problem)
    args = _args(inputs, problem)
    row = dataclasses.asdict(problem)
    row["path"] = forward_path(inputs["x"], inputs["B"], problem.chunk_size)

    reference = mamba_chunk_scan_torch(*args, D=inputs["D"], compute_dtype=torch.float64)
    y = api.mamba_chunk_scan_combined(*args, D=inputs["D"])
    row["rel_err"], row["max_abs_err"], row["max_rel_err"] = errors(y, reference)
    row["mamba2_tile_ms"] = median_ms(lambda: api.mamba_chunk_scan_combined(*args, D=inputs["D"]),
                                      reps, flush_buffer)
    if stages:
        row.update(stage_times(args, inputs["D"], reps, flush_buffer))
    for name, (implementation, call) in others.items():
        if implementation.slow and not stages:
            continue
        fn = call(inputs, problem)
        if implementation.check_errors:
            theirs = fn()
            (row[f"{name}_rel_err"], row[f"{name}_max_abs_err"],
             row[f"{name}_max_rel_err"]) = errors(theirs, reference)
            row[f"vs_{name}_rel_diff"], row[f"vs_{name}_max_abs_diff"], _ = errors(y, theirs)
            del theirs
        row[f"{name}_ms"] = median_ms(fn, reps, flush_buffer)
        row[implementation.speedup_key] = row[f"{name}_ms"] / row["mamba2_tile_ms"]

    row["minimal_bytes"] = minimal_bytes(problem)
    row["gbps"] = row["minimal_bytes"] / (row["mamba2_tile_ms"] * 1e-3) / 1e9
    row["copy_fraction"] = row["minimal_bytes"] / (row["mamba2_tile_ms"] * 1e-3) / copy_rate
    row["copy_gbps"] = copy_rate / 1e9
    del inputs, reference, y
    torch.cuda.empty_cache()
    return row


def measure_models(problem, reps, flush_buffer, copy_rate, others, missing=None):
    """The models preset's rows for one problem: this package and every implementation in
    ``others`` (but the slow ones) side by side, one row, or two for float32 inputs (exact and
    with ``tf32=True``; mamba_ssm's Triton runs float32 dots in TF32 either way).

    Each row: the problem's fields and ``tf32``; ``ms`` and ``error`` (relative, against the
    float64 reference) per implementation, ``None`` with a ``missing`` reason where one is not
    importable or failed; ``eager_ms`` (this package called eagerly, Python included);
    ``copy_fraction`` (minimal bytes / time / ``copy_rate``); ``vs_best_peer`` (the faster
    other implementation's time over ours); ``path``. ``others`` and ``missing`` are
    :func:`load_implementations`'s.
    """
    inputs = make_inputs(problem)
    args = _args(inputs, problem)
    # The float64 reference at chunk 64: the same function, a quarter of chunk 256's memory.
    reference = mamba_chunk_scan_torch(*args[:5], 64, D=inputs["D"], compute_dtype=torch.float64)
    peers = {name: call(inputs, problem) for name, (implementation, call) in others.items()
             if not implementation.slow}
    missing = dict(missing or {})               # name -> why, from load_implementations
    peer_ms, peer_error = {}, {}
    for name, fn in peers.items():
        try:
            peer_error[name] = errors(fn(), reference)[0]
            peer_ms[name] = median_ms(fn, reps, flush_buffer)
        except Exception as error:                   # noqa: BLE001 - recorded, not hidden
            missing[name] = f"{type(error).__name__}: {str(error)[:300]}"

    rows = []
    for tf32 in ((False, True) if problem.dtype == "float32" else (False,)):
        options = DEFAULT_OPTIONS.with_switches(tf32=True) if tf32 else DEFAULT_OPTIONS

        def ours(options=options, tf32=tf32):
            if tf32:          # the public API has no TF32 switch: the same call with options
                return api.forward_with_options(*args, options=options, D=inputs["D"])
            return api.mamba_chunk_scan_combined(*args, D=inputs["D"])
        row = {**dataclasses.asdict(problem), "tf32": tf32,
               "path": forward_path(inputs["x"], inputs["B"], problem.chunk_size, options)}
        ms = median_ms(ours, reps, flush_buffer)
        row["ms"] = {"mamba2_tile": ms, **{name: peer_ms.get(name) for name in (*peers, *missing)}}
        row["error"] = {"mamba2_tile": errors(ours(), reference)[0], **peer_error}
        row["missing"] = missing
        row["eager_ms"] = median_ms(ours, reps, flush_buffer, graph=False)   # warmed up above
        row["minimal_bytes"] = minimal_bytes(problem)
        row["copy_gbps"] = copy_rate / 1e9
        row["copy_fraction"] = row["minimal_bytes"] / (ms * 1e-3) / copy_rate
        row["vs_best_peer"] = min(peer_ms.values()) / ms if peer_ms else None
        rows.append(row)
    del inputs, reference
    torch.cuda.empty_cache()
    return rows


def measure_ablation(problem, reps, flush_buffer, others):
    """One row per step of the ladder for one problem (see :mod:`mamba2_tile.tools.bench`)."""
    inputs = make_inputs(problem)
    args = _args(inputs, problem)
    reference = mamba_chunk_scan_torch(*args, D=inputs["D"], compute_dtype=torch.float64)
    theirs_ms = {name: median_ms(call(inputs, problem), reps, flush_buffer)
                 for name, (implementation, call) in others.items() if not implementation.slow}
    rows, options, baseline_ms = [], ForwardOptions(), None
    for step, change in ladder(problem.dtype):
        row = {**dataclasses.asdict(problem), "variant": step}
        if change == "autotune":
            base, start = options, time.perf_counter()
            # Tuned on top of the numerics chosen so far (TF32 for float32).
            options = autotune.tuned_options(*args, base=base)
            row["autotune_s"] = time.perf_counter() - start
            autotune.clear_memory()                     # as a new process would: read the file
            start = time.perf_counter()
            autotune.tuned_options(*args, base=base)
            row["autotune_cached_s"] = time.perf_counter() - start
        else:
            options = options.with_switches(**change)
        row["options"] = json.dumps(options.to_dict(), sort_keys=True)
        row["path"] = forward_path(inputs["x"], inputs["B"], problem.chunk_size, options)

        def run(options=options):
            return api.forward_with_options(*args, options=options, D=inputs["D"])
        row["rel_err"], row["max_abs_err"], row["max_rel_err"] = errors(run(), reference)
        row["mamba2_tile_ms"] = median_ms(run, reps, flush_buffer)
        baseline_ms = baseline_ms or row["mamba2_tile_ms"]
        row["vs_baseline"] = baseline_ms / row["mamba2_tile_ms"]
        for name, ms in theirs_ms.items():
            row[f"{name}_ms"] = ms
            row[others[name][0].speedup_key] = ms / row["mamba2_tile_ms"]
        rows.append(row)
    del inputs, reference
    torch.cuda.empty_cache()
    return rows


# ------------------------------------------------------------------------------ the software

def _package_version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _tileiras_version():
    # Hand-written: tileiras is a compiler binary, which neither collect_env nor pip knows.
    tileiras = shutil.which("tileiras")
    if not tileiras:
        return None
    # "Cuda compilation tools, release 13.4, V13.4.92" -> "13.4.92"
    banner = subprocess.run([tileiras, "--version"], capture_output=True, text=True).stdout
    return banner.rsplit(" V", 1)[-1].split()[0] if " V" in banner else banner


def versions():
    """The versions a measurement depends on, stored with it."""
    return {"python": platform.python_version(), "torch": torch.__version__,
            "cuda": torch.version.cuda, "numpy": _package_version("numpy"),
            "cuda_tile": _package_version("cuda-tile"), "tileiras": _tileiras_version(),
            "triton": _package_version("triton"), "mamba_ssm": _package_version("mamba-ssm"),
            "fla": _package_version("fla-core"),
            "driver": collect_env.get_nvidia_driver_version(collect_env.run)}
