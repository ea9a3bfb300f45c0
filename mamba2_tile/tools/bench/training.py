"""Training: forward + backward timed side by side (``python -m mamba2_tile.tools.bench
--backward``).

One step is ``y = ssd(x, dt, A, B, C, D)`` then the gradients of ``sum(y * dy)`` for a fixed
random ``dy`` with respect to all six inputs (``torch.autograd.grad``: fresh gradients each
step, nothing accumulated). The implementations, each differentiable in all six:

- ``mamba2_tile``: :func:`mamba2_tile.api.mamba_chunk_scan_combined` (the backward of
  :mod:`mamba2_tile.autograd`);
- ``mamba_ssm``: its ``mamba_chunk_scan_combined`` (Triton, forward and backward);
- ``fla``: ``chunk_simple_gla`` with the mapping of :func:`.measurement.as_simple_gla` (``q = C``,
  ``k = B`` per head, ``v = dt x``, ``g = dt A``, ``+ D x``), the mapping inside the step this
  time, since the gradients must reach ``x, dt, A, B, C``.

Timing as the forward benchmark: a CUDA graph of the whole step replayed with the L2 cache
flushed, median of ``reps``; where capture fails the step is timed eagerly and the row says so
(``timing``). ``peak_mb``: the most memory one step allocates beyond its inputs (PyTorch's
allocator statistics). ``grad_error``: for each input, ``‖g - g_ref‖ / ‖g_ref‖`` against torch
autograd through the float64 chunked PyTorch baseline, on the first batch row of the same
inputs (the float64 graph of all eight rows would not fit beside the rest), and ``max_grad_error``
the worst of the six.
"""

import dataclasses

import torch

from mamba2_tile import api
from mamba2_tile.tools.bench.measurement import as_simple_gla, make_inputs, median_ms
from mamba2_tile.torch_reference import mamba_chunk_scan_torch

INPUTS = ("x", "dt", "A", "B", "C", "D")


def _mamba2_tile(problem):
    def forward(x, dt, A, B, C, D):
        return api.mamba_chunk_scan_combined(x, dt, A, B, C, problem.chunk_size, D=D)
    return forward, None


def _mamba_ssm(problem):
    try:
        from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined
    except Exception as error:                       # noqa: BLE001 - any import failure counts
        return None, f"{type(error).__name__}: {error}"

    def forward(x, dt, A, B, C, D):
        return mamba_chunk_scan_combined(x, dt, A, B, C, problem.chunk_size, D=D)
    return forward, None


def _fla(problem):
    try:
        from fla.ops.simple_gla import chunk_simple_gla
    except Exception as error:                       # noqa: BLE001 - any import failure counts
        return None, f"{type(error).__name__}: {error}"

    def forward(x, dt, A, B, C, D):
        q, k, v, g = as_simple_gla(x, dt, A, B, C, problem.heads_per_group)
        out, _ = chunk_simple_gla(q, k, v, g=g, scale=1.0)
        return out + D[:, None].to(x.dtype) * x
    return forward, None


def _reference(problem):
    def forward(x, dt, A, B, C, D):
        return mamba_chunk_scan_torch(x, dt, A, B, C, 64, D=D, compute_dtype=torch.float64)
    return forward, None


IMPLEMENTATIONS = {"mamba2_tile": _mamba2_tile, "mamba_ssm": _mamba_ssm, "fla": _fla}


def leaves(inputs, rows=None):
    """Fresh copies of the six inputs that require gradients (batch ``rows`` only, if given;
    ``A`` and ``D`` are per head)."""
    return {name: (inputs[name] if rows is None or name in ("A", "D") else inputs[name][rows])
            .detach().clone().requires_grad_() for name in INPUTS}


def step_function(forward, inputs, dy):
    """A function of no arguments: one forward + backward of ``forward`` on ``inputs`` (from
    :func:`leaves`), the six gradients returned."""
    tensors = [inputs[name] for name in INPUTS]

    def step():
        y = forward(*tensors)
        return torch.autograd.grad(y, tensors, dy)
    return step


def _time(step, reps, flush_buffer):
    """``(ms, "graph")``, or ``(ms, "eager: <why capture failed>")``."""
    try:
        return median_ms(step, reps, flush_buffer), "graph"
    except Exception as error:                       # noqa: BLE001 - recorded in the row
        return median_ms(step, reps, flush_buffer, graph=False), (
            f"eager: {type(error).__name__}: {str(error)[:200]}")


def _peak_mb(step, device):
    if device.type != "cuda":
        return None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    grads = step()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    del grads
    return peak / 2**20


def _grad_errors(grads, expected):
    return {name: ((g.double() - e).norm() / e.norm()).item()
            for name, g, e in zip(INPUTS, grads, expected)}


def measure_training(problem, reps, flush_buffer, implementations=IMPLEMENTATIONS):
    """One row for one problem: ``ms``, ``timing``, ``peak_mb``, ``grad_error`` and
    ``max_grad_error`` per implementation (``None`` with a ``missing`` reason where one is not
    importable or failed), and ``vs_best_peer`` (the faster peer's time over ours)."""
    inputs = make_inputs(problem)
    device = inputs["x"].device
    generator = torch.Generator(device=device).manual_seed(1)
    dy = torch.randn(inputs["x"].shape, device=device, generator=generator).to(inputs["x"].dtype)

    reference_forward, _ = _reference(problem)
    expected = step_function(reference_forward, leaves(inputs, slice(0, 1)), dy[:1].double())()
    row = {**dataclasses.asdict(problem), "ms": {}, "timing": {}, "peak_mb": {},
           "grad_error": {}, "max_grad_error": {}, "missing": {}}
    for name, load in implementations.items():
        forward, why = load(problem)
        if forward is None:
            row["missing"][name] = why
            continue
        try:
            errors = _grad_errors(step_function(forward, leaves(inputs, slice(0, 1)), dy[:1])(),
                                  expected)
            step = step_function(forward, leaves(inputs), dy)
            row["peak_mb"][name] = _peak_mb(step, device)
            row["ms"][name], row["timing"][name] = _time(step, reps, flush_buffer)
        except Exception as error:                   # noqa: BLE001 - recorded, not hidden
            row["missing"][name] = f"{type(error).__name__}: {str(error)[:300]}"
            continue
        row["grad_error"][name] = errors
        row["max_grad_error"][name] = max(errors.values())
        del step
    ours = row["ms"].get("mamba2_tile")
    peers = [ms for name, ms in row["ms"].items() if name != "mamba2_tile"]
    row["vs_best_peer"] = min(peers) / ours if ours and peers else None
    del inputs, expected
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return row
